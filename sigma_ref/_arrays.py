"""Private: input checks, numpy/torch round trips, group ids and group layouts.

The oracle computes in float64 in the caller's own array library: numpy input stays
in numpy (``import sigma_ref`` and numpy callers never import torch), torch input
stays in torch on its device. A group layout is a small reducer object with one
interface for both libraries: :class:`Rows` for ``[..., G]`` (the groups are rows of a
``[B, G]`` view; reductions along the last axis, no scatter), :class:`Segments` for a
flat ``[N]`` batch with an ``index`` (reductions by group number with
``bincount``/``index_add``). The statistics are written once against that interface
(``sigma_ref.advantages``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import numbers
import operator
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from . import _xp
from ._xp import Foreign

Array = Any  # numpy.ndarray | torch.Tensor

_MAX_SHOWN = 8


def torch_module() -> Any:
    """The torch module, imported on first use (``import sigma_ref`` does not load it)."""
    import torch

    return torch


def is_tensor(value: Any) -> bool:
    """``isinstance(value, torch.Tensor)`` without importing torch (no torch, no tensor)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def short(value: Any) -> str:
    """A short repr of a value for error messages."""
    if is_tensor(value):
        if value.is_meta or value.layout != torch_module().strided:
            return f"tensor(shape={tuple(value.shape)}, device={value.device}, layout={value.layout})"
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)
        body = ", ".join(f"{v:g}" if isinstance(v, float) else repr(v) for v in flat[:_MAX_SHOWN].tolist())
        more = ", ..." if flat.size > _MAX_SHOWN else ""
        return f"array(shape={tuple(value.shape)}, [{body}{more}])"
    return repr(value)


def check_dense_tensor(value: Any, name: str) -> None:
    """Refuse tensors without values (meta) or in a sparse layout, naming the fix."""
    torch = torch_module()
    if value.is_meta:
        raise ValueError(
            f"{name} is a tensor on the meta device (shape {tuple(value.shape)}, no values); "
            "pass a tensor that holds data, e.g. on 'cpu' or 'cuda'"
        )
    if value.layout != torch.strided:
        raise TypeError(
            f"{name} is a tensor with layout {value.layout}; pass a dense (strided) tensor, "
            f"e.g. {name}.to_dense()"
        )
    if value.is_complex():
        raise TypeError(f"{name} has dtype {value.dtype}; pass real numbers (float, int or bool)")


@dataclasses.dataclass(frozen=True)
class Backend:
    """Where an input came from, so results go back the same way."""

    is_torch: bool
    device: Any  # torch.device, or None for numpy
    dtype: Any  # the output dtype: numpy dtype or torch dtype

    @property
    def numpy_dtype(self) -> Any:
        """The output's floating dtype as numpy's (``None`` where numpy has none: bfloat16)."""
        name = str(self.dtype).removeprefix("torch.")
        return np.dtype(name) if name in _NUMPY_DTYPES else None

    def out(self, x: Array, kind: str | None = None) -> Array:
        """``x`` (a result in the input's library) as the caller's type, device and dtype.

        ``kind`` ``None`` keeps the caller's floating dtype; ``"float64"``, ``"int64"``
        or ``"bool"`` force one.
        """
        if self.is_torch:
            torch = torch_module()
            dtype = self.dtype if kind is None else getattr(torch, kind)
            if not isinstance(x, torch.Tensor):  # a result computed through numpy (CPU)
                name = str(dtype).removeprefix("torch.")
                if name in _NUMPY_DTYPES:
                    return torch.from_numpy(np.asarray(x).astype(name, order="C", copy=False)).to(self.device)
                x = torch.from_numpy(np.ascontiguousarray(x))
            if x.is_contiguous() or x.dim() == 0:
                return x.to(device=self.device, dtype=dtype)
            out = torch.empty(tuple(x.shape), dtype=dtype, device=self.device)
            return out.copy_(x)  # one pass: the layout's transpose and the dtype together
        if is_tensor(x):
            x = x.detach().cpu().numpy()
        dtype = self.dtype if kind is None else np.dtype(kind)
        return np.asarray(x).astype(dtype, order="C", copy=False)


