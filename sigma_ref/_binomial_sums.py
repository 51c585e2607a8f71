"""Private: ``E[sqrt(k (G - k))]`` and ``1 - fidelity`` for ``k ~ Binomial(G, p)``, the sums behind
``sigma_ref.difficulty`` (its docstring, "Evaluation and precision", says how and how accurately).

:func:`_expected_root` sums ``E[sqrt(k (G-k))]`` over ``p <= 1/2`` (term by term up to
``_DENSE_MAX``, else over a Chernoff window of ``k``, ``_window``, walked in runs from
saddle-point anchors, ``_window_sum``); :func:`_deficit` gives ``1 - fidelity`` without a
subtraction from 1. Derivations: ``proofs/04_expectations.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mpmath
import numpy as np

_LN_2PI = math.log(2 * math.pi)
_TAIL = 1e-17  # bound on the relative share of E[sqrt(k (G - k))] left outside the window
_SEGMENT = 128  # terms walked by the exact ratio from one saddle-point anchor
_GROUP = 1 << 22  # window cells evaluated at once: lanes (runs) of up to _SEGMENT terms, walked together
_MAX_G = 2**40
_DENSE_MAX = 16  # up to this G, E[sqrt(k (G-k))] is summed term by term (_dense_root): faster, as exact


def _stirlerr_table() -> np.ndarray:
    """``log(n!) - log(sqrt(2 pi n) (n/e)^n)`` for n = 0..15, exact to double precision."""
    with mpmath.workdps(40):
        table = [0.0]
        for n in range(1, 16):
            value = mpmath.loggamma(n + 1) - (n + mpmath.mpf(1) / 2) * mpmath.log(n) + n
            table.append(float(value - mpmath.log(2 * mpmath.pi) / 2))
    return np.array(table)


_STIRLERR_SMALL = _stirlerr_table()


def _stirlerr(n: np.ndarray) -> np.ndarray:
    """Stirling's error for integer ``n >= 1``: table up to 15, series beyond (Loader 2000)."""
    out = np.empty_like(n)
    small = n <= 15
    out[small] = _STIRLERR_SMALL[n[small].astype(np.int64)]
    m = n[~small]
    mm = m * m
    s0, s1, s2, s3, s4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
    series = np.where(
        m > 500,
        (s0 - s1 / mm) / m,
        np.where(
            m > 80,
            (s0 - (s1 - s2 / mm) / mm) / m,
            np.where(
                m > 35,
                (s0 - (s1 - (s2 - s3 / mm) / mm) / mm) / m,
                (s0 - (s1 - (s2 - (s3 - s4 / mm) / mm) / mm) / mm) / m,
            ),
        ),
    )
    out[~small] = series
    return out


