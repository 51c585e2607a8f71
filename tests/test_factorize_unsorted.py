"""``factorize(..., sort=False)`` (issue 12): the groups of ``sort=True``, nothing sorted.

The per-reward functions (``grpo_advantage``, ``dr_grpo_advantage``, ``rloo_advantage``,
``dapo_keep_mask``) do not depend on the group order, so they group string ids without sorting
them: in the order their objects lie in memory when the batch repeats its id objects (the
cheapest order to find), else first seen. Every case here checks that path against a plain
first-seen dict over every element (the definition, as ``pandas.factorize(sort=False)``: the
same groups, relabelled, each named by one of its ids; the same numbering on the dict path) and
against the sorted path, and that errors name the same position and the same group as before.
Integer ids keep sorted order at no cost: they are counted, not sorted (the last test).
"""

from __future__ import annotations

import math
import re
import uuid
from typing import Any

import numpy as np
import pytest
import torch

from sigma_ref import dapo_keep_mask, dr_grpo_advantage, group_statistics, grpo_advantage, rloo_advantage
from sigma_ref._factorize import factorize
from sigma_ref._layouts import arrange
from sigma_ref._pylist import addresses

N = 8192  # above the 4,096 ids where the address detour starts


def _uuids(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(count)]


def _first_seen(seq: list[Any]) -> tuple[list[int], list[int], list[Any]]:
    """The definition: a dict over every element, in order (each group named by its first id)."""
    table: dict[Any, int] = {}
    inverse = [table.setdefault(x, len(table)) for x in seq]
    return inverse, np.bincount(inverse, minlength=len(table)).tolist(), list(table)


def _same_groups(inverse: Any, sizes: Any, ids: Any, seq: list[Any]) -> dict[int, int]:
    """``(inverse, sizes, ids)`` are the first-seen groups of ``seq`` relabelled, each named by
    one of its ids; returns the relabelling (group number -> first-seen number)."""
    want_inverse, want_sizes, want_ids = _first_seen(seq)
    relabel: dict[int, int] = {}
    for got, want in zip(np.asarray(inverse).tolist(), want_inverse, strict=True):
        assert relabel.setdefault(got, want) == want  # one first-seen group per group
    assert sorted(relabel.values()) == list(range(len(want_ids))) == sorted(relabel)  # a bijection
    assert [np.asarray(sizes).tolist()[j] for j in range(len(ids))] == [
        want_sizes[relabel[j]] for j in range(len(ids))
    ]
    members: dict[int, set[int]] = {}
    for x, g in zip(seq, np.asarray(inverse).tolist(), strict=True):
        members.setdefault(g, set()).add(id(x))
    assert all(id(name) in members[j] for j, name in enumerate(ids))  # an id of the group itself
    return relabel


def _check(seq: list[Any]) -> None:
    """``sort=False`` gives the groups of the first-seen factorisation (numbered first-seen by the
    dict over every element), and a relabelling of ``sort=True``."""
    inverse, sizes, ids = factorize(seq, len(seq), sort=False)
    want = _first_seen(seq)
    assert inverse.dtype == np.int64 and sizes.dtype == np.float64 and ids.dtype == object
    relabel = _same_groups(inverse, sizes, ids, seq)
    if len(seq) < 4096:  # the dict over every element: first-seen numbering itself
        assert relabel == {j: j for j in relabel}
        assert [type(x) for x in ids] == [type(x) for x in want[2]]
    s_inverse, s_sizes, s_ids = factorize(seq, len(seq))
    assert len(s_ids) == len(ids)
    assert [s_ids[j] for j in s_inverse] == [ids[j] for j in inverse]  # same id for every reward
    assert sorted(s_sizes.tolist()) == sorted(sizes.tolist())


def _interleaved(names: list[Any], size: int, seed: int = 1) -> list[Any]:
    order = np.random.default_rng(seed).permutation(len(names) * size) // size
    return [names[i] for i in order]


