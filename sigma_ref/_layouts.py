"""Private: group layouts, the reducers the statistics are written against.

A group layout is a small reducer object with one interface for numpy and torch: :class:`Rows`
for ``[..., G]`` (the groups are rows of a ``[B, G]`` view, stored as a ``[G, B]`` array;
reductions along the first axis, no scatter), :class:`Segments` for a flat ``[N]`` batch with an
``index`` (reductions by group number with ``bincount``/``index_add``). :func:`arrange` is the
advantages' entry point (either layout), :func:`layout` the identity's (always
:class:`Segments`). The statistics are written once against that interface
(``sigma_ref.advantages``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import numpy as np

from ._factorize import UnsortableError, factorize, factorize_by_value
from ._tensors import Array, is_tensor, torch_module

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
            rank = factorize_by_value(self.ids.tolist(), sortable_only=True)[0]  # sorted rank
        except UnsortableError:  # the groups' first positions
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


def per_group(values: Array, groups: Layout) -> Array:
    """A per-group ``[n_groups, ...]`` result in the caller's per-group shape."""
    return groups.per_group(values)
