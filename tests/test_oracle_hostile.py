"""The oracle never returns a silently wrong number (issue 27, items 10-12).

A result beyond float64, or beyond the caller's dtype, raises ``ValueError`` naming the
quantity and the group; the continuous identity's slope is exact to a few ulps for any
spread of the rewards; ``-0.0`` is ``0``; extended precision is refused; ids are grouped by
``==`` even beyond ``2**53``; an unordered ``index`` is refused. Exact references: the
slope by ``fractions.Fraction`` on the float64 inputs.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

import sigma_ref as sr


@pytest.mark.parametrize(
    ("dtype", "top"),
    [(np.float16, 65504.0), (np.float32, 3.0e38), (torch.float16, 65504.0), (torch.bfloat16, 3.0e38)],
)
def test_rloo_beyond_the_output_dtype_raises(dtype: object, top: float) -> None:
    lib = torch.tensor if isinstance(dtype, torch.dtype) else np.array
    with pytest.raises(ValueError, match=r"do not fit in (float16|float32|bfloat16)"):
        sr.rloo_advantage(lib([top, -top], dtype=dtype))
    one_up = lib([top, -top, -top, -top], dtype=dtype)  # R_0 - mu = 1.5 top
    with pytest.raises(ValueError, match="do not fit in"):
        sr.dr_grpo_advantage(one_up)
    with pytest.raises(ValueError, match="do not fit in"):
        sr.grpo_advantage(one_up, convention=sr.get_convention("paper").replace(scale="none"))


def test_narrow_results_that_fit_are_returned_in_the_dtype() -> None:
    out = sr.rloo_advantage(np.array([30000.0, -30000.0], np.float16))
    assert out.dtype == np.float16 and out.tolist() == [60000.0, -60000.0]
    grpo = sr.grpo_advantage(np.array([65504.0, -65504.0], np.float16))  # |A| <= sqrt(G - 1)
    assert grpo.tolist() == [1.0, -1.0]


def test_identity_results_beyond_float64_raise() -> None:
    with pytest.raises(ValueError, match="update of the group does not fit in float64"):
        sr.policy_gradient(np.array([1e300, 1e300]), np.array([1e300, 1e300]))
    with pytest.raises(ValueError, match="does not fit in float64"):
        sr.decompose(np.array([1.0, 0.0]), np.array([1.7e308, -1.7e308]))
    with pytest.raises(ValueError, match="does not fit in float64"):
        sr.decompose_continuous(np.array([1.0, 0.0]), np.array([1.7e308, -1.7e308]))
    with pytest.raises(ValueError, match="caller's dtype float32"):
        sr.policy_gradient(np.array([1e30, 1e30], np.float32), np.array([1e30, 1e30], np.float32))


def _exact_slope(rewards: list[float], scores: list[float]) -> float:
    r = [Fraction(v) for v in rewards]
    s = [Fraction(v) for v in scores]
    mu, ms = sum(r) / len(r), sum(s) / len(s)
    cov = sum((a - mu) * (b - ms) for a, b in zip(r, s, strict=True))
    var = sum((a - mu) ** 2 for a in r)
    return float(cov / var)


@pytest.mark.parametrize("scale", [1e-300, 1e-170, 1e-154, 1.0, 1e154, 1e170, 1e300])
def test_continuous_slope_is_exact_for_any_spread(scale: float) -> None:
    rewards = [scale * v for v in (1.0, 0.0, 0.5, 0.25)]
    scores = [1.0, -1.0, 3.0, 0.5]
    out = sr.decompose_continuous(np.array(rewards), np.array(scores))
    exact = _exact_slope(rewards, scores)
    assert float(out.slope) == pytest.approx(exact, rel=1e-14)  # a few roundings of float64


def test_continuous_identity_counts_unit_std_singletons() -> None:
    conv = sr.get_convention("trl").replace(singleton="unit_std")
    rewards, scores, index = np.array([1.0, 0.0, 0.5, 2.0]), np.array([1.0, -1.0, 3.0, 5.0]), [0, 0, 0, 1]
    out = sr.decompose_continuous(rewards, scores, convention=conv, index=index)
    update = sr.policy_gradient(sr.grpo_advantage(rewards, convention=conv, index=index), scores, index=index)
    np.testing.assert_allclose(out.prediction, update, rtol=1e-15)
    assert float(out.prediction[1]) != 0.0


def test_negative_zero_is_zero() -> None:
    assert sr.attenuation(-0.0, 8) == sr.attenuation(0.0, 8)
    assert sr.difficulty_weight(-0.0) == sr.difficulty_weight(0.0) == np.inf
    x = torch.tensor([-0.0, 0.5], dtype=torch.float64)
    assert sr.difficulty_weight(x)[0] == np.inf and str(x[0].item()) == "-0.0"  # the input is untouched


def test_extended_precision_is_refused() -> None:
    rewards = np.array([1, 2, 3, 4], np.longdouble) / 3
    for call in (sr.grpo_advantage, sr.rloo_advantage, sr.group_statistics, sr.dapo_keep_mask):
        with pytest.raises(TypeError, match=r"rewards has dtype float\d+ \(extended precision\)"):
            call(rewards)
    with pytest.raises(TypeError, match="p has dtype"):
        sr.difficulty_weight(np.longdouble(0.25))
    ids = (
        np.array([1, 1, 2, 2], np.longdouble)
        + np.array([0, 1, 0, 1], np.longdouble) * np.longdouble(2) ** -60
    )
    with pytest.raises(TypeError, match="index has dtype"):
        sr.grpo_advantage(np.array([1.0, 0.0, 1.0, 0.0]), index=ids)


def test_big_integer_ids_are_not_merged_by_a_float_id() -> None:
    index = [2**53, 2**53 + 1, 2**53, 2**53 + 1, 0.5, 0.5]
    stats = sr.group_statistics(np.arange(6.0), index=index)
    assert stats.size.tolist() == [2, 2, 2]
    assert sr.group_statistics(np.arange(4.0), index=[2**53, 2.0**53, 1, 1.0]).size.tolist() == [2, 2]


@pytest.mark.parametrize("index", [{0, 1}, frozenset({0, 1}), {0: 1, 1: 2}])
def test_an_unordered_index_is_refused(index: object) -> None:
    with pytest.raises(TypeError, match="has no order"):
        sr.grpo_advantage(np.array([1.0, 0.0]), index=index)


def test_narrow_overflow_on_the_torch_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch code path (CUDA tensors take it) raises as the numpy one does."""
    from sigma_ref import _roundtrip

    monkeypatch.setattr(_roundtrip, "TORCH_KERNEL_ON_CPU", True)
    with pytest.raises(ValueError, match="do not fit in float16"):
        sr.rloo_advantage(torch.tensor([65504.0, -65504.0], dtype=torch.float16))
    with pytest.raises(ValueError, match="do not fit in bfloat16"):
        sr.dr_grpo_advantage(torch.tensor([3e38, -3e38, -3e38, -3e38], dtype=torch.bfloat16))
    out = sr.rloo_advantage(torch.tensor([30000.0, -30000.0], dtype=torch.float16))
    assert out.dtype == torch.float16 and out.tolist() == [60000.0, -60000.0]
