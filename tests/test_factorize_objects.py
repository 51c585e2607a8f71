"""Large batches of object ids (issue 12): grouped by identity first, then by value.

``sigma_ref._factorize.factorize`` on 4,096 or more ids reads the objects' addresses (the list's own
pointer array on CPython) and hashes one object per address. Every case here is checked against
the plain dict-over-every-element factorisation (``factorize_by_value``), which defines the result.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from sigma_ref import group_statistics, grpo_advantage
from sigma_ref._factorize import _factorize_objects, factorize, factorize_by_value
from sigma_ref._pylist import addresses

N = 8192


def _uuids(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(count)]


def _same(
    got: tuple[np.ndarray, np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> None:
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()
    assert got[2].tolist() == want[2].tolist()


def test_addresses_are_ids() -> None:
    seq = [object() for _ in range(100)] + ["a"] * 50 + [1.5, None, (1, 2)]
    assert addresses(seq).tolist() == [id(x) for x in seq]
    assert addresses([]).size == 0


def test_interleaved_uuid_strings_match_the_dict_factorisation() -> None:
    names = _uuids(N // 8)
    order = np.random.default_rng(1).permutation(N) // 8
    seq = [names[i] for i in order]
    _same(_factorize_objects(seq), factorize_by_value(seq))
    _, sizes, ids = _factorize_objects(seq)
    assert ids.tolist() == sorted(names) and (sizes == 8).all()


def test_equal_strings_in_distinct_objects_are_one_group() -> None:
    """Two different ``str`` objects with the same text (built separately) name one group."""
    names = _uuids(N // 8)
    seq = [names[i % len(names)] for i in range(N)]
    copies = ["".join(list(names[0])) for _ in range(8)]
    assert copies[0] is not names[0] and copies[0] == names[0]
    seq[:8] = copies
    _same(_factorize_objects(seq), factorize_by_value(seq))
    _, sizes, ids = _factorize_objects(seq)
    assert sizes[ids.tolist().index(names[0])] == N // len(names) + 8 - 1  # 8 copies replaced 1 original


def test_unsortable_ids_keep_first_seen_order() -> None:
    seq = ([1, "1", (2,)] * (N // 3 + 1))[:N]
    _same(_factorize_objects(seq), factorize_by_value(seq))
    assert _factorize_objects(seq)[2].tolist() == [1, "1", (2,)]


def test_object_array_of_uids_matches() -> None:
    """verl's layout: ``np.repeat`` of an object array of uuid strings."""
    uids = np.repeat(np.array(_uuids(N // 8), dtype=object), 8)
    inverse, _, ids = factorize(uids, N)
    want = factorize_by_value(uids.tolist())
    assert inverse.tolist() == want[0].tolist() and ids.tolist() == want[2].tolist()


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        (None, ValueError, "index[5000] is None"),
        (float("nan"), ValueError, "index[5000] is nan"),
        ([1], TypeError, "index[5000]=[1] is a list"),
    ],
)
def test_bad_ids_in_a_large_batch_name_their_position(bad: object, error: type, words: str) -> None:
    names = [f"g{j}" for j in range(512)]
    seq: list[object] = [names[i % 512] for i in range(N)]  # repeated objects: the address detour
    seq[5000] = bad
    with pytest.raises(error) as info:
        factorize(seq, N)
    assert words in str(info.value)


def test_advantages_with_string_ids_equal_integer_ids() -> None:
    names = _uuids(N // 8)
    order = np.random.default_rng(2).permutation(N) // 8
    rewards = np.random.default_rng(3).integers(0, 2, N).astype(np.float64)
    by_name = grpo_advantage(rewards, index=[names[i] for i in order])
    by_rank = grpo_advantage(rewards, index=np.argsort(np.argsort(names))[order])
    assert by_name.tolist() == by_rank.tolist()
    assert group_statistics(rewards, index=[names[i] for i in order]).ids.tolist() == sorted(names)
