"""Closed forms in the success probability ``p`` (SPEC section 5).

With ``k ~ Binomial(G, p)`` correct responses in a group of ``G``:

================================ ==================================================
``silent_group_rate(p, G)``      ``p**G + (1 - p)**G``
``expected_gradient(p, G)``      ``E[g] = (1/G) sum_{k=1}^{G-1} C(G,k) p^k (1-p)^(G-k) sqrt(k(G-k))``
``expected_gradient(.., "dr_grpo")`` ``E[sigma**2] = p (1 - p) (1 - 1/G)``
``fidelity(p, G)``               ``E[g] / sqrt(p (1 - p))``, in [0, 1], increasing in G
``attenuation(p, G)``            ``1 - 1 / (8 G p (1 - p))``, the large-G expansion of fidelity
``min_group_size(p, epsilon)``   ``ceil(1 / (8 epsilon p (1 - p)))`` (the group-size law)
``exact_group_size(p, epsilon)`` least ``G`` with ``fidelity(p, G) >= 1 - epsilon``
``difficulty_weight(p)``         ``1 / sqrt(p (1 - p)) = d/dp 2 arcsin sqrt(p)``
``mass_weight(p, method)``       ``sqrt(p (1 - p))`` (GRPO) or ``p (1 - p)`` (Dr. GRPO)
``arcsine_objective(p)``         ``2 arcsin sqrt(p)``
================================ ==================================================

Precision: binomial terms are evaluated in log space with Loader's saddle-point
expansion (``stirlerr`` and ``bd0``, as R's ``dbinom``), so no term overflows or
loses digits to cancellation at any ``G``; terms more than ~14 standard deviations
(plus 30) from ``G p`` are below ``1e-40`` of the sum and are not summed. The result
is accurate to about ``1e-13`` relative for every ``G`` up to ``2**40`` (tested against
exact rationals and 50-digit mpmath sums in ``tests/``).

All functions take a number, a sequence, a numpy array or a torch tensor for ``p``
(and ``G``), broadcast them, and return the same kind (Python scalars for scalars).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import mpmath
import numpy as np

from . import _arrays

__all__ = [
    "silent_group_rate",
    "expected_gradient",
    "fidelity",
    "attenuation",
    "min_group_size",
    "exact_group_size",
    "difficulty_weight",
    "mass_weight",
    "mass_share",
    "arcsine_objective",
]

Method = Literal["grpo", "dr_grpo"]
_METHODS = ("grpo", "dr_grpo")
_LN_2PI = math.log(2 * math.pi)
_TAIL_SD = 14.0  # terms beyond Gp +- (14 sd + 30) are < 1e-40 of the sum
_TAIL_PAD = 30.0
_CHUNK = 1 << 22  # window cells evaluated at once (memory bound: ~32 MiB a temp)
_MAX_G = 2**40


def _stirlerr_table() -> np.ndarray:
    """``log(n!) - log(sqrt(2 pi n) (n/e)^n)`` for n = 0..15, exact to double precision."""
    mpmath.mp.dps = 40
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
        out = x * log_ratio + mean - x
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


def _log_binom_pmf(k: np.ndarray, G: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``log(C(G,k) p^k (1-p)^(G-k))`` for ``0 < k < G`` and ``0 < p < 1``."""
    q = 1.0 - p
    lc = _stirlerr(G) - _stirlerr(k) - _stirlerr(G - k) - _bd0(k, G * p) - _bd0(G - k, G * q)
    lf = _LN_2PI + np.log(k) + np.log1p(-k / G)
    return lc - 0.5 * lf