@dataclasses.dataclass(frozen=True)
class ForeignBackend(Backend):
    """:class:`Backend` for a caller of another array-API library (jax, cupy, array_api_strict):
    the statistics run in numpy (or torch, ``library="torch"``) on the host, and :meth:`out`
    gives the result back in the caller's library, dtype and device (``sigma_ref._xp``)."""

    foreign: Foreign | None = None

    def out(self, x: Array, kind: str | None = None) -> Array:
        assert self.foreign is not None
        return self.foreign.back(x, kind)


#: Torch tensors on the CPU are computed through zero-copy numpy views (numpy runs each
#: operation on one thread, so the many small per-group operations never pay for
#: OpenMP start-up or for a busy machine's thread contention). Tests set this to True to
#: run the torch code path, which CUDA tensors always take, on the CPU.
TORCH_KERNEL_ON_CPU = False

#: Torch dtypes that numpy holds as they are.
_NUMPY_DTYPES = ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")


def as_float64(
    values: Any,
    name: str,
    *,
    allow_bool: bool = True,
    library: str = "input",
    copy: bool = True,
    convert: bool = True,
) -> tuple[Array, Backend]:
    """``values`` as float64 in its own library (a copy unless ``copy=False``, for callers
    that never write to it).

    numpy arrays, sequences and numbers give a numpy array; torch tensors a tensor on
    their device, except CPU tensors with ``library="auto"``, which give a numpy view
    (:data:`TORCH_KERNEL_ON_CPU`); ``library="torch"`` forces a torch tensor (the
    identity's code path). ``convert=False`` (with ``copy=False``) may return the real
    input dtype, for a caller that converts while it copies (:func:`arrange`). Floating
    inputs keep their dtype on the way out; integer and boolean inputs come back as float64.
    """
    if is_tensor(values):
        check_dense_tensor(values, name)
        torch = torch_module()
        out_dtype = values.dtype if values.dtype.is_floating_point else torch.float64
        backend = Backend(True, values.device, out_dtype)
        if values.dtype == torch.bool and not allow_bool:
            raise TypeError(f"{name} is boolean; pass numbers")
        x = values.detach()
        if library == "auto" and x.device.type == "cpu" and not TORCH_KERNEL_ON_CPU:
            if str(x.dtype).removeprefix("torch.") not in _NUMPY_DTYPES:  # bfloat16 and friends
                x = x.to(torch.float64)
            arr = x.numpy()
            if copy:
                arr = np.array(arr, dtype=np.float64, copy=True)
            elif convert:
                arr = np.asarray(arr, dtype=np.float64)
            return arr, backend
        if not convert and not copy:
            return x, backend
        if x.dtype != torch.float64:
            x = x.to(torch.float64)
        elif copy:
            x = x.clone()
        return x, backend
    if not isinstance(values, np.ndarray) and _xp.is_foreign(values):  # jax, cupy, array_api_strict, ...
        host, foreign = _xp.to_numpy(values)
        x, backend = as_float64(
            host, name, allow_bool=allow_bool, library=library, copy=copy, convert=convert
        )
        return x, ForeignBackend(backend.is_torch, backend.device, backend.dtype, foreign)
    if isinstance(values, (str, bytes)) or values is None:
        raise TypeError(f"{name}={values!r} must be a numpy array, a torch tensor or a sequence of numbers")
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as exc:  # ragged nested lists
        raise TypeError(f"{name} could not be read as an array ({exc}); pass a rectangular array") from None
    if arr.dtype.kind == "b" and not allow_bool:
        raise TypeError(f"{name} is boolean; pass numbers")
    if arr.dtype.kind not in "biuf":
        raise TypeError(
            f"{name} has dtype {arr.dtype} ({short(arr)}); pass real numbers (float, int or bool)"
        )
    check_not_extended(arr, name)
    out_dtype = arr.dtype if arr.dtype.kind == "f" else np.dtype(np.float64)
    if not convert and not copy:
        return arr, Backend(False, None, out_dtype)
    x = np.array(arr, dtype=np.float64, copy=True) if copy else np.asarray(arr, dtype=np.float64)
    if library == "torch":
        return torch_module().from_numpy(x), Backend(False, None, out_dtype)
    return x, Backend(False, None, out_dtype)


#: Up to this group size, :class:`Rows` sums run left to right over the G members.
SEQUENTIAL_MAX_G = 64