@pytest.mark.parametrize("count", [N, 100])  # the address detour, and the dict over every element
def test_interleaved_uuid_strings(count: int) -> None:
    _check(_interleaved(_uuids(count // 8), 8))


def test_ragged_uuid_strings() -> None:
    names = _uuids(600)
    sizes = np.random.default_rng(4).integers(1, 30, len(names))
    seq = [names[i] for i in np.random.default_rng(5).permutation(np.repeat(np.arange(len(names)), sizes))]
    _check(seq)


def test_equal_strings_in_distinct_objects_are_merged() -> None:
    names = _uuids(N // 8)
    seq = _interleaved(names, 8)
    for pos in range(0, N, 97):  # distinct objects with the same text, here and there
        seq[pos] = "".join(list(seq[pos]))
    assert seq[0] is not names[0] or seq[97] is not names[0]
    _check(seq)


def test_one_object_and_all_distinct() -> None:
    _check(["same"] * N)
    _check(_uuids(N))  # every id distinct: no detour, no dict lookups
    _check([f"g{i}" for i in range(N)] + ["g0"])


@pytest.mark.parametrize(
    "names",
    [
        [1, 1.0, True, "1", b"1", (1,), (1, "a")],  # 1, 1.0 and True one group; the rest apart
        [b"x", b"y", b"z"],
        [(1, 2), (2, 1), ("a",), ()],
        [1, "a", (2,), 2.5, frozenset({1})],  # do not sort: the sorted path is first-seen too
        [10**30, -(10**30), 7],  # big ints (object array)
    ],
    ids=["mixed-equal", "bytes", "tuples", "unsortable", "big-ints"],
)
@pytest.mark.parametrize("count", [N, 60])
def test_id_kinds(names: list[Any], count: int) -> None:
    seq = (names * (count // len(names) + 1))[:count]
    _check(seq)
    _check(seq[::-1])


def test_equal_values_in_distinct_objects_are_one_group() -> None:
    seq: list[Any] = [2.0, 1, 1.0, True] * (N // 4)  # one object each, the value 1 in three kinds
    inverse, sizes, ids = factorize(seq, N, sort=False)
    assert len(ids) == 2 and sorted(sizes.tolist()) == [N // 4, 3 * N // 4]
    one = int(inverse[1])
    assert inverse.tolist() == [1 - one, one, one, one] * (N // 4) and ids[one] == 1
    _same_groups(inverse, sizes, ids, seq)


def test_object_array_and_tensor_device() -> None:
    uids = np.repeat(np.array(_uuids(N // 8), dtype=object), 8)  # verl's layout
    inverse, sizes, ids = factorize(uids, N, sort=False)
    _same_groups(inverse, sizes, ids, uids.tolist())
    assert (sizes == 8).all()
    seq = _interleaved(_uuids(N // 8), 8)
    t_inverse, t_sizes, t_ids = factorize(seq, N, torch.device("cpu"), sort=False)
    assert torch.is_tensor(t_inverse) and t_inverse.dtype == torch.int64 and t_sizes.dtype == torch.float64
    assert t_inverse.tolist() == factorize(seq, N, sort=False)[0].tolist()
    _same_groups(t_inverse, t_sizes, t_ids, seq)


def test_numbers_keep_sorted_order() -> None:
    """Numeric ids are sorted at no extra cost: ``sort=False`` changes nothing for them."""
    for index in ([3, 1, 3, 2], np.array([3.5, 1.0, 3.5]), torch.tensor([9, 4, 9])):
        got, want = factorize(index, len(index), sort=False), factorize(index, len(index))
        assert all(np.asarray(a).tolist() == np.asarray(b).tolist() for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        (None, ValueError, "index[5000] is None"),
        (float("nan"), ValueError, "index[5000] is nan"),
        ([1], TypeError, "index[5000]=[1] is a list"),
        ({"a": 1}, TypeError, "index[5000]={'a': 1} is a dict"),
    ],
)
@pytest.mark.parametrize("repeated", [True, False])  # the address detour, or the dict over every element
def test_bad_ids_name_their_position(bad: object, error: type, words: str, repeated: bool) -> None:
    names = [f"g{j}" for j in range(512)]
    seq: list[object] = [names[i % 512] for i in range(N)] if repeated else [f"g{i}" for i in range(N)]
    seq[5000] = bad
    seq[6000] = bad
    for sort in (True, False):
        with pytest.raises(error) as info:
            factorize(seq, N, sort=sort)
        assert words in str(info.value)
    with pytest.raises(error, match=re.escape(words)):
        grpo_advantage(np.zeros(N), index=seq)


def test_nan_in_a_tuple_is_its_own_group_as_before() -> None:
    """``(nan,)`` equals itself (the same object) but not another ``(nan,)``: as with ``sort=True``."""
    a, b = (math.nan,), (math.nan,)
    seq = [a, b, a, "x"] * (N // 4)
    _check(seq)


# ---------------------------------------------------------------------------
# the per-reward functions: the same numbers and the same errors as the sorted path


def _sorted_layout_advantage(rewards: Any, seq: list[Any], **kw: Any) -> Any:
    """grpo_advantage on the sorted numbering: the same groups as integer ids in sorted id order."""
    ranks = factorize(seq, len(seq))[0]
    return grpo_advantage(rewards, index=ranks, **kw)


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("convention", ["paper", "verl", "trl_batch", "dr_grpo"])
def test_advantages_equal_the_sorted_path_bit_for_bit(interleaved: bool, convention: str) -> None:
    names = _uuids(N // 8)
    seq = _interleaved(names, 8) if interleaved else [n for n in names for _ in range(8)]
    rewards = np.random.default_rng(3).normal(size=N) * 1e3
    rewards[:64] = 2.0**-500 * np.arange(64)  # a group or two that needs scaling
    got = grpo_advantage(rewards, index=seq, convention=convention)
    want = _sorted_layout_advantage(rewards, seq, convention=convention)
    assert got.tobytes() == want.tobytes()
    for lib in (torch.from_numpy, lambda a: torch.from_numpy(a).float()):
        t = lib(rewards)
        assert torch.equal(grpo_advantage(t, index=seq, convention=convention),
                           grpo_advantage(t, index=factorize(seq, N)[0], convention=convention))  # fmt: skip


def test_other_per_reward_functions_equal_the_sorted_path() -> None:
    seq = _interleaved(_uuids(N // 8), 8)
    ranks = factorize(seq, N)[0]
    rewards = np.random.default_rng(6).integers(0, 2, N).astype(np.float64)
    for fn in (dr_grpo_advantage, rloo_advantage):
        assert fn(rewards, index=seq).tobytes() == fn(rewards, index=ranks).tobytes()
    assert dapo_keep_mask(rewards, index=seq).tolist() == dapo_keep_mask(rewards, index=ranks).tolist()


def test_group_statistics_stay_sorted() -> None:
    names = _uuids(N // 8)
    stats = group_statistics(np.ones(N), index=_interleaved(names, 8))
    assert stats.ids.tolist() == sorted(names)


@pytest.mark.parametrize("count", [N, 12])
def test_singleton_errors_name_the_sorted_first_group(count: int) -> None:
    """Two singletons, ``'zz'`` seen first and ``'aa'`` first in sorted order: the error names
    ``'aa'``, as the sorted path always did (for ``grpo_advantage`` and ``rloo_advantage``)."""
    names = [f"m{i:05d}" for i in range((count - 2) // 2)]
    seq = ["zz"] + [n for n in names for _ in range(2)] + ["aa"]
    rewards = np.random.default_rng(7).integers(0, 2, len(seq)).astype(np.float64)
    _, lay = arrange(rewards, seq, -1, "rewards", sort=False)
    assert lay.ids is not None and lay.ids[0] == "zz"  # first-seen numbering underneath
    with pytest.raises(ValueError, match=r"size 1 \(group with index id 'aa'\)"):
        grpo_advantage(rewards, index=seq)
    with pytest.raises(ValueError, match=r"size 1 \(group with index id 'aa'\)"):
        rloo_advantage(rewards, index=seq)
    with pytest.raises(ValueError, match=r"size 1 \(group with index id 'aa'\)"):
        grpo_advantage(torch.from_numpy(rewards), index=seq)


def test_singleton_error_with_unsortable_ids_names_the_first_seen() -> None:
    seq: list[Any] = [(1,), 1, 1, "a", "a", 2]
    with pytest.raises(ValueError, match=r"size 1 \(group with index id \(1,\)\)"):
        grpo_advantage(np.zeros(len(seq)), index=seq)


def test_singleton_error_with_unsortable_repeated_ids_names_the_first_seen() -> None:
    """Ids that do not sort, numbered by address underneath: the error still names the group seen
    first, here the singleton at the higher address (so not group 0 underneath)."""
    names: list[Any] = [i if i % 2 else f"s{i}" for i in range(N // 4)]
    early, late = sorted([("a",), ("b",)], key=id, reverse=True)
    seq = [early] + [names[i] for i in np.random.default_rng(8).permutation(np.repeat(np.arange(N // 4), 4))]
    seq.append(late)
    _, lay = arrange(np.zeros(len(seq)), seq, -1, "rewards", sort=False)
    assert lay.ids is not None and lay.ids[int(lay.inverse[0])] is early and not lay.in_order
    assert int(lay.inverse[0]) > int(lay.inverse[-1])  # numbered by address: the late one first
    for fn in (grpo_advantage, rloo_advantage):
        with pytest.raises(ValueError, match=re.escape(f"size 1 (group with index id {early!r})")):
            fn(np.zeros(len(seq)), index=seq)


def test_non_finite_rewards_name_their_group() -> None:
    names = _uuids(N // 8)
    seq = _interleaved(names, 8)
    rewards = np.zeros(N)
    rewards[4321] = math.inf
    with pytest.raises(ValueError, match=rf"inf in group with index id '{seq[4321]}' \(flat position 4321\)"):
        grpo_advantage(rewards, index=seq)


# ---------------------------------------------------------------------------
# object arrays (verl's uid) are read in place: their buffer of pointers, no tolist()


def test_object_array_addresses_are_ids() -> None:
    base = np.array([object() for _ in range(100)] + ["a"] * 50 + [1.5, None, (1, 2)], dtype=object)
    for arr in (base, base[::3], base[::-1], base[10:20]):
        assert addresses(arr).tolist() == [id(x) for x in arr]
    assert addresses(np.array([], dtype=object)).size == 0


@pytest.mark.parametrize("view", [slice(None), slice(None, None, -1), slice(1, None, 2)])
@pytest.mark.parametrize("sort", [True, False])
def test_object_arrays_equal_lists(view: slice, sort: bool) -> None:
    names = _uuids(N // 8)
    seq: list[Any] = _interleaved(names, 8)
    seq[::97] = ["".join(list(x)) for x in seq[::97]]  # some distinct objects with equal text
    arr = np.array(seq, dtype=object)[view]
    got, want = factorize(arr, arr.size, sort=sort), factorize(arr.tolist(), arr.size, sort=sort)
    assert all(a.tolist() == b.tolist() for a, b in zip(got, want, strict=True))
    if not sort:
        _check(arr.tolist())


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        (None, ValueError, "index[5000] is None"),
        (float("nan"), ValueError, "index[5000] is nan"),
        ([1], TypeError, "index[5000]=[1] is a list"),
    ],
)
@pytest.mark.parametrize("sort", [True, False])
def test_bad_ids_in_an_object_array_name_their_position(
    bad: object, error: type, words: str, sort: bool
) -> None:
    names = [f"g{j}" for j in range(512)]
    arr = np.empty(N, dtype=object)
    arr[:] = [names[i % 512] for i in range(N)]
    arr[5000] = bad
    with pytest.raises(error) as info:
        factorize(arr, N, sort=sort)
    assert words in str(info.value)


@pytest.mark.parametrize(
    ("ids", "inverse", "sizes", "groups"),
    [
        ([3, 1, 2, 1, 3], [2, 0, 1, 0, 2], [2, 1, 2], [1, 2, 3]),  # every id in [1, 3]: counted, no rank
        ([7, 1, 7, 4], [2, 0, 2, 1], [1, 1, 2], [1, 4, 7]),  # gaps in [1, 7]: counted and ranked
        ([10**12, 5, 10**12], [1, 0, 1], [1, 2], [5, 10**12]),  # range too wide to count: np.unique
    ],
)
def test_integer_ids_by_counting_dense_sparse_and_wide(ids, inverse, sizes, groups) -> None:  # type: ignore[no-untyped-def]
    """Integer ids are numbered in sorted order whether every id of their range occurs (the counts
    are the sizes at once), some do not (ranked), or the range is too wide to count (sorted)."""
    for index in (np.array(ids), torch.tensor(ids)):
        inv, size, got = factorize(index, len(ids), "cpu" if torch.is_tensor(index) else None)
        assert np.asarray(inv).tolist() == inverse, index
        assert np.asarray(size).tolist() == sizes, index
        assert got.tolist() == groups, index