def _expected_root(p: np.ndarray, G: np.ndarray) -> np.ndarray:
    """``E[sqrt(k (G - k))]`` for ``k ~ Binomial(G, p)``, elementwise over 1-D ``p``, ``G``."""
    out = np.zeros_like(p)
    live = (p > 0) & (p < 1)
    idx = np.flatnonzero(live)
    if idx.size == 0:
        return out
    pl, Gl = p[idx], G[idx]
    sd = np.sqrt(Gl * pl * (1 - pl))
    lo = np.maximum(1.0, np.floor(Gl * pl - _TAIL_SD * sd - _TAIL_PAD))
    hi = np.minimum(Gl - 1, np.ceil(Gl * pl + _TAIL_SD * sd + _TAIL_PAD))
    width = (hi - lo + 1).astype(np.int64)
    order = np.argsort(width, kind="stable")  # similar widths share a chunk
    sorted_width = width[order]
    start = 0
    while start < order.size:  # chunks of prompts, not a loop over k or groups
        # the most prompts whose padded block (count x widest) fits in one chunk
        rest = sorted_width[start:]
        fits = np.arange(1, rest.size + 1) * rest <= _CHUNK
        count = rest.size if fits.all() else max(1, int(np.argmin(fits)))
        sel = order[start : start + count]
        w = int(width[sel].max())
        Gs, ps = Gl[sel, None], pl[sel, None]
        total = np.zeros(sel.size)
        for offset in range(0, w, _CHUNK):  # one block, unless one prompt is wider than a chunk
            k = lo[sel, None] + np.arange(offset, min(w, offset + _CHUNK), dtype=np.float64)[None, :]
            valid = k <= hi[sel, None]
            k = np.where(valid, k, lo[sel, None])
            log_term = _log_binom_pmf(k, Gs, ps) + 0.5 * (np.log(k) + np.log(Gs - k))
            total += np.where(valid, np.exp(log_term), 0.0).sum(axis=1)
        out[idx[sel]] = total
        start += count
    return out


def _p_and_G(p: Any, G: Any) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], _arrays.Returner]:
    p_arr, back = _arrays.numeric(p, "p")
    _arrays.check_probability(p_arr)
    G_arr, _ = _arrays.numeric(G, "G")
    _arrays.check_group_size(G_arr)
    if (G_arr > _MAX_G).any():
        raise ValueError(f"G={float(G_arr.max()):g} is above the supported maximum 2**40")
    try:
        pb, Gb = np.broadcast_arrays(p_arr, G_arr)
    except ValueError:
        raise ValueError(f"p shape {p_arr.shape} and G shape {G_arr.shape} do not broadcast") from None
    return pb.reshape(-1), Gb.reshape(-1), pb.shape, back


def _check_method(method: Any) -> str:
    if method not in _METHODS:
        raise ValueError(f"method={method!r} must be one of {_METHODS}")
    return method


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
    return q**G * np.exp(G * np.log1p(ratio))


def silent_group_rate(p: Any, G: Any) -> Any:
    """Probability that a group of ``G`` is silent (all wrong or all right): ``p**G + (1-p)**G``.

    A silent group has ``sigma = 0`` and gives a zero update; DAPO drops it. Accurate to
    a few ulps for every ``G`` (``1 - p`` is not rounded before the power).

    >>> round(silent_group_rate(0.05, 8), 4)
    0.6634
    """
    pf, Gf, shape, back = _p_and_G(p, G)
    return back((pf**Gf + _one_minus_pow(pf, Gf)).reshape(shape))


def _expected(pf: np.ndarray, Gf: np.ndarray, method: str) -> np.ndarray:
    if method == "dr_grpo":
        return pf * (1 - pf) * (1 - 1 / Gf)
    return _expected_root(pf, Gf) / Gf


def expected_gradient(p: Any, G: Any, method: Method = "grpo") -> Any:
    """Exact expected per-prompt update, in units of ``delta_s``, for ``k ~ Bin(G, p)``.

    ``method="grpo"``: ``E[sigma] = (1/G) sum_{k=1}^{G-1} C(G,k) p^k (1-p)^(G-k) sqrt(k (G-k))``;
    ``method="dr_grpo"``: ``E[sigma**2] = p (1 - p) (1 - 1/G)``. As ``G`` grows, the GRPO value
    tends to ``sqrt(p (1 - p))``.

    >>> round(expected_gradient(0.5, 2), 6)  # k=1 w.p. 1/2, sigma=1/2
    0.25
    >>> expected_gradient(0.5, 4, "dr_grpo")
    0.1875
    """
    method = _check_method(method)
    pf, Gf, shape, back = _p_and_G(p, G)
    return back(_expected(pf, Gf, method).reshape(shape))