@dataclasses.dataclass(frozen=True)
class Rows:
    """Groups of one size ``G``, stored as the columns of a contiguous ``[G, B]`` array.

    The statistics run on that float64 ``[G, B]`` array (numpy or torch): every
    per-group reduction is ``G - 1`` elementwise operations on contiguous rows of length
    ``B``, with no scatter and no short inner reductions. For ``[..., G]`` input,
    ``batch_shape`` is ``[...]`` and ``dim`` the caller's group axis; for a flat input
    whose ids come in contiguous runs of equal length, ``row_group[b]`` is the group
    number (in :func:`factorize`'s order) of run ``b`` and ``ids``/``inverse`` its ids.
    """

    n_groups: int
    size: int
    sizes: Array
    batch_shape: tuple[int, ...]
    dim: int
    ndim: int
    row_group: Array | None = None
    ids: np.ndarray | None = None
    inverse: Array | None = None

    @property
    def torch(self) -> bool:
        return is_tensor(self.sizes)

    def sum(self, v: Array) -> Array:
        """Per-group sums: ``v[0] + v[1] + ...`` left to right for ``G <= 64`` (no temporary
        larger than a row), pairwise halving (``v[:h] + v[h:2h]``, ...) beyond. The same
        order in numpy and torch, so the two give bit-identical results."""
        if v.shape[0] <= SEQUENTIAL_MAX_G:
            acc = v[0].clone() if self.torch else v[0].copy()
            for j in range(1, v.shape[0]):
                acc += v[j]
            return acc
        while v.shape[0] > 1:
            half = v.shape[0] // 2
            head = v[:half] + v[half : 2 * half]
            if v.shape[0] % 2:
                head[0] += v[2 * half]
            v = head
        return v[0].clone() if self.torch else v[0].copy()

    def sum_squares(self, v: Array, scratch: Array | None = None) -> Array:
        """Per-group ``sum v**2``, in :meth:`sum`'s order, with one row-sized temporary."""
        if v.shape[0] > SEQUENTIAL_MAX_G:
            return self.sum(v * v)
        acc = v[0] * v[0]
        tmp = acc.clone() if self.torch else acc.copy()
        for j in range(1, v.shape[0]):
            if self.torch:
                torch_module().mul(v[j], v[j], out=tmp)
            else:
                np.multiply(v[j], v[j], out=tmp)
            acc += tmp
        return acc

    def min(self, v: Array) -> Array:
        return v.amin(0) if self.torch else v.min(axis=0)

    def max(self, v: Array) -> Array:
        return v.amax(0) if self.torch else v.max(axis=0)

    def expand(self, g: Array, out: Array | None = None) -> Array:
        """A per-group array broadcast against the ``[G, B]`` values (a view, no copy)."""
        return g[None, :]

    def restore(self, v: Array) -> Array:
        """A per-element ``[G, B]`` result in the caller's layout (a view; not contiguous)."""
        if self.row_group is not None:
            return v.T.reshape(-1) if not self.torch else v.t().reshape(-1)
        shaped = v.reshape(self.size, *self.batch_shape)
        if self.torch:
            return shaped.movedim(0, self.dim)
        return np.moveaxis(shaped, 0, self.dim)

    def per_group(self, g: Array) -> Array:
        """A per-group result as the caller's per-group array (``[...]``, or group order)."""
        if self.row_group is None:
            return g.reshape(self.batch_shape)
        out = g.new_empty(g.shape) if self.torch else np.empty_like(g)
        out[self.row_group] = g
        return out

    def describe(self, group: int) -> str:
        if self.row_group is not None and self.ids is not None:
            return _describe_id(self.ids[int(self.row_group[group])])
        if self.batch_shape:
            where = np.unravel_index(group, self.batch_shape)
            return f"group at batch position {tuple(int(w) for w in where)}"
        return "the group"

    def group_of(self, flat_position: int) -> int:
        """Group (column) of the element at ``flat_position`` of the ``[G, B]`` values."""
        return flat_position % self.n_groups

    def first_group(self, mask: Array) -> int:
        """The first group (row, or run of ids) where ``mask`` (per group) holds."""
        return int(_first_groups(mask)[0])

    def caller_position(self, flat_position: int) -> int:
        """The same element's flat position in the caller's ``[..., G]`` order."""
        member, group = divmod(flat_position, self.n_groups)
        return group * self.size + member


