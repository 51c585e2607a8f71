"""Hypothesis strategies for GRPO-family tests, reusable by anyone.

Every factory is keyword-only and returns a strategy of numpy float64 arrays:

* :func:`reward_groups`: ``[B, G]`` rewards, one group per row;
* :func:`ragged_batches`: ``(rewards [N], index [N])``, groups of different sizes,
  optionally interleaved and with arbitrary integer ids (as verl's ``uid``);
* :func:`score_vectors`: ``[N, d]`` per-response score vectors (``grad log pi``).

Rewards are binary ``{0, 1}`` or multiples of ``1/4`` in ``[-low_high, low_high]``:
exactly representable in float16 and bfloat16 too, so a low-precision test compares
with the oracle on the very rewards the implementation saw. Groups shrink towards
``G = min_size``, few groups, and rewards 0.

>>> from hypothesis import find
>>> r = find(reward_groups(binary=True, min_groups=2, silent="never"), lambda r: True)
>>> r.shape[0] >= 2, set(r.reshape(-1).tolist()) == {0.0, 1.0}
(True, True)

Performance: drawing a batch costs one list per group; keep ``max_size`` modest (<= 64)
and test large G with explicit examples instead.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

__all__ = ["reward_values", "reward_groups", "ragged_batches", "score_vectors"]


def _check_range(name_lo: str, lo: int, name_hi: str, hi: int, minimum: int) -> None:
    if lo < minimum:
        raise ValueError(f"{name_lo}={lo} is smaller than {minimum}")
    if lo > hi:
        raise ValueError(f"{name_lo}={lo} is larger than {name_hi}={hi}")


def reward_values(*, binary: bool = False, bound: float = 10.0) -> st.SearchStrategy[float]:
    """One reward: 0 or 1 (``binary``), else a multiple of 1/4 in ``[-bound, bound]``.

    >>> from hypothesis import find
    >>> find(reward_values(), lambda x: x > 2)
    2.25
    """
    if binary:
        return st.sampled_from([0.0, 1.0])
    if not bound > 0:
        raise ValueError(f"bound={bound!r} must be > 0")
    n = int(bound * 4)
    return st.integers(-n, n).map(lambda i: i / 4)


def _group(size: int, *, binary: bool, bound: float, silent: str) -> st.SearchStrategy[list[float]]:
    values = st.lists(reward_values(binary=binary, bound=bound), min_size=size, max_size=size)
    if silent == "never":

        def live(v: list[float]) -> list[float]:
            if len(set(v)) == 1:  # make the group live without filtering
                v = [1.0 - v[0] if binary else v[0] + 0.25, *v[1:]]
            return v

        return values.map(live)
    if silent == "always":
        return reward_values(binary=binary, bound=bound).map(lambda x: [x] * size)
    return st.one_of(values, reward_values(binary=binary, bound=bound).map(lambda x: [x] * size))


def reward_groups(
    *,
    min_groups: int = 1,
    max_groups: int = 4,
    min_size: int = 2,
    max_size: int = 8,
    binary: bool = False,
    bound: float = 10.0,
    silent: str = "sometimes",
) -> st.SearchStrategy[np.ndarray]:
    """``[B, G]`` rewards: ``B`` in ``[min_groups, max_groups]``, ``G`` in ``[min_size, max_size]``.

    ``silent``: ``"sometimes"`` (a group may have all rewards equal), ``"never"`` (every
    group has two different rewards) or ``"always"``.

    >>> from hypothesis import find
    >>> r = find(reward_groups(silent="always"), lambda r: True)
    >>> bool((r == r[:, :1]).all())
    True
    """
    _check_range("min_groups", min_groups, "max_groups", max_groups, 1)
    _check_range("min_size", min_size, "max_size", max_size, 1)
    if silent not in ("sometimes", "never", "always"):
        raise ValueError(f"silent={silent!r} must be 'sometimes', 'never' or 'always'")

    @st.composite
    def build(draw: st.DrawFn) -> np.ndarray:
        G = draw(st.integers(min_size, max_size))
        B = draw(st.integers(min_groups, max_groups))
        rows = [draw(_group(G, binary=binary, bound=bound, silent=silent)) for _ in range(B)]
        return np.array(rows, dtype=np.float64)

    return build()


def ragged_batches(
    *,
    min_groups: int = 1,
    max_groups: int = 4,
    min_size: int = 2,
    max_size: int = 8,
    binary: bool = False,
    bound: float = 10.0,
    silent: str = "sometimes",
    interleaved: bool = True,
) -> st.SearchStrategy[tuple[np.ndarray, np.ndarray]]:
    """``(rewards [N], index [N])``: groups of sizes in ``[min_size, max_size]``, by id.

    Ids are distinct integers in arbitrary order (not ``0..B-1``); with ``interleaved``
    the responses of the groups are shuffled together, as in a verl batch.

    >>> from hypothesis import find
    >>> r, i = find(ragged_batches(min_groups=2), lambda b: len(set(b[1].tolist())) == 2)
    >>> r.shape == i.shape, len(set(i.tolist()))
    (True, 2)
    """
    _check_range("min_groups", min_groups, "max_groups", max_groups, 1)
    _check_range("min_size", min_size, "max_size", max_size, 1)

    @st.composite
    def build(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
        B = draw(st.integers(min_groups, max_groups))
        ids = draw(st.lists(st.integers(0, 10**6), min_size=B, max_size=B, unique=True))
        rewards: list[float] = []
        index: list[int] = []
        for gid in ids:
            size = draw(st.integers(min_size, max_size))
            rewards += draw(_group(size, binary=binary, bound=bound, silent=silent))
            index += [gid] * size
        r, i = np.array(rewards, dtype=np.float64), np.array(index, dtype=np.int64)
        if interleaved:
            perm = np.array(draw(st.permutations(range(len(r)))), dtype=np.int64)
            r, i = r[perm], i[perm]
        return r, i

    return build()


def score_vectors(*, n: int, dim: int = 3, bound: float = 4.0) -> st.SearchStrategy[np.ndarray]:
    """``[n, dim]`` finite score vectors with entries in ``[-bound, bound]``.

    >>> from hypothesis import find
    >>> find(score_vectors(n=2, dim=1), lambda s: True).tolist()
    [[0.0], [0.0]]
    """
    if n < 1 or dim < 1:
        raise ValueError(f"n={n} and dim={dim} must be >= 1")
    element = st.floats(-bound, bound, allow_nan=False, allow_infinity=False, allow_subnormal=False)
    return st.lists(element, min_size=n * dim, max_size=n * dim).map(
        lambda v: np.array(v, dtype=np.float64).reshape(n, dim)
    )
