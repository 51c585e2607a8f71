"""``sigma_ref.group_statistics``: per-group G, k, mean, sigma, divisor d, silent, singleton."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sigma_ref import PRESETS, GroupStatistics, group_sigma, group_statistics, grpo_advantage
from tests.helpers import binary_rewards, ragged_batch

CONVENTIONS = list(PRESETS.values())


def _plain_divisor(row: np.ndarray, conv) -> float:
    """``d`` for one group, straight from the convention's definition (no singletons)."""
    if conv.scale == "none":
        return 1.0
    std = float(np.std(row, ddof=conv.ddof))
    return std + conv.eps if conv.eps_placement == "add" else max(std, conv.eps)


@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 6), G=st.integers(2, 16))
@settings(max_examples=30)
def test_binary_groups_match_the_closed_forms(seed: int, n_rows: int, G: int) -> None:
    """For binary rewards ``k`` counts the ones, ``sigma = sqrt(k (G - k)) / G`` and d follows
    the convention; silent iff ``k in {0, G}``."""
    rewards = binary_rewards([G] * n_rows, np.random.default_rng(seed)).reshape(n_rows, G)
    for conv in CONVENTIONS:
        if conv.scale == "batch":
            continue
        stats = group_statistics(rewards, convention=conv)
        k = rewards.sum(axis=1)
        assert stats.size.tolist() == [G] * n_rows and stats.k.tolist() == k.tolist()
        np.testing.assert_allclose(stats.sigma, group_sigma(k, G), rtol=1e-15, atol=0)
        np.testing.assert_allclose(stats.mean, k / G, rtol=1e-15, atol=0)
        d = [_plain_divisor(r, conv) for r in rewards]
        np.testing.assert_allclose(stats.divisor, d, rtol=1e-14, atol=0)
        assert stats.silent.tolist() == ((k == 0) | (k == G)).tolist()


def test_advantages_are_the_statistics() -> None:
    """``grpo_advantage == (R - mean) / divisor`` with the statistics broadcast by ``expand``."""
    rng = np.random.default_rng(3)
    rewards = rng.random((4, 3, 6))
    for conv in CONVENTIONS:
        for dim in (0, 1, 2):
            stats = group_statistics(rewards, convention=conv, dim=dim)
            assert stats.mean.shape == tuple(n for i, n in enumerate(rewards.shape) if i != dim)
            expected = (rewards - stats.expand(stats.mean)) / stats.expand(stats.divisor)
            np.testing.assert_allclose(
                grpo_advantage(rewards, convention=conv, dim=dim), expected, atol=1e-13
            )


def test_index_layout_ids_inverse_and_expand() -> None:
    """With ``index=``: ids in sorted order, ``inverse`` maps rewards to groups, ragged sizes."""
    rng = np.random.default_rng(5)
    index, _ = ragged_batch([3, 1, 5, 2], "str", rng)
    rewards = rng.random(len(index))
    stats = group_statistics(rewards, convention="trl", index=index)
    assert stats.ids.tolist() == sorted(set(index))
    assert [stats.ids[j] for j in stats.inverse] == list(index)
    for j, gid in enumerate(stats.ids):
        members = rewards[[i for i, g in enumerate(index) if g == gid]]
        assert stats.size[j] == len(members) and stats.singleton[j] == (len(members) == 1)
        assert stats.mean[j] == pytest.approx(members.mean(), rel=1e-15)
        assert stats.sigma[j] == pytest.approx(members.std(), rel=1e-14, abs=0)
        assert stats.divisor[j] == pytest.approx(
            1.0 if len(members) == 1 else _plain_divisor(members, PRESETS["trl"])
        )
    np.testing.assert_array_equal(stats.expand(stats.mean), stats.mean[stats.inverse])


def test_contiguous_runs_and_interleaved_ids_agree() -> None:
    """Ids in contiguous runs (the row fast path) and the same ids shuffled give the same
    statistics in the same group order."""
    rng = np.random.default_rng(9)
    rewards = rng.random(40)
    ids = np.repeat(rng.permutation(10) * 7, 4)
    perm = rng.permutation(40)
    runs = group_statistics(rewards, index=ids, convention="verl")
    shuffled = group_statistics(rewards[perm], index=ids[perm], convention="verl")
    assert runs.ids.tolist() == shuffled.ids.tolist() == sorted(set(ids.tolist()))
    for name in ("size", "k", "mean", "sigma", "divisor"):
        np.testing.assert_allclose(getattr(runs, name), getattr(shuffled, name), rtol=1e-15, atol=0)