@dataclasses.dataclass(frozen=True)
class Segments:
    """Groups of any sizes given by ``inverse`` (element -> group number) over a flat vector.

    ``sizes[j]`` is the size of group ``j``; ``ids`` the group ids in group order
    (``None`` when the groups are the rows of a ``[..., G]`` array: then
    ``batch_shape``/``dim`` describe it, the identity's layout). ``in_order``: the groups are
    numbered in :func:`factorize`'s sorted order; ``False`` when they may be numbered in
    another order (``sort=False``), which only :meth:`first_group` has to undo.
    """

    inverse: Array
    sizes: Array
    n_groups: int
    ids: np.ndarray | None
    batch_shape: tuple[int, ...] | None = None
    dim: int = 0
    in_order: bool = True

    @property
    def torch(self) -> bool:
        return is_tensor(self.inverse)

    def sum(self, v: Array) -> Array:
        """Per-group sums of ``v`` (``[N]`` or ``[N, d]``)."""
        if self.torch:
            return v.new_zeros((self.n_groups, *v.shape[1:])).index_add_(0, self.inverse, v)
        if v.ndim == 1:
            return np.bincount(self.inverse, weights=v, minlength=self.n_groups)
        out = np.zeros((self.n_groups, *v.shape[1:]))
        np.add.at(out, self.inverse, v)
        return out

    def mean(self, v: Array) -> Array:
        """Per-group means of ``v``."""
        return self.sum(v) / self.sizes.reshape(-1, *([1] * (v.ndim - 1)))

    def _extreme(self, v: Array, how: str) -> Array:
        start = math.inf if how == "min" else -math.inf
        if self.torch:
            out = v.new_full((self.n_groups,), start)
            return out.scatter_reduce_(0, self.inverse, v, "amin" if how == "min" else "amax")
        out = np.full(self.n_groups, start)
        (np.minimum if how == "min" else np.maximum).at(out, self.inverse, v)
        return out

    def min(self, v: Array) -> Array:
        return self._extreme(v, "min")

    def max(self, v: Array) -> Array:
        return self._extreme(v, "max")

    def all_equal(self, v: Array) -> Array:
        """Per group: True where every value of the group is equal (exactly)."""
        return self.min(v) == self.max(v)

    def expand(self, g: Array, out: Array | None = None) -> Array:
        """``g[inverse]``: one value per element (written into ``out`` when given)."""
        if out is None:
            return g[self.inverse]
        if self.torch:
            return torch_module().index_select(g, 0, self.inverse, out=out)
        # inverse holds valid group numbers by construction: mode="clip" changes no value and skips
        # the buffered copy numpy makes for out= under its default mode="raise" (1.6x the gather)
        return np.take(g, self.inverse, out=out, mode="clip")

    def sum_squares(self, v: Array, scratch: Array | None = None) -> Array:
        """Per-group ``sum v**2`` (the squares go to ``scratch`` when given)."""
        if scratch is None:
            return self.sum(v * v)
        if self.torch:
            torch_module().mul(v, v, out=scratch)
        else:
            np.multiply(v, v, out=scratch)
        return self.sum(scratch)

    def restore(self, v: Array) -> Array:
        if self.batch_shape is None:
            return v
        shaped = v.reshape(*self.batch_shape, -1)
        return shaped.movedim(-1, self.dim) if self.torch else np.moveaxis(shaped, -1, self.dim)

    def per_group(self, g: Array) -> Array:
        if self.batch_shape is None:
            return g
        return g.reshape((*self.batch_shape, *g.shape[1:]))

    def describe(self, group: int) -> str:
        if self.ids is not None:
            return _describe_id(self.ids[group])
        if self.batch_shape:
            where = np.unravel_index(group, self.batch_shape)
            return f"group at batch position {tuple(int(w) for w in where)}"
        return "the group"

    def group_of(self, flat_position: int) -> int:
        return int(self.inverse[flat_position])

    def first_group(self, mask: Array) -> int:
        """The first group where ``mask`` (per group) holds, in sorted group order (first-seen
        order for ids that do not sort): the group an error names. With ``in_order=False`` that
        order is worked out here (on the error path only), so errors name the same group as with
        ``sort=True``."""
        where = _first_groups(mask)
        if self.in_order or self.ids is None or where.size == 1:
            return int(where[0])
        try:
            rank = _factorize_by_value(self.ids.tolist(), sortable_only=True)[0]  # sorted rank
        except _UnsortableError:  # the groups' first positions
            inverse = self.inverse.cpu().numpy() if is_tensor(self.inverse) else self.inverse
            rank = np.full(self.n_groups, inverse.size, dtype=np.int64)
            np.minimum.at(rank, inverse, np.arange(inverse.size))
        return int(where[np.argmin(rank[where])])

    def caller_position(self, flat_position: int) -> int:
        return flat_position


