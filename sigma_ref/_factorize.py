"""Private: group ids of a flat batch as ``(inverse, sizes, ids)`` (:func:`factorize`).

Integer ids are counted (``bincount``) when their range is small, floats go through
``np.unique``, Python objects through a dict (grouped by ``==``); large batches of repeated id
objects are first grouped by their addresses (``sigma_ref._pylist``), so that only one object
per address is hashed, compared and sorted.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from . import _xp
from ._errors import short
from ._pylist import addresses
from ._tensors import Array, is_tensor, torch_module
from ._validate import check_dense_tensor, check_not_extended


def _check_index_length(count: int, n: int) -> None:
    if count != n:
        raise ValueError(f"index has {count} entries but rewards has {n}; pass one group id per reward")


def _factorize_ints_numpy(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted-order factorisation of integer ids: by counting when their range is small.

    Ids that already are the group numbers (``0 .. n - 1``, every one present, as ``intp``)
    are returned as ``inverse`` themselves, not copied: callers only read it."""
    hi = int(a.max())
    counts = None
    if a.dtype == np.intp and 0 <= hi <= 4 * a.size + 1024:  # perhaps the group numbers already
        try:
            counts = np.bincount(a, minlength=hi + 1)  # one pass fewer: bincount checks the minimum
        except ValueError:  # a negative id
            counts = None
    if counts is not None:
        lo = int(np.argmax(counts > 0))
        shifted, counts = (a, counts) if lo == 0 else (a - lo, counts[lo:])
    else:
        lo = int(a.min())
        if hi - lo + 1 <= 4 * a.size + 1024:
            shifted = (a - lo).astype(np.intp, copy=False)
            counts = np.bincount(shifted, minlength=hi - lo + 1)
    if counts is not None:
        present = counts > 0
        if bool(present.all()):  # every id in [lo, hi] occurs: the shifted ids are the group numbers
            return shifted, counts, np.arange(lo, hi + 1, dtype=a.dtype)
        ids = (np.flatnonzero(present) + int(lo)).astype(a.dtype)
        rank = np.cumsum(present) - 1
        return rank[shifted], counts[present], ids
    ids, inverse = np.unique(a, return_inverse=True)
    return inverse.reshape(-1), np.bincount(inverse.reshape(-1), minlength=ids.size), ids


def _factorize_ints_torch(a: Any) -> tuple[Any, Any, np.ndarray]:
    """:func:`_factorize_ints_numpy` on a torch integer tensor, on its device."""
    torch = torch_module()
    a = a.to(torch.int64)
    lo, hi = int(a.min()), int(a.max())
    span = hi - lo + 1
    if span <= 4 * a.numel() + 1024:
        shifted = a - lo
        counts = torch.bincount(shifted, minlength=span)
        present = counts > 0
        ids = (torch.nonzero(present).reshape(-1) + lo).cpu().numpy()
        if ids.size == span:  # every id in [lo, hi] occurs: the shifted ids are the group numbers
            return shifted, counts, ids
        rank = torch.cumsum(present, 0) - 1
        return rank[shifted], counts[present], ids
    ids_t, inverse = torch.unique(a, sorted=True, return_inverse=True)
    return inverse, torch.bincount(inverse, minlength=ids_t.numel()), ids_t.cpu().numpy()


def _refuse_self_unequal(table: Iterable[Any], seq: Sequence[Any]) -> None:
    """Raise for an id that is not equal to itself (NaN): it cannot name a group."""
    for key in table:
        try:
            nan = key != key
        except Exception:  # an id whose != does not give a bool
            nan = False
        if nan is True:
            pos = next(i for i, v in enumerate(seq) if v is key or v != v)
            raise ValueError(
                f"index[{pos}] is {key!r}, which is not equal to itself, so it cannot name a group: "
                "give those rewards a real group id"
            )


class UnsortableError(Exception):
    """Raised by :func:`factorize_by_value` (``sortable_only=True``) for ids that do not sort."""


#: Exact types whose values are always equal to themselves (no NaN can hide in them).
_SELF_EQUAL_TYPES = frozenset({str, bytes, int})


