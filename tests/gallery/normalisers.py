"""Level-5 gallery: the normaliser patterns trainers ship, each written wrong as a trainer would and right.

Each loss has the scale-out signature ``loss(logp, old_logp, advantages, mask, **globals)`` and
takes the global quantities it needs by keyword (``sigma_ref.conformance.scaleout.GLOBALS``),
as a trainer's loss gets them from its trainer: TRL's ``num_items_in_batch`` and
``num_processes``, verl's ``global_batch_info`` (``dp_size``, ``batch_num_tokens``,
``global_batch_size``), the Hugging Face Trainer's division by the accumulation steps. Written
from the trainers' descriptions and from reading TRL 1.16 ``GRPOTrainer._compute_loss``,
verl's ``agg_loss`` and SkyRL's ``loss_reduction="prompt_mean"``
(``apply_loss_reduction_to_advantages_minibatch``, which needs ``global_num_prompts`` and
``prompt_num_tokens``); none is a copy.

:data:`PATTERNS` lists, for each pattern, its wrong and correct entries with the knobs the
check runs them under (:class:`Entry`) and the class the wrong one must be named with.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist

M = "tests.gallery.normalisers"


def _surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """PPO's clipped surrogate per token, ``-min(r A, clip(r, 0.8, 1.2) A)``, as every trainer writes it."""
    coef_1 = torch.exp(logp - old_logp)
    coef_2 = torch.clamp(coef_1, 0.8, 1.2)
    adv = advantages.unsqueeze(1)
    return -torch.min(coef_1 * adv, coef_2 * adv)


# ---------------------------------------------------------------------------
# 1. several optimizer steps per generation batch (TRL steps_per_generation)


def step_items_loss(logp, old_logp, advantages, mask, *, global_num_tokens, world_size):  # type: ignore[no-untyped-def]
    """TRL ``dapo``: ``num_items_in_batch`` counted over the optimizer step's batch (every process,
    every accumulation step), divided by ``num_processes``."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    normalizer = global_num_tokens / world_size
    return (per_token_loss * mask).sum() / normalizer


def generation_items_loss(logp, old_logp, advantages, mask, *, generation_num_tokens, world_size):  # type: ignore[no-untyped-def]
    """``num_items_in_batch`` counted once over the whole generation batch and reused for each of
    its ``steps_per_generation`` optimizer steps: every step's update shrinks by its share."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    normalizer = generation_num_tokens / world_size
    return (per_token_loss * mask).sum() / normalizer


# ---------------------------------------------------------------------------
# 2. accumulation division applied twice (verl's agg_loss with global counts, then / gas)


def _verl_seq_mean(loss_mat, loss_mask, global_batch_size, dp_size):  # type: ignore[no-untyped-def]
    seq_losses = (loss_mat * loss_mask).sum(dim=-1) / loss_mask.sum(dim=-1).clamp(min=1.0)
    seq_mask = (loss_mask.sum(dim=-1) > 0).float()
    return (seq_losses * seq_mask).sum() / global_batch_size * dp_size


def verl_global_loss(logp, old_logp, advantages, mask, *, global_num_seqs, dp_size):  # type: ignore[no-untyped-def]
    """verl ``seq-mean-token-mean`` with ``global_batch_size`` (the mini-batch's responses on every
    rank) and ``dp_size``: the micro-batch losses add up to the step's loss, nothing else divides."""
    pg_losses = _surrogate(logp, old_logp, advantages)
    return _verl_seq_mean(pg_losses, mask, global_num_seqs, dp_size)


def verl_global_loss_divided(logp, old_logp, advantages, mask, *, global_num_seqs, dp_size, micro_batches):  # type: ignore[no-untyped-def]
    """The same, then ``loss / gradient_accumulation`` as before the global normaliser: divided twice."""
    pg_losses = _surrogate(logp, old_logp, advantages)
    loss = _verl_seq_mean(pg_losses, mask, global_num_seqs, dp_size)
    return loss / micro_batches


# ---------------------------------------------------------------------------
# 3. uneven splits: a mean of per-micro-batch means (verl use_dynamic_bsz, HF Trainer's 1/gas)