Layout = Rows | Segments


def _first_groups(mask: Array) -> np.ndarray:
    """The group numbers where a per-group boolean ``mask`` (numpy or torch) holds, as numpy."""
    if is_tensor(mask):
        mask = mask.detach().cpu().numpy()
    where: np.ndarray = np.flatnonzero(mask)
    if where.size == 0:
        raise ValueError("no group is selected")  # callers test mask.any() first
    return where


Groups = Segments  # the identity's name for a flat layout


def _describe_id(gid: Any) -> str:
    gid = gid.item() if isinstance(gid, np.generic) else gid  # 'a', not np.str_('a')
    return f"group with index id {gid!r}"


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


class _Pointers:
    """An object array's buffer seen as ``uint64`` (``np.array(_Pointers(a))`` copies it): numpy
    stores an object array's elements as ``PyObject *`` pointers, on CPython their ``id()``."""

    def __init__(self, objects: np.ndarray) -> None:
        self.__array_interface__ = {
            "shape": objects.shape,
            "strides": objects.strides,
            "typestr": "<u8",
            "data": (objects.__array_interface__["data"][0], True),
            "version": 3,
        }


def _addresses(seq: list[Any] | np.ndarray) -> np.ndarray:
    """``[id(x) for x in seq]`` as ``uint64``, without touching the objects: on CPython, a copy of
    an object array's buffer of pointers (numpy's documented layout), or of a list's own array of
    object pointers (``ob_item``, read through ctypes after checking the list's header: ``ob_size``
    equals ``len(seq)``, ``allocated`` is at least that); sampled pointers must equal ``id()``.
    Elsewhere, or if any check fails, ``id()`` per element (~200 times slower: ~0.2 s for 2**20;
    every way of reading the objects from Python touches each one, a cache miss per reward)."""
    n = len(seq)
    probe = np.unique(np.r_[0, n - 1, np.linspace(0, n - 1, 17).astype(np.int64)]) if n else np.r_[0]
    if isinstance(seq, np.ndarray):
        if sys.implementation.name == "cpython" and n and seq.dtype == object and seq.itemsize == 8:
            pointers: np.ndarray = np.array(_Pointers(seq), dtype=np.uint64)
            if all(int(pointers[i]) == id(seq[i]) for i in probe):
                return pointers
        return np.fromiter(map(id, seq), dtype=np.uint64, count=n)
    if sys.implementation.name == "cpython" and n:
        word = ctypes.sizeof(ctypes.c_void_p)
        head = id(seq)
        size = ctypes.c_ssize_t.from_address(head + 2 * word).value
        allocated = ctypes.c_ssize_t.from_address(head + 4 * word).value
        if word == 8 and size == n and allocated >= n:
            items = ctypes.c_void_p.from_address(head + 3 * word).value
            if items:
                out: np.ndarray = np.frombuffer(
                    memoryview((ctypes.c_uint64 * n).from_address(items)), dtype=np.uint64
                ).copy()
                if all(int(out[i]) == id(seq[i]) for i in probe):
                    return out
    return np.fromiter(map(id, seq), dtype=np.uint64, count=n)