def test_batch_scale_divisor_is_one_std_over_the_batch() -> None:
    rewards = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.5]])
    stats = group_statistics(rewards, convention="trl_batch")
    assert stats.divisor.tolist() == pytest.approx([np.std(rewards, ddof=1) + 1e-4] * 2, rel=1e-15)


def test_torch_in_torch_out() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float32)
    stats = group_statistics(rewards, index=None)
    assert isinstance(stats, GroupStatistics)
    assert (
        stats.sigma.dtype == torch.float64
        and stats.size.dtype == torch.int64
        and stats.silent.dtype == torch.bool
    )
    assert float(stats.sigma[0]) == pytest.approx(math.sqrt(3) / 4, rel=1e-15)
    flat = group_statistics(torch.tensor([1.0, 0.0, 1.0, 1.0]), index=torch.tensor([4, 4, 2, 2]))
    assert flat.inverse.tolist() == [1, 1, 0, 0] and flat.ids.tolist() == [2, 4]
    assert flat.silent.tolist() == [True, False]


def test_singletons_follow_the_convention() -> None:
    rewards = np.array([0.7, 1.0, 0.0])
    index = ["solo", "pair", "pair"]
    with pytest.raises(ValueError, match="size 1"):
        group_statistics(rewards, index=index)
    zero = group_statistics(rewards, index=index, convention="trl")
    assert zero.singleton.tolist() == [False, True] and zero.divisor[1] == 1.0
    unit = group_statistics(rewards, index=index, convention="verl")
    assert unit.divisor[1] == 1.0 + 1e-6 and unit.mean[1] == 0.7 and unit.sigma[1] == 0.0


def test_torch_index_layouts_agree_with_numpy() -> None:
    """Contiguous runs (row path) and interleaved ids (segment path), torch and numpy: the
    same advantages bit for bit."""
    rng = np.random.default_rng(21)
    rewards = rng.random(48)
    runs = np.repeat(rng.permutation(12), 4)
    perm = rng.permutation(48)
    for ids, r in ((runs, rewards), (runs[perm], rewards[perm])):
        for conv in ("verl", "trl_batch", "paper"):
            a = grpo_advantage(r, convention=conv, index=ids)
            tr, ti = torch.from_numpy(r.copy()), torch.from_numpy(ids.copy())
            t = grpo_advantage(tr, convention=conv, index=ti)
            np.testing.assert_array_equal(a, t.numpy())


EDGE = [[1e308, 0, 0, 0], [1e-200, 0, 0, 0], [1e16, 1e16 + 2, 1e16, 1e16], [5.0, 5.01, 5.0, 5.02], [3.0] * 4]


