"""Level 5's normaliser patterns: uneven splits, the accumulation reading, the normaliser a gradient used.

The scale-out check (:mod:`sigma_ref.conformance.scaleout`) splits a designed batch over W
ranks and M micro-batches and compares the accumulated, rank-averaged gradient with the
full-batch one. This module holds what turns a mismatch into a named bug class:

**Uneven splits** (:data:`SIZES`, the knob verl calls ``use_dynamic_bsz`` and TRL fixes with
``per_device_train_batch_size``): with ``sizes="uneven"`` (the default) rank ``r`` holds a
share of the groups proportional to ``r + 1`` and micro-batch ``j`` a share of the rank's rows
proportional to ``j + 1`` (:func:`uneven_sizes`), so ranks and micro-batches hold different
numbers of responses *and* tokens: every per-piece normaliser differs from the global one and
a mean of per-piece means is not the global mean. ``sizes="equal"`` keeps equal response
counts (``np.array_split``), as a trainer with a fixed per-device batch does.

**The accumulation reading** (:data:`READINGS`, issue 26): whether the trainer divides each
micro-batch's loss by M is outside the loss. Back-propagation is linear, so the gradient under
the reading ``mean-over-micro-batches`` is exactly ``1/M`` times the one under ``none``; the
check measures one and judges both (:func:`readings`), reports the reading the loss is right
under, and fails only when it is right under neither. A user's declaration (``--loss-scale``)
never changes a verdict; it is reported beside the reading the loss needs.

**Normaliser hypotheses** (:data:`HYPOTHESES`): the per-token weight of the gradient a split
accumulates is the oracle's :func:`~sigma_ref.objectives.effective_weights`,
``w_eff_it = (tau / W) * w_mode(counts of the scope of i)_it`` (``proofs/12_scale_out.py``),
for a counting *scope* (the whole step, the rank's shard, the micro-batch, the generation
batch) and a total scale ``tau`` (``W`` when the loss multiplies by the world size and nothing
divides, ``W / M`` when M divides on top, ``1`` without the world size, ...). Each hypothesis
predicts the whole gradient vector ``-sum_it w_eff_it A_i grad log pi(y_it)`` of the designed
batch (:class:`Probe`: its token scores, advantages, mask, prompts and outside counts) at every
configuration the check ran ((W, M) and its probes (1, M), (1, M + 1), (W, 1)); a class is
named only when its prediction equals the measured gradient at every one of them
(:func:`identify`), so a cause is printed only when the probes confirm it. Under ``prompt-mean``
both of its counts (the prompts ``P`` and each prompt's tokens) are taken over the scope
(:func:`~sigma_ref.objectives.prompt_mean_effective_weights`), and one class is its own: a
prompt's tokens counted per micro-batch with the step's ``P``.

**Aggregation folded into the advantages** (:data:`ADVANTAGE_SCALE_MODES`, ``--advantage-scale``):
a trainer may divide each advantage by a count of its mini-batch and then take a plain token sum.
Each scaling reproduces one aggregation mode exactly (:func:`advantage_scales`: ``s_i m_it`` is
the mode's weight); the check hands the loss ``s_i A_i`` with the counts of the batch
``--advantage-scale-on`` names, and judges the token sum against the declared aggregation. A
scaling over a micro-batch or a rank instead of the step is named as the per-piece normaliser it
is (:func:`advantage_scope_labels`); a scaling for another mode (``scale_by_own_tokens``) or a loss
that normalises the scaled advantages again (sum normalised twice) by
:func:`name_advantage_scale`.

>>> uneven_sizes(6, 3)
[1, 2, 3]
>>> [len(p) for p in split_pieces(7, 2, "equal")], [len(p) for p in split_pieces(7, 2, "uneven")]
([4, 3], [2, 5])
"""

from __future__ import annotations

from .advantage_scale import (
    ADVANTAGE_SCALE_MODES,
    SCALER_GLOBALS,
    advantage_scales,
    advantage_scope_labels,
    call_advantage_scaler,
    name_advantage_scale,
)
from .hypotheses import HYPOTHESES, Hypothesis, Probe, hypothesis_gradient, identify, token_scores
from .hypotheses import Assign as Assign
from .judge import Judge as Judge
from .splits import READINGS, SIZES, readings, split_pieces, uneven_sizes
from .splits import judge_reading as judge_reading

__all__ = [
    "SIZES",
    "READINGS",
    "Hypothesis",
    "HYPOTHESES",
    "Probe",
    "uneven_sizes",
    "split_pieces",
    "readings",
    "token_scores",
    "hypothesis_gradient",
    "identify",
    "ADVANTAGE_SCALE_MODES",
    "advantage_scales",
    "advantage_scope_labels",
    "name_advantage_scale",
    "SCALER_GLOBALS",
    "call_advantage_scaler",
]