class _UnsortableError(Exception):
    """Raised by :func:`_factorize_by_value` (``sortable_only=True``) for ids that do not sort."""


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
        address = _addresses(seq)
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
                code, _, ids = _factorize_by_value(objects, sortable_only=True)
            except (_UnsortableError, TypeError, ValueError):
                return _factorize_by_value(_as_list(seq))  # first-seen order, or the error at its position
            inverse = code[by_object]
            return inverse, np.bincount(inverse, minlength=ids.size), ids
    return _factorize_by_value(_as_list(seq), sort=sort)


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
        return _factorize_by_value(_as_list(seq), sort=False)  # the error at the caller's position
    if len(distinct) == m and None not in distinct:  # the objects are the groups
        if not set(map(type, objects)) <= _SELF_EQUAL_TYPES:  # (in address order: in memory order)
            _refuse_self_unequal(distinct, _as_list(seq))
        return by_object, np.bincount(by_object, minlength=m), np.fromiter(objects, dtype=object, count=m)
    try:  # distinct objects equal by ==: the dict merges them
        code, _, ids = _factorize_by_value(objects, sort=False)
    except (TypeError, ValueError):
        return _factorize_by_value(_as_list(seq), sort=False)  # the error at the caller's position
    inverse = code[by_object]
    return inverse, np.bincount(inverse, minlength=ids.size), ids