def micro_token_mean(logp, old_logp, advantages, mask):  # type: ignore[no-untyped-def]
    """``masked_mean`` over the micro-batch, the trainer divides by the accumulation steps and DDP
    averages: exact only when every micro-batch on every rank holds as many tokens."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)


def micro_seq_mean(logp, old_logp, advantages, mask):  # type: ignore[no-untyped-def]
    """TRL ``grpo`` (per-response token mean, mean over the micro-batch's responses) under the
    trainer's 1/gas, with micro-batches of different sizes (dynamic batch size)."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def items_token_mean(logp, old_logp, advantages, mask, *, global_num_tokens, world_size, micro_batches):  # type: ignore[no-untyped-def]
    """The fix under the trainer's 1/gas: the token sum over ``num_items_in_batch / num_processes``,
    times the accumulation steps the trainer divides by again."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    return (per_token_loss * mask).sum() / (global_num_tokens / world_size) * micro_batches


def verl_dynamic_seq_mean(logp, old_logp, advantages, mask, *, global_num_seqs, dp_size):  # type: ignore[no-untyped-def]
    """verl ``seq-mean-token-mean`` over ``global_batch_size``: right for any micro-batch sizes."""
    return verl_global_loss(
        logp, old_logp, advantages, mask, global_num_seqs=global_num_seqs, dp_size=dp_size
    )


# ---------------------------------------------------------------------------
# 4. a count taken before the mask changed (mask_truncated_completions)


def rows_seq_mean(logp, old_logp, advantages, mask, *, rank_num_seqs, process_group, world_size):  # type: ignore[no-untyped-def]
    """Sequence mean over the responses counted when the batch was built (all-reduced), before the
    truncated responses lost their mask: they still count in the denominator."""
    n = torch.tensor(float(rank_num_seqs), dtype=logp.dtype, device=logp.device)
    dist.all_reduce(n, op=dist.ReduceOp.SUM, group=process_group)
    per_token_loss = _surrogate(logp, old_logp, advantages)
    seq = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return seq.sum() / n * world_size


def masked_seq_mean(logp, old_logp, advantages, mask, *, global_num_seqs, world_size):  # type: ignore[no-untyped-def]
    """The responses with a token left in the mask the loss is applied with (``global_batch_size``
    computed after the truncation mask, over every rank and micro-batch)."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    seq = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return seq.sum() / global_num_seqs * world_size


# ---------------------------------------------------------------------------
# 5. NaN or inf at masked positions


def multiplies_by_mask(logp, old_logp, advantages, mask, *, global_num_tokens, world_size):  # type: ignore[no-untyped-def]
    """The token sum as ``(loss * mask).sum()``: a NaN at a padded position survives (NaN * 0)."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    return (per_token_loss * mask).sum() / global_num_tokens * world_size


def selects_before_arithmetic(logp, old_logp, advantages, mask, *, global_num_tokens, world_size):  # type: ignore[no-untyped-def]
    """The padded positions replaced before any arithmetic (``masked_fill``), so neither the loss nor
    its gradient sees them."""
    keep = mask.bool()
    logp = logp.masked_fill(~keep, 0.0)
    old_logp = old_logp.masked_fill(~keep, 0.0)
    per_token_loss = _surrogate(logp, old_logp, advantages)
    return per_token_loss.masked_fill(~keep, 0.0).sum() / global_num_tokens * world_size


# ---------------------------------------------------------------------------
# 6. sequence packing: several responses per row (position_ids or cu_seqlens)


def _segment_of_slot_from_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """The response each slot of the flattened rows belongs to: one starts wherever the ids restart at 0
    (a row's padding tail keeps counting, so it stays with the row's last response)."""
    return torch.cumsum((position_ids.reshape(-1) == 0).long(), 0) - 1


def _segment_of_slot_from_cu_seqlens(cu_seqlens: torch.Tensor, numel: int) -> torch.Tensor:
    """The response of each slot: segment k covers ``[cu_seqlens[k], cu_seqlens[k + 1])``."""
    slots = torch.arange(numel, device=cu_seqlens.device)
    return torch.searchsorted(cu_seqlens[1:].long().contiguous(), slots, right=True)


def _packed_surrogate(logp, old_logp, advantages, segment):  # type: ignore[no-untyped-def]
    """The clipped surrogate per slot, each token with its own response's advantage."""
    adv = advantages[segment].reshape(logp.shape)
    coef_1 = torch.exp(logp - old_logp)
    return -torch.min(coef_1 * adv, torch.clamp(coef_1, 0.8, 1.2) * adv)


def _per_response_mean(per_token, mask, segment, n):  # type: ignore[no-untyped-def]
    """Each response's token mean: the slots' sums gathered by segment, over its unmasked tokens."""
    sums = torch.zeros(n, dtype=per_token.dtype, device=per_token.device)
    sums = sums.index_add(0, segment, (per_token * mask).reshape(-1))
    tokens = torch.zeros(n, dtype=mask.dtype, device=mask.device).index_add(0, segment, mask.reshape(-1))
    return sums / tokens.clamp(min=1.0)


def packed_seq_mean(logp, old_logp, advantages, mask, *, position_ids, global_num_seqs, world_size):  # type: ignore[no-untyped-def]
    """seq-mean-token-mean on packed rows: split at the position_ids restarts, each response's own token
    mean, summed over the global response count (times W)."""
    segment = _segment_of_slot_from_position_ids(position_ids)
    per_token = _packed_surrogate(logp, old_logp, advantages, segment)
    seq = _per_response_mean(per_token, mask, segment, advantages.shape[0])
    return seq.sum() / global_num_seqs * world_size


def packed_seq_mean_varlen(logp, old_logp, advantages, mask, *, cu_seqlens, global_num_seqs, world_size):  # type: ignore[no-untyped-def]
    """The same with flash-attn's varlen boundaries (cumulative lengths over the flattened rows)."""
    segment = _segment_of_slot_from_cu_seqlens(cu_seqlens, logp.numel())
    per_token = _packed_surrogate(logp, old_logp, advantages, segment)
    seq = _per_response_mean(per_token, mask, segment, advantages.shape[0])
    return seq.sum() / global_num_seqs * world_size


def packed_row_seq_mean(logp, old_logp, advantages, mask, *, position_ids, global_num_seqs, world_size):  # type: ignore[no-untyped-def]
    """The unpadded loss reused on packed rows: ``masked_mean(loss, mask, dim=-1)`` per row, as for one
    response per row; the responses sharing a row share one token mean."""
    segment = _segment_of_slot_from_position_ids(position_ids)
    per_token = _packed_surrogate(logp, old_logp, advantages, segment)
    row_mean = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return row_mean.sum() / global_num_seqs * world_size


# ---------------------------------------------------------------------------
# 7. the aggregation folded into the advantages, then a token-sum loss


def prescaled_token_sum(logp, old_logp, advantages, mask, *, world_size):  # type: ignore[no-untyped-def]
    """The trainer divided the advantages already: the loss is the plain token sum (times W)."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    return (per_token_loss * mask).sum() * world_size


def prescaled_token_mean(logp, old_logp, advantages, mask, *, global_num_tokens, world_size):  # type: ignore[no-untyped-def]
    """The usual token-mean loss kept after the trainer started dividing the advantages by the step's
    token count: the sum is normalised twice."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    return (per_token_loss * mask).sum() / global_num_tokens * world_size


# ---------------------------------------------------------------------------
# 8. prompt-mean: a token mean per prompt group, then a mean over the prompts (SkyRL's
# loss_reduction=prompt_mean scales each advantage by 1 / (num_prompts * prompt_tokens) over the
# mini-batch, from the prompt boundaries, before the workers cut micro-batches)


def prompt_mean_loss(logp, old_logp, advantages, mask, *, prompt_num_tokens, global_num_prompts, world_size):  # type: ignore[no-untyped-def]
    """Each token over its prompt's tokens in the step and the step's prompt count, then a token sum
    (times W): ``sum_it l_it m_it / (P N_tok(g(i)))`` adds up to the step's prompt-mean."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    weights = mask / (global_num_prompts * prompt_num_tokens).unsqueeze(1)
    return (per_token_loss * weights).sum() * world_size


def micro_prompt_mean(logp, old_logp, advantages, mask, *, prompt_index):  # type: ignore[no-untyped-def]
    """prompt-mean computed on the micro-batch it is given: a loop over the prompts it holds, each a
    token mean, then their mean; the trainer divides by the accumulation steps and DDP averages. A
    mean of per-micro-batch prompt means, exact only when every micro-batch holds the same prompts."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    losses = []
    for prompt in torch.unique(prompt_index):
        rows = prompt_index == prompt
        tokens = mask[rows].sum()
        if tokens > 0:
            losses.append((per_token_loss[rows] * mask[rows]).sum() / tokens)
    return torch.stack(losses).mean()


def straddling_prompt_mean(logp, old_logp, advantages, mask, *, prompt_index, global_num_prompts, world_size):  # type: ignore[no-untyped-def]
    """The step's prompt count, but each prompt's tokens summed over the rows this micro-batch holds
    (prompt boundaries taken within the micro-batch): a group cut by a micro-batch boundary counts
    only its part's tokens, so each part weighs as a whole prompt."""
    per_token_loss = _surrogate(logp, old_logp, advantages)
    _, inverse = torch.unique(prompt_index, return_inverse=True)
    tokens = torch.zeros(int(inverse.max()) + 1, dtype=mask.dtype, device=mask.device)
    tokens = tokens.index_add(0, inverse, mask.sum(-1))
    weights = mask / (global_num_prompts * tokens[inverse]).unsqueeze(1)
    return (per_token_loss * weights).sum() * world_size


# ---------------------------------------------------------------------------
# the entries


@dataclasses.dataclass(frozen=True)
class Entry:
    """One gallery loss with the knobs the check runs it under, and for a wrong one the class."""

    name: str
    loss: str
    aggregation: str
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    expect: str = ""
    #: the class as named with several ranks, where it is told from its one-rank twins (default: expect)
    expect_at_ranks: str = ""

    def kwargs(self) -> dict[str, Any]:
        """``run_scaleout``/``ScaleoutJob`` keyword arguments (besides W and M)."""
        return {"layout": "index", "aggregation": self.aggregation, **self.options}


_S2 = {"steps_per_generation": 2}
_MEAN = {"loss_scale": "mean-over-micro-batches"}
_TRUNC = {"mask_truncated": True}
_NAN = {"pad_value": float("nan")}
_INF = {"pad_value": float("inf")}
_PACKED = {"packing": "position_ids"}
_VARLEN = {"packing": "cu_seqlens"}
_BATCH_TOKENS = {"advantage_scale": "batch-tokens"}
_OWN_TOKENS = {"advantage_scale": "sequence-tokens"}
_MICRO_TOKENS = {"advantage_scale": "batch-tokens", "advantage_scale_on": "micro-batch"}

#: pattern -> (wrong entries, correct entries)
PATTERNS: dict[str, tuple[list[Entry], list[Entry]]] = {
    "steps per generation batch": (
        [
            Entry(
                "generation_items_loss",
                f"{M}:generation_items_loss",
                "token-mean",
                _S2,
                "counted over the generation batch, not the optimizer step's batch",
            )
        ],
        [Entry("step_items_loss", f"{M}:step_items_loss", "token-mean", _S2)],
    ),
    "accumulation division applied twice": (
        [
            Entry(
                "verl_global_loss_divided",
                f"{M}:verl_global_loss_divided",
                "seq-mean-token-mean",
                {},
                "accumulation division applied twice",
            )
        ],
        [Entry("verl_global_loss", f"{M}:verl_global_loss", "seq-mean-token-mean")],
    ),
    "uneven splits": (
        [
            Entry(
                "micro_token_mean",
                f"{M}:micro_token_mean",
                "token-mean",
                _MEAN,
                # on one rank a mean over micro-batches and ranks is one over micro-batches: both named
                "normaliser computed per micro-batch",
                "normaliser computed per micro-batch and averaged over micro-batches and ranks",
            ),
            Entry(
                "micro_seq_mean",
                f"{M}:micro_seq_mean",
                "seq-mean-token-mean",
                _MEAN,
                # on one rank a mean over micro-batches and ranks is one over micro-batches: both named
                "normaliser computed per micro-batch",
                "normaliser computed per micro-batch and averaged over micro-batches and ranks",
            ),
        ],
        [
            Entry("items_token_mean", f"{M}:items_token_mean", "token-mean", _MEAN),
            Entry("verl_dynamic_seq_mean", f"{M}:verl_dynamic_seq_mean", "seq-mean-token-mean"),
        ],
    ),
    "count taken before the mask changed": (
        [
            Entry(
                "rows_seq_mean",
                f"{M}:rows_seq_mean",
                "seq-mean-token-mean",
                _TRUNC,
                "count taken before the mask changed",
            )
        ],
        [Entry("masked_seq_mean", f"{M}:masked_seq_mean", "seq-mean-token-mean", _TRUNC)],
    ),
    "NaN or inf at masked positions": (
        [
            Entry(
                "multiplies_by_mask[nan]",
                f"{M}:multiplies_by_mask",
                "token-mean",
                _NAN,
                "with logp = nan at the masked positions: it reaches the loss",
            ),
            Entry(
                "multiplies_by_mask[inf]",
                f"{M}:multiplies_by_mask",
                "token-mean",
                _INF,
                "with logp = inf at the masked positions: it reaches the loss",
            ),
        ],
        [
            Entry("selects_before_arithmetic[nan]", f"{M}:selects_before_arithmetic", "token-mean", _NAN),
            Entry("selects_before_arithmetic[inf]", f"{M}:selects_before_arithmetic", "token-mean", _INF),
        ],
    ),
    "sequence packing": (
        [
            Entry(
                "packed_row_seq_mean",
                f"{M}:packed_row_seq_mean",
                "seq-mean-token-mean",
                _PACKED,
                "packed_row_seq_mean: a token mean per packed row, not per response",
            )
        ],
        [
            Entry("packed_seq_mean", f"{M}:packed_seq_mean", "seq-mean-token-mean", _PACKED),
            Entry("packed_seq_mean_varlen", f"{M}:packed_seq_mean_varlen", "seq-mean-token-mean", _VARLEN),
        ],
    ),
    "aggregation folded into the advantages": (
        [
            Entry(
                "scaled_per_micro_batch",
                f"{M}:prescaled_token_sum",
                "token-mean",
                _MICRO_TOKENS,
                "advantages scaled per micro-batch, not per optimizer step",
            ),
            Entry(
                "scale_by_own_tokens",
                f"{M}:prescaled_token_sum",
                "token-mean",
                _OWN_TOKENS,
                "scale_by_own_tokens: --advantage-scale sequence-tokens folds seq-mean-token-mean",
            ),
            Entry(
                "prescaled_token_mean",
                f"{M}:prescaled_token_mean",
                "token-mean",
                _BATCH_TOKENS,
                "sum normalised twice: the loss applies token-mean's normaliser",
            ),
        ],
        [
            Entry(
                "prescaled_token_sum[batch-tokens]", f"{M}:prescaled_token_sum", "token-mean", _BATCH_TOKENS
            ),
            Entry(
                "prescaled_token_sum[sequence-tokens]",
                f"{M}:prescaled_token_sum",
                "seq-mean-token-mean",
                _OWN_TOKENS,
            ),
        ],
    ),
    "prompt-mean": (
        [
            Entry(
                "micro_prompt_mean",
                f"{M}:micro_prompt_mean",
                "prompt-mean",
                _MEAN,
                # on one rank a mean over micro-batches and ranks is one over micro-batches: both named
                "normaliser computed per micro-batch",
                "normaliser computed per micro-batch and averaged over micro-batches and ranks",
            ),
            Entry(
                "straddling_prompt_mean",
                f"{M}:straddling_prompt_mean",
                "prompt-mean",
                {},
                "prompt's tokens counted per micro-batch",
            ),
        ],
        [Entry("prompt_mean_loss", f"{M}:prompt_mean_loss", "prompt-mean")],
    ),
}
WRONG: list[Entry] = [e for wrong, _ in PATTERNS.values() for e in wrong]
CORRECT: list[Entry] = [e for _, correct in PATTERNS.values() for e in correct]


# ---------------------------------------------------------------------------
# the trainer's own pre-scaling function (--advantage-scaler), for a token-sum loss


def scale_by_batch_tokens(mask):  # type: ignore[no-untyped-def]
    """Each token's factor ``1 / N_tok`` of the batch it is given, the way a trainer's driver writes
    it before the workers split the batch (SkyRL's ``token_mean``)."""
    return torch.ones_like(mask) / mask.sum().clamp(min=1)


def scale_by_micro_batch_tokens(mask, *, world_size, micro_batches):  # type: ignore[no-untyped-def]
    """``1 / N_tok`` of each of the ``W M`` equal chunks of the batch, over ``W M``: the mean of
    per-micro-batch token means (SkyRL's ``token_mean_legacy``, verl's old default)."""
    chunks = world_size * micro_batches
    size = mask.shape[0] // chunks
    out = torch.zeros_like(mask)
    for c in range(chunks):
        part = mask[c * size : (c + 1) * size]
        out[c * size : (c + 1) * size] = 1.0 / part.sum().clamp(min=1) / chunks
    return out
