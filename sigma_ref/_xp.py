"""Private: arrays of other array-API libraries at the oracle's boundary (jax, cupy, array_api_strict, ...).

The oracle's statistics are written once, for numpy and torch (``sigma_ref._layouts``,
``sigma_ref._roundtrip``). An array of any other library that implements the array API standard (it has
``__array_namespace__``; numpy and torch keep their own paths) makes the round trip here:

* in: :func:`to_numpy` copies it to the host as a numpy array (``numpy.from_dlpack``, zero
  copy for CPU arrays; ``numpy.asarray`` or cupy's ``.get()`` for arrays on an accelerator), so
  the statistics run in float64 exactly as for a numpy caller (the same bits);
* out: :meth:`Foreign.back` rounds the float64 result once to the caller's dtype (directly:
  a bfloat16 caller gets ``float64 -> bfloat16``, not via float32) and gives it back in the
  caller's library on the caller's device (``xp.asarray(..., device=...)``).

What a library lacks:

* jax has no in-place updates: nothing here needs them, the oracle writes only to its own
  numpy buffers, never to the caller's array (jax arrays are immutable anyway).
* jax holds no float64 unless ``jax_enable_x64`` is set: the statistics are still computed in
  float64 on the host, and a float64 result (an integer or boolean caller's advantages, the
  float64 fields of ``GroupStatistics``) comes back as jax's default float, float32: one
  rounding of the float64 value, as a float32 torch caller gets. Integer results (``k``,
  ``G``, group numbers) come back as jax's default integer (int32 without x64).
* a library without bfloat16 or float16 (array_api_strict) never hands the oracle one.
* arrays on an accelerator (cupy, jax on a GPU) are computed on the host and copied back to
  their device: correct, not fast (torch CUDA tensors keep their on-device path).

>>> import array_api_strict as xs
>>> import sigma_ref
>>> a = sigma_ref.grpo_advantage(xs.asarray([[1.0, 0.0, 0.0, 0.0]]))
>>> type(a).__module__.split(".")[0], a.dtype == xs.float64
('array_api_strict', True)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["Foreign", "is_foreign", "to_numpy", "numpy_dtype"]


#: Types that are never foreign arrays, answered without a look-up (the scalar fast path).
_PLAIN: frozenset[type] = frozenset({int, float, bool, list, tuple, np.ndarray, np.float64, np.int64})


def is_foreign(value: Any) -> bool:
    """Whether ``value`` is an array of an array-API library other than numpy and torch."""
    kind = type(value)
    if kind in _PLAIN or not hasattr(kind, "__array_namespace__"):
        return False
    if isinstance(value, np.ndarray | np.generic):
        return False
    return kind.__module__.partition(".")[0] != "torch"


def numpy_dtype(dtype: Any) -> np.dtype[Any]:
    """A library's dtype as numpy's (``array_api_strict.float32`` -> ``float32``; jax's bfloat16
    is ml_dtypes' bfloat16, which numpy holds)."""
    found: np.dtype[Any]
    try:
        found = np.dtype(dtype)
    except TypeError:
        name = str(dtype).rpartition(".")[2]
        try:
            found = np.dtype(name)
        except TypeError:
            import ml_dtypes  # the extension dtypes jax uses: bfloat16, float8_*

            found = np.dtype(getattr(ml_dtypes, name))
    return found


def is_floating(dtype: np.dtype[Any]) -> bool:
    """Real floating, numpy's own or an ml_dtypes extension (bfloat16's numpy kind is ``"V"``)."""
    return dtype.kind == "f" or (dtype.kind == "V" and dtype.name.startswith(("bfloat", "float")))


@dataclasses.dataclass(frozen=True)
class Foreign:
    """Where a foreign array came from: its namespace, device and dtype (numpy's name for it)."""

    xp: Any
    device: Any
    dtype: np.dtype[Any]

    def back(self, result: Any, kind: str | None = None) -> Any:
        """``result`` (numpy, or a CPU torch tensor) in the caller's library, on its device.

        ``kind`` ``None``: the caller's floating dtype (float64 for an integer or boolean
        caller); ``"float64"``, ``"int64"`` or ``"bool"`` force one (the library's default
        float and integer where it lacks the 64-bit ones: jax without x64).
        """
        if not isinstance(result, np.ndarray | np.generic):
            result = result.detach().cpu().numpy()  # a torch tensor (the identity computes in torch)
        if kind is not None:
            target = np.dtype(kind)
        else:
            target = self.dtype if is_floating(self.dtype) else np.dtype(np.float64)
        host = np.ascontiguousarray(np.asarray(result).astype(target, copy=False))
        return self.xp.asarray(host, device=self.device)


def to_numpy(value: Any) -> tuple[np.ndarray, Foreign]:
    """A foreign array as a numpy array on the host (read only; a view where the library allows)
    and where it came from. Extension floats numpy computes nothing in (bfloat16, float8) are
    widened to float32, exactly."""
    import array_api_compat

    xp = array_api_compat.array_namespace(value)
    device = array_api_compat.device(value)
    dtype = numpy_dtype(value.dtype)
    try:
        arr = np.from_dlpack(value)
    except (BufferError, TypeError, RuntimeError, ValueError):  # on an accelerator, or a dtype DLPack lacks
        getter = getattr(value, "get", None)  # cupy: an explicit device-to-host copy
        arr = np.asarray(getter() if callable(getter) else value)
    if arr.dtype.kind not in "biufc":
        arr = arr.astype(np.float32)  # bfloat16 and friends: every value is a float32
    return arr, Foreign(xp, device, dtype)
