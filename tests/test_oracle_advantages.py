"""The advantages against brute-force per-group references (docs/spec.md §2 and §4).

Every reference is written in the test from SPEC.md with plain numpy, one group at a
time (:func:`tests.helpers.ref_advantage`); the oracle is vectorised, so the two share
no code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sigma_ref import (
    PAPER,
    PRESETS,
    Convention,
    dapo_keep_mask,
    dr_grpo_advantage,
    grpo_advantage,
    rloo_advantage,
)
from tests.helpers import (
    assert_close,
    binary_rewards,
    group_members,
    ragged_batch,
    ref_advantage,
    ref_rloo,
    rows_as_ids,
)

PRESET_LIST = list(PRESETS.values())
preset_ids = [c.name for c in PRESET_LIST]
seeds = st.integers(0, 2**32 - 1)


def _grouped_case(seed: int, n_rows: int, G: int, binary: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if binary:
        return binary_rewards([G] * n_rows, rng).reshape(n_rows, G)
    rewards = rng.normal(size=(n_rows, G)).round(2)
    rewards[0] = 0.1  # a silent non-binary group
    return rewards


# ---------------------------------------------------------------------------
# GRPO under every preset


@pytest.mark.parametrize("conv", PRESET_LIST, ids=preset_ids)
@given(seed=seeds, n_rows=st.integers(1, 6), G=st.integers(2, 12), binary=st.booleans())
def test_grpo_advantage_matches_per_group_formula(
    conv: Convention, seed: int, n_rows: int, G: int, binary: bool
) -> None:
    """``A_i = (R_i - mu) / d`` with ``d`` the preset's divisor, group by group in plain numpy."""
    rewards = _grouped_case(seed, n_rows, G, binary)
    expected = ref_advantage(rewards.reshape(-1), rows_as_ids(rewards.shape, -1).reshape(-1), conv)
    actual = grpo_advantage(rewards, convention=conv)
    assert_close(actual, expected.reshape(rewards.shape), rtol=1e-12, atol=1e-12, what=conv.name)
    by_name = grpo_advantage(rewards, convention=conv.name)
    assert np.array_equal(by_name, actual)


@given(G=st.integers(2, 300), data=st.data())
def test_binary_two_valued_structure_under_paper(G: int, data: st.DataObject) -> None:
    """PAPER: ``A+ = sqrt((G-k)/k)`` on correct, ``A- = -sqrt(k/(G-k))`` on incorrect responses."""
    k = data.draw(st.integers(1, G - 1), label="k")
    rng = np.random.default_rng(data.draw(seeds, label="seed"))
    rewards = rng.permutation(np.r_[np.ones(k), np.zeros(G - k)])
    adv = grpo_advantage(rewards)
    plus, minus = math.sqrt((G - k) / k), -math.sqrt(k / (G - k))
    assert_close(adv, np.where(rewards == 1, plus, minus), rtol=1e-13, what=f"G={G}, k={k}")
    assert abs(adv.sum()) <= 1e-12 * G * max(plus, -minus)


@given(seed=seeds, n_rows=st.integers(1, 6), G=st.integers(2, 12), binary=st.booleans())
def test_dr_grpo_is_mean_centering(seed: int, n_rows: int, G: int, binary: bool) -> None:
    """Dr. GRPO: ``A_i = R_i - mu``, whatever the convention's divisor fields say."""
    rewards = _grouped_case(seed, n_rows, G, binary)
    expected = rewards - rewards.mean(axis=-1, keepdims=True)
    expected[np.all(rewards == rewards[:, :1], axis=-1)] = 0.0
    assert_close(dr_grpo_advantage(rewards), expected, rtol=1e-12, atol=1e-14, what="dr_grpo")
    assert_close(
        dr_grpo_advantage(rewards, convention="verl"), expected, rtol=1e-12, atol=1e-14, what="verl fields"
    )


@given(seed=seeds, n_rows=st.integers(1, 6), G=st.integers(2, 12), binary=st.booleans())
def test_rloo_is_leave_one_out(seed: int, n_rows: int, G: int, binary: bool) -> None:
    """RLOO: ``A_i = R_i - mean_{j != i} R_j`` (brute force) ``= G/(G-1) (R_i - mu)``."""
    rewards = _grouped_case(seed, n_rows, G, binary)
    ids = rows_as_ids(rewards.shape, -1).reshape(-1)
    actual = rloo_advantage(rewards)
    brute = ref_rloo(rewards.reshape(-1), ids).reshape(rewards.shape)
    assert_close(actual, brute, rtol=1e-12, atol=1e-13, what="leave-one-out")
    centering = G / (G - 1) * (rewards - rewards.mean(axis=-1, keepdims=True))
    assert_close(actual, centering, rtol=1e-12, atol=1e-13, what="G/(G-1) centering")


