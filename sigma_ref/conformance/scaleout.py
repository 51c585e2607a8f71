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
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, TypeGuard

import numpy as np
import numpy.typing as npt
import torch

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

from .._aggregation import PROMPT_MEAN
from .._options import ADVANTAGE_SCALE_SCOPES
from .._vocabulary import LOSS_SCALES, SPLITS
from ..conventions import AGGREGATION_MODES
from ..objectives import aggregation_weights, prompt_mean_weights
from .adapter import LAYOUTS, LOSS_EXTRAS, Adapter, Batch, load_adapter, load_object
from .levels import Verdict
from .normalisers import (
    ADVANTAGE_SCALE_MODES,
    SIZES,
    Judge,
    advantage_scales,
    advantage_scope_labels,
    call_advantage_scaler,
    judge_reading,
    name_advantage_scale,
    readings,
    split_pieces,
    token_scores,
)
from .packing import PACKING_INPUTS, check_packing, pack, pack_tensor, packed_cause, packing_inputs
from .precision import PRECISIONS

__all__ = [
    "GLOBALS",
    "declared_globals",
    "loss_globals",
    "HORIZON",
    "PACKED_CAPACITY",
    "LOSS_SCALES",
    "LOSS_PRECISION_RTOL",
    "SPLITS",
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

#: Where rank 0's rendezvous store listens unless a multi-host run asks otherwise: loopback only.
RENDEZVOUS_HOST = "127.0.0.1"

#: What the harness can pass to a loss (by keyword, only the names its signature declares).
GLOBALS: dict[str, str] = {
    "global_num_tokens": "unmasked tokens in the whole batch (all ranks, all micro-batches)",
    "global_num_seqs": "responses with at least one unmasked token in the whole batch",
    "rank_num_tokens": "unmasked tokens in this rank's shard (all its micro-batches)",
    "rank_num_seqs": "responses in this rank's shard",
    "micro_num_tokens": "unmasked tokens in this micro-batch",
    "micro_num_seqs": "responses in this micro-batch",
    "horizon": "the padded response length T of the batch (seq-mean-token-sum-norm's constant)",
    "world_size": "W, the number of data-parallel ranks",
    "dp_size": "W again, under verl's name",
    "rank": "this process's rank in process_group",
    "micro_batches": "M, the micro-batches per rank per optimiser step",
    "micro_batch_index": "which micro-batch this is, 0 .. M - 1",
    "process_group": "the torch.distributed group of the W ranks (for losses that all-reduce)",
    "aggregation": "the declared aggregation mode, or None",
    "generation_num_tokens": "unmasked tokens in the generation batch (steps_per_generation optimizer steps)",
    "generation_num_seqs": "responses with an unmasked token in the generation batch",
    "global_num_prompts": "prompts (groups) with an unmasked token in the whole batch (prompt-mean's P)",
    "prompt_index": "Tensor [n]: each row's prompt (group id of the whole batch), as a trainer's uids",
    "prompt_num_tokens": "Tensor [n]: each row's prompt's unmasked tokens in the whole batch (all ranks, "
    "all micro-batches; prompt-mean's N_tok(g))",
}


def loss_globals(
    micro_mask: Any,
    *,
    rank_mask: Any = None,
    global_mask: Any = None,
    world_size: int = 1,
    rank: int = 0,
    micro_batches: int = 1,
    micro_batch_index: int = 0,
    process_group: ProcessGroup | None = None,
    aggregation: str | None = None,
    micro_index: Any = None,
    rank_index: Any = None,
    global_index: Any = None,
) -> dict[str, Any]:
    """The value of every :data:`GLOBALS` name for one micro-batch (masks ``[n, T]``, numpy or torch).

    ``rank_mask``, ``global_mask``: this rank's shard and the whole batch, by default the
    micro-batch itself (one process, one micro-batch: levels 0 to 4 call a loss that way).
    ``micro_index``, ``rank_index``, ``global_index``: each row's prompt (group id) in the same three,
    defaulting alike; without any, each row is its own prompt (one response per prompt). The prompt
    globals are ``P = global_num_prompts`` and, per row of the micro-batch, ``prompt_num_tokens =
    N_tok(g)`` over the whole batch: ``sum_i sum_t mask_it l_it / prompt_num_tokens_i / P`` over
    every micro-batch of every rank is the ``prompt-mean`` loss
    (:func:`~sigma_ref.objectives.prompt_mean_weights`), as SkyRL's ``loss_reduction=prompt_mean``
    scales its advantages by ``1 / (num_prompts * prompt_tokens)``.

    >>> m = np.array([[1, 1, 0], [0, 0, 0]])
    >>> g = loss_globals(m)
    >>> g["global_num_tokens"], g["global_num_seqs"], g["rank_num_seqs"], g["horizon"], g["world_size"]
    (2, 1, 2, 3, 1)
    >>> g = loss_globals(m[:1], global_mask=np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1]]),
    ...                  micro_index=[7], global_index=[7, 7, 9])
    >>> g["global_num_prompts"], g["prompt_num_tokens"].tolist(), g["prompt_index"].tolist()
    (2, [3.0], [7])
    """
    rank_mask = micro_mask if rank_mask is None else rank_mask
    global_mask = rank_mask if global_mask is None else global_mask
    micro_ids = _prompt_ids(micro_index, micro_mask, "micro_index")
    rank_ids = micro_ids if rank_index is None else _prompt_ids(rank_index, rank_mask, "rank_index")
    global_ids = rank_ids if global_index is None else _prompt_ids(global_index, global_mask, "global_index")
    global_tokens = _prompt_tokens(global_ids, global_mask)
    missing = sorted(set(micro_ids.tolist()) - set(global_tokens))
    if missing:
        raise ValueError(
            f"micro_index holds prompts {missing[:5]} that global_index does not: pass each row's group id "
            "of the whole batch"
        )
    return {
        "global_num_prompts": sum(1 for t in global_tokens.values() if t > 0),
        "prompt_index": torch.as_tensor(micro_ids, dtype=torch.int64),
        "prompt_num_tokens": torch.tensor(
            [global_tokens[g] for g in micro_ids.tolist()], dtype=torch.float64
        ),
        "global_num_tokens": int(global_mask.sum()),
        "global_num_seqs": int((global_mask.sum(-1) > 0).sum()),
        "rank_num_tokens": int(rank_mask.sum()),
        "rank_num_seqs": int(rank_mask.shape[0]),
        "micro_num_tokens": int(micro_mask.sum()),
        "micro_num_seqs": int(micro_mask.shape[0]),
        "horizon": int(global_mask.shape[-1]),
        "world_size": world_size,
        "dp_size": world_size,
        "rank": rank,
        "micro_batches": micro_batches,
        "micro_batch_index": micro_batch_index,
        "process_group": process_group,
        "aggregation": aggregation,
    }


def _prompt_ids(index: Any, mask: Any, name: str) -> npt.NDArray[np.int64]:
    """``index`` as int64 ``[n]`` (one prompt id per row of ``mask``); None: each row its own prompt."""
    n = int(mask.shape[0])
    if index is None:
        return np.arange(n, dtype=np.int64)
    ids = np.asarray(index.detach().cpu() if isinstance(index, torch.Tensor) else index)
    if ids.shape != (n,) or ids.dtype.kind not in "iu":
        raise ValueError(
            f"{name} has shape {ids.shape} and dtype {ids.dtype}; pass one integer prompt (group) id per row "
            f"of its mask ({n} rows)"
        )
    return ids.astype(np.int64)


def _prompt_tokens(ids: npt.NDArray[np.int64], mask: Any) -> dict[int, float]:
    """Each prompt's unmasked tokens in ``mask`` (rows by ``ids``)."""
    per_row = np.asarray(mask.detach().cpu() if isinstance(mask, torch.Tensor) else mask, dtype=np.float64)
    out: dict[int, float] = {}
    for g, t in zip(ids.tolist(), per_row.sum(-1).tolist(), strict=True):
        out[g] = out.get(g, 0.0) + t
    return out


def declared_globals(fn: Callable[..., Any]) -> list[str]:
    """The :data:`GLOBALS` names ``fn`` takes by keyword after its four positional inputs.

    >>> declared_globals(lambda logp, old_logp, advantages, mask, *, global_num_tokens, ref_logp=None: 0)
    ['global_num_tokens']
    """
    try:
        params = list(inspect.signature(fn).parameters.values())[4:]
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.name in GLOBALS and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


#: What the harness can pass to an advantage function.
ADVANTAGE_GLOBALS: tuple[str, ...] = ("process_group", "rank", "world_size", "dp_size")

_RTOL = 1e-8  # float64 throughout: only summation order separates a correct split from the full batch

#: The relative tolerance of every gradient comparison by the loss's working precision
#: (``loss_precision``): float64, only summation order separates a correct split from the full batch
#: (``1e-8``); a loss computed in float32 (tunix casts its log-probs, advantages and per-token loss to
#: float32) rounds every ``A_i w_it`` to float32: 64 units of float32's roundoff ``2**-24``, the
#: bound levels 0 to 4 read a float32 loss's gradient with (``loss_precision.py``).
LOSS_PRECISION_RTOL: dict[str, float] = {"float64": _RTOL, "float32": 64 * PRECISIONS["float32"]}

#: One configuration of a plan: (world size w, micro-batches m, split); w = 1 runs on rank 0 alone.
_Key: TypeAlias = "tuple[int, int, str]"


# ---------------------------------------------------------------------------
# the prediction


def oracle_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: str | None,
    global_num_tokens: int,
    global_num_seqs: int,
    horizon: int,
    world_size: int,
) -> torch.Tensor:
    """The reference loss for a piece of the batch: ``W * sum_piece w_it l_it`` (clip 0.2).

    ``l_it = -min(r_it A_i, clip(r_it, 0.8, 1.2) A_i)``, ``w_it`` from
    :func:`aggregation_weights` with the global counts: the pieces' losses add up to the
    full-batch loss, and the factor W undoes DDP's average (``loss_scale="none"``).

    >>> lp = torch.zeros(1, 2, requires_grad=True)
    >>> oracle_loss(lp, lp.detach(), torch.tensor([1.0]), torch.ones(1, 2), aggregation="token-mean",
    ...             global_num_tokens=4, global_num_seqs=2, horizon=2, world_size=1)
    tensor(-0.5000, grad_fn=<MulBackward0>)
    """
    if aggregation is None:
        raise ValueError(
            "oracle_loss needs a declared aggregation: pass aggregation=one of " + str(AGGREGATION_MODES)
        )
    w = aggregation_weights(
        mask,
        aggregation,
        num_tokens=global_num_tokens,
        num_seqs=global_num_seqs,
        constant=horizon if aggregation == "seq-mean-token-sum-norm" else None,
    ).to(logp.dtype)
    keep = mask > 0  # padding (NaN, inf) is selected out before any arithmetic: NaN * 0 is NaN
    logp, old_logp = torch.where(keep, logp, 0.0), torch.where(keep, old_logp, 0.0)
    ratio = torch.exp(logp - old_logp)
    adv = advantages.reshape(-1, 1).to(logp.dtype)
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv)
    return (per_token * w).sum() * world_size


