"""How a DAPO keep-mask filter reads: what it counts ``k`` on, and how a per-group result is ordered.

Both are detected from designed probes when an :class:`~.adapter.Adapter` does not declare them
(``keep_metric``, ``keep_order``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from .batch import Batch
from .layouts import _BY_INDEX

if TYPE_CHECKING:
    from .adapter import Adapter

__all__ = ["ACCURACY_THRESHOLD", "detect_keep_metric", "detect_keep_order"]


#: A response is correct (accuracy 1) iff its reward exceeds this, for a filter whose k is counted
#: on the accuracy (``keep_metric="accuracy"``). The suite's shaped probes are the accuracy plus a
#: shaping bonus in [0, 0.5), so ``R > 0.5`` and ``R >= 1`` (correctness plus a format bonus) agree
#: on them.
ACCURACY_THRESHOLD = 0.5

#: The keep-metric probe: shaped rewards (accuracy + a bonus in [0, 0.5)) in three contiguous
#: groups of two (every layout takes it): all right but differing, all wrong but differing, mixed.
#: The reward's rule keeps all three groups, the accuracy's only the last.
_METRIC_PROBE = Batch.grouped([[1.1, 1.0], [0.1, 0.0], [1.25, 0.2]])


def detect_keep_metric(adapter: Adapter) -> str:
    """What a keep-mask filter counts k on: ``accuracy`` (``R > ACCURACY_THRESHOLD``) or ``reward``.

    On :data:`_METRIC_PROBE` the two rules differ in every group but one: a result that is the
    accuracy's rule is ``accuracy``; anything else reads as ``reward`` (the default rule, which
    ``keep_mask_rule`` then checks and reports).
    """
    from ..advantages import dapo_keep_mask

    accuracy = (_METRIC_PROBE.rewards > ACCURACY_THRESHOLD).astype(np.float64)
    want = np.asarray(dapo_keep_mask(accuracy, index=_METRIC_PROBE.index)).astype(bool)
    got = adapter.keep(_METRIC_PROBE).numpy().astype(bool)
    return "accuracy" if got.shape == want.shape and bool((got == want).all()) else "reward"


def detect_keep_order(adapter: Adapter) -> str:
    """How a keep-mask filter orders its result: ``response``, ``first-seen`` or ``sorted``.

    The probe has ids 7, 3, 7, 3, 5, 5 (first-seen order 7, 3, 5; sorted 3, 5, 7) and only
    group 7 live, so the three readings of the result differ. A filter of a contiguous layout
    (``rewards.view(-1, G)``) takes no ids: its groups are positional, so first-seen and sorted are
    one order and no probe is made (interleaved ids would not fit its layout).
    """
    if adapter.layout not in _BY_INDEX:
        return "first-seen"
    probe = Batch(np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), np.array([7, 3, 7, 3, 5, 5]))
    out = adapter.flat(adapter._keep_call(probe, torch.tensor(probe.rewards))).to("cpu").bool().tolist()
    if len(out) == probe.n:
        return "response"
    if out == [True, False, False]:
        return "first-seen"
    if out == [False, False, True]:
        return "sorted"
    return "first-seen"  # unreadable: the keep property reports the values it got