@given(seed=seeds, n_rows=st.integers(1, 8), G=st.integers(2, 16))
def test_dapo_keep_mask_is_zero_lt_k_lt_G(seed: int, n_rows: int, G: int) -> None:
    """DAPO keeps a group iff ``0 < k < G`` (binary); iff its rewards are not all equal (real)."""
    rng = np.random.default_rng(seed)
    rewards = binary_rewards([G] * n_rows, rng).reshape(n_rows, G)
    k = rewards.sum(axis=-1, keepdims=True)
    keep = dapo_keep_mask(rewards)
    assert keep.dtype == np.bool_
    assert np.array_equal(keep, np.broadcast_to((0 < k) & (k < G), rewards.shape))
    real = rewards * 0.3 + 0.05
    assert np.array_equal(dapo_keep_mask(real), keep)


# ---------------------------------------------------------------------------
# layouts


@pytest.mark.parametrize("conv", PRESET_LIST, ids=preset_ids)
@given(
    seed=seeds,
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    G=st.integers(2, 9),
    data=st.data(),
)
def test_grouped_layout_any_dim(conv: Convention, seed: int, shape: list[int], G: int, data) -> None:
    """``[..., G]`` along any ``dim`` (2-D and 3-D batches): same as the per-row reference."""
    ndim = len(shape) + 1
    dim = data.draw(st.integers(-ndim, ndim - 1), label="dim")
    full = list(shape)
    full.insert(dim % ndim, G)
    rng = np.random.default_rng(seed)
    rewards = (rng.random(full) < rng.random()).astype(np.float64)
    ids = rows_as_ids(rewards.shape, dim).reshape(-1)
    expected = ref_advantage(rewards.reshape(-1), ids, conv).reshape(rewards.shape)
    assert_close(grpo_advantage(rewards, convention=conv, dim=dim), expected, rtol=1e-12, atol=1e-12)
    rloo = ref_rloo(rewards.reshape(-1), ids).reshape(rewards.shape)
    assert_close(rloo_advantage(rewards, dim=dim), rloo, rtol=1e-12, atol=1e-13, what="rloo")
    moved = np.moveaxis(rewards, dim, -1)
    keep = np.moveaxis(np.broadcast_to(~np.all(moved == moved[..., :1], -1)[..., None], moved.shape), -1, dim)
    assert np.array_equal(dapo_keep_mask(rewards, dim=dim), keep)


@pytest.mark.parametrize("kind", ["int", "str", "tuple"])
@pytest.mark.parametrize("conv", PRESET_LIST, ids=preset_ids)
@given(seed=seeds, sizes=st.lists(st.integers(2, 9), min_size=1, max_size=8))
def test_index_layout_ragged_interleaved(conv: Convention, kind: str, seed: int, sizes: list[int]) -> None:
    """Flat ``[N]`` with ``index=`` (ragged, interleaved groups; int, uuid-string and tuple ids)."""
    rng = np.random.default_rng(seed)
    index, perm = ragged_batch(sizes, kind, rng)
    rewards = binary_rewards(sizes, rng)[perm]
    expected = ref_advantage(rewards, index, conv)
    assert_close(grpo_advantage(rewards, convention=conv, index=index), expected, rtol=1e-12, atol=1e-12)
    assert_close(rloo_advantage(rewards, index=index), ref_rloo(rewards, index), rtol=1e-12, atol=1e-13)
    keep = np.zeros(len(index), dtype=bool)
    for pos in group_members(index).values():
        k = rewards[pos].sum()
        keep[pos] = 0 < k < len(pos)
    assert np.array_equal(dapo_keep_mask(rewards, index=index), keep)
    dr = ref_advantage(rewards, index, PRESETS["dr_grpo"])
    assert_close(dr_grpo_advantage(rewards, index=index), dr, rtol=1e-12, atol=1e-14, what="dr_grpo")


