"""A seeded fuzz of the public oracle against exact arithmetic (issue 27): 0 silently wrong results.

Each case draws one batch of groups (sizes 1-70, so pairwise sums beyond 64 are reached) of
hostile rewards: binary, small integers, a huge common offset with a tiny spread (1e16 + k),
normal draws scaled by ``10**e`` for ``e`` in -310..308 (subnormals to near-overflow), and
values at float64's edge. For every public function fuzzed (``grpo_advantage`` under
``paper``, ``trl`` and ``dr_grpo``; ``rloo_advantage``; ``group_statistics``;
``policy_gradient``; ``decompose_continuous``) the result is compared with the exact value
(``fractions.Fraction`` on the float64 inputs; one square root per group by ``mpmath`` at
300 bits). A call passes when

* the exact result fits in float64 and the returned one is within the oracle's documented
  bound, ``|A_i - A_i*| <= (G + 4) u max_j |A_j*|`` with ``u = 2**-53`` (``sigma_ref.advantages``,
  "Bound"; statistics and the identity likewise, bounds stated at each check), or
* the exact result does not fit in float64 and the call raises ``ValueError``, or
* the input is refused by the documented rule (a singleton group under ``singleton="error"``
  or in RLOO) with ``ValueError``.

Anything else (a NaN, an ``inf``, a value outside its bound, an unexpected exception) is
collected and reported with the seed and the case; the test asserts there is none. The
number of calls is printed and asserted (>= 10,000).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest

import sigma_ref as sr

pytestmark = pytest.mark.slow

SEED = 20261204
CASES = int(os.environ.get("SIGMA_REF_FUZZ_CASES", "1600"))
U = 2.0**-53
#: Every real below this in magnitude rounds to a finite float64 (max + half an ulp of it).
ROUNDS_FINITE = Fraction(2**1024 - 2**970)
#: The smallest subnormal: each operation whose result is subnormal adds up to half of it
#: (absolute), so every bound below also allows (terms) * TINY.
TINY = 2.0**-1074
#: group_statistics of every group, singletons included (their sigma is 0).
ZERO_SINGLETONS = sr.get_convention("paper").replace(singleton="zero")


def _draw_group(rng: np.random.Generator) -> np.ndarray:
    G = int(rng.choice([1, 2, 2, 3, 4, 5, 8, 16, 33, 64, 65, 70]))
    kind = int(rng.integers(6))
    if kind == 0:
        return rng.integers(0, 2, G).astype(np.float64)
    if kind == 1:
        return rng.integers(-5, 6, G).astype(np.float64)
    if kind == 2:
        return 1e16 + rng.integers(0, 4, G).astype(np.float64)
    if kind == 3:
        exponent = int(rng.integers(-310, 309))
        with np.errstate(over="ignore", under="ignore"):
            values = rng.standard_normal(G) * 10.0**exponent
        return np.where(np.isfinite(values), values, 1.0)
    if kind == 4:
        top = np.finfo(np.float64).max
        return rng.choice([top, -top, top / 2, 0.0, 5e-324, -5e-324], G)
    return rng.choice([0.0, -0.0, 1.0, 0.5, 0.25], G)


def _exact_group(values: list[float], ddof: int) -> tuple[list[Fraction], Fraction, Any]:
    """Centered values, mean and ``sqrt(sum c**2 / (G - ddof))`` (an mpf at 300 bits) of one group."""
    r = [Fraction(v) for v in values]
    G = len(r)
    mu = sum(r, Fraction(0)) / G
    c = [v - mu for v in r]
    ss = sum((v * v for v in c), Fraction(0))
    with mpmath.workprec(300):
        std = mpmath.sqrt(mpmath.mpf(ss.numerator) / ss.denominator / (G - ddof)) if G > ddof else None
    return c, mu, std


def _mp(x: Fraction) -> Any:
    with mpmath.workprec(300):
        return mpmath.mpf(x.numerator) / x.denominator


def _fits(x: Any) -> bool:
    """Whether ``x`` rounds to a finite float64 (below ``2**1024 - 2**970``, half an ulp past the max)."""
    return bool(abs(x) < _mp(ROUNDS_FINITE))


def _arr(got: Any) -> Any:
    return got if got is None or isinstance(got, ValueError) else np.atleast_1d(got)


class Fuzz:
    def __init__(self) -> None:
        self.calls = 0
        self.edge = 0  # refusals of a result within its bound of float64's largest value
        self.wrong: list[str] = []

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        self.calls += 1
        try:
            return fn()
        except ValueError as exc:
            return exc
        except Exception as exc:
            self.wrong.append(f"{what}: unexpected {type(exc).__name__}: {exc}")
            return None

    def expect_refusal(self, what: str, got: Any) -> None:
        if not isinstance(got, ValueError):
            self.wrong.append(f"{what}: should raise ValueError, returned {got!r}")

    def expect_close(self, what: str, got: Any, exact: list[Any], bound: Any) -> None:
        if isinstance(got, ValueError):
            # a refusal is right when an exact value is beyond float64, and allowed when one is
            # within the documented bound of the edge (the oracle's rounding may cross it)
            if _fits(max(abs(e) for e in exact) + bound):
                self.wrong.append(f"{what}: raised {got} although every exact value fits in float64")
            else:
                self.edge += 1
            return
        if got is None:
            return
        values = np.asarray(got, dtype=np.float64).reshape(-1)
        if not all(_fits(e) for e in exact):
            self.wrong.append(f"{what}: returned {values[:4]} although an exact value is beyond float64")
            return
        for i, (v, e) in enumerate(zip(values.tolist(), exact, strict=True)):
            if not math.isfinite(v) or abs(mpmath.mpf(v) - e) > bound:
                self.wrong.append(
                    f"{what}[{i}]: {v!r}, exact {mpmath.nstr(e, 17)}, bound {mpmath.nstr(bound, 3)}"
                )
                return


def _advantages(fz: Fuzz, tag: str, groups: list[np.ndarray], rewards: np.ndarray, index: np.ndarray) -> None:
    conventions: list[tuple[str, Callable[[], Any], int, float, str, bool]] = [
        ("paper", lambda: sr.grpo_advantage(rewards, index=index), 0, 0.0, "group", False),
        ("trl", lambda: sr.grpo_advantage(rewards, convention="trl", index=index), 1, 1e-4, "group", True),
        ("dr_grpo", lambda: sr.dr_grpo_advantage(rewards, index=index), 0, 0.0, "none", False),
        ("rloo", lambda: sr.rloo_advantage(rewards, index=index), 0, 0.0, "rloo", False),
    ]
    singles = any(g.size == 1 for g in groups)
    for name, fn, ddof, eps, scale, singleton_ok in conventions:
        what = f"{tag} {name}"
        got = fz.call(what, fn)
        if singles and not singleton_ok:
            fz.expect_refusal(what, got)
            continue
        exact_all: list[Any] = []
        bound = mpmath.mpf(0)
        for g in groups:
            c, _, std = _exact_group(g.tolist(), ddof)
            G = len(c)
            with mpmath.workprec(300):
                if G == 1:
                    exact = [mpmath.mpf(0)]  # trl: singleton 'zero'
                elif scale == "none":
                    exact = [_mp(v) for v in c]
                elif scale == "rloo":
                    exact = [_mp(v * G / (G - 1)) for v in c]
                else:
                    d = std + eps
                    exact = [_mp(v) / d if d > 0 else mpmath.mpf(0) for v in c]
                top = max(abs(e) for e in exact)
                bound = max(bound, (G + 4) * (U * top + TINY))
            exact_all.extend(exact)
        # the rewards are listed group after group (index sorted), so results line up
        fz.expect_close(what, got, exact_all, bound)


def _statistics(fz: Fuzz, tag: str, groups: list[np.ndarray], rewards: np.ndarray, index: np.ndarray) -> None:
    got = fz.call(
        f"{tag} group_statistics",
        lambda: sr.group_statistics(rewards, index=index, convention=ZERO_SINGLETONS),
    )
    sums = [sum((Fraction(v) for v in g.tolist()), Fraction(0)) for g in groups]
    if not all(abs(k) < ROUNDS_FINITE for k in sums):  # k = sum(R) is a statistic: beyond float64, refused
        fz.expect_refusal(f"{tag} group_statistics (k beyond float64)", got)
        return
    # k's bound: G u sum |R| (a sum of G terms); a refusal within it of the edge is allowed
    slack = [len(g) * Fraction(U) * sum(abs(Fraction(v)) for v in g.tolist()) for g in groups]
    near_edge = any(abs(k) + e >= ROUNDS_FINITE for k, e in zip(sums, slack, strict=True))
    if got is None or isinstance(got, ValueError):
        if isinstance(got, ValueError) and not near_edge:
            fz.wrong.append(f"{tag} group_statistics: raised {got} although every statistic fits")
        fz.edge += isinstance(got, ValueError) and near_edge
        return
    for j, g in enumerate(groups):
        c, mu, _ = _exact_group(g.tolist(), 0)
        G = len(c)
        with mpmath.workprec(300):
            ss = sum((v * v for v in c), Fraction(0))
            sigma = mpmath.sqrt(_mp(ss) / G)
            scale = max(abs(_mp(Fraction(v))) for v in g.tolist())
        # mean: two passes, within (G + 4) u max|R|; sigma: within (G + 4) u sigma (relative)
        fz.expect_close(f"{tag} mean[{j}]", got.mean[j : j + 1], [_mp(mu)], (G + 4) * (U * scale + TINY))
        fz.expect_close(f"{tag} sigma[{j}]", got.sigma[j : j + 1], [sigma], (G + 4) * (U * sigma + TINY))


def _identity(fz: Fuzz, tag: str, rng: np.random.Generator, groups: list[np.ndarray]) -> None:
    live = [g for g in groups if g.size >= 2 and g.min() < g.max() and np.abs(g).max() < 1e150]
    if not live:
        return
    g = live[0]
    scores = rng.standard_normal(g.size) * 10.0 ** int(rng.integers(-100, 100))
    adv = np.asarray(sr.dr_grpo_advantage(g), dtype=np.float64)
    got = fz.call(f"{tag} policy_gradient", lambda: sr.policy_gradient(adv, scores))
    terms = [Fraction(a) * Fraction(s) for a, s in zip(adv.tolist(), scores.tolist(), strict=True)]
    exact = _mp(sum(terms, Fraction(0)) / g.size)
    size = sum(abs(_mp(t)) for t in terms) / g.size
    fz.expect_close(
        f"{tag} policy_gradient",
        _arr(got),
        [exact],
        (g.size + 2) * (U * size + TINY),
    )
    c, _, _ = _exact_group(g.tolist(), 0)
    s = [Fraction(v) for v in scores.tolist()]
    ms = sum(s, Fraction(0)) / len(s)
    cov = sum(((a * (b - ms)) for a, b in zip(c, s, strict=True)), Fraction(0))
    var = sum((a * a for a in c), Fraction(0))
    slope = _mp(cov / var)
    with mpmath.workprec(300):
        sigma = mpmath.sqrt(_mp(var) / g.size)
        spread = sum(abs(_mp(a) * _mp(b)) for a, b in zip(c, s, strict=True)) / g.size / sigma**2
    got = fz.call(f"{tag} decompose_continuous", lambda: sr.decompose_continuous(g, scores).slope)
    # slope = mean(z s) / sigma with z = (R - mu) / sigma: the sum's error is relative to sum |z s|
    fz.expect_close(
        f"{tag} slope",
        _arr(got),
        [slope],
        (4 * g.size + 8) * (U * spread + TINY),
    )


def test_the_oracle_is_never_silently_wrong() -> None:
    rng = np.random.default_rng(SEED)
    fz = Fuzz()
    for case in range(CASES):
        groups = [_draw_group(rng) for _ in range(int(rng.integers(1, 4)))]
        rewards = np.concatenate(groups)
        index = np.repeat(np.arange(len(groups)), [g.size for g in groups])
        tag = f"seed {SEED} case {case}"
        _advantages(fz, tag, groups, rewards, index)
        _statistics(fz, tag, groups, rewards, index)
        _identity(fz, tag, rng, groups)
    print(
        f"{fz.calls} oracle calls, {fz.edge} refused within their bound of float64's edge, "
        f"{len(fz.wrong)} wrong"
    )
    assert fz.calls >= 10_000
    assert not fz.wrong, "\n".join(fz.wrong[:20])
