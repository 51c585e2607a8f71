"""Correct implementations, one per preset convention, written the way trainers write them.

These are the code under test, not the oracle: each is an independent implementation in
the style of its trainer (TRL's view/repeat_interleave, verl's id-to-scores dictionary,
OpenRLHF's reshape), so agreeing with the oracle is a real check of both.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from sigma_ref.conformance import Adapter


@torch.no_grad()
def paper_grouped(rewards: torch.Tensor) -> torch.Tensor:
    """The paper: population std, no eps, silent groups 0 (found by max == min: a 'std > 0' guard keeps
    equal non-dyadic rewards, whose std is a rounding residue). Layout grouped [B, G]."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, unbiased=False, keepdim=True)
    centered = rewards - mean
    live = rewards.max(dim=1, keepdim=True).values > rewards.min(dim=1, keepdim=True).values
    return torch.where(live, centered / torch.where(live, std, 1), torch.zeros_like(centered))


@torch.no_grad()
def post_contiguous(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """The seed post: torch's default (Bessel) std plus 1e-8."""
    r = rewards.view(-1, group_size)
    return ((r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + 1e-8)).view(-1)


@torch.no_grad()
def dr_grpo_contiguous(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr. GRPO: mean-centering only."""
    r = rewards.view(-1, group_size)
    return (r - r.mean(dim=1, keepdim=True)).view(-1)


@torch.no_grad()
def trl_contiguous(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL GRPOTrainer, scale_rewards='group': Bessel std + 1e-4; a group of one gets 0."""
    mean_grouped = rewards.view(-1, group_size).mean(dim=1).repeat_interleave(group_size, dim=0)
    if group_size > 1:
        std = rewards.view(-1, group_size).std(dim=1).repeat_interleave(group_size, dim=0)
    else:
        std = torch.zeros_like(rewards)
    advantages = rewards - mean_grouped
    return advantages / (std + 1e-4)


@torch.no_grad()
def trl_batch_contiguous(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL, scale_rewards='batch': centered per group, one Bessel std over the batch + 1e-4."""
    mean_grouped = rewards.view(-1, group_size).mean(dim=1).repeat_interleave(group_size, dim=0)
    advantages = rewards - mean_grouped
    std = rewards.std() if rewards.numel() > 1 else torch.zeros((), dtype=rewards.dtype)
    return advantages / (std + 1e-4)


@torch.no_grad()
def verl_index(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl compute_grpo_outcome_advantage: scores by uid, Bessel std + 1e-6; singleton mean 0, std 1."""
    scores = rewards.clone()
    id2score: dict = defaultdict(list)
    id2mean, id2std = {}, {}
    for i in range(scores.shape[0]):
        id2score[index[i]].append(scores[i])
    for idx, values in id2score.items():
        if len(values) == 1:
            id2mean[idx] = torch.tensor(0.0, dtype=scores.dtype)
            id2std[idx] = torch.tensor(1.0, dtype=scores.dtype)
        else:
            stacked = torch.stack(values)
            id2mean[idx] = torch.mean(stacked)
            id2std[idx] = torch.std(stacked)
    for i in range(scores.shape[0]):
        scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + 1e-6)
    return scores


@torch.no_grad()
def openrlhf_contiguous(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """OpenRLHF group_norm: Bessel std + 1e-9."""
    r = rewards.reshape(-1, group_size)
    r = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-9)
    return r.reshape(-1)


@torch.no_grad()
def rloo_contiguous(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO: the baseline is the mean of the other responses of the group."""
    r = rewards.view(-1, group_size)
    baseline = (r.sum(dim=1, keepdim=True) - r) / (group_size - 1)
    return (r - baseline).view(-1)


@torch.no_grad()
def dapo_keep(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """DAPO dynamic sampling: keep a group iff its rewards are not all equal."""
    r = rewards.view(-1, group_size)
    keep = r.std(dim=1) > 0
    return keep.repeat_interleave(group_size)


def token_mean_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """TRL-style clipped loss, one mean over every token of the batch."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.28) * adv)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def seq_mean_token_mean_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """verl's loss_agg_mode='seq-mean-token-mean'."""
    ratio = torch.exp(logp - old_logp)
    pg = -advantages.unsqueeze(1) * ratio
    return ((pg * mask).sum(-1) / mask.sum(-1)).mean()


#: The DAPO adapter: paper advantages, a keep mask, a token-mean loss.
dapo_adapter = Adapter(
    post_contiguous,
    "contiguous",
    loss=token_mean_loss,
    keep_mask=dapo_keep,
    convention="post",
    name="dapo-style",
)

#: ``(name, target, layout, preset, loss)`` for every correct implementation.
CORRECT = [
    ("paper_grouped", paper_grouped, "grouped", "paper", token_mean_loss),
    ("post_contiguous", post_contiguous, "contiguous", "post", None),
    ("dr_grpo_contiguous", dr_grpo_contiguous, "contiguous", "dr_grpo", seq_mean_token_mean_loss),
    ("trl_contiguous", trl_contiguous, "contiguous", "trl", token_mean_loss),
    ("trl_batch_contiguous", trl_batch_contiguous, "contiguous", "trl_batch", None),
    ("verl_index", verl_index, "index", "verl", seq_mean_token_mean_loss),
    ("openrlhf_contiguous", openrlhf_contiguous, "contiguous", "openrlhf", None),
    ("rloo_contiguous", rloo_contiguous, "contiguous", "rloo", token_mean_loss),
]