@pytest.mark.parametrize("layout", ["rows", "runs", "interleaved"])
def test_torch_kernel_equals_numpy_kernel(monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """CPU tensors run through numpy; the torch code path (CUDA's) gives the same bits when
    forced onto the CPU, at ordinary values and at the edges of float64."""
    from sigma_ref import _roundtrip, dr_grpo_advantage, rloo_advantage

    rng = np.random.default_rng(2)
    rows = np.concatenate([rng.random((6, 4)), np.array(EDGE)])
    flat, index = rows.reshape(-1), np.repeat(np.arange(rows.shape[0]), 4)
    if layout == "interleaved":
        perm = rng.permutation(flat.size)
        flat, index = flat[perm], index[perm]
    args = (rows, {}) if layout == "rows" else (flat, {"index": torch.from_numpy(index)})

    def run() -> list[np.ndarray]:
        r = torch.from_numpy(args[0].copy())
        out = [rloo_advantage(r, **args[1]), dr_grpo_advantage(r, **args[1])]
        for conv in PRESETS.values():
            out.append(grpo_advantage(r, convention=conv, **args[1]))
        stats = group_statistics(r[:-1] if layout == "rows" else r, convention="verl", **args[1])
        out += [stats.sigma, stats.divisor, stats.mean]
        return [o.numpy() for o in out]

    via_numpy = run()
    monkeypatch.setattr(_roundtrip, "TORCH_KERNEL_ON_CPU", True)
    via_torch = run()
    for a, b in zip(via_numpy, via_torch, strict=True):
        np.testing.assert_array_equal(a, b)


def _float32_rows(way: str, G: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of float32 numbers (held in float64) that the kernel centers ``way``."""
    from sigma_ref._kernel import _centering, _units

    rows = np.concatenate(
        [
            rng.random((5, G)).astype(np.float32).astype(np.float64),
            (rng.random((5, G)) < 0.5).astype(np.float64),  # binary, some silent
            np.full((1, G), 0.1, dtype=np.float32).astype(np.float64),  # silent, not dyadic
            1000.0 + np.round(rng.random((2, G)) * 64) / 64,  # an offset
        ]
    )
    if way == "float32":  # one row of a wide dynamic range moves the batch to the float32 way
        rows = np.concatenate([rows, np.array([[2.0**-149, 2.0**100] + [1.0] * (G - 2)])])
    assert _centering(_units(rows, False), G) == way
    return rows


@pytest.mark.parametrize("G", [4, 6])
@pytest.mark.parametrize("way", ["exact", "float32"])
@pytest.mark.parametrize("layout", ["rows", "interleaved", "ragged"])
def test_float32_ways_torch_kernel_equals_numpy_kernel(
    monkeypatch: pytest.MonkeyPatch, layout: str, way: str, G: int
) -> None:
    """The exact and float32 ways (float32 numbers) give the same bits through numpy and
    through torch's code path, in every layout, with silent groups detected exactly."""
    from sigma_ref import _roundtrip, dr_grpo_advantage, rloo_advantage

    rng = np.random.default_rng(G)
    rows = _float32_rows(way, G, rng)
    flat, index = rows.reshape(-1), np.repeat(np.arange(rows.shape[0]), G)
    if layout != "rows":
        perm = rng.permutation(flat.size)
        flat, index = flat[perm], index[perm]
    if layout == "ragged":  # drop some rewards: groups of several sizes, one of size 1
        keep = np.ones(flat.size, dtype=bool)
        keep[np.flatnonzero(index == 0)[1:]] = False
        keep[np.flatnonzero(index == 1)[:2]] = False
        flat, index = flat[keep], index[keep]
    args = (rows, {}) if layout == "rows" else (flat, {"index": torch.from_numpy(index)})

    def run() -> list[np.ndarray]:
        r = torch.from_numpy(args[0].copy())
        out = [dr_grpo_advantage(r, convention="verl", **args[1])]
        if layout != "ragged":
            out.append(rloo_advantage(r, **args[1]))
        for conv in PRESETS.values():
            if layout == "ragged" and conv.singleton == "error":
                continue
            out.append(grpo_advantage(r, convention=conv, **args[1]))
        stats = group_statistics(r, convention="verl", **args[1])
        out += [stats.sigma, stats.divisor, stats.mean, stats.silent]
        return [o.numpy() for o in out]

    via_numpy = run()
    silent = via_numpy[-1]
    per_group = rows if layout == "rows" else [flat[index == g] for g in np.unique(index)]
    assert silent.tolist() == [bool(np.all(g == g[0])) for g in per_group]
    monkeypatch.setattr(_roundtrip, "TORCH_KERNEL_ON_CPU", True)
    via_torch = run()
    for a, b in zip(via_numpy, via_torch, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_inverse_is_not_the_callers_ids(library: str) -> None:
    """Ids that already are the group numbers are read in place, never handed back: writing to
    ``stats.inverse`` leaves the caller's ids alone."""
    ids = np.array([0, 1, 2, 0, 1, 2])
    index = torch.from_numpy(ids) if library == "torch" else ids
    stats = group_statistics(np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0]), index=index)
    assert np.asarray(stats.inverse).tolist() == ids.tolist()
    stats.inverse[0] = 7
    assert ids.tolist() == [0, 1, 2, 0, 1, 2]
