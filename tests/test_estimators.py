"""The named estimators (sigma_ref.estimators) against their definitions, computed here by brute
force (one group at a time, the leave-one-out sets built explicitly) in exact rationals where the
definition has no square root, else in float64 with a tolerance of 1e-12 relative (a few float64
roundings of values of size ~1; the oracle's own statistics are exact or correctly rounded)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from sigma_ref.estimators import (
    ESTIMATORS,
    gdpo_advantage,
    group_then_batch_advantage,
    loo_std_advantage,
    maxrl_advantage,
    rloo_std_advantage,
)

_RNG = np.random.default_rng(14)
_BATCHES = [
    (np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5]), np.repeat([0, 1, 2], 4)),
    ((_RNG.normal(size=15) * 2).round(3), np.array([4, 1, 4, 9, 1, 9, 4, 1, 9, 4, 1, 9, 4, 1, 9])),
    (np.array([0.1, 0.7, 0.3, 0.9, 0.2, 0.35, 0.6]), np.array(["b", "a", "b", "a", "b", "a", "b"])),
    # repeated rewards in interleaved groups (equal rewards of a group share one leave-one-out set)
    (_RNG.integers(0, 3, size=24) / 2.0, _RNG.permutation(np.repeat([7, 2, 5], 8))),
]


def _std(values: list[float], ddof: int) -> float:
    m = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - ddof))


def _groups(index: np.ndarray) -> dict:
    out: dict = {}
    for i, g in enumerate(index.tolist()):
        out.setdefault(g, []).append(i)
    return out


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("eps", [0.0, 1e-5])
@pytest.mark.parametrize("b", range(len(_BATCHES)))
def test_rloo_std_is_rloo_over_the_group_std(b: int, eps: float, ddof: int) -> None:
    rewards, index = _BATCHES[b]
    got = rloo_std_advantage(rewards, index=index, ddof=ddof, eps=eps)
    for rows in _groups(index).values():
        vals = rewards[rows].tolist()
        d = _std(vals, ddof) + eps
        for i, row in enumerate(rows):
            others = vals[:i] + vals[i + 1 :]
            num = vals[i] - math.fsum(others) / len(others)
            want = 0.0 if max(vals) == min(vals) else num / d
            assert got[row] == pytest.approx(want, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("b", range(len(_BATCHES)))
def test_loo_std_uses_the_other_responses_std(b: int, ddof: int) -> None:
    rewards, index = _BATCHES[b]
    eps = 1e-4
    got = loo_std_advantage(rewards, index=index, ddof=ddof, eps=eps)
    for rows in _groups(index).values():
        vals = rewards[rows].tolist()
        for i, row in enumerate(rows):
            others = vals[:i] + vals[i + 1 :]
            num = vals[i] - math.fsum(others) / len(others)
            want = 0.0 if max(vals) == min(vals) else num / (_std(others, ddof) + eps)
            assert got[row] == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_loo_std_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match="G >= 2"):
        loo_std_advantage(np.array([1.0, 0.0, 1.0]), index=[0, 0, 1])
    with pytest.raises(ValueError, match=r"ddof=1.*G >= 3"):
        loo_std_advantage(np.array([[1.0, 0.0]]), ddof=1)
    with pytest.raises(ValueError, match="eps"):
        rloo_std_advantage(np.array([[1.0, 0.0]]), eps=-1.0)


def test_group_then_batch_is_grpo_over_the_batch_std_of_grpo() -> None:
    """mean_batch(a) = 0 (every group's a sums to 0), so A = a / (std_batch a + eps)."""
    from sigma_ref import grpo_advantage

    for rewards, index in _BATCHES:
        a = np.asarray(grpo_advantage(rewards, index=index))
        got = group_then_batch_advantage(rewards, index=index, batch_ddof=1, batch_eps=1e-6)
        want = a / (_std(a.tolist(), 1) + 1e-6)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_gdpo_with_one_component_is_group_then_batch() -> None:
    for rewards, index in _BATCHES:
        one = gdpo_advantage(rewards[:, None], index=index).reshape(-1)
        np.testing.assert_allclose(one, group_then_batch_advantage(rewards, index=index), rtol=1e-13, atol=0)
    with pytest.raises(ValueError, match=r"rewards \[N, K\]"):
        gdpo_advantage(np.array([1.0, 0.0]))


def test_maxrl_is_the_centered_reward_over_the_mean_exactly() -> None:
    """Binary rewards, k of G correct: A+ = (G - k) / k, A- = -1, exactly (rationals)."""
    for G in range(2, 9):
        for k in range(G + 1):
            r = np.array([1.0] * k + [0.0] * (G - k))
            got = maxrl_advantage(r[None, :])[0]
            if k == 0:
                assert (got == 0).all()
                continue
            want = [Fraction(G - k, k)] * k + [Fraction(-1)] * (G - k) if k < G else [Fraction(0)] * G
            assert [Fraction(x).limit_denominator(1000) for x in got.tolist()] == want


def test_every_estimator_is_named() -> None:
    assert set(ESTIMATORS) == {"rloo_std", "loo_std", "group_then_batch", "gdpo", "maxrl"}
    for fn in ESTIMATORS.values():
        assert fn.__doc__ and ">>>" in fn.__doc__ and "A" in fn.__doc__.split("\n\n")[0]
