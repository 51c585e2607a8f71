"""Losses and advantage functions for the scale-out check (level 5), correct and wrong.

Each loss has the suite's signature ``loss(logp, old_logp, advantages, mask, **globals)``
and declares the global quantities it needs by keyword (``sigma_ref.conformance.scaleout.
GLOBALS``). The harness averages gradients over ranks as DDP does, so a loss whose pieces
must add up to the global loss multiplies by ``world_size``.

:data:`CASES` lists every entry with how to run it and, for the wrong ones, the words the
check must say.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch
import torch.distributed as dist

M = "tests.gallery.scaleout_losses"


def _per_token(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """PPO's clipped surrogate per token, ``-min(r A, clip(r, 0.8, 1.2) A)``."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    return -torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv)


# ---------------------------------------------------------------------------
# correct: one per aggregation mode, global normalisers


def token_mean(logp, old_logp, advantages, mask, *, global_num_tokens, world_size):  # type: ignore[no-untyped-def]
    """token-mean: the micro-batch's token sum over the global token count, times W (DDP averages)."""
    return (_per_token(logp, old_logp, advantages) * mask).sum() / global_num_tokens * world_size


def seq_mean_token_mean(logp, old_logp, advantages, mask, *, global_num_seqs, world_size):  # type: ignore[no-untyped-def]
    """seq-mean-token-mean: each response's token mean, summed, over the global response count."""
    seq = (_per_token(logp, old_logp, advantages) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return seq.sum() / global_num_seqs * world_size


def seq_mean_token_sum(logp, old_logp, advantages, mask, *, global_num_seqs, world_size):  # type: ignore[no-untyped-def]
    """seq-mean-token-sum: each response's token sum, summed, over the global response count."""
    return (_per_token(logp, old_logp, advantages) * mask).sum() / global_num_seqs * world_size


def seq_mean_token_sum_norm(logp, old_logp, advantages, mask, *, global_num_seqs, horizon, world_size):  # type: ignore[no-untyped-def]
    """seq-mean-token-sum-norm (Dr. GRPO, verl 0.9.1): the token sum over N_seq * T, both global."""
    return (_per_token(logp, old_logp, advantages) * mask).sum() / (global_num_seqs * horizon) * world_size


def token_sum(logp, old_logp, advantages, mask, *, world_size):  # type: ignore[no-untyped-def]
    """token-sum: no normaliser at all."""
    return (_per_token(logp, old_logp, advantages) * mask).sum() * world_size


def token_mean_all_reduce(logp, old_logp, advantages, mask, *, rank_num_tokens, process_group, world_size):  # type: ignore[no-untyped-def]
    """token-mean that gathers the token count itself: all-reduce the rank's count over the group."""
    n = torch.tensor(float(rank_num_tokens), dtype=logp.dtype, device=logp.device)
    dist.all_reduce(n, op=dist.ReduceOp.SUM, group=process_group)
    return (_per_token(logp, old_logp, advantages) * mask).sum() / n * world_size


def agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None):  # type: ignore[no-untyped-def]
    """verl's ``agg_loss`` with its global normalisers (the shape of verl's core_algos since 2025)."""
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            batch_num_tokens = loss_mask.sum()
        return (loss_mat * loss_mask).sum() / batch_num_tokens * dp_size
    seq_mask = (loss_mask.sum(-1) > 0).to(loss_mat.dtype)
    if global_batch_size is None:
        global_batch_size = seq_mask.sum()
    if loss_agg_mode == "seq-mean-token-sum":
        seq_losses = (loss_mat * loss_mask).sum(-1)
    elif loss_agg_mode == "seq-mean-token-mean":
        seq_losses = (loss_mat * loss_mask).sum(-1) / loss_mask.sum(-1).clamp(min=1.0)
    else:
        raise ValueError(f"loss_agg_mode={loss_agg_mode!r} not in this excerpt")
    return (seq_losses * seq_mask).sum() / global_batch_size * dp_size


def verl_loss(logp, old_logp, advantages, mask, *, aggregation, dp_size, global_num_tokens, global_num_seqs):  # type: ignore[no-untyped-def]
    """verl's policy loss: the per-token surrogate through ``agg_loss`` with the global counts."""
    pg = _per_token(logp, old_logp, advantages)
    loss = agg_loss(
        pg,
        mask,
        aggregation,
        dp_size=dp_size,
        batch_num_tokens=global_num_tokens,
        global_batch_size=global_num_seqs,
    )
    return loss, {"pg_loss": float(loss.detach())}


def trl_dapo_loss(logp, old_logp, advantages, mask, *, global_num_tokens, world_size):  # type: ignore[no-untyped-def]
    """TRL's ``loss_type='dapo'``: normalise by the items of the accumulated batch over all processes.

    ``normalizer = num_items_in_batch / num_processes`` with ``num_items_in_batch`` the unmasked
    tokens of every micro-batch of the step on every process (``global_num_tokens``).
    """
    normalizer = global_num_tokens / world_size
    return (_per_token(logp, old_logp, advantages) * mask).sum() / normalizer


