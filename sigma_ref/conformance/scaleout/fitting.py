"""How a gradient is measured against a reference: the least-squares factor ``c`` (:func:`_fit`), its
words (:func:`_scale`), and the tolerance by the loss's working precision (:func:`prediction_rtol`).

>>> _scale(*_fit(np.array([1.0, 2.0]), np.array([2.0, 4.0]))[:2])
'0.5x'
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np

from ..precision import PRECISIONS

_RTOL = 1e-8  # float64 throughout: only summation order separates a correct split from the full batch

#: The relative tolerance of every gradient comparison by the loss's working precision
#: (``loss_precision``): float64, only summation order separates a correct split from the full batch
#: (``1e-8``); a loss computed in float32 (tunix casts its log-probs, advantages and per-token loss to
#: float32) rounds every ``A_i w_it`` to float32: 64 units of float32's roundoff ``2**-24``, the
#: bound levels 0 to 4 read a float32 loss's gradient with (``loss_precision.py``).
LOSS_PRECISION_RTOL: dict[str, float] = {"float64": _RTOL, "float32": 64 * PRECISIONS["float32"]}


def prediction_rtol(loss_precision: str) -> float:
    """The relative tolerance of the gradient against the aggregation's prediction, for a loss
    computed at ``loss_precision``: float64's ``1e-8`` (summation order only), else ``64 u`` of the
    precision (:mod:`~.loss_precision`'s rule: a cast on the gradient's path rounds each
    ``A_i w_it`` once); a split's normalisers round differently from the full batch's, so the split
    is held to the full batch within the same tolerance. A normaliser bug moves the gradient by an
    O(1) factor, far above either.

    >>> prediction_rtol("float64"), prediction_rtol("float32")
    (1e-08, 3.814697265625e-06)
    """
    if loss_precision not in LOSS_PRECISION_RTOL:
        raise ValueError(
            f"loss_precision={loss_precision!r} must be one of {tuple(LOSS_PRECISION_RTOL)} (a loss's "
            "working precision; levels 0-4 judge coarser ones at float32)"
        )
    return LOSS_PRECISION_RTOL[loss_precision]


#: ``(c, residual, error)`` of :func:`_fit`.
_Fit: TypeAlias = "tuple[float, float, float]"


def _fit(g: np.ndarray, ref: np.ndarray) -> _Fit:
    """``(c, residual, error)``: ``g ~ c ref`` by least squares, what c leaves, ``|g - ref|/|ref|``."""
    rr = float(ref @ ref)
    c = float(g @ ref) / rr if rr > 0 else float("nan")
    resid = float(np.linalg.norm(g - c * ref) / max(np.linalg.norm(g), 1e-300))
    err = float(np.linalg.norm(g - ref) / max(np.linalg.norm(ref), 1e-300))
    return c, resid, err


def _scale(c: float, resid: float, *, detail: bool = True) -> str:
    """``0.5x``, or ``~2.3x (...)`` when no single factor explains the gradient."""
    if resid <= 1e-6:
        return f"{c:.3g}x"
    return f"~{c:.3g}x" + (
        f" (best scalar fit; {resid:.0%} of the gradient is not a multiple of it)" if detail else ""
    )