@torch.no_grad()
def oracle_advantages(rewards: torch.Tensor, index: npt.ArrayLike) -> torch.Tensor:
    """The oracle's GRPO advantages (paper convention), layout ``index``: ``(R - mu_g) / sigma_g``."""
    from ..advantages import grpo_advantage

    out: torch.Tensor = grpo_advantage(rewards, index=np.asarray(index))  # a Tensor in, a Tensor out
    return out


def _gather_rows(x: torch.Tensor, rank: int, world_size: int, group: ProcessGroup | None) -> torch.Tensor:
    """Every rank's ``x`` (rows of any count, same trailing shape) concatenated in rank order, this
    rank's own rows the live tensor (its autograd path kept), the others' copies without one."""
    import torch.distributed as dist

    if world_size == 1:
        return x
    count = torch.tensor([x.shape[0]], dtype=torch.int64, device=x.device)
    counts = [torch.zeros_like(count) for _ in range(world_size)]
    dist.all_gather(counts, count, group=group)
    most = max(int(c.item()) for c in counts)
    padded = torch.zeros((most, *x.shape[1:]), dtype=x.dtype, device=x.device)
    padded[: x.shape[0]] = x.detach()
    parts = [torch.zeros_like(padded) for _ in range(world_size)]
    dist.all_gather(parts, padded, group=group)
    rows = [x if r == rank else parts[r][: int(counts[r].item())] for r in range(world_size)]
    return torch.cat(rows)


