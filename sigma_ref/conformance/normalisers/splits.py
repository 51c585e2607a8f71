"""Uneven splits (:data:`SIZES`) and the accumulation reading (:data:`READINGS`): how a batch is cut
into ranks and micro-batches, and the gradient under each reading of the trainer's scaling.

>>> uneven_sizes(6, 3), readings([2.0], 2, "none")["mean-over-micro-batches"].tolist()
([1, 2, 3], [1.0])
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from ..._options import LOSS_SCALES, SPLIT_SIZES

#: How a batch is cut into ranks and micro-batches (module doc; ``--split-sizes``).
SIZES: tuple[str, ...] = SPLIT_SIZES
#: The two readings of the trainer's accumulation scaling (``--loss-scale``).
READINGS: tuple[str, ...] = LOSS_SCALES

#: Relative tolerance of a match: float64 throughout, only summation order separates an exact
#: prediction from the measured gradient (the scale-out check's own ``_RTOL``; a loss computed in
#: float32 is matched at the scale-out check's float32 tolerance, passed as ``rtol``).
_RTOL = 1e-8


def uneven_sizes(n: int, parts: int) -> list[int]:
    """Sizes of ``parts`` consecutive pieces of ``n`` items, about proportional to ``1, 2, ..., parts``.

    Every piece holds at least one item; the cumulative sizes are ``round(n * j (j + 1) /
    (parts (parts + 1)))`` pushed apart where rounding would leave a piece empty.

    >>> uneven_sizes(12, 2), uneven_sizes(4, 2), uneven_sizes(6, 4), uneven_sizes(5, 1)
    ([4, 8], [1, 3], [1, 1, 2, 2], [5])
    """
    if not isinstance(parts, int) or parts < 1:
        raise ValueError(f"parts={parts!r} must be a positive int")
    if not isinstance(n, int) or n < parts:
        raise ValueError(f"n={n!r} must be an int >= parts={parts}: every piece needs an item")
    total = parts * (parts + 1) // 2
    ends: list[int] = []
    for j in range(1, parts + 1):
        target = round(Fraction(n * j * (j + 1), 2 * total))
        low = (ends[-1] if ends else 0) + 1
        high = n - (parts - j)
        ends.append(min(max(target, low), high))
    return [e - s for s, e in zip([0, *ends[:-1]], ends, strict=True)]


def split_pieces(n: int, parts: int, sizes: str) -> list[npt.NDArray[np.int64]]:
    """Positions ``0 .. n - 1`` in ``parts`` consecutive pieces, ``equal`` or ``uneven`` (:data:`SIZES`).

    >>> [p.tolist() for p in split_pieces(5, 2, "uneven")]
    [[0, 1], [2, 3, 4]]
    """
    if sizes not in SIZES:
        raise ValueError(f"sizes={sizes!r} must be one of {SIZES}")
    positions = np.arange(n, dtype=np.int64)
    if sizes == "equal" or parts > n:
        return list(np.array_split(positions, parts))
    return list(np.split(positions, np.cumsum(uneven_sizes(n, parts))[:-1]))


def readings(grad: npt.ArrayLike, micro_batches: int, measured_under: str) -> dict[str, np.ndarray]:
    """The gradient under each accumulation reading, from one measured under ``measured_under``.

    Back-propagation is linear: dividing each micro-batch's loss by M divides the accumulated
    gradient by M. So ``g_none = M g_mean`` exactly.

    >>> readings([2.0, 4.0], 2, "none")["mean-over-micro-batches"].tolist()
    [1.0, 2.0]
    """
    if measured_under not in READINGS:
        raise ValueError(f"measured_under={measured_under!r} must be one of {READINGS}")
    g = np.asarray(grad, dtype=np.float64)
    g_none = g * micro_batches if measured_under == "mean-over-micro-batches" else g
    return {"none": g_none, "mean-over-micro-batches": g_none / micro_batches}


def _close(g: np.ndarray, pred: np.ndarray, rtol: float = _RTOL) -> bool:
    return float(np.linalg.norm(g - pred)) <= rtol * max(float(np.linalg.norm(pred)), 1e-300)


def _rel(g: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(g - ref)) / max(float(np.linalg.norm(ref)), 1e-300)


_NEEDS = {
    "none": "the trainer adds the micro-batch gradients undivided (the loss normalises over the whole step)",
    "mean-over-micro-batches": "the trainer divides each micro-batch loss by M (the Hugging Face Trainer "
    "without num_items_in_batch, DeepSpeed's 1/gas)",
}


def judge_reading(
    grad: npt.ArrayLike, reference: npt.ArrayLike, micro_batches: int, declared: str, *, rtol: float = _RTOL
) -> tuple[np.ndarray, str, str]:
    """The gradient under the reading the loss is right under, that reading, and the words for a report.

    ``grad`` was measured under the ``declared`` reading. Under the reading that makes it equal
    ``reference`` (the declared one when both do, i.e. ``M = 1``) it is returned with
    ``"; right under loss_scale=..."``; when neither does, under the declared reading with ``""``.

    >>> g, reading, words = judge_reading([4.0, 8.0], [2.0, 4.0], 2, "none")
    >>> reading, g.tolist()
    ('mean-over-micro-batches', [2.0, 4.0])
    """
    reads = readings(grad, micro_batches, declared)
    ref = np.asarray(reference, dtype=np.float64)
    if micro_batches == 1:
        return reads[declared], declared, ""
    right = [r for r in READINGS if _rel(reads[r], ref) <= rtol]
    if not right:
        return reads[declared], declared, ""
    reading = declared if declared in right else right[0]
    words = f"; right under loss_scale={reading!r}: {_NEEDS[reading]}"
    if reading != declared:
        c = float(reads[declared] @ ref) / float(ref @ ref)
        words += (
            f". Declared loss_scale={declared!r}, under which it is {c:.3g}x: if the trainer does that, "
            "its update is off by that factor"
        )
    return reads[reading], reading, words
