"""Private: input checks, numpy/torch round trips, and group layouts as segments.

Every per-group computation in the oracle runs here in torch float64 on the input's
device, whatever the caller passed: numpy arrays go in through ``torch.from_numpy``
and come back with ``.numpy()``. Both layouts (``[..., G]`` along ``dim``, and flat
``[N]`` with a group ``index``) become one flat vector plus an ``inverse`` map from
element to group, so there is a single segment-reduction code path and no Python loop
over groups or elements.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import numpy as np
import torch

Array = Any  # numpy.ndarray | torch.Tensor

_MAX_SHOWN = 8


def short(value: Any) -> str:
    """A short repr of a value for error messages."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)
        body = ", ".join(f"{v:g}" if isinstance(v, float) else repr(v) for v in flat[:_MAX_SHOWN].tolist())
        more = ", ..." if flat.size > _MAX_SHOWN else ""
        return f"array(shape={tuple(value.shape)}, [{body}{more}])"
    return repr(value)


@dataclasses.dataclass(frozen=True)
class Backend:
    """Where an input came from, so results go back the same way."""

    is_torch: bool
    device: torch.device
    dtype: Any  # the output dtype: numpy dtype or torch dtype

    def out(self, x: torch.Tensor, kind: str | None = None) -> Array:
        """``x`` (a torch result) as the caller's type and device.

        ``kind`` ``None`` keeps the caller's floating dtype; ``"float64"``, ``"int64"``
        or ``"bool"`` force one.
        """
        if self.is_torch:
            dtype = self.dtype if kind is None else getattr(torch, kind)
            return x.to(device=self.device, dtype=dtype)
        dtype = self.dtype if kind is None else np.dtype(kind)
        return x.detach().cpu().numpy().astype(dtype, copy=False)


def as_float64(values: Any, name: str, *, allow_bool: bool = True) -> tuple[torch.Tensor, Backend]:
    """``values`` as a float64 tensor (a copy: the input is never touched) and its backend.

    Floating inputs keep their dtype on the way out; integer and boolean inputs come
    back as float64.
    """
    if isinstance(values, torch.Tensor):
        if values.is_complex():
            raise TypeError(f"{name} has dtype {values.dtype}; pass real numbers (float, int or bool)")
        out_dtype = values.dtype if values.dtype.is_floating_point else torch.float64
        backend = Backend(True, values.device, out_dtype)
        return values.detach().to(torch.float64).clone(), backend
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
    out_dtype = arr.dtype if arr.dtype.kind == "f" else np.dtype(np.float64)
    tensor = torch.from_numpy(np.array(arr, dtype=np.float64, copy=True))
    return tensor, Backend(False, torch.device("cpu"), out_dtype)


@dataclasses.dataclass(frozen=True)
class Groups:
    """A group layout as segments of a flat vector.

    ``inverse[i]`` is the group of flat element ``i``; ``sizes[j]`` the size of group
    ``j``. For the ``[..., G]`` layout the groups are the rows of the array with ``dim``
    moved last (``batch_shape`` is ``[...]``); for the index layout they are the sorted
    unique ids (``ids``).
    """

    inverse: torch.Tensor
    sizes: torch.Tensor
    n_groups: int
    ids: np.ndarray | None
    batch_shape: tuple[int, ...] | None
    dim: int

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """Per-group sums of ``x`` (``[N]`` or ``[N, d]``)."""
        out = x.new_zeros((self.n_groups, *x.shape[1:]))
        return out.index_add_(0, self.inverse, x)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """Per-group means of ``x``."""
        sizes = self.sizes.reshape(-1, *([1] * (x.dim() - 1)))
        return self.sum(x) / sizes

    def all_equal(self, x: torch.Tensor) -> torch.Tensor:
        """Per group: True where every value of the group is equal (exactly)."""
        lo = x.new_full((self.n_groups,), math.inf).scatter_reduce(0, self.inverse, x, "amin")
        hi = x.new_full((self.n_groups,), -math.inf).scatter_reduce(0, self.inverse, x, "amax")
        return lo == hi

    def describe(self, group: int) -> str:
        """Human name of group number ``group`` for error messages."""
        if self.ids is not None:
            gid = self.ids[group]
            gid = gid.item() if isinstance(gid, np.generic) else gid  # 'a', not np.str_('a')
            return f"group with index id {gid!r}"
        if self.batch_shape:
            where = np.unravel_index(group, self.batch_shape)
            return f"group at batch position {tuple(int(w) for w in where)}"
        return "the group"


def flatten_grouped(x: torch.Tensor, dim: int, name: str) -> tuple[torch.Tensor, Groups]:
    """Rows along ``dim`` of ``x`` as groups; returns the flat values and the layout."""
    if x.dim() == 0:
        raise ValueError(f"{name} is a scalar; pass a [..., G] array of rewards (one group per row)")
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise TypeError(f"dim={dim!r} must be an int")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(
            f"dim={dim} is out of range for {name} with shape {tuple(x.shape)}; "
            f"use {-x.dim()} <= dim < {x.dim()} (the axis that holds each group's responses)"
        )
    moved = torch.movedim(x, dim, -1)
    batch_shape = tuple(moved.shape[:-1])
    size = moved.shape[-1]
    n_groups = math.prod(batch_shape)
    inverse = torch.arange(n_groups, device=x.device).repeat_interleave(size)
    sizes = torch.full((n_groups,), float(size), dtype=torch.float64, device=x.device)
    groups = Groups(inverse, sizes, n_groups, None, batch_shape, int(dim) % x.dim())
    return moved.reshape(-1), groups


