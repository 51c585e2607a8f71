"""Hypothesis strategies for GRPO-family tests, reusable by anyone.

Every factory is keyword-only and returns a strategy of numpy float64 arrays:

* :func:`reward_groups`: ``[B, G]`` rewards, one group per row;
* :func:`ragged_batches`: ``(rewards [N], index [N])``, groups of different sizes,
  optionally interleaved and with arbitrary integer ids (as verl's ``uid``);
* :func:`score_vectors`: ``[N, d]`` per-response score vectors (``grad log pi``).

Rewards are binary ``{0, 1}``, or by ``values``: ``"dyadic"`` multiples of ``1/4`` in
``[-bound, bound]`` (exactly representable in float16 and bfloat16 too, so a
low-precision test compares with the oracle on the very rewards the implementation saw),
``"continuous"`` floats in ``[-bound, bound]`` on a ``1e-6`` grid (not representable in float32),
``"offset"`` ill-conditioned groups ``c + s u`` (an offset ``c`` in ``{5, -3, 100, 1e4}``
and a spread ``s`` in ``{1e-3, 1e-2, 1}``: near-equal rewards whose statistics cancel in
low precision), or ``"mixed"`` (each group one of the three). Silent groups always take
a dyadic value. Groups shrink towards ``G = min_size``, few groups, dyadic rewards and 0.

>>> from hypothesis import find
>>> r = find(reward_groups(binary=True, min_groups=2, silent="never"), lambda r: True)
>>> r.shape[0] >= 2, set(r.reshape(-1).tolist()) == {0.0, 1.0}
(True, True)

Performance: drawing a batch costs one list per group; keep ``max_size`` modest (<= 64)
and test large G with explicit examples instead.
"""

from __future__ import annotations

import functools

import numpy as np
from hypothesis import strategies as st

__all__ = ["reward_values", "reward_groups", "ragged_batches", "score_vectors"]

#: The kinds of reward values the group strategies draw (module doc).
VALUES: tuple[str, ...] = ("dyadic", "continuous", "offset", "mixed")


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


@functools.lru_cache(maxsize=4096)
def _values(size: int, *, binary: bool, bound: float, values: str) -> st.SearchStrategy[list[float]]:
    """``size`` rewards of one group, of the kind ``values`` (module doc)."""
    if binary or values == "dyadic":
        return st.lists(reward_values(binary=binary, bound=bound), min_size=size, max_size=size)
    if values == "continuous":
        # on a 1e-6 grid: never representable in float32 for most draws, and two distinct rewards
        # stay distinct after any shift the suite applies (a spread of 1e-300 would not)
        x = st.floats(-bound, bound, allow_nan=False, allow_infinity=False).map(lambda v: round(v, 6))
        return st.lists(x, min_size=size, max_size=size)
    if values == "offset":
        unit = st.floats(0.0, 1.0).map(lambda v: round(v, 6))
        u = st.lists(unit, min_size=size, max_size=size)
        return st.tuples(st.sampled_from([5.0, -3.0, 100.0, 1e4]), st.sampled_from([1e-3, 1e-2, 1.0]), u).map(
            lambda t: [t[0] + t[1] * x for x in t[2]]
        )
    kinds = [_values(size, binary=False, bound=bound, values=v) for v in ("dyadic", "continuous", "offset")]
    return st.one_of(kinds)


@functools.lru_cache(maxsize=4096)
def _group(
    size: int, *, binary: bool, bound: float, silent: str, values: str = "dyadic"
) -> st.SearchStrategy[list[float]]:
    drawn = _values(size, binary=binary, bound=bound, values=values)
    if silent == "never":

        def live(v: list[float]) -> list[float]:
            if len(set(v)) == 1:  # make the group live without filtering
                v = [1.0 - v[0] if binary else v[0] + 0.25, *v[1:]]
            return v

        return drawn.map(live)
    if silent == "always":
        return reward_values(binary=binary, bound=bound).map(lambda x: [x] * size)
    # a drawn group whose rewards happen to be all equal is silent: keep it silent but dyadic, as
    # every generated silent group is (non-dyadic silent groups have their own property,
    # non_dyadic_silent_group, whose verdict depends on the working precision)
    drawn = drawn.map(lambda v: [round(v[0] * 4) / 4] * len(v) if len(set(v)) == 1 else v)
    return st.one_of(drawn, reward_values(binary=binary, bound=bound).map(lambda x: [x] * size))


