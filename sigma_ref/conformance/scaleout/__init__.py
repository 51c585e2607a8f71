"""Level 5: the same gradient under micro-batches, gradient accumulation and data-parallel ranks.

The check runs the implementation on real ``torch.distributed`` processes (gloo on CPU,
nccl when every rank has a CUDA device), never on ranks simulated in one process:

1. W worker processes start (``subprocess``, one session each, a free TCP port), build the
   same designed batch (a small softmax policy over a vocabulary, responses of different
   lengths under a padding mask, binary and continuous rewards, several groups) and shard it
   over ranks: whole groups per rank (``split="whole-groups"``), or every group dealt across
   the ranks (``split="split-groups"``).
2. Each rank calls the advantage function on its shard, cuts its shard into M micro-batches,
   calls the loss on each with the global quantities it declares (:data:`GLOBALS`), and
   calls ``backward()`` per micro-batch, as trainers accumulate gradients. The gradients are
   then averaged over ranks as DDP does: ``all_reduce(SUM) / W``.
3. Rank 0's gradient is compared with (a) the single-process full-batch gradient of the same
   code (W = 1, M = 1) and (b) the prediction ``-sum_it w_it A_i grad log pi(y_it)`` under the
   declared aggregation with global normalisers (``w_it`` from
   :func:`sigma_ref.objectives.aggregation_weights` with the whole batch's counts).

**Scaling convention** (``loss_scale``): with ``"none"`` (the default) the harness adds the
micro-batch gradients as they are, so the loss must normalise globally itself (verl's
``agg_loss`` with ``batch_num_tokens``/``global_batch_size``); with
``"mean-over-micro-batches"`` the harness divides each micro-batch loss by M first, as the
Hugging Face Trainer does without ``num_items_in_batch``. In both, gradients are averaged over
ranks, so a loss whose pieces should add up to the global loss multiplies by the world size
(verl's ``* dp_size``, the Trainer's ``* num_processes``).

**Globals** (:data:`GLOBALS`): a loss ``loss(logp, old_logp, advantages, mask, **globals)``
gets exactly the keyword arguments its signature names; an advantage function may ask for
``process_group``, ``rank`` and ``world_size``. For ``prompt-mean`` (a token mean per prompt, then
a mean over prompts) a loss gets the step's prompt count ``global_num_prompts`` and, per row, its
prompt's tokens over the step ``prompt_num_tokens`` and its prompt ``prompt_index``.

**Call shapes**: the advantage function is called through its :class:`~.adapter.Adapter`, as at
levels 0 to 4 (every layout, the ``inputs``/``output`` hooks; layout ``token`` gets
``(token_level_rewards, response_mask, index)`` of its shard and is read at each row's last valid
token), on each rank's shard. A loss may return ``(loss, metrics)`` and may take the objective
inputs ``ref_logp=`` and ``rollout_logp=`` (:data:`~.adapter.LOSS_EXTRAS`): each micro-batch gets
its rows of ``old_logp``, ``ref_logp`` and ``rollout_logp``. They are the neutral values levels 0
to 4 use at ratio 1 (``old_logp = ref_logp = rollout_logp = logp.detach()``: importance weight 1,
no k2 or k3 gradient), so the oracle's policy-gradient prediction holds for a PPO + TIS + k2/k3 loss.
Without a loss only ``scaleout_advantages`` runs.

**Packing** (``packing``, :mod:`~.packing`): each micro-batch's responses packed into rows of
:data:`PACKED_CAPACITY` tokens, their boundaries passed as ``position_ids=`` or ``cu_seqlens=``.
**Advantages pre-scaled** (``advantage_scale``, ``advantage_scale_on``,
:func:`~.normalisers.advantage_scales`): the loss gets ``s_i A_i`` with the counts of the step,
the rank's shard or the micro-batch, as a trainer that folds the aggregation into the advantages
hands them to a token-sum loss.

**JAX code**: each rank puts the implementation behind the JAX bridge of levels 0 to 4
(:func:`~.frameworks.on_framework`, ``framework`` as ``--framework``), so a JAX loss is called on
its micro-batch like a torch one and its gradient is ``jax.value_and_grad``'s; a loss computed in
float32 is compared at float32's tolerance (``loss_precision``, :data:`LOSS_PRECISION_RTOL`). A
``jax.sharding`` (SPMD) trainer computes one loss on the global micro-batch of every device:
:func:`spmd_loss` gives a loss that form (tunix's rows in the matrix).

**Rendezvous**: rank 0's store listens on ``rendezvous_host`` (default ``127.0.0.1``, loopback
only; gloo and nccl are pinned to the loopback interface too); give an interface address only for
a run whose ranks must reach it from other hosts. ``spec/README.md`` (level 5) documents the protocol
with verl's and TRL's normalisers as examples.

A failure names the bug class with the measured factor ``c`` (the least-squares fit of the
split gradient as ``c`` times the full-batch gradient), after probes at other (W, M) confirm
the cause: ``normaliser computed per micro-batch: the accumulated gradient is 0.50x the
full-batch gradient at M = 2``.

**Many checks, one launch** (:func:`run_scaleout_many`): the W processes start once (the torch
import takes seconds, a check milliseconds) and run a list of :class:`ScaleoutJob` in order,
each with the results it has alone; a job whose rank raises or hangs gets its FAIL, every
process is killed, and the jobs after it run in fresh processes. :func:`run_scaleout` is the
one-job case.

**Modules** (one job each): :mod:`.keywords` (what a loss and an advantage function get by keyword),
:mod:`.oracle` (the reference loss and advantages, :func:`spmd_loss`), :mod:`.design` (the designed
batch and how it is cut), :mod:`.calling` (calling the implementation as the suite does),
:mod:`.protocol` (what the parent and the ranks exchange), :mod:`.worker` (one rank),
:mod:`.launcher` (the processes, deadlines and clean-up), :mod:`.fitting`, :mod:`.analysis` and
:mod:`.diagnosis` (the verdicts and the bug class), :mod:`.job` (validation and the plan),
:mod:`.results` and :mod:`.run` (the entry points and the command line).
"""

