"""Dynamic-sampling filters beyond ``0 < k < G``: a band on the group's mean score, a std threshold.

DAPO keeps a group iff it is not silent (:func:`sigma_ref.dapo_keep_mask`, ``0 < k < G`` for binary
scores). Trainers' filters add rules on the same per-group statistics (:func:`sigma_ref.group_statistics`
of the filter's metric: the accuracy or the shaped reward):

* ``band=(lo, hi)``: keep only groups whose mean score lies strictly inside ``(lo, hi)`` (e.g.
  ``(0.1, 0.9)``: drop groups that are almost all right or all wrong);
* ``min_std=t``: keep only groups whose population std exceeds ``t``.

A kept group is never silent (a silent group's std is 0 and it is dropped first), and a group of
one is never kept, as under ``dapo_keep_mask``.

>>> import numpy as np
>>> from sigma_ref.filters import filter_keep_mask
>>> acc = np.array([[1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
>>> filter_keep_mask(acc, band=(0.25, 0.9))[:, 0].tolist()
[False, True, False]
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import numpy.typing as npt

from .advantages import dapo_keep_mask, group_statistics
from .conventions import PAPER

__all__ = ["filter_keep_mask", "check_band", "check_min_std"]


def check_band(band: Any, *, name: str = "band") -> tuple[float, float] | None:
    """``band`` as ``(lo, hi)`` floats with ``lo < hi``, or ``None``; a ValueError names the fix.

    >>> check_band((0.1, 0.9))
    (0.1, 0.9)
    """
    if band is None:
        return None
    try:
        lo, hi = (float(x) for x in band)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={band!r} must be a pair (lo, hi) of numbers, e.g. (0.1, 0.9)") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"{name}={band!r} must have finite lo < hi: keep groups with lo < mean < hi")
    return lo, hi


def check_min_std(min_std: Any, *, name: str = "min_std") -> float | None:
    """``min_std`` as a float ``>= 0``, or ``None``; a ValueError names the fix.

    >>> check_min_std(0.05)
    0.05
    """
    if min_std is None:
        return None
    if isinstance(min_std, bool) or not isinstance(min_std, numbers.Real):
        raise ValueError(f"{name}={min_std!r} must be a number >= 0 (a std threshold), e.g. 0.05")
    value = float(min_std)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}={min_std!r} must be finite and >= 0 (a std threshold), e.g. 0.05")
    return value


def filter_keep_mask(
    scores: Any,
    *,
    index: Any = None,
    band: tuple[float, float] | None = None,
    min_std: float | None = None,
) -> npt.NDArray[np.bool_]:
    """Keep a response iff its group is not silent (``dapo_keep_mask``), ``lo < mu < hi`` for
    ``band=(lo, hi)``, and ``sigma > min_std``: ``mu`` and ``sigma`` the group's mean and population
    std of ``scores`` (:func:`sigma_ref.group_statistics`). With neither rule it is ``dapo_keep_mask``.
    Returns a bool numpy array shaped like ``scores`` (``[N]`` with ``index=``, or ``[..., G]``).

    >>> import numpy as np
    >>> filter_keep_mask(np.array([0.5, 0.52, 0.0, 1.0]), index=[0, 0, 1, 1], min_std=0.05).tolist()
    [False, False, True, True]
    """
    lohi = check_band(band)
    threshold = check_min_std(min_std)
    keep = np.asarray(dapo_keep_mask(scores, index=index)).astype(bool)
    if lohi is None and threshold is None:
        return keep
    values = np.asarray(scores.detach().cpu().double().numpy() if hasattr(scores, "detach") else scores)
    st = group_statistics(values.astype(np.float64), convention=PAPER.replace(singleton="zero"), index=index)
    mean = np.asarray(st.expand(st.mean), dtype=np.float64)
    sigma = np.asarray(st.expand(st.sigma), dtype=np.float64)
    if lohi is not None:
        keep &= (mean > lohi[0]) & (mean < lohi[1])
    if threshold is not None:
        keep &= sigma > threshold
    return keep