def _fidelity(pf: np.ndarray, Gf: np.ndarray) -> np.ndarray:
    root = np.sqrt(pf * (1 - pf))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(root > 0, _expected_root(pf, Gf) / Gf / np.where(root > 0, root, 1), 0.0)


def fidelity(p: Any, G: Any) -> Any:
    """Gradient fidelity ``phi = E[g] / sqrt(p (1 - p))``: the share of the large-G update kept.

    In ``[0, 1]`` (Jensen), increasing in ``G``; 0 at ``p in {0, 1}``.

    >>> round(fidelity(0.5, 8), 4)
    0.9278
    """
    pf, Gf, shape, back = _p_and_G(p, G)
    return back(_fidelity(pf, Gf).reshape(shape))


def attenuation(p: Any, G: Any) -> Any:
    """Delta-method approximation of the fidelity: ``1 - 1 / (8 G p (1 - p))``.

    Accurate to ``O(1/G**2)`` for ``G p (1 - p)`` large; it understates the fidelity
    loss near ``p in {0, 1}`` and goes negative (``-inf`` at the edges) where the
    expansion is meaningless.

    >>> attenuation(0.5, 10)
    0.95
    """
    pf, Gf, shape, back = _p_and_G(p, G)
    with np.errstate(divide="ignore"):
        return back((1 - 1 / (8 * Gf * pf * (1 - pf))).reshape(shape))


def min_group_size(p: Any, epsilon: float = 0.05) -> Any:
    """The group-size law in closed form: ``G* = ceil(1 / (8 epsilon p (1 - p)))``.

    The ``G`` at which :func:`attenuation` reaches ``1 - epsilon`` (the seed post's
    ``min_group_size``). It understates the need near ``p in {0, 1}``; see
    :func:`exact_group_size`.

    >>> min_group_size(0.5), min_group_size(0.03)
    (10, 86)
    """
    eps = _arrays.check_epsilon(epsilon)
    p_arr, back = _arrays.numeric(p, "p")
    _arrays.check_probability(p_arr, open_interval=True)
    with np.errstate(over="ignore"):
        size = np.ceil(1 / (8 * eps * p_arr * (1 - p_arr)))
    too_big = ~(size < 2.0**63)  # would wrap around in int64
    if too_big.any():
        i = np.flatnonzero(too_big.reshape(-1))[0]
        raise ValueError(
            f"p={float(p_arr.reshape(-1)[i])!r} needs G = {float(size.reshape(-1)[i]):.3g} at "
            f"epsilon={eps!r}, beyond a 64-bit integer; no finite training budget reaches it"
        )
    return back(size, integer=True)


def exact_group_size(p: Any, epsilon: float = 0.05) -> Any:
    """Least ``G >= 2`` with ``fidelity(p, G) >= 1 - epsilon``.

    The fidelity increases in ``G``, so the answer is found by doubling from the
    closed form and then bisecting, all prompts at once (about ``2 log2 G`` fidelity
    evaluations, not one per ``G``).

    >>> exact_group_size(0.5), exact_group_size(0.03)
    (11, 113)
    """
    eps = _arrays.check_epsilon(epsilon)
    p_arr, back = _arrays.numeric(p, "p")
    _arrays.check_probability(p_arr, open_interval=True)
    pf = p_arr.reshape(-1)
    target = 1 - eps
    hi = np.maximum(2.0, np.ceil(1 / (8 * eps * pf * (1 - pf))))
    ok = _fidelity(pf, hi) >= target
    lo = np.where(ok, 1.0, hi)  # fidelity(1) = 0: G = 1 never suffices
    while not ok.all():
        if (hi > _MAX_G / 2).any():
            raise ValueError(
                f"epsilon={eps!r} needs a group above 2**40 for p={float(pf[~ok][0])!r}; "
                "use a larger epsilon or drop prompts that (almost) never or always succeed"
            )
        lo = np.where(ok, lo, hi)
        hi = np.where(ok, hi, 2 * hi)
        ok = _fidelity(pf, hi) >= target
    while (hi - lo > 1).any():
        mid = np.floor((lo + hi) / 2)
        ok = _fidelity(pf, np.maximum(mid, 2.0)) >= target
        move = hi - lo > 1
        hi = np.where(move & ok, mid, hi)
        lo = np.where(move & ~ok, mid, lo)
    return back(np.maximum(hi, 2.0).reshape(p_arr.shape), integer=True)