@pytest.mark.parametrize(
    "index",
    [
        pytest.param([(0,), (0, 2), (0,), (0, 2), (0,), (0, 2)], id="tuples-of-different-lengths"),
        pytest.param([1, "1", 1, "1", 1, "1"], id="int-and-look-alike-str"),
        pytest.param([1, "a", 1, "a", 1, "a"], id="int-and-str-unsortable"),
        pytest.param(np.array([4, 9, 4, 9, 4, 9], dtype=np.uint8), id="uint8-array"),
    ],
)
def test_index_layout_odd_ids(index: list) -> None:
    """Any hashable ids work, sortable or not, equal-length or not."""
    rewards = np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    expected = ref_advantage(rewards, [i if not isinstance(i, np.generic) else int(i) for i in index], PAPER)
    assert_close(grpo_advantage(rewards, index=index), expected, rtol=1e-14, atol=1e-15)


def test_index_layout_equals_grouped_layout() -> None:
    """The same groups given contiguously as ``[B, G]`` or flat with an index agree exactly."""
    rng = np.random.default_rng(7)
    rewards = (rng.random((5, 6)) < 0.4).astype(np.float64)
    index = np.repeat(np.arange(5), 6)
    for conv in PRESET_LIST:
        flat = grpo_advantage(rewards.reshape(-1), convention=conv, index=index)
        assert_close(flat, grpo_advantage(rewards, convention=conv).reshape(-1), rtol=1e-15, atol=0)


# ---------------------------------------------------------------------------
# singleton and silent groups


@pytest.mark.parametrize(
    "conv",
    [
        PRESETS["trl"],
        PRESETS["verl"],
        PRESETS["trl_batch"],
        Convention("unit-floor", ddof=1, eps=2.0, eps_placement="floor", singleton="unit_std"),
        Convention("unit-none", scale="none", singleton="unit_std"),
    ],
    ids=lambda c: c.name,
)
@given(seed=seeds, sizes=st.lists(st.integers(1, 5), min_size=1, max_size=8))
def test_singleton_groups_follow_the_rule(conv: Convention, seed: int, sizes: list[int]) -> None:
    """``zero``: a group of one gets 0; ``unit_std``: mean 0 and std 1, ``A = R / (1 (+) eps)``."""
    rng = np.random.default_rng(seed)
    sizes = [1, *sizes]
    index, perm = ragged_batch(sizes, "int", rng)
    rewards = binary_rewards(sizes, rng)[perm]
    expected = ref_advantage(rewards, index, conv)
    assert_close(grpo_advantage(rewards, convention=conv, index=index), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("conv", [c for c in PRESET_LIST if c.singleton == "error"], ids=lambda c: c.name)
def test_singleton_error_rule_raises(conv: Convention) -> None:
    """``singleton="error"``: a group of one response is rejected, naming the group."""
    with pytest.raises(ValueError, match=r"group of size 1 \(group with index id 'lonely'\)"):
        grpo_advantage(np.array([1.0, 0.0, 1.0]), convention=conv, index=["a", "a", "lonely"])


def test_singleton_dapo_never_kept() -> None:
    """A group of one response is never kept by DAPO (its std is 0)."""
    keep = dapo_keep_mask(np.array([1.0, 0.0, 1.0]), index=[0, 0, 1])
    assert keep.tolist() == [True, True, False]


@pytest.mark.parametrize("conv", PRESET_LIST, ids=preset_ids)
@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, -3.7, 1e300, 5e-324])
@pytest.mark.parametrize("G", [2, 3, 7, 1000])
def test_silent_groups_are_exactly_zero(conv: Convention, value: float, G: int) -> None:
    """All-equal rewards (binary or not, e.g. 0.1, 0.1, 0.1) give exactly 0, never NaN."""
    rewards = np.full((2, G), value)
    rewards[1] = np.linspace(0.0, 1.0, G)  # a live group beside it
    adv = grpo_advantage(rewards, convention=conv)
    assert np.all(adv[0] == 0.0), adv[0]
    assert np.isfinite(adv).all()
    assert np.all(dr_grpo_advantage(rewards)[0] == 0.0)
    assert np.all(rloo_advantage(rewards)[0] == 0.0)


def test_silent_non_binary_group_in_index_layout() -> None:
    """``0.1, 0.1, 0.1`` sharing a batch with a live group: exactly zero there."""
    adv = grpo_advantage(np.array([0.1, 1.0, 0.1, 0.0, 0.1]), index=["s", "l", "s", "l", "s"])
    assert adv.tolist() == [0.0, 1.0, 0.0, -1.0, 0.0]