def trl_grpo_loss_mean(logp, old_logp, advantages, mask):  # type: ignore[no-untyped-def]
    """TRL's ``loss_type='grpo'`` (seq-mean-token-mean over the micro-batch), run with the harness's 1/M.

    Correct under ``loss_scale='mean-over-micro-batches'`` when the micro-batches hold equally
    many responses (TRL's fixed ``per_device_train_batch_size``: ``sizes='equal'``); DDP's average
    does the rest. With uneven splits it is a mean of per-micro-batch means
    (``tests/gallery/normalisers.py``).
    """
    seq = (_per_token(logp, old_logp, advantages) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return seq.mean()


# ---------------------------------------------------------------------------
# wrong


def token_mean_micro(logp, old_logp, advantages, mask, *, world_size):  # type: ignore[no-untyped-def]
    """token-mean over the micro-batch's own tokens, accumulated without 1/M: about M times too large."""
    return (_per_token(logp, old_logp, advantages) * mask).sum() / mask.sum() * world_size


def token_mean_rank(logp, old_logp, advantages, mask, *, rank_num_tokens, world_size):  # type: ignore[no-untyped-def]
    """token-mean over the rank's token count (num_items_in_batch not gathered), times num_processes."""
    return (_per_token(logp, old_logp, advantages) * mask).sum() / rank_num_tokens * world_size


def sum_norm_per_micro_batch(logp, old_logp, advantages, mask, *, world_size):  # type: ignore[no-untyped-def]
    """seq-mean-token-sum-norm as verl 0.4.1-0.6.0 wrote it: the token sum over T alone, per micro-batch.

    Run with the trainer's 1/M (``loss_scale='mean-over-micro-batches'``) the update is 1/M of
    the full batch's: it grows with the micro-batch size. Its micro-batch sums add up to its own
    full-batch sum, so the check finds it right under the reading ``none`` and FAILs it on the
    missing ``1/N_seq`` of the declared aggregation.
    """
    return (_per_token(logp, old_logp, advantages) * mask).sum() / mask.shape[-1] * world_size


def token_mean_no_dp_size(logp, old_logp, advantages, mask, *, global_num_tokens):  # type: ignore[no-untyped-def]
    """Global token count, but no factor W: DDP's average leaves 1/W of the update."""
    return (_per_token(logp, old_logp, advantages) * mask).sum() / global_num_tokens


def sleeps_on_rank_1(logp, old_logp, advantages, mask, *, rank, world_size, micro_batch_index):  # type: ignore[no-untyped-def]
    """A hung rank: rank 1 never returns from its first micro-batch of a multi-rank run."""
    if world_size > 1 and rank == 1:
        while True:
            time.sleep(1.0)
    return token_sum(logp, old_logp, advantages, mask, world_size=world_size)


def raises_on_rank_1(logp, old_logp, advantages, mask, *, rank, world_size):  # type: ignore[no-untyped-def]
    """A crashing rank: rank 1 raises in a multi-rank run."""
    if world_size > 1 and rank == 1:
        raise RuntimeError("CUDA out of memory (planted on rank 1)")
    return token_sum(logp, old_logp, advantages, mask, world_size=world_size)


# ---------------------------------------------------------------------------
# advantage functions with groups split across ranks


def _group_stats(rewards: torch.Tensor, index: np.ndarray, process_group=None):  # type: ignore[no-untyped-def]
    ids = torch.as_tensor(np.asarray(index), dtype=torch.long, device=rewards.device)
    n_groups = torch.tensor([int(ids.max()) + 1], device=rewards.device)
    if process_group is not None:
        dist.all_reduce(n_groups, op=dist.ReduceOp.MAX, group=process_group)
    stats = torch.zeros(3, int(n_groups), dtype=torch.float64, device=rewards.device)
    r = rewards.to(torch.float64)
    stats[0].index_add_(0, ids, torch.ones_like(r))
    stats[1].index_add_(0, ids, r)
    stats[2].index_add_(0, ids, r * r)
    if process_group is not None:
        dist.all_reduce(stats, op=dist.ReduceOp.SUM, group=process_group)
    count, total, squares = stats
    mean = total / count.clamp(min=1.0)
    std = (squares / count.clamp(min=1.0) - mean * mean).clamp(min=0.0).sqrt()
    return mean[ids], std[ids]


@torch.no_grad()
def grpo_gathered(rewards, index, *, process_group):  # type: ignore[no-untyped-def]
    """GRPO (population std) whose group sums, squares and counts are all-reduced over the ranks."""
    mean, std = _group_stats(rewards, index, process_group)
    return torch.where(std > 0, (rewards - mean) / torch.where(std > 0, std, 1.0), torch.zeros_like(rewards))


@torch.no_grad()
def grpo_local(rewards, index):  # type: ignore[no-untyped-def]
    """GRPO with each group's mean and std taken over the members this rank holds."""
    mean, std = _group_stats(rewards, index)
    return torch.where(std > 0, (rewards - mean) / torch.where(std > 0, std, 1.0), torch.zeros_like(rewards))


@torch.no_grad()
def grpo_batch_std_local(rewards, group_size):  # type: ignore[no-untyped-def]
    """TRL scale_rewards='batch' without the gather: one std over the rank's shard, not the batch."""
    r = rewards.view(-1, group_size)
    return ((r - r.mean(1, keepdim=True)) / rewards.std(unbiased=False)).view(-1)


# ---------------------------------------------------------------------------
# the cases


@dataclasses.dataclass(frozen=True)
class Case:
    """One gallery entry: what to run and, for a wrong one, words its failure must contain."""

    name: str
    loss: str
    advantages: str = "sigma_ref.conformance.scaleout:oracle_advantages"
    layout: str = "index"
    aggregation: str | None = None
    loss_scale: str = "none"
    split: str = "whole-groups"
    expect: tuple[str, ...] = ()
    sizes: str = "uneven"

    def kwargs(self) -> dict:
        """Keyword arguments of ``run_scaleout`` (besides W and M)."""
        return {
            "layout": self.layout,
            "aggregation": self.aggregation,
            "loss_scale": self.loss_scale,
            "split": self.split,
            "sizes": self.sizes,
        }


ORACLE = "sigma_ref.conformance.scaleout:oracle_loss"
CORRECT = [
    *(
        Case(f"oracle[{mode}]", ORACLE, aggregation=mode)
        for mode in (
            "token-mean",
            "seq-mean-token-mean",
            "seq-mean-token-sum",
            "seq-mean-token-sum-norm",
            "token-sum",
        )
    ),
    Case("token_mean", f"{M}:token_mean", aggregation="token-mean"),
    Case("seq_mean_token_mean", f"{M}:seq_mean_token_mean", aggregation="seq-mean-token-mean"),
    Case("seq_mean_token_sum", f"{M}:seq_mean_token_sum", aggregation="seq-mean-token-sum"),
    Case("seq_mean_token_sum_norm", f"{M}:seq_mean_token_sum_norm", aggregation="seq-mean-token-sum-norm"),
    Case("token_sum", f"{M}:token_sum", aggregation="token-sum"),
    Case("token_mean_all_reduce", f"{M}:token_mean_all_reduce", aggregation="token-mean"),
    Case("verl_loss[token-mean]", f"{M}:verl_loss", aggregation="token-mean"),
    Case("verl_loss[seq-mean-token-mean]", f"{M}:verl_loss", aggregation="seq-mean-token-mean"),
    Case("trl_dapo_loss", f"{M}:trl_dapo_loss", aggregation="token-mean"),
    Case(
        "trl_grpo_loss_mean",
        f"{M}:trl_grpo_loss_mean",
        aggregation="seq-mean-token-mean",
        loss_scale="mean-over-micro-batches",
        sizes="equal",
    ),
    Case(
        "grpo_gathered[split-groups]",
        f"{M}:token_mean",
        f"{M}:grpo_gathered",
        split="split-groups",
        aggregation="token-mean",
    ),
    Case(
        "trl_contiguous",
        f"{M}:token_mean",
        "tests.gallery.correct:trl_contiguous",
        "contiguous",
        aggregation="token-mean",
    ),
]
WRONG = [
    Case(
        "token_mean_micro",
        f"{M}:token_mean_micro",
        aggregation="token-mean",
        expect=("normaliser computed per micro-batch", "at W = 2, M = 2"),
    ),
    Case(
        "token_mean_rank",
        f"{M}:token_mean_rank",
        aggregation="token-mean",
        expect=("token count not gathered across ranks", "at W = 2"),
    ),
    Case(
        "sum_norm_per_micro_batch",
        f"{M}:sum_norm_per_micro_batch",
        aggregation="seq-mean-token-sum-norm",
        loss_scale="mean-over-micro-batches",
        # its micro-batch sums add up to its full-batch sum (right under the reading 'none'), which
        # lacks seq-mean-token-sum-norm's 1/N_seq: the verdict does not depend on the declared 1/M
        expect=("the loss does not aggregate as declared",),
    ),
    Case(
        "token_mean_no_dp_size",
        f"{M}:token_mean_no_dp_size",
        aggregation="token-mean",
        expect=("world size not applied", "0.5x"),
    ),
    Case(
        "grpo_local[split-groups]",
        f"{M}:token_mean",
        f"{M}:grpo_local",
        split="split-groups",
        aggregation="token-mean",
        expect=(
            "group statistics computed on a rank's shard: advantages differ when a group is split "
            "across ranks",
        ),
    ),
    Case(
        "grpo_batch_std_local",
        f"{M}:token_mean",
        f"{M}:grpo_batch_std_local",
        "contiguous",
        aggregation="token-mean",
        expect=("batch statistics computed on a rank's shard",),
    ),
]
