"""Likely causes of a mismatch, in words.

Each hypothesis below is a known, realistic deviation; its prediction is computed with the
oracle under a changed convention or grouping (or, for bugs no convention describes, from
the oracle's own centred values and divisors). The first hypothesis that reproduces the
actual advantages names the cause.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..advantages import dr_grpo_advantage, grpo_advantage
from .reference import Reference, as_numpy

__all__ = ["likely_cause"]


def _groups(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, inverse, counts = np.unique(index, return_inverse=True, return_counts=True)
    return inverse.reshape(-1), counts


def _silent(rewards: np.ndarray, index: np.ndarray) -> np.ndarray:
    inv, counts = _groups(index)
    lo = np.full(counts.shape, np.inf)
    hi = np.full(counts.shape, -np.inf)
    np.minimum.at(lo, inv, rewards)
    np.maximum.at(hi, inv, rewards)
    return (lo == hi)[inv]


_TOL = {"rtol": 1e-4, "atol": 1e-6}


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=_TOL["rtol"], atol=_TOL["atol"]))


def likely_cause(
    actual: np.ndarray, rewards: np.ndarray, index: np.ndarray, ref: Reference, *, rtol: float = 1e-4
) -> str | None:
    """The known deviations that explain ``actual`` (flat float64), or ``None``.

    A hypothesis explains ``actual`` when it reproduces it within ``rtol`` (loosen it for
    low-precision outputs).

    >>> import numpy as np
    >>> from sigma_ref.conformance.reference import reference_for
    >>> r, idx = np.array([1.0, 0.0, 0.0, 1.0]), np.array([0, 0, 1, 1])
    >>> cause = likely_cause(np.array([0.5, -0.5, -0.5, 0.5]), r, idx, reference_for("paper"))
    >>> cause.startswith("advantages are R - mean, not divided by the std")
    True
    """
    saved = dict(_TOL)
    _TOL.update(rtol=rtol, atol=max(1e-6, rtol / 100))
    try:
        with np.errstate(all="ignore"):
            return _likely_cause(actual, rewards, index, ref)
    finally:
        _TOL.update(saved)


def _likely_cause(actual: np.ndarray, rewards: np.ndarray, index: np.ndarray, ref: Reference) -> str | None:
    actual = np.asarray(actual, dtype=np.float64).reshape(-1)
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    index = np.asarray(index).reshape(-1)
    if actual.shape != rewards.shape:
        return None
    inv, counts = _groups(index)
    silent = _silent(rewards, index)
    single = counts[inv] == 1
    bad = ~np.isfinite(actual)
    if bad.any():
        if (bad & single).any() and not (bad & ~single).any():
            return (
                "a group of one response gets NaN/inf: the std of one value (ddof=1) is NaN; "
                f"a singleton group should get {ref.singleton!r} under {ref.name}"
            )
        if (bad & silent).any() and not (bad & ~silent).any():
            return (
                "silent groups (all rewards equal) give NaN/inf: std = 0 and no eps make 0/0; "
                "return 0 where the group std is 0"
            )
        return "the advantages hold NaN or infinity for finite rewards"
    expected = as_numpy(ref.advantages(rewards, index))
    centred = as_numpy(dr_grpo_advantage(rewards, index=index))
    hypotheses: list[tuple[str, Callable[[], np.ndarray]]] = [
        ("advantages have the wrong sign: use R - mean, not mean - R", lambda: -expected),
    ]
    conv = ref.convention
    if conv is not None and ref.family == "grpo":
        flip = 1 - conv.ddof
        ddof_cause = (
            "std is Bessel-corrected (divides by G-1); declare ddof=1, or use std(unbiased=False)"
            if flip == 1
            else "std is the population std (divides by G); declare ddof=0, or use Bessel's std"
        )
        hypotheses.append(
            (
                ddof_cause,
                lambda: as_numpy(grpo_advantage(rewards, convention=conv.replace(ddof=flip), index=index)),
            )
        )
        if conv.scale == "group":
            hypotheses.append(
                (
                    "advantages are divided by one std over the whole batch, not each group's std "
                    "(scale='batch')",
                    lambda: as_numpy(
                        grpo_advantage(rewards, convention=conv.replace(scale="batch"), index=index)
                    ),
                )
            )
        else:
            hypotheses.append(
                (
                    "advantages are divided by each group's std, not one std over the batch (scale='group')",
                    lambda: as_numpy(
                        grpo_advantage(rewards, convention=conv.replace(scale="group"), index=index)
                    ),
                )
            )
        hypotheses.append(
            (
                "advantages are divided by the std but not mean-centred: mean centering forgotten, "
                "(R - mean) / std",
                lambda: _divide_like(rewards, centred, expected, inv),
            )
        )
        hypotheses.append(
            (
                "eps is inside the sqrt: sqrt(var + eps) instead of std + eps",
                lambda: _eps_inside(rewards, index, conv),
            )
        )
        hypotheses.append(
            (
                "advantages are R - mean, not divided by the std: declare scale='none' (Dr. GRPO) "
                "or divide by the group std",
                lambda: centred,
            )
        )
    hypotheses.append(
        (
            "advantages are centered on the batch mean, not the group mean",
            lambda: _divide_like(rewards - rewards.mean(), centred, expected, inv),
        )
    )
    hypotheses.append(
        (
            "advantages are centered and scaled over the whole batch as one group, not per group",
            lambda: as_numpy(ref.advantages(rewards, np.zeros_like(inv))),
        )
    )
    G = int(counts[0])
    if (counts == G).all() and len(counts) > 1:
        B = len(counts)
        hypotheses.append(
            (
                "groups are read interleaved (response i in group i mod B) instead of contiguous runs of G: "
                "use reshape(-1, G), not reshape(G, -1)",
                lambda: as_numpy(ref.advantages(rewards, np.arange(rewards.size) % B)),
            )
        )
    _, first = np.unique(index, return_index=True)
    order = np.argsort(first, kind="stable")
    runs = np.repeat(np.arange(len(counts)), counts[order])
    if not np.array_equal(runs, inv):
        hypotheses.append(
            (
                "groups are taken as contiguous runs in order of appearance, ignoring the index: "
                "group by the index ids (unique(return_inverse=True)), not by position",
                lambda: as_numpy(ref.advantages(rewards, runs)),
            )
        )
    causes = []
    for cause, predict in hypotheses:
        try:
            if _close(actual, predict()):
                causes.append(cause)
        except (ValueError, TypeError, ZeroDivisionError, FloatingPointError):
            continue
    if causes:  # several hypotheses can explain a small input; name them all
        return "; or ".join(causes)
    # a constant factor
    den = float(expected @ expected)
    if den > 0:
        lam = float(actual @ expected) / den
        if lam != 0 and _close(actual, lam * expected):
            sizes = counts[inv]
            if np.allclose(lam, (sizes - 1) / sizes, rtol=1e-6):
                return (
                    "advantages are a factor (G-1)/G too small: RLOO's baseline leaves the response out, "
                    "A = G/(G-1) (R - mean); R - mean is Dr. GRPO's"
                )
            if np.allclose(lam, sizes / (sizes - 1), rtol=1e-6):
                return "advantages are a factor G/(G-1) too large"
            return f"advantages are {lam:.6g} times the expected values (a constant factor)"
    last = inv == inv[-1]
    if (
        (actual[last] == 0).all()
        and _close(actual[~last], expected[~last])
        and not (expected[last] == 0).all()
    ):
        return "the last group's advantages are all zero: the loop over groups stops one group early"
    wrong = ~np.isclose(actual, expected, rtol=1e-4, atol=1e-6)
    if (wrong & silent).any() and not (wrong & ~silent).any():
        return "silent groups (all rewards equal) get non-zero advantages; they should get 0"
    if (wrong & single).any() and not (wrong & ~single).any():
        return f"groups of one response get other values than {ref.singleton!r} ({ref.name})"
    return None


def _divide_like(
    numerator: np.ndarray, centred: np.ndarray, expected: np.ndarray, inv: np.ndarray
) -> np.ndarray:
    """``numerator / d`` with the reference's divisor per group, ``d = |c|**2 / (c . A)``."""
    num = np.bincount(inv, centred * centred)
    den = np.bincount(inv, centred * expected)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = (num / den)[inv]
        return np.where(np.isfinite(d) & (d != 0), numerator / d, 0.0)  # silent groups: 0


def _eps_inside(rewards: np.ndarray, index: np.ndarray, conv: object) -> np.ndarray:
    """``(R - mean) / sqrt(std**2 + eps)``: the eps-inside-the-sqrt bug, from oracle pieces."""
    assert hasattr(conv, "replace")
    no_eps = conv.replace(eps=0.0)  # type: ignore[attr-defined]
    centred = as_numpy(dr_grpo_advantage(rewards, index=index))
    plain = as_numpy(grpo_advantage(rewards, convention=no_eps, index=index))
    with np.errstate(divide="ignore", invalid="ignore"):
        std = np.where(plain != 0, centred / np.where(plain != 0, plain, 1), 0.0)
    return centred / np.sqrt(std**2 + conv.eps)  # type: ignore[attr-defined]