def _take(seq: list[Any] | np.ndarray, positions: np.ndarray) -> Sequence[Any]:
    """``[seq[p] for p in positions]`` in one C loop (a list: as a tuple, not copied into a list,
    which would touch every object once more) or one gather (an object array)."""
    if isinstance(seq, np.ndarray):
        taken: list[Any] = seq[positions].tolist()
        return taken
    if positions.size == 1:
        return (seq[int(positions[0])],)
    picked: tuple[Any, ...] = operator.itemgetter(*positions.tolist())(seq)
    return picked


def _as_list(seq: list[Any] | np.ndarray) -> list[Any]:
    return seq.tolist() if isinstance(seq, np.ndarray) else seq


def _factorize_objects(
    seq: list[Any] | np.ndarray, sort: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Factorise hashable ids with a dict: groups are ids equal under ``==`` (``1`` and ``'1'``
    differ). Group order is sorted order when the ids sort, else first-seen order; with
    ``sort=False`` nothing is sorted: the order in which the objects lie in memory for a batch
    that repeats its id objects (each group named by one of its ids), else first-seen order.

    Batches repeat each id object (``np.repeat`` of a uid array, or one string per group reused):
    the objects are first grouped by identity (``id()``, their address: no object is read, so no
    cache miss per element), and only one object per address is hashed, compared and sorted.
    Two live objects never share an address, and when every address offset is a multiple of
    ``2**s`` (16 for CPython's aligned objects, often more) they are ``2**s`` apart at least, so
    ``offset >> s`` names each object once; objects equal by ``==`` but distinct are merged in the
    dict step.
    ``seq`` is a list, or a one-dimensional object array (read in place: no ``tolist()``)."""
    n = len(seq)
    if n >= 4096:
        address = addresses(seq)
        slots = address - address.min()
        # every offset a multiple of 2**shift: distinct objects are 2**shift apart at least, so
        # offset >> shift names each once (objects are 16-byte aligned, so shift >= 4; 5 for
        # pymalloc's 96-byte blocks of short strings: half the slots)
        common = int(np.bitwise_or.reduce(slots))
        np.right_shift(slots, np.uint64((common & -common).bit_length() - 1 if common else 0), out=slots)
        slots = slots.view(np.int64)
        span = int(slots.max()) + 1
        if span <= 16 * n + 1024:  # objects of one batch sit close together: a presence map
            present = np.zeros(span, dtype=bool)  # a bool per slot: small enough to stay in cache
            present[slots] = True
            rank = np.cumsum(present, dtype=np.int64 if span >= 2**31 else np.int32)
            by_object = rank[slots] - np.int64(1)  # int64, in one pass
            m = int(rank[-1])
        else:
            _, by_object = np.unique(slots, return_inverse=True)
            m = int(by_object.max()) + 1
        if 2 * m <= n and not sort:  # repeated objects, numbered by address
            return _factorize_repeated_any_order(seq, by_object, m)
        if 2 * m <= n:  # repeated objects: worth the detour
            objects = _one_per_object(seq, by_object, m)
            try:
                code, _, ids = factorize_by_value(objects, sortable_only=True)
            except (UnsortableError, TypeError, ValueError):
                return factorize_by_value(_as_list(seq))  # first-seen order, or the error at its position
            inverse = code[by_object]
            return inverse, np.bincount(inverse, minlength=ids.size), ids
    return factorize_by_value(_as_list(seq), sort=sort)


def _one_per_object(seq: list[Any] | np.ndarray, by_object: np.ndarray, m: int) -> Sequence[Any]:
    """One element of ``seq`` for each of its ``m`` distinct objects, in ``by_object``'s order."""
    n = len(seq)
    small = np.int32 if n < 2**31 else np.int64  # half the bytes to write
    position = np.empty(m, dtype=small)
    position[by_object] = np.arange(n, dtype=small)  # whichever position lands, it is the same object
    return _take(seq, position)


def _factorize_repeated_any_order(
    seq: list[Any] | np.ndarray, by_object: np.ndarray, m: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_factorize_objects` with ``sort=False`` once ``by_object`` numbers the ``m`` distinct
    objects of ``seq`` in address order: one object per address goes through a set (a dict where
    distinct objects are equal by ``==``, to merge them), in address order, so the objects are read
    in memory order, not in the batch's random order; the groups keep that order."""
    objects = _one_per_object(seq, by_object, m)
    try:
        distinct = set(objects)  # a set, not a dict: every object one value is the usual case
    except TypeError:
        return factorize_by_value(_as_list(seq), sort=False)  # the error at the caller's position
    if len(distinct) == m and None not in distinct:  # the objects are the groups
        if not set(map(type, objects)) <= _SELF_EQUAL_TYPES:  # (in address order: in memory order)
            _refuse_self_unequal(distinct, _as_list(seq))
        return by_object, np.bincount(by_object, minlength=m), np.fromiter(objects, dtype=object, count=m)
    try:  # distinct objects equal by ==: the dict merges them
        code, _, ids = factorize_by_value(objects, sort=False)
    except (TypeError, ValueError):
        return factorize_by_value(_as_list(seq), sort=False)  # the error at the caller's position
    inverse = code[by_object]
    return inverse, np.bincount(inverse, minlength=ids.size), ids


def factorize_by_value(
    seq: Sequence[Any], sortable_only: bool = False, sort: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_factorize_objects` through a dict over every element (``sortable_only``: raise
    :class:`UnsortableError` where the first-seen order would be needed; ``sort=False``:
    first-seen order, nothing sorted)."""
    try:
        table: dict[Any, Any] = dict.fromkeys(seq)
    except TypeError:
        for pos, value in enumerate(seq):
            try:
                hash(value)
            except TypeError:
                raise TypeError(
                    f"index[{pos}]={short(value)} is a {type(value).__name__}, which cannot be a "
                    "group id (not hashable); use ints, strings or tuples as group ids"
                ) from None
        raise
    if None in table:
        raise ValueError(
            f"index[{seq.index(None)}] is None; every reward needs a group id (a missing uid?): "
            "fill it in or drop that reward"
        )
    if not sort:
        if not set(map(type, table)) <= _SELF_EQUAL_TYPES:
            _refuse_self_unequal(table, seq)
        ids = np.fromiter(table, dtype=object, count=len(table))
        if len(table) == len(seq):  # every id distinct: group j is element j
            inverse = np.arange(len(seq), dtype=np.int64)
            return inverse, np.ones(len(seq), dtype=np.int64), ids
        code = dict(zip(table, range(len(table)), strict=True))
        inverse = np.array(operator.itemgetter(*seq)(code), dtype=np.int64)
        return inverse, np.bincount(inverse, minlength=len(code)), ids
    try:
        order, comparable = sorted(table), True
    except TypeError:  # ids of kinds that do not compare (e.g. 1 and 'a'): first-seen order
        if sortable_only:
            raise UnsortableError from None
        order, comparable = list(table), False
    if not (comparable and isinstance(order[0], str)):  # sorted strings cannot hold a NaN
        _refuse_self_unequal(table, seq)
    table.update(zip(order, range(len(order)), strict=True))
    if len(seq) == 1:
        inverse = np.zeros(1, dtype=np.int64)
    else:  # itemgetter looks all of them up in one C loop (twice as fast as map + fromiter)
        inverse = np.array(operator.itemgetter(*seq)(table), dtype=np.int64)
    ids = np.fromiter(order, dtype=object, count=len(order))
    return inverse, np.bincount(inverse, minlength=len(order)), ids


def _beyond_float(seq: list[Any]) -> bool:
    """Whether an ``int`` of ``seq`` is not exact in float64 (``|v| > 2**53``): ids mixing such
    ints with floats are grouped by ``==`` as objects, never merged by rounding to float64."""
    exact = 1 << 53
    return any(type(v) is int and not -exact <= v <= exact for v in seq)


def factorize(
    index: Any, n: int, device: Any = None, *, sort: bool = True
) -> tuple[Array, Array, np.ndarray]:
    """Group ids of a flat batch of ``n`` as ``(inverse, sizes, ids)``.

    ``inverse[i]`` is the group number of reward ``i``; groups are numbered in sorted order
    of their ids (first-seen order when the ids do not sort, e.g. ``1`` and ``'a'``).
    Ids are grouped by ``==``: ``1``, ``1.0`` and ``True`` are one group, ``1`` and
    ``'1'`` two. ``device`` (a torch device) puts ``inverse`` and ``sizes`` there;
    ``None`` gives numpy. None, NaN and unhashable ids are refused.

    ``sort=False`` is for callers whose results do not depend on the group order (one value
    per reward): ids that are Python objects (strings, tuples, ...) are then never sorted and
    numbered in an order that is cheapest to find (their objects' order in memory, or first
    seen); numbers keep sorted order (it costs nothing more). Grouping and errors are the same
    as with ``sort=True``.
    """
    if isinstance(index, (str, bytes)) or index is None or isinstance(index, numbers.Number):
        raise TypeError(f"index={index!r} must be a sequence of group ids, one per reward")
    if isinstance(index, (set, frozenset, dict)):  # no order: which id is whose reward is arbitrary
        raise TypeError(
            f"index is a {type(index).__name__} ({short(index)}), which has no order; pass a list or "
            "array of group ids, one per reward, in the rewards' order"
        )
    if _xp.is_foreign(index):  # jax, cupy, array_api_strict, ...: read on the host
        index = np.array(_xp.to_numpy(index)[0])  # a writable copy (torch refuses read-only views)
    if is_tensor(index):
        check_dense_tensor(index, "index")
        if index.dim() != 1:
            raise TypeError(
                f"index has shape {tuple(index.shape)}; pass a one-dimensional array of group ids, "
                "one per reward"
            )
        _check_index_length(index.shape[0], n)
        torch = torch_module()
        if device is not None and not index.dtype.is_floating_point and not index.is_complex():
            inverse, sizes, ids = _factorize_ints_torch(index.detach().to(device))
            return inverse, sizes.to(torch.float64), ids
        index = index.detach().cpu().numpy()
    if isinstance(index, np.ndarray):
        if index.ndim != 1:
            raise TypeError(
                f"index has shape {index.shape}; pass a one-dimensional array of group ids, one per reward"
            )
        ids_arr = index
    else:
        try:
            seq = index if type(index) is list else list(index)  # read only: a list is not copied
        except TypeError:
            raise TypeError(f"index={short(index)} must be a sequence of group ids, one per reward") from None
        _check_index_length(len(seq), n)
        if seq and isinstance(seq[0], (str, bytes, tuple)):  # not numbers: by == through a dict
            return _on_device(*_factorize_objects(seq, sort), device)
        kinds = set(map(type, seq))
        if kinds <= {int, np.int64, np.int32}:
            try:
                ids_arr = np.array(seq, dtype=np.int64)
            except OverflowError:
                ids_arr = np.fromiter(seq, dtype=object, count=len(seq))
        elif kinds <= {float, int, np.float64} and not (int in kinds and _beyond_float(seq)):
            ids_arr = np.array(seq, dtype=np.float64)
        else:
            return _on_device(*_factorize_objects(seq, sort), device)
    _check_index_length(ids_arr.shape[0], n)
    check_not_extended(ids_arr, "index")  # distinct longdouble ids could merge in float64
    kind = ids_arr.dtype.kind
    if kind in "iub":
        inverse, sizes, ids = _factorize_ints_numpy(ids_arr.astype(np.uint8) if kind == "b" else ids_arr)
    elif kind == "f":
        nan = np.isnan(ids_arr)
        if nan.any():
            raise ValueError(
                f"index[{int(np.flatnonzero(nan)[0])}] is NaN; NaN is not equal to itself, so it "
                "cannot name a group: give those rewards a real group id"
            )
        ids, inverse = np.unique(ids_arr, return_inverse=True)
        inverse = inverse.reshape(-1)
        sizes = np.bincount(inverse, minlength=ids.size)
    elif kind == "O":  # Python objects: by ==, through a dict, read in place
        inverse, sizes, ids = _factorize_objects(ids_arr, sort)
    else:  # numpy strings and bytes: by ==, through a dict
        inverse, sizes, ids = _factorize_objects(ids_arr.tolist(), sort)
    return _on_device(inverse, sizes, ids, device)


def _on_device(
    inverse: np.ndarray, sizes: np.ndarray, ids: np.ndarray, device: Any
) -> tuple[Array, Array, np.ndarray]:
    """``(inverse, sizes as float64, ids)``, the first two moved to torch ``device`` if given."""
    if device is None:
        return inverse.astype(np.int64, copy=False), sizes.astype(np.float64), ids
    torch = torch_module()
    inverse_t = torch.from_numpy(inverse.astype(np.int64, copy=False)).to(device)
    return inverse_t, torch.from_numpy(sizes.astype(np.float64)).to(device), ids