def _check_groups(
    min_groups: int, max_groups: int, min_size: int, max_size: int, silent: str, values: str
) -> None:
    """The checks of the options :func:`reward_groups` and :func:`ragged_batches` share."""
    _check_range("min_groups", min_groups, "max_groups", max_groups, 1)
    _check_range("min_size", min_size, "max_size", max_size, 1)
    if silent not in ("sometimes", "never", "always"):
        raise ValueError(f"silent={silent!r} must be 'sometimes', 'never' or 'always'")
    if values not in VALUES:
        raise ValueError(f"values={values!r} must be one of {VALUES}")


def reward_groups(
    *,
    min_groups: int = 1,
    max_groups: int = 4,
    min_size: int = 2,
    max_size: int = 8,
    binary: bool = False,
    bound: float = 10.0,
    silent: str = "sometimes",
    values: str = "dyadic",
) -> st.SearchStrategy[np.ndarray]:
    """``[B, G]`` rewards: ``B`` in ``[min_groups, max_groups]``, ``G`` in ``[min_size, max_size]``.

    ``silent``: ``"sometimes"`` (a group may have all rewards equal), ``"never"`` (every
    group has two different rewards) or ``"always"``. ``values``: the kind of rewards
    (module doc: dyadic, continuous, offset or mixed).

    >>> from hypothesis import find
    >>> r = find(reward_groups(silent="always"), lambda r: True)
    >>> bool((r == r[:, :1]).all())
    True
    """
    _check_groups(min_groups, max_groups, min_size, max_size, silent, values)

    @st.composite
    def build(draw: st.DrawFn) -> np.ndarray:
        G = draw(st.integers(min_size, max_size))
        B = draw(st.integers(min_groups, max_groups))
        rows = [draw(_group(G, binary=binary, bound=bound, silent=silent, values=values)) for _ in range(B)]
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
    values: str = "dyadic",
    ids: str = "int",
) -> st.SearchStrategy[tuple[np.ndarray, np.ndarray]]:
    """``(rewards [N], index [N])``: groups of sizes in ``[min_size, max_size]``, by id.

    Ids are distinct integers in arbitrary order (not ``0..B-1``), or with ``ids="str"``
    uuid-like hex strings (an object array, as verl's ``uid``) whose sorted order differs
    from their first-seen order whenever it can; with ``interleaved`` the responses of
    the groups are shuffled together, as in a verl batch. ``values`` as for
    :func:`reward_groups`.

    >>> from hypothesis import find
    >>> r, i = find(ragged_batches(min_groups=2), lambda b: len(set(b[1].tolist())) == 2)
    >>> r.shape == i.shape, len(set(i.tolist()))
    (True, 2)
    """
    _check_groups(min_groups, max_groups, min_size, max_size, silent, values)
    if ids not in ("int", "str"):
        raise ValueError(f"ids={ids!r} must be 'int' or 'str'")

    @st.composite
    def build(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
        B = draw(st.integers(min_groups, max_groups))
        gids = draw(st.lists(st.integers(0, 10**6), min_size=B, max_size=B, unique=True))
        rewards: list[float] = []
        index: list[int] = []
        for gid in gids:
            size = draw(st.integers(min_size, max_size))
            rewards += draw(_group(size, binary=binary, bound=bound, silent=silent, values=values))
            index += [gid] * size
        r, i = np.array(rewards, dtype=np.float64), np.array(index, dtype=np.int64)
        if interleaved:
            perm = np.array(draw(st.permutations(range(len(r)))), dtype=np.int64)
            r, i = r[perm], i[perm]
        if ids == "str":
            return r, np.array([_uid(int(x)) for x in i], dtype=object)
        return r, i

    return build()


def _uid(x: int) -> str:
    """A uuid-like hex id of ``x`` whose order is unrelated to the order of ``x``."""
    return f"{(x * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64:016x}-{x:x}"


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