def spmd_loss(loss: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``loss`` as a JAX SPMD trainer computes it: once, on the global micro-batch of every rank.

    Under ``jax.sharding`` (tunix's ``PeftTrainer``, MaxText) data parallelism is not a loss per
    device: the micro-batch is one global array sharded over the devices' batch axis, and the loss
    and its gradient are one global computation, so the loss's normaliser counts the micro-batch of
    all ranks. At level 5 each rank holds its part ``x_r`` of micro-batch ``j``; the at-scale form
    gathers ``X_j = concat_r x_r`` (rank order; rows of any count), computes ``L_j = loss(X_j)``
    and returns ``W L_j`` with the gradient flowing through this rank's rows only. The harness
    averages the ranks' gradients as DDP does, ``(1/W) sum_r W dL_j/dx_r dx_r/dtheta = dL_j/dtheta``:
    the SPMD gradient of micro-batch ``j`` exactly. ``loss(logp, old_logp, advantages, mask)`` is
    called with torch tensors (a JAX loss behind :func:`~.frameworks.jax_loss`); the wrapper takes
    ``rank``, ``world_size`` and ``process_group`` from :data:`GLOBALS`.

    >>> mean = spmd_loss(lambda lp, old, adv, mask: (lp * mask).sum() / mask.sum())
    >>> lp = torch.ones(1, 2, requires_grad=True)
    >>> mean(lp, lp.detach(), torch.ones(1), torch.ones(1, 2), rank=0, world_size=1, process_group=None)
    tensor(1., grad_fn=<MulBackward0>)
    """

    def at_scale(
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        *,
        rank: int,
        world_size: int,
        process_group: ProcessGroup | None,
    ) -> torch.Tensor:
        gathered = [
            _gather_rows(x, rank, world_size, process_group) for x in (logp, old_logp, advantages, mask)
        ]
        out = loss(*gathered)
        value = out[0] if isinstance(out, tuple | list) else out
        return value * world_size

    name = getattr(loss, "__name__", "loss")
    at_scale.__name__ = at_scale.__qualname__ = f"spmd[{name}]"
    at_scale.__sigma_ref_framework__ = "torch"  # type: ignore[attr-defined]  # torch glue: never re-bridged
    return at_scale


# ---------------------------------------------------------------------------
# results


@dataclasses.dataclass(frozen=True)
class ScaleoutResult:
    """One level-5 property's outcome.

    ``property``: e.g. ``scaleout_gradient[W=2,M=2]``; ``verdict``: ``pass``, ``FAIL``, ``WARN`` or
    ``NOTE`` (the suite's :data:`~.levels.Verdict`); ``factor``: the measured ``c`` (split
    gradient = ``c`` x reference), or None;
    ``message``: what was measured, and for a FAIL the bug class.
    """

    property: str
    verdict: Verdict
    factor: float | None
    message: str

    def line(self) -> str:
        """One line for a report."""
        return f"{self.verdict:4} {self.property}: {self.message}"


@dataclasses.dataclass(frozen=True)
class ScaleoutReport:
    """The results of one :func:`run_scaleout` call, its backend and its wall time."""

    results: tuple[ScaleoutResult, ...]
    world_size: int
    micro_batches: tuple[int, ...]
    backend: str
    seconds: float

    @property
    def passed(self) -> bool:
        """True when no property failed."""
        return all(r.verdict != "FAIL" for r in self.results)

    def summary(self) -> str:
        """The report as printed by the CLI."""
        head = (
            f"scale-out W={self.world_size} M={','.join(map(str, self.micro_batches))} "
            f"({self.backend}, {self.seconds:.1f} s): " + ("pass" if self.passed else "FAIL")
        )
        return "\n".join([head, *(r.line() for r in self.results)])


# ---------------------------------------------------------------------------
# the designed batch (built identically in every process from the seed)

_G, _T, _V, _D = 6, 8, 6, 4
#: The padded response length of the designed batch (the ``C = T`` of a seq-mean-token-sum-norm
#: whose constant is the padded width, verl's default and TRL's ``max_completion_length``).
HORIZON: int = _T
#: Tokens per packed row under ``packing`` (two padded widths: a row holds two to several responses).
PACKED_CAPACITY: int = 2 * _T


@dataclasses.dataclass(frozen=True)
class _Batch:
    rewards: np.ndarray  # [N] float64
    index: np.ndarray  # [N] int64, contiguous groups of _G
    mask: np.ndarray  # [N, T] float64
    feats: np.ndarray  # [N, T, V, D]
    tokens: np.ndarray  # [N, T]
    theta: np.ndarray  # [D]

    @property
    def n(self) -> int:
        return int(self.rewards.shape[0])


def _design_batch(seed: int, n_groups: int) -> _Batch:
    rng = np.random.default_rng(seed)
    rewards = []
    for g in range(n_groups):
        if g % 2 == 0:  # binary, k = 2 or G - 1 correct (never silent)
            k = 2 if g % 4 == 0 else _G - 1
            r = np.zeros(_G)
            r[rng.permutation(_G)[:k]] = 1.0
        else:  # continuous
            r = rng.uniform(-1.0, 2.0, size=_G)
        rewards.append(r)
    n = n_groups * _G
    lengths = rng.integers(1, _T + 1, size=n)
    lengths[0], lengths[1] = 1, _T  # the extremes: one token, the full padded length
    mask = (np.arange(_T)[None, :] < lengths[:, None]).astype(np.float64)
    return _Batch(
        rewards=np.concatenate(rewards),
        index=np.repeat(np.arange(n_groups), _G),
        mask=mask,
        feats=rng.normal(size=(n, _T, _V, _D)),
        tokens=rng.integers(0, _V, size=(n, _T)),
        theta=rng.normal(scale=0.5, size=_D),
    )


def _n_groups(world_size: int, sizes: str = "equal") -> int:
    """Groups of the designed batch: 4 per 4 ranks; uneven shares of ``r + 1`` need ``W (W + 1) / 2``."""
    n = 4 * math.ceil(world_size / 4)
    return max(n, world_size * (world_size + 1) // 2) if sizes == "uneven" else n


def _job_batch(seed: int, n_groups: int, mask_truncated: bool) -> _Batch:
    """The designed batch; ``mask_truncated``: the responses that reach the padded length T lose
    their whole mask (TRL's ``mask_truncated_completions``, verl's overlong filter)."""
    batch = _design_batch(seed, n_groups)
    if not mask_truncated:
        return batch
    return dataclasses.replace(batch, mask=batch.mask * (batch.mask.sum(-1, keepdims=True) < _T))


def _lengths(seed: int, n_groups: int) -> np.ndarray:
    """Each response's length as designed (before a truncation mask): the tokens packing places."""
    lengths: np.ndarray = _design_batch(seed, n_groups).mask.sum(-1).astype(np.int64)
    return lengths


def _scope_order(
    batch: _Batch, w: int, m: int, split: str, sizes: str, rows: np.ndarray, piece: np.ndarray, scope: str
) -> np.ndarray:
    """The rows of ``scope`` (``step``, ``rank``, ``micro-batch``) in the order the trainer holds
    them: rank by rank, each rank's micro-batches in turn (``rows``/``piece``: this rank's, this
    micro-batch's positions in them)."""
    if scope == "micro-batch":
        mine: np.ndarray = rows[piece]
        return mine
    ranks = [rows] if scope == "rank" else [_shard_rows(batch, w, r, split, sizes) for r in range(w)]
    order = np.asarray(
        np.concatenate([r[p] for r in ranks for p in split_pieces(len(r), m, sizes)]), np.int64
    )
    return order


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


def _counts(mask: np.ndarray) -> tuple[int, int]:
    return int(mask.sum()), int((mask.sum(-1) > 0).sum())


def _outside_counts(job: _JobConfig, n_groups: int) -> dict[str, tuple[int, int]]:
    """``(tokens, responses)`` of the scopes a loss may wrongly count over: the generation batch of
    ``steps_per_generation`` optimizer steps (the judged step's batch and ``S - 1`` more designed
    alike, seeds ``seed + 1 ..``), and the mask before truncated responses were masked."""
    seed, steps, truncated = job["seed"], job["steps_per_generation"], job["mask_truncated"]
    masks = [_job_batch(seed + k, n_groups, truncated).mask for k in range(steps)]
    out = {"generation": (sum(_counts(m)[0] for m in masks), sum(_counts(m)[1] for m in masks))}
    if truncated:
        out["before-mask"] = _counts(_design_batch(seed, n_groups).mask)
    return out


def _token_logp(theta: torch.Tensor, feats: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log pi(y_it)`` of the softmax policy ``logits = feats @ theta`` over the vocabulary."""
    return torch.log_softmax(feats @ theta, dim=-1).gather(-1, tokens[..., None])[..., 0]


def _shard_rows(batch: _Batch, world_size: int, rank: int, split: str, sizes: str = "equal") -> np.ndarray:
    """Rows of ``rank``: a block of whole groups, or every group's members dealt over the ranks
    (round-robin; ``sizes="uneven"``: blocks of positions, :func:`~.normalisers.split_pieces`)."""
    if split == "whole-groups":
        groups = split_pieces(int(batch.index.max()) + 1, world_size, sizes)[rank]
        return np.flatnonzero(np.isin(batch.index, groups))
    position = np.arange(batch.n) % _G
    if sizes == "uneven" and world_size <= _G:
        return np.flatnonzero(np.isin(position, split_pieces(_G, world_size, sizes)[rank]))
    return np.flatnonzero(position % world_size == rank)


def _assignment(batch: _Batch, w: int, m: int, split: str, sizes: str) -> tuple[np.ndarray, np.ndarray]:
    """Each row's rank and micro-batch at ``(w, m, split)``, as the ranks cut the batch."""
    rank = np.zeros(batch.n, dtype=np.int64)
    micro = np.zeros(batch.n, dtype=np.int64)
    for r in range(w):
        rows = _shard_rows(batch, w, r, split, sizes)
        rank[rows] = r
        for j, piece in enumerate(split_pieces(len(rows), m, sizes)):
            micro[rows[piece]] = j
    return rank, micro


# ---------------------------------------------------------------------------
# calling the implementation


#: An advantage function or a loss under test: called with tensors; what it returns is checked.
_Fn: TypeAlias = "Callable[..., object]"


def _declared(
    fn: _Fn, n_positional: int, vocabulary: Sequence[str], what: str, *, strict: bool = True
) -> list[str]:
    """The vocabulary names ``fn`` declares; an unknown required parameter raises TypeError (unless
    not ``strict``: an ``inputs`` hook builds the call, so the positional inputs are unknown)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []
    wanted: list[str] = []
    rest = params[n_positional:] if strict else params
    for p in rest:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in vocabulary:
            wanted.append(p.name)
        elif strict and p.default is p.empty:
            raise TypeError(
                f"{what} has a required parameter {p.name!r} the harness cannot fill; the scale-out "
                f"check passes only these by keyword: {', '.join(vocabulary)} (give {p.name!r} a default)"
            )
    return wanted


#: The positional inputs each layout passes (the advantage function's globals come after them).
_POSITIONAL: dict[str, int] = {
    "contiguous": 2,
    "index": 2,
    "grouped": 1,
    "token": 3,
    "keep-mask": 2,
    "sizes": 2,
}
#: What the harness can pass a loss by keyword: the globals and the objective inputs.
_LOSS_VOCABULARY: tuple[str, ...] = (*GLOBALS, *LOSS_EXTRAS, *PACKING_INPUTS)


def _resolve(
    impl: str, layout: str | None, loss: str | None, output: str | int | None = None, framework: str = "auto"
) -> tuple[Adapter, _Fn | None]:
    """The Adapter of ``impl`` (:func:`~.adapter.load_adapter`, as the suite builds it) and the loss
    (``loss``, else the Adapter's; None: the advantages alone are checked). ``framework``: JAX code
    goes behind the bridge (:func:`~.frameworks.on_framework`), as at levels 0 to 4."""
    from .frameworks import on_framework

    adapter = on_framework(load_adapter(impl, layout=layout, loss=loss, output=output), framework)
    if adapter.layout == "keep-mask":
        raise ValueError(
            "layout 'keep-mask' is a dynamic-sampling filter: level 5 checks advantages and a loss, "
            "which a keep mask does not compute"
        )
    return adapter, adapter.loss


def _advantage_globals(adapter: Adapter) -> list[str]:
    """The :data:`ADVANTAGE_GLOBALS` the advantage function takes (a required unknown one raises)."""
    return _declared(
        adapter.advantages,
        _POSITIONAL[adapter.layout],
        ADVANTAGE_GLOBALS,
        "the advantage function",
        strict=adapter.inputs is None,
    )


def _call_advantages(
    adapter: Adapter, rewards: torch.Tensor, index: npt.NDArray[np.int64], kw: Mapping[str, object]
) -> torch.Tensor:
    """The advantages of a shard, one per response, called as the suite calls them (the layout, the
    ``inputs``/``output`` hooks; layout token read at each row's last valid token)."""
    if kw:
        adapter = adapter.replace(advantages=functools.partial(adapter.advantages, **kw))
    batch = Batch(rewards.detach().cpu().numpy(), np.asarray(index).copy())
    out = adapter.call_raw(batch, rewards)
    if isinstance(out, np.ndarray):
        out = torch.from_numpy(out)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the advantage function returned {type(out).__name__}, but should return a Tensor")
    return out.detach().reshape(-1).to(torch.float64)


# ---------------------------------------------------------------------------
# the worker (one per rank)


class _JobConfig(TypedDict):
    """One job as the ranks read it from the launch's config file (JSON)."""

    impl: str
    loss: str | None
    layout: str | None  # as given (None: the Adapter's own)
    output: str | int | None
    seed: int
    aggregation: str | None
    loss_scale: str
    plan: list[_Key]
    sizes: str
    steps_per_generation: int
    mask_truncated: bool
    pad_value: float | None
    packing: str
    advantage_scale: str
    advantage_scale_on: str
    advantage_scaler: str | None
    aggregation_constant: float | None
    framework: str


class _LaunchConfig(TypedDict):
    """The launch's config file: the process group and the jobs, run in this order."""

    world_size: int
    backend: str
    host: str
    port: int
    timeout: float  # of the process group's collectives: the parent's deadlines come first
    jobs: list[_JobConfig]


class _Run(TypedDict):
    """Rank 0's outcome of one configuration: the rank-averaged gradient, the gathered advantages."""

    grad: list[float] | None  # None: no loss
    advantages: list[float]


def _worker(config_path: str, rank: int) -> int:
    """Entry point of one rank: join the process group once, then run every job of the launch in order.

    For each job rank 0 writes its results (``results.<k>.json``) *before* the barrier that ends
    the job, so a rank that has reached job k + 1 proves job k's file is there: the parent blames
    a raising or hung rank on the first job without results, and nothing else is needed to know
    which job a rank was in. Any exception ends the process (``error.<rank>``, exit code 1).
    """
    with open(config_path, encoding="utf-8") as fh:
        cfg: _LaunchConfig = json.load(fh)
    workdir = os.path.dirname(config_path)
    progress = os.path.join(workdir, f"progress.{rank}")

    def say(stage: str) -> None:
        with open(progress, "w", encoding="utf-8") as fh:
            fh.write(stage)

    try:
        import datetime

        import torch.distributed as dist

        torch.set_num_threads(1)
        W, backend = cfg["world_size"], cfg["backend"]
        device = torch.device(
            f"cuda:{rank % max(1, torch.cuda.device_count())}" if backend == "nccl" else "cpu"
        )
        if device.type == "cuda":
            torch.cuda.set_device(device)
        say("init_process_group")
        timeout = datetime.timedelta(seconds=2 * cfg["timeout"])  # the parent's deadline comes first
        host, port = cfg["host"], cfg["port"]
        listen_fd = None
        if rank == 0:  # the store listens on the host asked for only (TCPStore alone listens on every one)
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, port))
            sock.listen(128)
            listen_fd = sock.detach()
        store = dist.TCPStore(  # type: ignore[attr-defined]  # exported at run time, not in the stubs
            host, port, W, rank == 0, timeout=timeout, master_listen_fd=listen_fd
        )
        dist.init_process_group(backend, store=store, rank=rank, world_size=W, timeout=timeout)
        world = dist.group.WORLD
        solo = dist.new_group([0])  # every rank must create it; only rank 0 uses it (W = 1 runs)
        for k, job in enumerate(cfg["jobs"]):
            results = _run_job(job, rank, W, device, world, solo, say)
            if rank == 0:
                tmp = os.path.join(workdir, f"results.{k}.json.tmp")
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump(results, fh)
                os.replace(tmp, os.path.join(workdir, f"results.{k}.json"))
            say("barrier")
            dist.barrier()
        say("done")
        dist.destroy_process_group()
        return 0
    except BaseException:
        with open(os.path.join(workdir, f"error.{rank}"), "w", encoding="utf-8") as fh:
            fh.write(traceback.format_exc())
        return 1


def _run_job(
    job: _JobConfig,
    rank: int,
    W: int,
    device: torch.device,
    world: ProcessGroup | None,
    solo: ProcessGroup | None,
    say: Callable[[str], None],
) -> list[_Run | None]:
    """One job's plan on this rank: rank 0's results per configuration (None where it is not a member)."""
    import torch.distributed as dist

    batch = _job_batch(job["seed"], _n_groups(W, job["sizes"]), job["mask_truncated"])
    generation = _outside_counts(job, _n_groups(W, job["sizes"]))["generation"]
    lengths = _lengths(job["seed"], _n_groups(W, job["sizes"]))
    adapter, loss_fn = _resolve(job["impl"], job["layout"], job["loss"], job["output"], job["framework"])
    loss_kw = [] if loss_fn is None else _declared(loss_fn, 4, _LOSS_VOCABULARY, "the loss")
    adv_kw = _advantage_globals(adapter)
    scaler_target = job["advantage_scaler"]
    scaler = None if scaler_target is None else load_object(scaler_target, what="advantage_scaler")
    feats = torch.tensor(batch.feats, device=device)
    tokens = torch.tensor(batch.tokens, device=device)
    mask = torch.tensor(batch.mask, device=device)
    rewards = torch.tensor(batch.rewards, device=device)
    results: list[_Run | None] = []
    for w, m, split in job["plan"]:
        group = world if w == W else solo
        if rank >= w:
            results.append(None)
            continue
        tag = f"W={w}, M={m}, {split}"
        torch.manual_seed(job["seed"] + rank)  # code that draws (verl's clip_cov) draws the same every run
        rows = _shard_rows(batch, w, rank, split, job["sizes"])
        rows_t = torch.tensor(rows, device=device)
        say(f"the advantage function at {tag}")
        env: dict[str, object] = {"process_group": group, "rank": rank, "world_size": w, "dp_size": w}
        adv = _call_advantages(adapter, rewards[rows_t], batch.index[rows], {k: env[k] for k in adv_kw}).to(
            device
        )
        if adv.shape != (len(rows),):
            raise ValueError(
                f"the advantage function returned shape {tuple(adv.shape)} for {len(rows)} rewards at {tag}"
            )
        theta = torch.tensor(batch.theta, device=device, requires_grad=True)
        pieces = split_pieces(len(rows), m, job["sizes"]) if loss_fn is not None else []
        for j, piece in enumerate(pieces):
            assert loss_fn is not None
            r = rows_t[torch.tensor(piece, device=device)]
            logp = _token_logp(theta, feats[r], tokens[r])
            piece_adv = adv[torch.tensor(piece, device=device)]
            if scaler is not None:  # the trainer's own pre-scaling function
                scope_rows = _scope_order(
                    batch, w, m, split, job["sizes"], rows, piece, job["advantage_scale_on"]
                )
                factors = np.zeros(batch.n)
                factors[scope_rows] = call_advantage_scaler(
                    scaler,
                    batch.mask[scope_rows],
                    world_size=w,
                    micro_batches=m,
                    prompt_index=batch.index[scope_rows],
                )
                piece_adv = piece_adv * torch.tensor(factors[rows[piece]], device=device)
            elif job["advantage_scale"] != "none":  # the trainer folds the aggregation into the advantages
                scope = {"step": batch.mask, "rank": batch.mask[rows], "micro-batch": batch.mask[rows[piece]]}
                tok, seq = _counts(scope[job["advantage_scale_on"]])
                scale = advantage_scales(
                    batch.mask[rows[piece]],
                    job["advantage_scale"],
                    num_tokens=tok,
                    num_seqs=seq,
                    constant=job["aggregation_constant"],
                )
                piece_adv = piece_adv * torch.tensor(scale, device=device)
            piece_mask = mask[r]
            packed = {}
            order = None  # the responses' order under packing (each per-response input follows it)
            if job["packing"] != "none":  # several responses per row, their boundaries by keyword
                packing = pack(lengths[rows[piece]], PACKED_CAPACITY, _T)
                logp, piece_mask = pack_tensor(logp, packing), pack_tensor(piece_mask, packing)
                order = torch.tensor(packing.order, device=device)
                piece_adv = piece_adv[order]
                packed = packing_inputs(PACKING_INPUTS, packing, device)
            if job["pad_value"] is not None:  # padded log-probs holding NaN or inf, on the gradient's path
                logp = logp + torch.where(piece_mask > 0, 0.0, job["pad_value"]).to(logp.dtype)
            values = loss_globals(
                batch.mask[rows[piece]],
                rank_mask=batch.mask[rows],
                global_mask=batch.mask,
                world_size=w,
                rank=rank,
                micro_batches=m,
                micro_batch_index=j,
                process_group=group,
                aggregation=job["aggregation"],
                micro_index=batch.index[rows[piece]],
                rank_index=batch.index[rows],
                global_index=batch.index,
            )
            for name in ("prompt_index", "prompt_num_tokens"):  # per row, in the order the loss gets the rows
                per_row = values[name].to(device)
                values[name] = per_row if order is None else per_row[order]
            # the objective inputs, this micro-batch's rows: neutral at ratio 1, as at levels 0 to 4
            values.update(dict.fromkeys(LOSS_EXTRAS, logp.detach()))
            values["generation_num_tokens"], values["generation_num_seqs"] = generation
            values.update(packed)
            say(f"the loss at {tag}, micro-batch {j}")
            out = loss_fn(logp, logp.detach(), piece_adv, piece_mask, **{k: values[k] for k in loss_kw})
            value = out[0] if isinstance(out, (tuple, list)) else out
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                raise TypeError(f"the loss returned {value!r} at {tag}; it should return a scalar Tensor")
            if job["loss_scale"] == "mean-over-micro-batches":
                value = value / m
            torch.autograd.backward(value.reshape(()))
        say(f"all_reduce of the gradients at {tag}")
        grad = theta.grad if theta.grad is not None else torch.zeros_like(theta)
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=group)
        grad = grad / w
        full_adv = torch.zeros(batch.n, dtype=torch.float64, device=device)
        full_adv[rows_t] = adv
        dist.all_reduce(full_adv, op=dist.ReduceOp.SUM, group=group)
        grad_list = grad.cpu().tolist() if loss_fn is not None else None
        results.append({"grad": grad_list, "advantages": full_adv.cpu().tolist()})
    return results


# ---------------------------------------------------------------------------
# the parent: processes, time-outs, clean-up


class _RunError(Exception):
    """A job that ended without results: ``message`` for its FAIL, ``detail`` the rank's traceback or log."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message, detail)
        self.message = message
        self.detail = detail


#: A job's outcome: rank 0's results per configuration of its plan, or why there are none.
_Outcome: TypeAlias = "list[_Run | None] | _RunError"


#: Rendezvous hosts that keep every socket of a launch on this machine.
_LOOPBACK: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")


def _loopback_interface() -> str:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS)."""
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    return next((n for n in names if n in ("lo", "lo0")), "lo")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # each rank leads its own session
            except (ProcessLookupError, PermissionError):
                p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            pass


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return ""


def _launch(
    world_size: int,
    backend: str,
    jobs: Sequence[_JobConfig],
    timeouts: Sequence[float],
    host: str = RENDEZVOUS_HOST,
) -> list[tuple[_Outcome, float]]:
    """Run ``jobs`` in order on ``world_size`` fresh processes; each outcome with when it was known.

    The outcomes cover every job, or stop at the first that fails (a :class:`_RunError` naming
    the rank and its exception, or where every rank was when a rank hung): then every process
    is killed and the caller runs the rest elsewhere. Job k has ``timeouts[k]`` seconds from the
    end of job k - 1 (the first from the launch, start-up included, as a launch of one job); the
    last job ends when every process has exited with code 0.
    """
    workdir = tempfile.mkdtemp(prefix="sigma-ref-scaleout-")
    procs: list[subprocess.Popen[bytes]] = []
    outcomes: list[tuple[_Outcome, float]] = []
    try:
        cfg: _LaunchConfig = {
            "world_size": world_size,
            "backend": backend,
            "host": host,
            "port": _free_port(),
            "timeout": max(timeouts),
            "jobs": list(jobs),
        }
        config_path = os.path.join(workdir, "config.json")
        with open(config_path, "w", encoding="utf-8") as fh:
            json.dump(cfg, fh)
        env = dict(os.environ)
        paths = [os.getcwd(), *(p for p in sys.path if p)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        env.setdefault("OMP_NUM_THREADS", "1")
        if host in _LOOPBACK:  # the collectives' sockets too, unless the user chose an interface
            for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
                env.setdefault(name, _loopback_interface())
        code = (
            "import sys; from sigma_ref.conformance.scaleout import _worker; "
            "sys.exit(_worker(sys.argv[1], int(sys.argv[2])))"
        )
        for rank in range(world_size):
            log = open(os.path.join(workdir, f"log.{rank}"), "w", encoding="utf-8")
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", code, config_path, str(rank)],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            log.close()
        deadline = time.monotonic() + timeouts[0]

        def collect(codes: Sequence[int | None]) -> None:
            """Add the jobs whose results are written (the last one only once every rank exited 0)."""
            nonlocal deadline
            while len(outcomes) < len(jobs):
                k = len(outcomes)
                path = os.path.join(workdir, f"results.{k}.json")
                if not os.path.exists(path) or (k == len(jobs) - 1 and not all(c == 0 for c in codes)):
                    return
                with open(path, encoding="utf-8") as fh:
                    outcomes.append((json.load(fh), time.monotonic()))
                if len(outcomes) < len(jobs):
                    deadline = time.monotonic() + timeouts[len(outcomes)]

        while True:
            codes = [p.poll() for p in procs]
            collect(codes)
            if len(outcomes) == len(jobs):
                return outcomes
            if all(c == 0 for c in codes):  # pragma: no cover - a rank 0 that exits 0 wrote every file
                outcomes.append(
                    (_RunError("rank 0 exited without writing its results", ""), time.monotonic())
                )
                return outcomes
            crashed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if crashed:
                time.sleep(0.3)  # let a peer's error land too, then blame the first one written
                collect([p.poll() for p in procs])  # a rank past job k proves job k's results
                errors = [r for r in range(world_size) if os.path.exists(os.path.join(workdir, f"error.{r}"))]
                r = min(
                    errors,
                    key=lambda k: os.path.getmtime(os.path.join(workdir, f"error.{k}")),
                    default=crashed[0],
                )
                _kill(procs)
                detail = _read(os.path.join(workdir, f"error.{r}")) or _read(
                    os.path.join(workdir, f"log.{r}")
                )
                last = detail.strip().splitlines()[-1] if detail.strip() else f"exit code {codes[r]}"
                outcomes.append((_RunError(f"rank {r} failed: {last}", detail), time.monotonic()))
                return outcomes
            if time.monotonic() > deadline:
                stages = {
                    r: _read(os.path.join(workdir, f"progress.{r}")) or "start-up" for r in range(world_size)
                }
                waiting = len(outcomes)
                collect(codes)  # a stage read above that belongs to the next job proves this one done
                if len(outcomes) > waiting:
                    continue
                _kill(procs)
                where = "; ".join(f"rank {r} in {s}" for r, s in stages.items())
                timeout = timeouts[len(outcomes)]
                message = (
                    f"a rank hung: no result within the timeout of {timeout:g} s ({where}); every rank was "
                    "killed"
                )
                outcomes.append((_RunError(message, ""), time.monotonic()))
                return outcomes
            time.sleep(0.02)
    finally:
        _kill(procs)
        shutil.rmtree(workdir, ignore_errors=True)


def _run_jobs(
    world_size: int,
    backend: str,
    jobs: Sequence[_JobConfig],
    timeouts: Sequence[float],
    host: str = RENDEZVOUS_HOST,
) -> list[tuple[_Outcome, float]]:
    """Every job's outcome: as many jobs per launch as run through, the rest in fresh processes.

    A job that fails (a rank raised or hung) gets its FAIL as if it had run alone, and the jobs
    after it run in a new launch. Another program may take the free port before rank 0 binds
    it: a job failing with ``address already in use`` is tried up to three times, as alone.
    """
    outcomes: list[tuple[_Outcome, float]] = []
    attempts = 0
    while len(outcomes) < len(jobs):
        start = len(outcomes)
        got = _launch(world_size, backend, jobs[start:], timeouts[start:], host)
        if len(got) > 1:
            attempts = 0  # the failing job, if any, had its first attempt in this launch
        attempts += 1
        last = got[-1][0]
        if isinstance(last, _RunError):
            if attempts < 3 and "address already in use" in last.detail.lower():
                outcomes += got[:-1]
                continue
        outcomes += got
        attempts = 0
    return outcomes


# ---------------------------------------------------------------------------
# the analysis


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


def _prediction(
    batch: _Batch, advantages: np.ndarray, mode: str, constant: float | None = None
) -> np.ndarray:
    theta = torch.tensor(batch.theta, requires_grad=True)
    logp = _token_logp(theta, torch.tensor(batch.feats), torch.tensor(batch.tokens))
    mask = torch.tensor(batch.mask)
    # the oracle's weights: seq-mean-token-sum-norm's 1 / (N_seq C), C = T unless declared
    if mode == PROMPT_MEAN:  # a token mean per prompt group, then a mean over prompts
        w = prompt_mean_weights(mask, batch.index)
    else:
        w = aggregation_weights(mask, mode, constant=constant if mode == "seq-mean-token-sum-norm" else None)
    torch.autograd.backward(-(w * torch.tensor(advantages)[:, None] * logp).sum())
    grad = theta.grad
    if grad is None:  # pragma: no cover - logp depends on theta
        raise RuntimeError("the prediction's loss does not depend on theta")
    return grad.numpy()


def _adv_gap(a: np.ndarray, ref: np.ndarray) -> tuple[float, int]:
    gap = np.abs(a - ref)
    i = int(np.argmax(gap))
    return float(gap[i]), i


def _analyse(
    runs: Mapping[_Key, _Run],
    batch: _Batch,
    *,
    W: int,
    Ms: Sequence[int],
    split: str,
    aggregation: str | None,
    loss_scale: str,
    constant: float | None = None,
    sizes: str = "equal",
    counts: Mapping[str, tuple[int, int]] | None = None,
    pad_value: float | None = None,
    packing: str = "none",
    lengths: np.ndarray | None = None,
    advantage_scale: str = "none",
    advantage_scale_on: str = "step",
    loss_precision: str = "float64",
) -> list[ScaleoutResult]:
    results = []
    pred_rtol = prediction_rtol(loss_precision)
    full = runs[(1, 1, "whole-groups")]
    a_full = np.asarray(full["advantages"])
    if full["grad"] is not None and not np.isfinite(np.asarray(full["grad"])).all():
        why = (
            f" with logp = {pad_value} at the masked positions: it reaches the loss (NaN * 0 is NaN, and so "
            "is its gradient); select with torch.where or masked_fill on the inputs before any arithmetic, "
            "not by multiplying with the mask"
            if pad_value is not None
            else ""
        )
        prop = f"scaleout_gradient[padding={pad_value}]"
        return [ScaleoutResult(prop, "FAIL", None, f"the full-batch gradient is not finite{why}")]
    M = max(Ms)  # the advantages are computed before micro-batching: one M is enough
    a = np.asarray(runs[(W, M, split)]["advantages"])
    adv_tol = 1e-9 * max(1.0, float(np.abs(a_full).max()))

    # advantages on the shards
    gap, i = _adv_gap(a, a_full)
    adv_ok = gap <= adv_tol
    prop = f"scaleout_advantages[{split},W={W}]"
    if adv_ok:
        results.append(ScaleoutResult(prop, "pass", None, f"advantages on {W} ranks equal the full batch's"))
    else:
        where = f"max |A_split - A_full| = {gap:.3g} at row {i} (group {int(batch.index[i])})"
        if split == "split-groups":
            whole = runs.get((W, M, "whole-groups"))
            whole_ok = whole is not None and _adv_gap(np.asarray(whole["advantages"]), a_full)[0] <= adv_tol
            if whole_ok:
                msg = (
                    "group statistics computed on a rank's shard: advantages differ when a group is split "
                    f"across ranks ({where}; with whole groups per rank they agree). Gather each group's "
                    "statistics over process_group, or shard by whole groups and check with "
                    "split='whole-groups'"
                )
            else:
                msg = f"advantages differ on {W} ranks even with whole groups per rank ({where})"
        else:
            msg = (
                "batch statistics computed on a rank's shard: with whole groups per rank the advantages "
                f"differ from the full batch's ({where}), e.g. a batch-wide std taken per rank; gather the "
                "rewards across ranks before normalising"
            )
        results.append(ScaleoutResult(prop, "FAIL", None, msg))
    if full["grad"] is None:  # no loss: the advantages are all there is to check
        return results
    g_full = np.asarray(full["grad"])

    # the aggregation, on the full batch
    matches = [
        mode
        for mode in (*AGGREGATION_MODES, PROMPT_MEAN)
        if _fit(g_full, _prediction(batch, a_full, mode))[2] <= pred_rtol
    ]
    detected = (
        f"detected on the full batch: {matches[0]}"
        if matches
        else "the full batch matches none of the five modes nor prompt-mean"
    )
    if aggregation is None:
        results.append(
            ScaleoutResult("scaleout_aggregation", "NOTE", None, f"no aggregation declared; {detected}")
        )
    scores = token_scores(batch.theta, batch.feats, batch.tokens)
    judge = Judge(
        scores,
        a_full,
        batch.mask,
        matches[0] if matches else None,
        lambda w, m, s: _assignment(batch, w, m, s, sizes),
        constant,
        counts,
        advantage_scope_labels(advantage_scale, advantage_scale_on),
        rtol=pred_rtol,
        index=batch.index,
    )
    cause = None  # a cause of the packing or the pre-scaled advantages every run confirms
    if aggregation in AGGREGATION_MODES and packing != "none" and lengths is not None:
        grads = {key: readings(np.asarray(r["grad"]), key[1], loss_scale)["none"] for key, r in runs.items()}
        cause = packed_cause(
            grads,
            scores,
            a_full,
            batch.mask,
            lengths,
            aggregation,
            assign=judge.assign,
            capacity=PACKED_CAPACITY,
            constant=constant,
        )
    if cause is None and aggregation in AGGREGATION_MODES:
        cause = name_advantage_scale(
            g_full,
            scores,
            a_full,
            batch.mask,
            scale=advantage_scale,
            aggregation=aggregation,
            constant=constant,
        )
    for M in Ms:
        results += _per_split(
            runs,
            batch,
            g_full,
            a_full,
            W,
            M,
            split,
            aggregation,
            loss_scale,
            adv_ok,
            detected,
            constant,
            judge,
            cause,
            pred_rtol,
        )
    return results


#: float32's tolerance (:func:`prediction_rtol`): a float64 loss off by no more is off by roundings.
_F32_RTOL = LOSS_PRECISION_RTOL["float32"]


def _rounding_level(c: float, err: float, rtol: float) -> bool:
    """A gradient beyond ``rtol`` (float64's) of its reference but within float32's roundings of it
    (factor and error): hygiene, not a normaliser (which moves it by an O(1) factor)."""
    return rtol < _F32_RTOL and err <= _F32_RTOL and abs(c - 1.0) <= _F32_RTOL


def _rounding_message(reference: str, err: float) -> str:
    return (
        f"equals {reference} to rel. error {err:.1g} only: float32's rounding level, not float64's "
        f"{_RTOL:g} (a count, weight or ratio rounded to float32 on the gradient's path); no normaliser "
        "differs. Declare the loss's working precision float32 if that is its design"
    )


def _per_split(
    runs: Mapping[_Key, _Run],
    batch: _Batch,
    g_full: np.ndarray,
    a_full: np.ndarray,
    W: int,
    M: int,
    split: str,
    aggregation: str | None,
    loss_scale: str,
    adv_ok: bool,
    detected: str,
    constant: float | None = None,
    judge: Judge | None = None,
    cause: str | None = None,
    pred_rtol: float = _RTOL,
) -> list[ScaleoutResult]:
    results = []
    # (a) the split gradient against the same code's full-batch gradient, under both readings of
    # the trainer's accumulation scaling (measured, not declared: normalisers.readings)
    split_grad = runs[(W, M, split)]["grad"]
    assert split_grad is not None  # _per_split runs only with a loss
    g, _, reading_text = judge_reading(split_grad, g_full, M, loss_scale, rtol=pred_rtol)
    prop = f"scaleout_gradient[W={W},M={M}]"
    c, resid, err = _fit(g, g_full)
    if err <= pred_rtol:  # the same code split and whole: only its working precision's roundings differ
        results.append(
            ScaleoutResult(
                prop,
                "pass",
                c,
                f"the accumulated, rank-averaged gradient equals the full-batch gradient "
                f"(rel. error {err:.1g}){reading_text}",
            )
        )
    elif _rounding_level(c, err, pred_rtol):
        results.append(ScaleoutResult(prop, "WARN", c, _rounding_message("the full-batch gradient", err)))
    else:
        named = None if judge is None or not adv_ok else judge.name(runs, W, M, split, loss_scale, c, resid)
        if cause is not None and adv_ok:
            named = (
                f"{cause}: the accumulated, rank-averaged gradient is {_scale(c, resid)} the full-batch "
                f"gradient at W = {W}, M = {M}"
            )
        results.append(
            ScaleoutResult(
                prop,
                "FAIL",
                c,
                named
                or _diagnose(runs, g_full, W, M, split, c, resid, adv_ok, loss_scale, aggregation, pred_rtol),
            )
        )

    # (b) against the prediction under the declared aggregation
    if aggregation is not None:
        pred = _prediction(batch, a_full, aggregation, constant)
        cp, rp, ep = _fit(g, pred)
        prop = f"scaleout_prediction[{aggregation},W={W},M={M}]"
        at = (
            ""
            if pred_rtol == _RTOL
            else f", judged at the loss's working precision (rel. tol. {pred_rtol:.2g})"
        )
        if ep <= pred_rtol:
            results.append(
                ScaleoutResult(
                    prop,
                    "pass",
                    cp,
                    "equals -sum_it w_it A_i grad log pi_it with global normalisers "
                    f"(rel. error {ep:.1g}{at})",
                )
            )
        elif _rounding_level(cp, ep, pred_rtol):
            message = _rounding_message(f"the {aggregation} prediction", ep)
            results.append(ScaleoutResult(prop, "WARN", cp, message))
        else:
            cf, rf, ef = _fit(g_full, pred)
            why = (
                "the full-batch gradient already differs"
                f" ({_scale(cf, rf)} the prediction; {detected}): the loss does not aggregate as declared"
                if ef > pred_rtol
                else "the full-batch gradient matches it, the split one does not (see scaleout_gradient)"
            )
            countable = judge is not None and ef > pred_rtol and aggregation in AGGREGATION_MODES
            named = judge.name_prediction(runs, aggregation, loss_scale, cf) if judge and countable else None
            own = cause if cause and adv_ok and not named else None  # its class leads the line
            why += f". {named}" if named else f". {own}" if own else ""
            lead = own.split(":", 1)[0] + ": " if own else ""
            results.append(
                ScaleoutResult(
                    prop,
                    "FAIL",
                    cp,
                    f"{lead}the gradient at W={W}, M={M} is {_scale(cp, rp)} the {aggregation} prediction; "
                    + why,
                )
            )
    return results


def _diagnose(
    runs: Mapping[_Key, _Run],
    g_full: np.ndarray,
    W: int,
    M: int,
    split: str,
    c: float,
    resid: float,
    adv_ok: bool,
    loss_scale: str,
    aggregation: str | None,
    rtol: float = _RTOL,
) -> str:
    """Name the bug class from the probes at (1, M), (1, M + 1) and (W, 1)."""
    if not adv_ok:
        return (
            f"the gradient at W={W}, M={M} is {_scale(c, resid, detail=False)} the full-batch gradient "
            "because the advantages differ (see scaleout_advantages)"
        )

    def probe(w: int, m: int) -> _Fit | None:
        run = runs.get((w, m, split)) if w > 1 else runs.get((w, m, "whole-groups"))
        return None if run is None else _fit(np.asarray(run["grad"]), g_full)

    on_m = probe(1, M) if M > 1 else None
    on_m2 = probe(1, M + 1) if M > 1 else None
    on_w = probe(W, 1) if W > 1 else None
    if W == 1:
        on_m = (c, resid, 1.0)
    if M == 1:
        on_w = (c, resid, 1.0)

    def bad(f: _Fit | None) -> TypeGuard[_Fit]:
        """The probe ran and its gradient differs from the full batch's."""
        return f is not None and f[2] > rtol

    def pure(f: _Fit) -> bool:
        """One factor explains the probe's gradient."""
        return f[1] <= 1e-6

    if bad(on_m):
        trend = ""
        if on_m2 is not None:
            trend = f"; {_scale(on_m2[0], on_m2[1], detail=False)} at M = {M + 1}"
            if (
                pure(on_m)
                and pure(on_m2)
                and abs(on_m[0] * M - 1) < 1e-6
                and abs(on_m2[0] * (M + 1) - 1) < 1e-6
            ):
                trend += ": it shrinks as 1/M"
            elif (
                pure(on_m)
                and pure(on_m2)
                and abs(on_m[0] / M - 1) < 1e-6
                and abs(on_m2[0] / (M + 1) - 1) < 1e-6
            ):
                trend += ": it grows as M"
        confirm = (
            f" (confirmed on one rank: {_scale(on_m[0], on_m[1], detail=False)} at W = 1, M = {M}{trend}"
        )
        if W > 1 and bad(on_w):
            confirm += (
                f"; {_scale(on_w[0], on_w[1], detail=False)} at W = {W}, M = 1, where a rank's shard is "
                "one micro-batch)"
            )
        elif W > 1:
            confirm += f"; equal at W = {W}, M = 1)"
        else:
            confirm += ")"
        hint = ""
        if loss_scale == "mean-over-micro-batches" and pure(on_m) and abs(on_m[0] * M - 1) < 1e-6:
            hint = (
                ". The harness divides each micro-batch loss by M (loss_scale='mean-over-micro-batches'), "
                "so the loss must normalise by the micro-batch's share, not by a constant"
            )
            if aggregation == "seq-mean-token-sum-norm":
                hint += "; seq-mean-token-sum-norm's sum grows with the micro-batch size"
        return (
            "normaliser computed per micro-batch: the accumulated gradient is "
            f"{_scale(c, resid)} the full-batch gradient at M = {M}{confirm}{hint}"
        )
    if bad(on_w):
        confirm = (
            f" (confirmed with one micro-batch: {_scale(on_w[0], on_w[1], detail=False)} at W = {W}, M = 1"
        )
        confirm += f"; equal on one rank at M = {M})" if M > 1 else ")"
        if pure(on_w) and abs(on_w[0] * W - 1) < 1e-6:
            return (
                f"world size not applied: the rank-averaged gradient is {_scale(c, resid)} the full-batch "
                f"gradient at W = {W}{confirm}. DDP divides by W; the loss must multiply by world_size "
                "(verl's dp_size)"
            )
        return (
            f"token count not gathered across ranks: the rank-averaged gradient is {_scale(c, resid)} the "
            f"full-batch gradient at W = {W}{confirm}. Normalise by the global count (global_num_tokens, "
            "or all-reduce rank_num_tokens over process_group)"
        )
    return (
        f"the gradient at W = {W}, M = {M} is {_scale(c, resid)} the full-batch gradient, although it is "
        f"right at W = 1, M = {M} and at W = {W}, M = 1: the normaliser depends on ranks and "
        "micro-batches jointly"
    )


# ---------------------------------------------------------------------------
# the public entry points


def _backend(requested: str, world_size: int) -> str:
    if requested == "auto":
        return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size else "gloo"
    if requested not in ("gloo", "nccl"):
        raise ValueError(f"backend={requested!r} must be 'auto', 'gloo' or 'nccl'")
    return requested


@dataclasses.dataclass(frozen=True)
class ScaleoutJob:
    """One level-5 check for :func:`run_scaleout_many`: :func:`run_scaleout`'s arguments but W and backend.

    >>> ScaleoutJob("sigma_ref.conformance.scaleout:oracle_advantages",
    ...             "sigma_ref.conformance.scaleout:oracle_loss", layout="index").micro_batches
    2
    """

    advantages_target: str
    loss_target: str | None = None
    layout: str | None = None
    micro_batches: int | Sequence[int] = 2
    split: str = "whole-groups"
    aggregation: str | None = None
    loss_scale: str = "none"
    timeout: float = 120.0
    seed: int = 0
    aggregation_constant: float | None = None
    output: str | int | None = None
    sizes: str = "uneven"
    steps_per_generation: int = 1
    mask_truncated: bool = False
    pad_value: float | None = None
    packing: str = "none"
    advantage_scale: str = "none"
    advantage_scale_on: str = "step"
    advantage_scaler: str | None = None
    framework: str = "auto"
    loss_precision: str = "float64"


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """A validated job: what the ranks run (``config``) and what the analysis needs."""

    job: ScaleoutJob
    config: _JobConfig
    batch: _Batch
    world_size: int
    Ms: tuple[int, ...]


def _prepare(job: ScaleoutJob, world_size: int) -> _Prepared:
    """Validate one job (every usage error raises here, before any process starts) and plan it."""
    micro_batches = job.micro_batches
    Ms = (micro_batches,) if isinstance(micro_batches, int) else tuple(micro_batches)
    if not Ms or not all(isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in Ms):
        raise ValueError(f"micro_batches={micro_batches!r} must be a positive int or a sequence of them")
    Ms = tuple(sorted(set(Ms)))
    split, loss_scale, aggregation = job.split, job.loss_scale, job.aggregation
    if split not in SPLITS:
        raise ValueError(f"split={split!r} must be one of {SPLITS}")
    if loss_scale not in LOSS_SCALES:
        raise ValueError(f"loss_scale={loss_scale!r} must be one of {LOSS_SCALES}")
    if job.sizes not in SIZES:
        raise ValueError(
            f"sizes={job.sizes!r} must be one of {SIZES} (uneven: ranks and micro-batches hold different "
            "numbers of responses, as verl's use_dynamic_bsz; equal: a fixed per-device batch, as TRL's)"
        )
    steps = job.steps_per_generation
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(
            f"steps_per_generation={steps!r} must be a positive int: the optimizer steps one generation "
            "batch is cut into (TRL's steps_per_generation, verl's ppo_mini_batch_size ratio)"
        )
    if aggregation is not None and aggregation not in (*AGGREGATION_MODES, PROMPT_MEAN):
        raise ValueError(
            f"aggregation={aggregation!r} must be one of {(*AGGREGATION_MODES, PROMPT_MEAN)} or None (detect)"
        )
    constant = job.aggregation_constant
    if constant is not None and not (
        isinstance(constant, int | float) and math.isfinite(constant) and constant > 0
    ):
        raise ValueError(
            f"aggregation_constant={constant!r} must be a positive number (the C of "
            "seq-mean-token-sum-norm, e.g. the padded length) or None"
        )
    for name, target in (("advantages_target", job.advantages_target), ("loss_target", job.loss_target)):
        if target is not None and not isinstance(target, str):
            raise TypeError(
                f"{name}={target!r} must be a 'pkg.module:attr' string: the ranks are separate processes "
                "that import it"
            )
    if job.output is not None and not isinstance(job.output, str | int):
        raise TypeError(f"output={job.output!r} must be a key or an index (the ranks read it from a file)")
    adapter, loss_fn = _resolve(  # fail fast (a bad --framework too)
        job.advantages_target, job.layout, job.loss_target, job.output, job.framework
    )
    layout = adapter.layout
    if split == "split-groups" and layout not in ("index", "token"):
        raise ValueError(
            f"split='split-groups' needs layout 'index' or 'token' (a {layout!r} function cannot receive "
            "part of a group)"
        )
    if loss_fn is not None:
        check_packing(job.packing, _declared(loss_fn, 4, _LOSS_VOCABULARY, "the loss"))
    else:
        check_packing(job.packing, None)
    if job.advantage_scale not in ADVANTAGE_SCALE_MODES:
        raise ValueError(
            f"advantage_scale={job.advantage_scale!r} must be one of {tuple(ADVANTAGE_SCALE_MODES)} "
            "(the count the trainer divides each advantage by before a token-sum loss)"
        )
    if job.advantage_scale_on not in ADVANTAGE_SCALE_SCOPES:
        raise ValueError(
            f"advantage_scale_on={job.advantage_scale_on!r} must be one of {ADVANTAGE_SCALE_SCOPES}: the "
            "batch whose counts the advantages are divided by"
        )
    if job.advantage_scale != "none" and loss_fn is None:
        raise ValueError(
            f"advantage_scale={job.advantage_scale!r} scales the advantages a loss gets: give a loss (--loss)"
        )
    if job.advantage_scaler is not None:
        if not isinstance(job.advantage_scaler, str):
            raise TypeError(
                f"advantage_scaler={job.advantage_scaler!r} must be a 'pkg.module:attr' string: the ranks "
                "are separate processes that import it"
            )
        if job.advantage_scale != "none":
            raise ValueError(
                f"advantage_scaler={job.advantage_scaler!r} and advantage_scale={job.advantage_scale!r} both "
                "scale the advantages: give one (the trainer's own function, or the count it divides by)"
            )
        if loss_fn is None:
            raise ValueError(
                f"advantage_scaler={job.advantage_scaler!r} scales the advantages a loss gets: give a loss "
                "(--loss)"
            )
        load_object(job.advantage_scaler, what="advantage_scaler")  # fail fast
    _advantage_globals(adapter)
    if job.loss_precision not in LOSS_PRECISION_RTOL:
        raise ValueError(
            f"loss_precision={job.loss_precision!r} must be one of {tuple(LOSS_PRECISION_RTOL)}: the "
            "precision the loss computes its gradient in (tunix: float32)"
        )
    if not isinstance(job.mask_truncated, bool):
        raise TypeError(f"mask_truncated={job.mask_truncated!r} must be a bool")
    if job.pad_value is not None and not isinstance(job.pad_value, int | float):
        raise TypeError(f"pad_value={job.pad_value!r} must be a float (e.g. float('nan')) or None")
    batch = _job_batch(job.seed, _n_groups(world_size, job.sizes), job.mask_truncated)
    per_rank = min(len(_shard_rows(batch, world_size, r, split, job.sizes)) for r in range(world_size))
    if max(Ms) > per_rank:
        raise ValueError(
            f"micro_batches={max(Ms)} exceeds the {per_rank} responses a rank holds at "
            f"world_size={world_size}; use at most {per_rank}"
        )
    W = world_size
    plan: list[_Key] = [(1, 1, "whole-groups")]
    for M in Ms:
        plan.append((W, M, split))
        if M > 1:
            plan += [(1, M, "whole-groups")] + ([(1, M + 1, "whole-groups")] if M + 1 <= batch.n else [])
        if W > 1 and M > 1:
            plan.append((W, 1, split))
    if split == "split-groups":
        plan.append((W, max(Ms), "whole-groups"))
    config: _JobConfig = {
        "impl": job.advantages_target,
        "loss": job.loss_target,
        "layout": job.layout,
        "output": job.output,
        "seed": job.seed,
        "aggregation": aggregation,
        "loss_scale": loss_scale,
        "plan": list(dict.fromkeys(plan)),
        "sizes": job.sizes,
        "steps_per_generation": steps,
        "mask_truncated": job.mask_truncated,
        "pad_value": None if job.pad_value is None else float(job.pad_value),
        "packing": job.packing,
        "advantage_scale": job.advantage_scale,
        "advantage_scale_on": job.advantage_scale_on,
        "advantage_scaler": job.advantage_scaler,
        "aggregation_constant": None if constant is None else float(constant),
        "framework": job.framework,
    }
    return _Prepared(job, config, batch, W, Ms)


def run_scaleout_many(
    jobs: Sequence[ScaleoutJob],
    *,
    world_size: int = 2,
    backend: str = "auto",
    rendezvous_host: str = RENDEZVOUS_HOST,
) -> list[ScaleoutReport]:
    """Run several level-5 checks on one launch of ``world_size`` processes; one report per job, in order.

    The ranks start once (the torch import, seconds, instead of milliseconds of work per job) and
    run the jobs one after another, each exactly as :func:`run_scaleout` runs it alone: the same
    designed batch, the same plan, the same results, messages and factors. Every job is validated
    before any process starts (a usage error raises, as in :func:`run_scaleout`). A job whose rank
    raises or hangs gets the FAIL it gets alone (the rank and its exception; where every rank was,
    after the job's own ``timeout``, which counts from the end of the job before it); every process
    is killed and the jobs after it run in fresh processes, so their verdicts are their own.
    ``rendezvous_host``: where rank 0's store listens (loopback unless a multi-host run needs more).
    ``ScaleoutReport.seconds`` is the job's share of the wall time: from the end of the job before
    it (the first: from the start) to the end of its analysis.

    What a batch shares is the processes: modules the jobs import stay imported, so code under test
    that keeps state between calls (a module-level counter, a global torch setting changed on
    import) sees what the jobs before it left; check such code alone with :func:`run_scaleout`.

    Example (two processes, started once for both jobs)::

        adv = "sigma_ref.conformance.scaleout:oracle_advantages"
        loss = "sigma_ref.conformance.scaleout:oracle_loss"
        reports = run_scaleout_many([ScaleoutJob(adv, loss, layout="index", aggregation=mode)
                                     for mode in ("token-mean", "token-sum")], world_size=2)
        assert all(r.passed for r in reports)
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be a positive int")
    prepared = [_prepare(job, world_size) for job in jobs]
    backend = _backend(backend, world_size)
    start = time.monotonic()
    if not prepared:
        return []
    if not isinstance(rendezvous_host, str) or not rendezvous_host:
        raise ValueError(
            f"rendezvous_host={rendezvous_host!r} must be an address to listen on, e.g. {RENDEZVOUS_HOST!r}"
        )
    outcomes = _run_jobs(
        world_size, backend, [p.config for p in prepared], [p.job.timeout for p in prepared], rendezvous_host
    )
    reports: list[ScaleoutReport] = []
    since = start
    for p, (outcome, ended) in zip(prepared, outcomes, strict=True):
        analysed = time.monotonic()
        W, Ms = p.world_size, p.Ms
        if isinstance(outcome, _RunError):
            prop = f"scaleout[W={W},M={','.join(map(str, Ms))}]"
            results = [ScaleoutResult(prop, "FAIL", None, outcome.message)]
        else:
            runs = {key: r for key, r in zip(p.config["plan"], outcome, strict=True) if r is not None}
            results = _analyse(
                runs,
                p.batch,
                W=W,
                Ms=Ms,
                split=p.job.split,
                aggregation=p.job.aggregation,
                loss_scale=p.job.loss_scale,
                constant=p.job.aggregation_constant,
                sizes=p.job.sizes,
                counts=_outside_counts(p.config, int(p.batch.index.max()) + 1),
                pad_value=p.job.pad_value,
                packing=p.job.packing,
                lengths=_lengths(p.job.seed, int(p.batch.index.max()) + 1),
                advantage_scale=p.job.advantage_scale,
                advantage_scale_on=p.job.advantage_scale_on,
                loss_precision=p.job.loss_precision,
            )
        seconds = (ended - since) + (time.monotonic() - analysed)
        reports.append(ScaleoutReport(tuple(results), W, Ms, backend, seconds))
        since = ended
    return reports


def run_scaleout(
    advantages_target: str,
    loss_target: str | None = None,
    *,
    layout: str | None = None,
    world_size: int = 2,
    micro_batches: int | Sequence[int] = 2,
    split: str = "whole-groups",
    aggregation: str | None = None,
    loss_scale: str = "none",
    timeout: float = 120.0,
    seed: int = 0,
    backend: str = "auto",
    aggregation_constant: float | None = None,
    output: str | int | None = None,
    rendezvous_host: str = RENDEZVOUS_HOST,
    sizes: str = "uneven",
    steps_per_generation: int = 1,
    mask_truncated: bool = False,
    pad_value: float | None = None,
    packing: str = "none",
    advantage_scale: str = "none",
    advantage_scale_on: str = "step",
    advantage_scaler: str | None = None,
    framework: str = "auto",
    loss_precision: str = "float64",
) -> ScaleoutReport:
    """Run the level-5 check on ``world_size`` real processes (module doc); a :class:`ScaleoutReport`.

    ``advantages_target``/``loss_target``: ``pkg.module:attr`` strings (child processes import
    them; an :class:`~sigma_ref.conformance.Adapter` may carry the loss and layout).
    ``micro_batches``: M, or several (``(1, 2, 3)``: one verdict each, in the same processes).
    ``split``: ``whole-groups`` or ``split-groups`` (then only layout ``index`` fits).
    ``aggregation``: the declared mode (one of :data:`AGGREGATION_MODES`) or None to detect.
    ``aggregation_constant``: the ``C`` of a declared ``seq-mean-token-sum-norm``, whose weights are
    the oracle's ``1 / (N_seq C)``; None means ``C = T``, the padded length (verl's and TRL's
    default).
    ``sizes``: ``uneven`` (ranks and micro-batches hold different numbers of responses and tokens)
    or ``equal`` (:mod:`~.normalisers`). ``steps_per_generation``: S, the optimizer steps of one
    generation batch; the judged step's loss may ask for ``generation_num_tokens``/``_seqs``, the
    counts of all S steps' batches, and must not normalise by them. ``mask_truncated``: the
    responses reaching the padded length lose their mask (TRL's ``mask_truncated_completions``):
    counts must be of the mask the loss gets. ``pad_value``: fill ``logp`` (and so ``old_logp``) at
    masked positions with it (``float('nan')``, ``float('inf')``): the loss must not let it through.
    ``packing``: ``none``, ``position_ids`` or ``cu_seqlens``: call the loss on packed rows with
    the responses' boundaries by that keyword (:mod:`~.packing`). ``advantage_scale``: hand the
    loss ``s_i A_i`` (:func:`~.normalisers.advantage_scales`) with the counts of
    ``advantage_scale_on`` (``step``, ``rank``, ``micro-batch``); the loss is then a token sum.
    ``advantage_scaler``: instead, the trainer's own pre-scaling function (``pkg.module:attr``,
    :func:`~.normalisers.call_advantage_scaler`), called on the mask of ``advantage_scale_on``'s batch.
    ``loss_scale``: the trainer's reading as the user declares it (module doc); the check measures
    both readings and judges the one the loss is right under (the declaration is reported). A hung or crashed
    rank ends the check within ``timeout`` seconds with a FAIL; every process is killed.
    ``output``: where the advantages are in the result (a key or an index, the Adapter's ``output``).
    ``loss_target=None`` (and no loss on the Adapter): only the advantages are checked.
    ``rendezvous_host``: where rank 0's store listens (default loopback only; module doc).
    ``framework``: ``auto``, ``torch`` or ``jax``, as ``sigma-ref check --framework``: JAX code runs
    in the ranks behind the bridge (module doc, **JAX code**). ``loss_precision``: ``float64`` or
    ``float32``, the precision the loss computes its gradient in; every gradient comparison is made
    at its tolerance (:data:`LOSS_PRECISION_RTOL`).

    Performance: one check starts W processes once (torch import, ~2-4 s each) and runs every
    configuration it needs in them: (1, 1), (W, M) and the probes (1, M), (1, M + 1), (W, 1).
    Several checks at the same W: :func:`run_scaleout_many` starts the processes once for all
    (this function is its one-job case).

    Example (starts two processes, a few seconds)::

        report = run_scaleout("sigma_ref.conformance.scaleout:oracle_advantages",
                              "sigma_ref.conformance.scaleout:oracle_loss", layout="index",
                              aggregation="token-mean", world_size=2, micro_batches=(1, 2, 3))
        assert report.passed, report.summary()
    """
    job = ScaleoutJob(
        advantages_target,
        loss_target,
        layout=layout,
        micro_batches=micro_batches,
        split=split,
        aggregation=aggregation,
        loss_scale=loss_scale,
        timeout=timeout,
        seed=seed,
        aggregation_constant=aggregation_constant,
        output=output,
        sizes=sizes,
        steps_per_generation=steps_per_generation,
        mask_truncated=mask_truncated,
        pad_value=pad_value,
        packing=packing,
        advantage_scale=advantage_scale,
        advantage_scale_on=advantage_scale_on,
        advantage_scaler=advantage_scaler,
        framework=framework,
        loss_precision=loss_precision,
    )
    (report,) = run_scaleout_many(
        [job], world_size=world_size, backend=backend, rendezvous_host=rendezvous_host
    )
    return report


# ---------------------------------------------------------------------------
# command line


def add_scaleout_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the level-5 options (``--world-size``, ``--micro-batches``, ``--split``, ``--loss-scale``,
    ``--packing``, ``--advantage-scale``, ``--advantage-scale-on``, ``--scaleout-timeout``,
    ``--backend``, ``--rendezvous-host``, ...) from the one option table, ``sigma_ref._options``."""
    from .._options import add_to_argparse

    add_to_argparse(
        parser.add_argument_group("scale-out (level 5, real torch.distributed processes)"),
        group="scale-out",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sigma_ref.conformance.scaleout --impl ... --loss ...``: print; exit 0 iff it passes."""
    p = argparse.ArgumentParser(
        prog="python -m sigma_ref.conformance.scaleout",
        description="Check an advantage function and loss under micro-batching, gradient accumulation and "
        "data-parallel ranks, on real torch.distributed processes.",
    )
    p.add_argument("--impl", required=True, help="pkg.module:attr of the advantage function (or an Adapter)")
    p.add_argument("--layout", choices=LAYOUTS, help="how the advantage function is called")
    p.add_argument("--loss", help="pkg.module:attr of loss(logp, old_logp, advantages, mask, **globals)")
    p.add_argument(
        "--aggregation",
        choices=(*AGGREGATION_MODES, PROMPT_MEAN),
        help="the declared aggregation (default: detect)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the designed batch")
    add_scaleout_arguments(p)
    args = p.parse_args(argv)
    if args.world_size is None and args.micro_batches is None:
        args.world_size, args.micro_batches = 2, 2
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        report = run_scaleout(
            args.impl,
            args.loss,
            layout=args.layout,
            world_size=args.world_size or 1,
            micro_batches=args.micro_batches or 1,
            split=args.split,
            aggregation=args.aggregation,
            loss_scale=args.loss_scale,
            timeout=args.scaleout_timeout,
            seed=args.seed,
            backend=args.backend,
            rendezvous_host=args.rendezvous_host,
            sizes=args.split_sizes,
            steps_per_generation=args.steps_per_generation,
            mask_truncated=args.mask_truncated,
            pad_value=args.pad_value,
            packing=args.packing,
            advantage_scale=args.advantage_scale,
            advantage_scale_on=args.advantage_scale_on,
        )
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
