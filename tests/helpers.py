"""Independent references and assertions for the oracle's own tests.

Nothing here calls the formula it checks: the references are brute force (a Python
loop over groups with ``np.std``), exact (``fractions``) or high precision
(``mpmath``), written from SPEC.md, not from ``sigma_ref``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import torch

from sigma_ref import Convention

# ---------------------------------------------------------------------------
# assertions


def assert_close(actual: Any, expected: Any, *, rtol: float, atol: float = 0.0, what: str = "") -> None:
    """``|actual - expected| <= atol + rtol * |expected|`` elementwise, with a readable failure."""
    __tracebackhide__ = True
    a = np.asarray(_numpy(actual), dtype=np.float64)
    e = np.asarray(_numpy(expected), dtype=np.float64)
    assert a.shape == e.shape, f"shape {a.shape}, but should be {e.shape} [{what}]"
    both_nan = np.isnan(a) & np.isnan(e)
    err = np.where(both_nan, 0.0, np.abs(a - e))
    bound = atol + rtol * np.abs(e)
    bad = ~(err <= bound)
    if bad.any():
        i = np.unravel_index(int(np.argmax(np.where(bad, err - bound, -np.inf))), a.shape)
        raise AssertionError(
            f"{int(bad.sum())} of {a.size} mismatched; worst at {tuple(int(j) for j in i)}: "
            f"actual={a[i]!r}, but should be {e[i]!r} (|diff|={err[i]:.3g} > {bound[i]:.3g}) [{what}]"
        )


def _numpy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64).numpy()
    return x


# ---------------------------------------------------------------------------
# brute-force GRPO-family references (one Python loop over groups: fine in a test)


def group_members(ids: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    """Positions of each group id, in order of first appearance."""
    members: dict[Hashable, list[int]] = {}
    for pos, gid in enumerate(ids):
        members.setdefault(gid, []).append(pos)
    return members


def ref_advantage(rewards: np.ndarray, ids: Sequence[Hashable], conv: Convention) -> np.ndarray:
    """``A_i = (R_i - mean(group)) / d`` written from docs/spec.md §4, group by group."""
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.zeros_like(rewards)
    batch_std = np.std(rewards, ddof=conv.ddof) if rewards.size > conv.ddof else 0.0

    def with_eps(std: float) -> float:
        return std + conv.eps if conv.eps_placement == "add" else max(std, conv.eps)

    for pos in group_members(ids).values():
        r = rewards[pos]
        if len(r) == 1:
            if conv.singleton == "error":
                raise ValueError("singleton")
            if conv.singleton == "zero":
                out[pos] = 0.0
            else:  # unit_std: mean 0, std 1
                out[pos] = r / (1.0 if conv.scale == "none" else with_eps(1.0))
            continue
        if np.all(r == r[0]):  # silent: centered rewards are exactly zero
            out[pos] = 0.0
            continue
        centered = r - np.mean(r)
        if conv.scale == "none":
            d = 1.0
        elif conv.scale == "group":
            d = with_eps(float(np.std(r, ddof=conv.ddof)))
        else:
            d = with_eps(float(batch_std))
        out[pos] = centered / d
    return out


def ref_rloo(rewards: np.ndarray, ids: Sequence[Hashable]) -> np.ndarray:
    """``A_i = R_i - mean_{j != i} R_j`` by brute force."""
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.zeros_like(rewards)
    for pos in group_members(ids).values():
        for i in pos:
            others = [rewards[j] for j in pos if j != i]
            out[i] = rewards[i] - sum(others) / len(others)
    return out


def rows_as_ids(shape: tuple[int, ...], dim: int) -> np.ndarray:
    """For a ``[..., G]`` array grouped along ``dim``: the group id (row number) of each element."""
    dim = dim % len(shape)
    moved = list(shape)
    size = moved.pop(dim)
    rows = np.arange(math.prod(moved)).reshape(moved)
    ids = np.repeat(rows[..., None], size, axis=-1)
    return np.moveaxis(ids, -1, dim)


# ---------------------------------------------------------------------------
# ragged, interleaved batches with several kinds of group ids


def make_ids(kind: str, n_groups: int, rng: np.random.Generator) -> list[Hashable]:
    """``n_groups`` distinct group ids of a kind: ``int``, ``str`` (uuid-like) or ``tuple``."""
    if kind == "int":
        picks = rng.choice(10**9, size=n_groups, replace=False) - 5 * 10**8
        return [int(v) for v in picks]
    if kind == "str":
        return [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(n_groups)]
    if kind == "tuple":
        return [(int(rng.integers(0, 3)), f"prompt-{j}") for j in range(n_groups)]
    raise ValueError(kind)


def ragged_batch(
    sizes: Sequence[int], kind: str, rng: np.random.Generator
) -> tuple[list[Hashable], np.ndarray]:
    """Group ids for groups of ``sizes``, interleaved by a random permutation; and its order."""
    ids = make_ids(kind, len(sizes), rng)
    flat = [ids[j] for j, n in enumerate(sizes) for _ in range(n)]
    perm = rng.permutation(len(flat))
    return [flat[i] for i in perm], perm


def binary_rewards(sizes: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Binary rewards, one success probability per group (including 0 and 1: silent groups)."""
    probs = rng.choice([0.0, 1.0, 0.1, 0.5, 0.9, -1.0], size=len(sizes))
    probs = np.where(probs < 0, rng.random(len(sizes)), probs)
    return np.concatenate([(rng.random(n) < q).astype(np.float64) for n, q in zip(sizes, probs, strict=True)])


