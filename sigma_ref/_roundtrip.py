"""Private: input in, result out the same way (the round trip of the caller's array library).

:func:`as_float64` reads rewards as float64 in their own library (numpy stays numpy, torch stays
torch on its device, other array-API libraries go through ``sigma_ref._xp``) and returns a
:class:`Backend` whose :meth:`Backend.out` gives a result back in the caller's type, device and
dtype. :func:`numeric` is the same for the closed forms' scalar-or-array arguments (always
numpy inside), with a :class:`Returner`.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import numpy as np

from . import _xp
from ._errors import short
from ._tensors import Array, is_tensor, torch_module
from ._validate import check_dense_tensor, check_not_extended
from ._xp import Foreign


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