from __future__ import annotations

from ..._vocabulary import LOSS_SCALES, SPLITS

# the names tests and proofs reach through the package: the private ones as the designed batch
# and the analysis, for checks of the harness itself
from .analysis import _analyse as _analyse
from .analysis import _prediction as _prediction
from .calling import _resolve as _resolve
from .design import HORIZON, PACKED_CAPACITY
from .design import _assignment as _assignment
from .design import _Batch as _Batch
from .design import _design_batch as _design_batch
from .design import _job_batch as _job_batch
from .design import _lengths as _lengths
from .design import _n_groups as _n_groups
from .design import _outside_counts as _outside_counts
from .design import _shard_rows as _shard_rows
from .design import _token_logp as _token_logp
from .fitting import LOSS_PRECISION_RTOL
from .fitting import prediction_rtol as prediction_rtol
from .job import CallShape, ScaleoutJob
from .keywords import GLOBALS, declared_globals, loss_globals
from .launcher import RENDEZVOUS_HOST
from .oracle import oracle_advantages, oracle_loss, spmd_loss
from .results import ScaleoutReport, ScaleoutResult
from .run import add_scaleout_arguments, main, run_scaleout, run_scaleout_many

__all__ = [
    "GLOBALS",
    "declared_globals",
    "loss_globals",
    "HORIZON",
    "PACKED_CAPACITY",
    "LOSS_SCALES",
    "LOSS_PRECISION_RTOL",
    "SPLITS",
    "CallShape",
    "ScaleoutJob",
    "ScaleoutResult",
    "RENDEZVOUS_HOST",
    "ScaleoutReport",
    "oracle_advantages",
    "oracle_loss",
    "spmd_loss",
    "run_scaleout",
    "run_scaleout_many",
    "add_scaleout_arguments",
    "main",
]