def unflatten_grouped(flat: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Inverse of :func:`flatten_grouped`."""
    assert groups.batch_shape is not None
    shaped = flat.reshape(*groups.batch_shape, -1)
    return torch.movedim(shaped, -1, groups.dim)


def factorize(index: Any, n: int, device: torch.device) -> Groups:
    """Group ids (any hashables, or integers) of a flat batch of ``n`` as segments."""
    if isinstance(index, torch.Tensor):
        index = index.detach().cpu().numpy()
    if isinstance(index, (str, bytes)):
        raise TypeError(f"index={index!r} must be a sequence of group ids, one per reward")
    if isinstance(index, np.ndarray):
        if index.ndim != 1:
            raise TypeError(
                f"index has shape {index.shape}; pass a one-dimensional array of group ids, one per reward"
            )
        ids = index
    else:
        try:
            ids = np.asarray(index)
        except (ValueError, TypeError):  # e.g. tuples of different lengths
            ids = None
        if ids is None or ids.ndim != 1:
            try:  # e.g. a list of tuples: one hashable id each
                ids = np.fromiter(index, dtype=object)
            except TypeError:
                raise TypeError(
                    f"index={short(index)} must be a sequence of group ids, one per reward"
                ) from None
    if ids.shape[0] != n:
        raise ValueError(
            f"index has {ids.shape[0]} entries but rewards has {n}; pass one group id per reward"
        )
    if ids.dtype.kind == "f" and np.isnan(ids).any():
        raise ValueError("index contains NaN; group ids must be comparable values")
    try:
        unique, inverse = np.unique(ids, return_inverse=True)
    except TypeError:  # ids that hash but do not sort: factorize through a dict
        table: dict[Any, int] = {}
        inverse = np.fromiter(
            (table.setdefault(v, len(table)) for v in ids.tolist()), dtype=np.int64, count=n
        )
        unique = np.empty(len(table), dtype=object)
        unique[:] = list(table)
    inverse_t = torch.as_tensor(inverse.reshape(-1), dtype=torch.int64, device=device)
    sizes = torch.bincount(inverse_t, minlength=len(unique)).to(torch.float64)
    return Groups(inverse_t, sizes, len(unique), unique, None, 0)


def layout(x: torch.Tensor, index: Any, dim: int, name: str) -> tuple[torch.Tensor, Groups]:
    """Flatten ``x`` into segments for either layout."""
    if x.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); pass at least one group")
    if index is None:
        return flatten_grouped(x, dim, name)
    if x.dim() != 1:
        raise ValueError(
            f"{name} has shape {tuple(x.shape)} but index= is given; the index layout takes "
            f"a flat [N] {name} (or drop index= to group along dim)"
        )
    return x, factorize(index, x.shape[0], x.device)


def restore(flat: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Put a flat per-element result back in the caller's layout."""
    if groups.ids is None:
        return unflatten_grouped(flat, groups)
    return flat


def per_group(values: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Reshape a per-group ``[n_groups, ...]`` result to ``[..., ...]`` for the grouped layout."""
    if groups.ids is None:
        return values.reshape((*groups.batch_shape, *values.shape[1:]))  # type: ignore[misc]
    return values


def check_finite(x: torch.Tensor, groups: Groups, name: str) -> None:
    """Raise naming the first group that holds a NaN or an infinity."""
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        pos = int(torch.nonzero(bad)[0, 0])
        group = int(groups.inverse[pos])
        value = float(x[pos])
        raise ValueError(
            f"{name} contains {value} in {groups.describe(group)} (flat position {pos}); "
            "every reward must be finite: fix or drop that group before computing advantages"
        )


def check_binary(x: torch.Tensor, groups: Groups, name: str, hint: str) -> None:
    """Raise unless every value is 0 or 1."""
    bad = (x != 0) & (x != 1)
    if bool(bad.any()):
        pos = int(torch.nonzero(bad)[0, 0])
        group = int(groups.inverse[pos])
        raise ValueError(
            f"{name} must be binary (0 or 1) but holds {float(x[pos])!r} in {groups.describe(group)}; {hint}"
        )


@dataclasses.dataclass(frozen=True)
class Returner:
    """Gives a numpy result back as the caller's kind: Python scalar, numpy or torch."""

    kind: str  # "scalar", "numpy" or "torch"
    device: torch.device | None = None
    dtype: Any = None

    def __call__(self, result: np.ndarray, *, integer: bool = False) -> Any:
        result = np.asarray(result)
        if self.kind == "scalar" and result.ndim == 0:
            return int(result) if integer else float(result)
        if self.kind == "torch":
            dtype = (
                torch.int64 if integer else (self.dtype if self.dtype.is_floating_point else torch.float64)
            )
            return torch.as_tensor(result, device=self.device).to(dtype)
        return result.astype(np.int64 if integer else np.float64, copy=False)


def numeric(values: Any, name: str) -> tuple[np.ndarray, Returner]:
    """``values`` (a number, sequence, numpy array or torch tensor) as float64 numpy."""
    if isinstance(values, torch.Tensor):
        if values.is_complex():
            raise TypeError(f"{name} has dtype {values.dtype}; pass real numbers")
        back = Returner("torch", values.device, values.dtype)
        return values.detach().cpu().to(torch.float64).numpy(), back
    if isinstance(values, (str, bytes)) or values is None:
        raise TypeError(f"{name}={values!r} must be a number or an array of numbers")
    kind = "scalar" if isinstance(values, numbers.Number) else "numpy"
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):
        raise TypeError(f"{name}={values!r} could not be read as an array of numbers") from None
    if arr.dtype.kind not in "biuf" or (arr.dtype.kind == "b" and kind == "scalar"):
        raise TypeError(f"{name}={short(values)} must be real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64), Returner(kind)


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