def _bd0(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Deviance term ``x log(x / mean) + mean - x``, without cancellation near ``x = mean``."""
    d = x - mean
    s = x + mean
    near = np.abs(d) < 0.1 * s
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = x / mean
        # a subnormal mean (p below ~1e-300) overflows the ratio: take the difference of logs
        log_ratio = np.where(np.isfinite(ratio), np.log(ratio), np.log(x) - np.log(mean))
        out: np.ndarray = x * log_ratio + mean - x
    if near.any():
        dn, sn, xn = d[near], s[near], x[near]
        v = dn / sn
        total = dn * v
        term = 2 * xn * v
        v2 = v * v
        for j in range(1, 16):  # |v| < 0.1: each term shrinks 100-fold; 15 reach 1e-30
            term = term * v2
            total = total + term / (2 * j + 1)
        out[near] = total
    return out


def _binom_pmf(k: np.ndarray, G: np.ndarray, p: np.ndarray, q: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``C(G,k) p^k (1-p)^(G-k)`` for ``1 <= k <= G - 1`` by Loader's saddle-point form.

    ``exp(stirlerr(G) - stirlerr(k) - stirlerr(G-k) - bd0(k, G p) - bd0(G-k, G q)) *
    sqrt(G / (2 pi k (G-k)))``: each piece is small or free of cancellation, so the relative
    error is a few ulps of the exponent. ``q = fl(1 - p)`` and ``c = (1 - p) - q`` (exact,
    Fast2Sum): with ``q`` for ``1 - p`` the form is the pmf times ``exp(c (k - G p) / q)``
    (``d bd0(x, m)/dm = 1 - x/m``), a tilt the ``- c (k - G p) / q`` in the exponent removes.
    At ``k = 1`` the direct ``G p (1-p)^(G-1)`` keeps full precision for subnormal ``p``.
    """
    pmf = np.empty_like(p)
    first = k == 1
    with np.errstate(under="ignore"):
        g1, p1, q1 = G[first] - 1, p[first], q[first]
        tilt = g1 * c[first] / q1  # (1 - p)**n = q**n (1 + c/q)**n; first order is exact to 1e-20 here
        pmf[first] = (g1 + 1) * p1 * q1**g1 * np.where(np.abs(tilt) < 1e-10, 1 + tilt, 1.0)
        far = np.flatnonzero(np.abs(tilt) >= 1e-10)
        if far.size:
            pmf[np.flatnonzero(first)[far]] = (g1[far] + 1) * p1[far] * _one_minus_pow(p1[far], g1[far])
        k, G, p, q, c = (x[~first] for x in (k, G, p, q, c))
        exponent = _stirlerr(G) - _stirlerr(k) - _stirlerr(G - k) - _bd0(k, G * p) - _bd0(G - k, G * q)
        exponent -= c * (k - G * p) / q
        pmf[~first] = np.exp(exponent) * np.sqrt(G / (2 * np.pi * k * (G - k)))
    return pmf


def _bennett(u: np.ndarray) -> np.ndarray:
    """Bennett's function ``h(u) = (1 + u) log(1 + u) - u`` for ``u > -1``."""
    out: np.ndarray = (1 + u) * np.log1p(u) - u
    return out


def _reach(L: np.ndarray, c: np.ndarray, d: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Least integer ``J <= limit`` with ``F(J) >= L`` for ``F(s) = c h(s/c) + d h(-s/d)``, or ``limit``.

    ``F`` is convex and increasing on ``[0, d)`` (``limit <= d - 1``), and
    ``F(s) >= s**2/2 (1/(c + s/3) + 1/d)`` (``h(u) >= u**2 / (2 (1 + u/3))``, ``h(-u) >= u**2/2``).
    ``s0 = L/3 + sqrt(L**2/9 + 2 L c)`` solves ``s**2 = 2 L (c + s/3)``, so ``F(s0) >= L``; below
    ``s0`` the bound is at least ``s**2 / (2 V)`` with ``1/V = 1/(c + s0/3) + 1/d``, so
    ``s1 = sqrt(2 L V) <= s0`` has ``F(s1) >= L`` too. Newton steps from there stay above the
    root (on a convex function the tangent lies below it), so every iterate is a valid, if
    wider, reach; they stop once a step is under one term.
    """
    s0 = L / 3 + np.sqrt(L * L / 9 + 2 * L * c)
    s = np.minimum(np.sqrt(2 * L / (1 / (c + s0 / 3) + 1 / d)), limit)
    todo = np.flatnonzero(s > 0)
    for _ in range(4):
        st, ct, dt = s[todo], c[todo], d[todo]
        excess = ct * _bennett(st / ct) + dt * _bennett(-st / dt) - L[todo]
        slope = np.log1p(st / ct) - np.log1p(-st / dt)
        step = np.where(excess > 0, excess / np.where(slope > 0, slope, 1.0), 0.0)
        s[todo] = st - step
        todo = todo[step > 1]  # a smaller step moves the reach by at most one term
        if todo.size == 0:
            break
    out: np.ndarray = np.minimum(np.ceil(s), limit)
    return out


def _window(
    p: np.ndarray, q: np.ndarray, G: np.ndarray, extra: np.ndarray | float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """``[lo, hi]`` outside which the terms of ``sum_k C(G,k) p^k q^(G-k) sqrt(k (G-k))`` (``p <= 1/2``)
    add up to less than ``_TAIL`` of the sum (derivation: ``proofs/04_expectations.py``).

    With ``t_k`` the pmf and ``a`` its mode clamped to ``[1, G-1]`` (so ``t_{a+1} <= t_a`` and
    ``t_{a-1} <= t_a``), the exact ratios give ``log(t_{a+j} / t_a) <= -F(j - 1)`` with
    ``c = a + 1, d = G - a`` and ``log(t_{a-j} / t_a) <= -F(j - 1)`` with ``c = G - a + 1, d = a``
    (``F`` as in ``_reach``: a Chernoff bound in Bennett's form). Every term left out is then
    below ``exp(-L) t_a``; there are fewer than ``G`` of them, each weight ``sqrt(k (G-k)) <= G/2``,
    and the sum is at least ``t_a sqrt(a (G - a)) >= t_a sqrt(G - 1)``, so the share left out is
    below ``G**1.5 exp(-L) / 2``: ``L = log(1/_TAIL) + 1.5 log G`` makes it ``< _TAIL / 2``.
    ``extra`` (per prompt) is added to ``L``: the fidelity deficit's window (``_deficit``) needs more.
    """
    lo, hi = np.ones_like(G), G - 1  # small groups: every term (cheaper than the bound)
    big = np.flatnonzero(G > _SEGMENT // 2)
    if big.size:
        p, q, Gb = p[big], q[big], G[big]
        a = np.clip(np.floor((Gb + 1) * p), 1, Gb - 1)
        a = np.where(((Gb - a) * p > (a + 1) * q) & (a < Gb - 1), a + 1, a)  # the float mode, made exact
        a = np.where((a * q > (Gb - a + 1) * p) & (a > 1), a - 1, a)
        L = math.log(1 / _TAIL) + 1.5 * np.log(Gb) + (extra[big] if isinstance(extra, np.ndarray) else extra)
        lo[big] = a - _reach(L, Gb - a + 1, a, a - 1)
        hi[big] = a + _reach(L, a + 1, Gb - a, Gb - 1 - a)
    return lo, hi


def _walk(
    k0: np.ndarray,
    length: np.ndarray,
    G: np.ndarray,
    odds: np.ndarray,
    anchor: np.ndarray,
    deficit: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """``sum_{i < length} t_{k0+i} w(k0+i)`` per lane: ``t_{k0}`` is the saddle-point pmf ``anchor``,
    then the exact ratio ``t_{k+1} / t_k = (G - k) / (k + 1) * p / (1 - p)`` (three roundings a step:
    relative error below ``3 max(length)`` ulps). The weight ``w(k)`` is ``sqrt(k (G-k))``, or with
    ``deficit = (d0, gr, inv)`` (``d0 = k0 - G p``, ``gr = G (1 - 2p)``, ``inv = 1 / (G**2 p (1-p))``)
    ``(u / (1 + sqrt(1 - u)))**2`` with ``u = d (d - gr) inv = 1 - k (G-k) / (G**2 p (1-p))`` (no
    cancellation: ``d = k - G p`` is carried exactly from ``d0``). A loop over the steps (at most
    ``_SEGMENT``), each a few vector ops over the lanes still running."""
    steps = int(length.max())
    if deficit is None and k0.min() == k0.max() and G.min() == G.max() and length.min() == steps:
        # the same k and G in every lane (small groups: the whole range): the weight and the
        # binomial part of the ratio are scalars, rounded once each (same error budget)
        term, total, tmp = anchor.copy(), np.zeros_like(k0), np.empty_like(k0)
        kf, g = float(k0[0]), float(G[0])
        with np.errstate(under="ignore"):
            for i in range(steps):
                if i:
                    term *= odds
                    term *= (g - kf) / (kf + 1)
                    kf += 1
                np.multiply(term, math.sqrt(kf * (g - kf)), out=tmp)
                total += tmp
        return total
    # longest lanes first: step i touches only the first n_i lanes (those longer than i)
    order = np.argsort(-length, kind="stable")
    longest = length[order]
    running = longest.size - np.searchsorted(longest[::-1], np.arange(steps), side="right")
    k = k0[order]
    rest = G[order] - k
    lane_odds, term = odds[order], anchor[order]
    total, tmp = np.zeros_like(k), np.empty_like(k)
    if deficit is not None:
        d, gr, inv = (x[order] for x in deficit)
        tmp2 = np.empty_like(k)
    with np.errstate(under="ignore"):
        for i in range(steps):
            n = int(running[i])
            kn, rn, tn, wn = k[:n], rest[:n], term[:n], tmp[:n]
            if i:
                np.multiply(rn, lane_odds[:n], out=wn)
                kn += 1
                rn -= 1
                np.divide(wn, kn, out=wn)
                tn *= wn
            if deficit is None:
                np.multiply(kn, rn, out=wn)
                np.sqrt(wn, out=wn)
            else:
                dn, vn = d[:n], tmp2[:n]
                if i:
                    dn += 1
                np.subtract(dn, gr[:n], out=wn)
                wn *= dn
                wn *= inv[:n]  # u
                np.subtract(1.0, wn, out=vn)
                np.sqrt(vn, out=vn)
                vn += 1.0
                np.divide(wn, vn, out=wn)  # 1 - sqrt(1 - u), without cancellation
                wn *= wn
            wn *= tn
            total[:n] += wn
    out = np.empty_like(total)
    out[order] = total
    return out


def _minus_product(k: np.ndarray, G: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``k - G p`` for integer-valued ``k, G < 2**41``, with error a few ulps of the result (not of ``G p``).

    ``G = G_hi + G_lo`` (``G_hi`` a multiple of ``2**20``: at most 21 significant bits) and Veltkamp's
    split ``p = p_hi + p_lo`` (26 bits each) make the four partial products exact."""
    G_hi = np.floor(G / 2.0**20) * 2.0**20
    G_lo = G - G_hi
    t = p * (2.0**27 + 1)
    p_hi = t - (t - p)
    p_lo = p - p_hi
    out: np.ndarray = (((k - G_hi * p_hi) - G_hi * p_lo) - G_lo * p_hi) - G_lo * p_lo
    return out


def _window_sum(pl: np.ndarray, Gl: np.ndarray, deficit: bool) -> np.ndarray:
    """``sum_k t_k w(k)`` over the window, ``0 < pl <= 1/2``: ``w = sqrt(k (G-k))``, or the deficit's
    weight (``_walk``). Each prompt's window (``_window``, ``O(sqrt(G p (1-p)) + log G)`` terms)
    is cut into runs of at most ``_SEGMENT`` terms, each anchored by the saddle-point pmf and
    walked by the exact ratio; prompts are sorted by window width and processed in cache-sized
    chunks of runs."""
    q = 1.0 - pl
    c = (1.0 - q) - pl  # (1 - p) - q, exactly
    odds = pl / q / (1 + c / q)
    if deficit:
        var = pl * q + pl * c  # p (1 - p), rounded once or twice
        extra = 0.5 * np.log(Gl) - 2 * np.log(4 * var)
        lo, hi = _window(pl, q, Gl, extra)
        gr = Gl * (1.0 - 2 * pl)  # G (1 - 2p): 2p exact, two roundings
        inv = 1.0 / (Gl * Gl * var)
    else:
        lo, hi = _window(pl, q, Gl)
    width = (hi - lo + 1).astype(np.int64)

    def lanes(r: np.ndarray, k0: np.ndarray, length: np.ndarray) -> np.ndarray:
        anchors = _binom_pmf(k0, Gl[r], pl[r], q[r], c[r])  # the group's saddle points in one pass
        extra_lanes = (_minus_product(k0, Gl[r], pl[r]), gr[r], inv[r]) if deficit else None
        return _walk(k0, length, Gl[r], odds[r], anchors, extra_lanes)

    if width.max() <= _SEGMENT:  # one run per prompt: no grouping needed
        return lanes(np.arange(pl.size), lo, width)
    order = np.argsort(width, kind="stable")
    sorted_width = width[order]
    totals = np.zeros(pl.size)
    start = 0
    while start < order.size:  # groups of prompts with similar widths
        end = min(order.size, start + max(1, _GROUP // int(sorted_width[start])))
        if (end - start) * int(sorted_width[end - 1]) > _GROUP:
            end = start + max(1, _GROUP // int(sorted_width[end - 1]))
        rows = order[start:end]
        # a prompt's runs depend on its own width only, so its value does not depend on its company
        runs = -(-width[rows] // _SEGMENT)
        span = -(-width[rows] // runs)
        local = np.repeat(np.arange(rows.size), runs)
        nth = np.arange(local.size) - np.repeat(np.cumsum(runs) - runs, runs)
        offset = nth * span[local]
        length = np.minimum(width[rows][local] - offset, span[local])
        keep = length > 0
        local, offset, length = local[keep], offset[keep], length[keep]
        r = rows[local]
        lane_sums = lanes(r, lo[r] + offset, length)
        starts = np.r_[0, np.flatnonzero(np.diff(local)) + 1]  # each prompt's lanes are adjacent
        totals[rows] = np.add.reduceat(lane_sums, starts)  # pairwise within a prompt
        start = end
    return totals


def _dense_root(p: np.ndarray, G: int) -> np.ndarray:
    """``sum_{k=1}^{G-1} C(G,k) p^k (1-p)^(G-k) sqrt(k (G-k))`` term by term, for one small ``G``
    (``<= _DENSE_MAX``) and ``0 < p <= 1/2``.

    ``= (1-p)^G sum_k w_k x^k`` with ``w_k = C(G,k) sqrt(k (G-k))`` (one rounded scalar each) and the
    odds ``x = p / (1-p) <= 1``, summed by Horner's rule: every coefficient and ``x`` are positive,
    so there is no cancellation and the sum is within ``2 G`` ulps, ``x``'s three roundings add
    ``3 G`` more through ``x^k``. ``(1-p)^G = q^G (1 + c/q)^G`` with ``q = fl(1-p)`` and the exact
    residual ``c = (1-p) - q`` is ``q^G (1 + G c/q)`` to first order (``|G c/q| <= G 2**-52``: the
    second order is below ``1e-28``), and ``x = p / q / (1 + c/q)``. In all, ``(6 G + 8)`` ulps:
    ``2e-14`` at ``G = 16``. About ``2 G`` in-place vector operations over ``p``, cheaper than the
    window's saddle-point anchors for ``G <= _DENSE_MAX``."""
    q = 1.0 - p
    tilt = (1.0 - q) - p
    tilt /= q
    x = p / q
    x /= 1.0 + tilt
    total = np.full_like(p, math.comb(G, G - 1) * math.sqrt(G - 1))
    with np.errstate(under="ignore"):
        for k in range(G - 2, 0, -1):
            total *= x
            total += math.comb(G, k) * math.sqrt(k * (G - k))
        total *= x
        scale = q**G
        tilt *= G
        tilt += 1.0
        scale *= tilt
        total *= scale
    return total


def _expected_root(p: np.ndarray, G: np.ndarray) -> np.ndarray:
    """``E[sqrt(k (G - k))]`` for ``k ~ Binomial(G, p)``, elementwise over 1-D ``p``, ``G``.

    Symmetric in ``p <-> 1 - p`` (``k -> G - k``), so only ``p <= 1/2`` is summed (``1 - p`` is exact
    for ``p >= 1/2``): term by term for ``G <= _DENSE_MAX`` (``_dense_root``), else by
    ``_window_sum``.
    """
    return _folded_where_live(p, G, 0.0, _folded_root)


def _folded_root(pl: np.ndarray, Gl: np.ndarray) -> np.ndarray:
    """:func:`_expected_root` at ``0 < pl <= 1/2``."""
    small = Gl <= _DENSE_MAX
    if small.all() and Gl.min() == Gl.max():
        return _dense_root(pl, int(Gl[0]))
    values = np.empty_like(pl)
    for g in np.unique(Gl[small]).tolist():
        rows = np.flatnonzero(Gl == g)
        values[rows] = _dense_root(pl[rows], int(g))
    big = np.flatnonzero(~small)
    if big.size:
        values[big] = _window_sum(pl[big], Gl[big], deficit=False)
    return values


def _deficit(p: np.ndarray, G: np.ndarray) -> np.ndarray:
    """``1 - fidelity(p, G)`` to about ``1e-13`` relative, however small (no subtraction from 1).

    With ``Y = k (G-k) / (G**2 p (1-p))`` and ``u = 1 - Y``: ``phi = E[sqrt(Y)]``, ``E[u] = 1/G``
    exactly, and ``1 - sqrt(1 - u) = u/2 + (u / (1 + sqrt(1 - u)))**2 / 2``, so
    ``1 - phi = 1/(2G) + E[(u / (1 + sqrt(1 - u)))**2] / 2``: every term is nonnegative
    (derivation: ``proofs/04_expectations.py``). The ``k = 0, G`` terms (``u = 1``) give
    ``silent_group_rate / 2``; the rest is ``_window_sum`` with a window widened so that what it
    leaves out is below ``_TAIL`` of ``1/(2G) <= 1 - phi``. ``1`` at ``p in {0, 1}``.
    """
    return _folded_where_live(p, G, 1.0, _folded_deficit)


def _folded_deficit(pl: np.ndarray, Gl: np.ndarray) -> np.ndarray:
    """:func:`_deficit` at ``0 < pl <= 1/2``."""
    silent = pl**Gl + _one_minus_pow(pl, Gl)
    deficit: np.ndarray = 1 / (2 * Gl) + (silent + _window_sum(pl, Gl, deficit=True)) / 2
    return deficit


def _folded_where_live(
    p: np.ndarray, G: np.ndarray, fill: float, folded: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    """``folded(min(p, 1 - p), G)`` where ``0 < p < 1`` and ``fill`` at ``p in {0, 1}``: the sums
    symmetric in ``p <-> 1 - p`` are taken at ``p <= 1/2`` only (``1 - p`` is exact for ``p >= 1/2``)."""
    out = np.full_like(p, fill)
    live = (p > 0) & (p < 1)
    idx = np.flatnonzero(live) if not live.all() else slice(None)
    if p[idx].size:
        pl, Gl = p[idx], G[idx]
        out[idx] = folded(np.minimum(pl, 1.0 - pl), Gl)
    return out


def _one_minus_pow(p: np.ndarray, G: np.ndarray) -> np.ndarray:
    """``(1 - p)**G`` without the rounding of ``1 - p``.

    ``q = fl(1 - p)`` is off by up to half an ulp of 1, which ``**G`` turns into a
    relative error of ``G * 1.1e-16`` (``3e-12`` at ``p = 1e-6, G = 1e5``). The residual
    ``c = (1 - q) - p`` is exact (Fast2Sum), so ``(1 - p)**G = q**G * exp(G log1p(c / q))``
    is accurate to a few ulps for every ``G``.
    """
    q = 1.0 - p
    c = (1.0 - q) - p
    ratio = np.divide(c, q, out=np.zeros_like(q), where=q > 0)
    out: np.ndarray = q**G * np.exp(G * np.log1p(ratio))
    return out