def difficulty_weight(p: Any) -> Any:
    """GRPO's implicit per-prompt weight ``w(p) = 1 / sqrt(p (1 - p)) = d/dp 2 arcsin sqrt(p)``.

    Dividing by ``sigma`` multiplies Dr. GRPO's update by this; infinite at the edges.

    >>> difficulty_weight(0.5)
    2.0
    """
    p_arr, back = _arrays.numeric(p, "p")
    _arrays.check_probability(p_arr)
    with np.errstate(divide="ignore"):
        return back(1 / np.sqrt(p_arr * (1 - p_arr)))


def mass_weight(p: Any, method: Method = "grpo", G: Any = None) -> Any:
    """Expected update size a prompt of success rate ``p`` receives.

    Large-group limit (``G=None``): ``sqrt(p (1 - p))`` for GRPO (``method="grpo"``),
    ``p (1 - p)`` for Dr. GRPO (``method="dr_grpo"``). With ``G`` given: the exact
    :func:`expected_gradient`.

    >>> mass_weight(0.5), mass_weight(0.5, "dr_grpo")
    (0.5, 0.25)
    """
    method = _check_method(method)
    if G is not None:
        return expected_gradient(p, G, method)
    p_arr, back = _arrays.numeric(p, "p")
    _arrays.check_probability(p_arr)
    var = p_arr * (1 - p_arr)
    return back(np.sqrt(var) if method == "grpo" else var)


def mass_share(p: Any, mask: Any, method: Method = "grpo", G: Any = None) -> float:
    """Share of a corpus's total update mass that falls on the prompts where ``mask`` is True.

    ``share = sum(m[mask]) / sum(m)`` with ``m = mass_weight(p, method, G)`` (``method``
    ``"grpo"`` or ``"dr_grpo"``; ``G=None`` for the large-group limit).

    >>> round(mass_share([0.05, 0.5], [True, False]), 4)
    0.3036
    """
    weights = np.asarray(_arrays.numeric(mass_weight(p, method, G), "p")[0], dtype=np.float64)
    weights = weights.reshape(-1)
    if isinstance(mask, (str, bytes)):
        raise TypeError(f"mask={mask!r} must be an array of booleans, one per prompt")
    m = np.asarray(mask.detach().cpu().numpy() if hasattr(mask, "detach") else mask)
    if m.dtype.kind != "b":
        raise TypeError(f"mask has dtype {m.dtype}; pass booleans, one per prompt")
    m = m.reshape(-1)
    if m.shape != weights.shape:
        raise ValueError(f"mask has {m.size} entries but p has {weights.size}; pass one per prompt")
    total = weights.sum()
    if total == 0:
        raise ValueError("every prompt has zero update mass (p in {0, 1}); the share is undefined")
    return float(weights[m].sum() / total)


def arcsine_objective(p: Any) -> Any:
    """GRPO's implicit objective per prompt, ``2 arcsin sqrt(p)``, whose p-derivative is
    :func:`difficulty_weight`.

    Above ``p = 1/2`` it is evaluated as ``pi - 2 arcsin sqrt(1 - p)`` (``1 - p`` is exact
    there), which keeps full precision near ``p = 1`` where ``arcsin`` is ill-conditioned.

    >>> round(arcsine_objective(0.5), 6)  # pi / 2
    1.570796
    """
    p_arr, back = _arrays.numeric(p, "p")
    _arrays.check_probability(p_arr)
    upper = p_arr > 0.5
    low = 2 * np.arcsin(np.sqrt(np.where(upper, 0.0, p_arr)))
    high = np.pi - 2 * np.arcsin(np.sqrt(np.where(upper, 1.0 - p_arr, 0.0)))
    return back(np.where(upper, high, low))