# ---------------------------------------------------------------------------
# exact closed forms


def exact_silent_rate(p: float, G: int) -> Fraction:
    """``p^G + (1-p)^G`` in exact rationals (``p`` is the float's exact value)."""
    fp = Fraction(p)
    return fp**G + (1 - fp) ** G


def exact_dr_grpo(p: float, G: int) -> Fraction:
    """``E[sigma^2] = sum_k C(G,k) p^k q^(G-k) k (G-k) / G^2`` in exact rationals."""
    fp = Fraction(p)
    fq = 1 - fp
    return sum(math.comb(G, k) * fp**k * fq ** (G - k) * Fraction(k * (G - k), G * G) for k in range(G + 1))


def exact_expected_sigma_small(p: float, G: int, dps: int = 50) -> mpmath.mpf:
    """``E[sigma] = (1/G) sum_k C(G,k) p^k q^(G-k) sqrt(k (G-k))``: exact rational weights,
    each square root at ``dps`` digits."""
    fp = Fraction(p)
    fq = 1 - fp
    with mpmath.workdps(dps):
        total = mpmath.mpf(0)
        for k in range(1, G):
            w = math.comb(G, k) * fp**k * fq ** (G - k)
            total += mpmath.mpf(w.numerator) / w.denominator * mpmath.sqrt(k * (G - k))
        return total / G


def windowed_expected_sigma(p: float, G: int, dps: int = 40, cutoff: float = 1e-36) -> mpmath.mpf:
    """``E[sigma]`` for large ``G`` at ``dps`` digits: terms walked outward from the mode by
    the ratio ``t_{k+1}/t_k = (G-k)/(k+1) * p/q`` until they fall below ``cutoff`` times the
    largest (the pmf is unimodal, so every term left out is smaller still and the tail is
    below ``G * cutoff`` of the sum)."""
    with mpmath.workdps(dps):
        mp_p = mpmath.mpf(p)
        mp_q = 1 - mp_p
        ratio = mp_p / mp_q
        mode = min(max(math.floor((G + 1) * p), 1), G - 1)
        log_t = (
            mpmath.loggamma(G + 1)
            - mpmath.loggamma(mode + 1)
            - mpmath.loggamma(G - mode + 1)
            + mode * mpmath.log(mp_p)
            + (G - mode) * mpmath.log(mp_q)
        )
        top = mpmath.exp(log_t)
        floor = top * cutoff
        total = top * mpmath.sqrt(mode * (G - mode))
        t, k = top, mode
        while k < G - 1:
            t = t * ratio * (G - k) / (k + 1)
            k += 1
            total += t * mpmath.sqrt(k * (G - k))
            if t < floor:
                break
        t, k = top, mode
        while k > 1:
            t = t / ratio * k / (G - k + 1)
            k -= 1
            total += t * mpmath.sqrt(k * (G - k))
            if t < floor:
                break
        return total / G