def _factorize_by_value(
    seq: Sequence[Any], sortable_only: bool = False, sort: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_factorize_objects` through a dict over every element (``sortable_only``: raise
    :class:`_UnsortableError` where the first-seen order would be needed; ``sort=False``:
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
            raise _UnsortableError from None
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


def _grouped_rows(x: Array, dim: Any, name: str) -> tuple[Array, Rows]:
    """Rows along ``dim`` of ``x`` as groups: the ``[G, B]`` float64 values (a new array) and
    the layout."""
    ndim = x.ndim
    if ndim == 0:
        raise ValueError(f"{name} is a scalar; pass a [..., G] array of rewards (one group per row)")
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise TypeError(f"dim={dim!r} must be an int")
    if not -ndim <= dim < ndim:
        raise ValueError(
            f"dim={dim} is out of range for {name} with shape {tuple(x.shape)}; "
            f"use {-ndim} <= dim < {ndim} (the axis that holds each group's responses)"
        )
    axis = int(dim) % ndim
    size = int(x.shape[axis])
    batch_shape = tuple(int(n) for i, n in enumerate(x.shape) if i != axis)
    n_groups = math.prod(batch_shape)
    return _columns(x.reshape(-1, size) if axis == ndim - 1 else x, axis, size, n_groups), Rows(
        n_groups, size, _full(x, n_groups, float(size)), batch_shape, axis, ndim
    )


def _full(like: Array, n: int, value: float) -> Array:
    if is_tensor(like):
        return like.new_full((n,), value, dtype=torch_module().float64)
    return np.full(n, value)


def _columns(x: Array, axis: int, size: int, n_groups: int) -> Array:
    """A new contiguous float64 ``[G, B]`` array of the groups along ``axis`` of ``x``: the
    transpose and the dtype conversion in one copy."""
    if x.ndim == 2 and axis != 0:
        moved = x.T if not is_tensor(x) else x.t()
    else:
        moved = x.movedim(axis, 0) if is_tensor(x) else np.moveaxis(x, axis, 0)
    if is_tensor(x):
        torch = torch_module()
        out = torch.empty(tuple(moved.shape), dtype=torch.float64, device=x.device)
        out.copy_(moved)
        return out.reshape(size, n_groups)
    return np.array(moved, dtype=np.float64, order="C").reshape(size, n_groups)


def arrange(x: Array, index: Any, dim: Any, name: str, *, sort: bool = True) -> tuple[Array, Layout]:
    """``x`` (real numbers, numpy or torch) as the float64 values the statistics run on, and
    its layout (the row layout's values are a new array; the index layout's may be ``x``).

    Without ``index``: :class:`Rows` along ``dim``. With ``index``: :class:`Rows` when the
    ids come in contiguous runs of one length (``[a, a, b, b, ...]``), else :class:`Segments`.
    ``sort=False``: the groups may be numbered in another order (:func:`factorize`), for
    callers whose results are per reward; :meth:`Segments.first_group` still names the group an
    error would name in sorted order.
    """
    if x.size == 0 if isinstance(x, np.ndarray) else x.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); pass at least one group")
    if index is None:
        return _grouped_rows(x, dim, name)
    if x.ndim != 1:
        raise ValueError(
            f"{name} has shape {tuple(x.shape)} but index= is given; the index layout takes "
            f"a flat [N] {name} (or drop index= to group along dim)"
        )
    if isinstance(dim, bool) or dim not in (-1, 0):
        raise ValueError(
            f"dim={dim!r} has no effect with index=: the index layout groups a flat [N] {name} "
            "by its ids; drop dim= (or drop index= to group along dim)"
        )
    n = int(x.shape[0])
    inverse, sizes, ids = factorize(index, n, x.device if is_tensor(x) else None, sort=sort)
    x = x.to(torch_module().float64) if is_tensor(x) else np.asarray(x, dtype=np.float64)
    n_groups = len(ids)
    size = n // n_groups
    if size * n_groups == n:
        runs = inverse.reshape(n_groups, size)
        # contiguous runs of one length: rows (each run's ends first, a cheap test that interleaved
        # ids fail at once)
        if (
            bool((runs[:64, -1] == runs[:64, 0]).all())
            and bool((runs[:, -1] == runs[:, 0]).all())
            and bool((runs == runs[:, :1]).all())
        ):
            rows = Rows(n_groups, size, sizes, (n_groups,), 0, 1, runs[:, 0], ids, inverse)
            return _columns(x.reshape(n_groups, size), 1, size, n_groups), rows
    return x, Segments(inverse, sizes, n_groups, ids, in_order=sort)


def layout(x: Any, index: Any, dim: Any, name: str) -> tuple[Any, Segments]:
    """The identity's layout: a flat torch float64 ``x`` and :class:`Segments` (either layout)."""
    torch = torch_module()
    if x.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); pass at least one group")
    values, lay = arrange(x, index, dim, name)
    if isinstance(lay, Segments):
        return values, lay
    flat = values.t().reshape(-1)  # back to [B, G] order: group b holds flat[b*G:(b+1)*G]
    if lay.inverse is not None:
        return flat, Segments(lay.inverse, lay.sizes, lay.n_groups, lay.ids)
    inverse = torch.arange(lay.n_groups, device=x.device).repeat_interleave(lay.size)
    return flat, Segments(inverse, lay.sizes, lay.n_groups, None, lay.batch_shape, lay.dim)


def check_finite(values: Array, groups: Layout, name: str) -> None:
    """Raise naming the first group that holds a NaN or an infinity."""
    finite = values.isfinite() if is_tensor(values) else np.isfinite(values)
    if not bool(finite.all()):
        bad = ~finite.reshape(-1)
        pos = int(bad.nonzero()[0][0]) if not is_tensor(bad) else int(bad.nonzero()[0, 0])
        value = float(values.reshape(-1)[pos])
        where = groups.describe(groups.group_of(pos))
        raise ValueError(
            f"{name} contains {value} in {where} (flat position {groups.caller_position(pos)}); "
            "every reward must be finite: fix or drop that group before computing advantages"
        )


def check_binary(x: Array, groups: Layout, name: str, hint: str) -> None:
    """Raise unless every value is 0 or 1."""
    bad = ((x != 0) & (x != 1)).reshape(-1)
    if bool(bad.any()):
        pos = int(bad.nonzero()[0][0]) if not is_tensor(bad) else int(bad.nonzero()[0, 0])
        group = groups.group_of(pos)
        raise ValueError(
            f"{name} must be binary (0 or 1) but holds {float(x.reshape(-1)[pos])!r} in "
            f"{groups.describe(group)}; {hint}"
        )


@dataclasses.dataclass(frozen=True)
class Returner:
    """Gives a numpy result back as the caller's kind: Python scalar, numpy or torch."""

    kind: str  # "scalar", "numpy" or "torch"
    device: Any = None
    dtype: Any = None

    def __call__(self, result: np.ndarray, *, integer: bool = False) -> Any:
        result = np.asarray(result)
        if self.kind == "scalar" and result.ndim == 0:
            return int(result) if integer else float(result)
        if self.kind == "torch":
            torch = torch_module()
            dtype = (
                torch.int64 if integer else (self.dtype if self.dtype.is_floating_point else torch.float64)
            )
            return torch.as_tensor(result, device=self.device).to(dtype)
        return result.astype(np.int64 if integer else np.float64, copy=False)


def check_not_extended(arr: np.ndarray, name: str) -> None:
    """Refuse numpy's extended precision (``longdouble``): the oracle computes in float64, and
    rounding every value of a wider input silently would be a wrong result in its dtype."""
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        raise TypeError(
            f"{name} has dtype {arr.dtype} (extended precision); sigma_ref computes in float64: pass "
            f"{name}.astype(numpy.float64), which rounds each value to the nearest float64"
        )


@dataclasses.dataclass(frozen=True)
class ForeignReturner(Returner):
    """:class:`Returner` for a caller of another array-API library (``sigma_ref._xp``)."""

    foreign: Foreign | None = None

    def __call__(self, result: np.ndarray, *, integer: bool = False) -> Any:
        assert self.foreign is not None
        return self.foreign.back(np.asarray(result), "int64" if integer else None)


def numeric(values: Any, name: str) -> tuple[np.ndarray, Returner]:
    """``values`` (a number, sequence, numpy array or torch tensor) as float64 numpy."""
    if is_tensor(values):
        check_dense_tensor(values, name)
        back = Returner("torch", values.device, values.dtype)
        return values.detach().cpu().double().numpy() + 0.0, back  # a copy, -0.0 as +0.0
    if _xp.is_foreign(values):  # jax, cupy, array_api_strict, ...
        host, foreign = _xp.to_numpy(values)
        if host.dtype.kind not in "biuf":
            raise TypeError(f"{name} has dtype {host.dtype}; pass real numbers")
        return host.astype(np.float64) + 0.0, ForeignReturner("foreign", foreign=foreign)  # -0.0 as +0.0
    if isinstance(values, (str, bytes)) or values is None:
        raise TypeError(f"{name}={values!r} must be a number or an array of numbers")
    kind = "scalar" if isinstance(values, numbers.Number) else "numpy"
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):
        raise TypeError(f"{name}={values!r} could not be read as an array of numbers") from None
    if arr.dtype.kind not in "biuf" or (arr.dtype.kind == "b" and kind == "scalar"):
        raise TypeError(f"{name}={short(values)} must be real numbers, got dtype {arr.dtype}")
    check_not_extended(arr, name)
    out = arr.astype(np.float64)  # a copy: adding +0.0 turns -0.0 into +0.0 (1 / -0.0 is -inf)
    out += 0.0
    return out, Returner(kind)


def check_probability(p: np.ndarray, name: str = "p", *, open_interval: bool = False) -> None:
    """Raise unless every entry is in [0, 1] (or (0, 1))."""
    if p.size == 0:
        raise ValueError(f"{name} is empty; pass at least one probability")
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    if bad.any():
        raise ValueError(
            f"{name}={float(p[bad].reshape(-1)[0])!r} is outside [0, 1]; {name} is a success "
            "probability (a pass rate), e.g. 0.25"
        )
    if open_interval:
        edge = (p == 0) | (p == 1)
        if edge.any():
            value = float(p[edge].reshape(-1)[0])
            raise ValueError(
                f"{name}={value!r} has no finite group size: a prompt that always or never "
                "succeeds gives a zero update for every G; pass 0 < p < 1"
            )


def check_group_size(G: np.ndarray, name: str = "G", *, minimum: int = 2) -> None:
    """Raise unless every entry is an integer >= ``minimum``."""
    if G.size == 0:
        raise ValueError(f"{name} is empty")
    bad_int = ~np.isfinite(G) | (G != np.round(G))
    if bad_int.any():
        raise TypeError(f"{name}={float(G[bad_int].reshape(-1)[0])!r} must be an integer group size")
    small = G < minimum
    if small.any():
        raise ValueError(
            f"{name}={int(G[small].reshape(-1)[0])} is too small: a group needs at least "
            f"{minimum} responses for a non-zero reward std; use {name} >= {minimum}"
        )


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """``epsilon`` as a float in (0, 1), or raise."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"{name}={epsilon!r} must be a float in (0, 1), e.g. 0.05")
    value = float(epsilon)
    if not (0 < value < 1):
        raise ValueError(
            f"{name}={value!r} is outside (0, 1); it is the tolerated loss of gradient "
            "fidelity, e.g. 0.05 for 95%"
        )
    return value


def per_group(values: Array, groups: Layout) -> Array:
    """A per-group ``[n_groups, ...]`` result in the caller's per-group shape."""
    return groups.per_group(values)
