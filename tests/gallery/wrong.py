"""Deliberately wrong implementations: realistic bugs, each with the property it breaks.

Every entry of :data:`WRONG` names the convention its author intended, the property the
suite must fail and words the failure message must contain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from . import correct


@torch.no_grad()
def batch_std(rewards: torch.Tensor) -> torch.Tensor:
    """Divides by the std of the whole batch instead of each group's."""
    return (rewards - rewards.mean(dim=1, keepdim=True)) / rewards.std(unbiased=False)


@torch.no_grad()
def interleaved(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Reads groups as interleaved: view(G, -1) instead of view(-1, G)."""
    r = rewards.view(group_size, -1)
    mean, std = r.mean(dim=0, keepdim=True), r.std(dim=0, unbiased=False, keepdim=True)
    return torch.nan_to_num((r - mean) / std).reshape(-1)


@torch.no_grad()
def eps_inside_sqrt(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL intended, but eps goes inside the sqrt: sqrt(var + 1e-4)."""
    r = rewards.view(-1, group_size)
    return ((r - r.mean(1, keepdim=True)) / torch.sqrt(r.var(1, keepdim=True) + 1e-4)).view(-1)


@torch.no_grad()
def no_centering(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Forgets to subtract the group mean."""
    r = rewards.view(-1, group_size)
    std = r.std(1, unbiased=False, keepdim=True)
    return torch.where(std > 0, r / std.clamp(min=1e-12), torch.zeros_like(r)).view(-1)


@torch.no_grad()
def in_place(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Normalises the caller's rewards in place and returns them."""
    r = rewards.view(-1, group_size)
    std = r.std(1, unbiased=False, keepdim=True)
    r.sub_(r.mean(1, keepdim=True)).div_(torch.where(std > 0, std, torch.ones_like(std)))
    return rewards


@torch.no_grad()
def nan_on_silent(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """No guard for std = 0: a silent group is 0/0."""
    r = rewards.view(-1, group_size)
    return ((r - r.mean(1, keepdim=True)) / r.std(1, unbiased=False, keepdim=True)).view(-1)


@torch.no_grad()
def rloo_missing_factor(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """'RLOO' as R - mean: the baseline includes the response itself."""
    r = rewards.view(-1, group_size)
    return (r - r.mean(1, keepdim=True)).view(-1)


def grad_flow(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Correct values, but no torch.no_grad(): advantages keep the rewards' graph."""
    r = rewards.view(-1, group_size)
    std = r.std(1, unbiased=False, keepdim=True)
    centered = r - r.mean(1, keepdim=True)
    live = r.max(1, keepdim=True).values > r.min(1, keepdim=True).values  # exact silence test
    return torch.where(live, centered / torch.where(live, std, 1), torch.zeros_like(centered)).view(-1)


@torch.no_grad()
def dropped_last_group(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """An off-by-one loop over groups: the last group keeps its zero initialisation."""
    out = torch.zeros_like(rewards)
    for start in range(0, rewards.numel() - group_size, group_size):
        g = rewards[start : start + group_size]
        std = g.std(unbiased=False)
        out[start : start + group_size] = (g - g.mean()) / std if std > 0 else 0.0
    return out


@torch.no_grad()
def half_overflow(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Computes E[x^2] - E[x]^2 in the input dtype: overflows (and cancels) in float16."""
    r = rewards.view(-1, group_size)
    mean = r.mean(1, keepdim=True)
    var = (r * r).mean(1, keepdim=True) - mean * mean
    std = var.clamp(min=0).sqrt()
    return torch.where(std > 0, (r - mean) / torch.where(std > 0, std, 1), torch.zeros_like(r)).view(-1)


@torch.no_grad()
def bessel_undeclared(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Meant the paper's population std but used torch.std's default (Bessel)."""
    r = rewards.view(-1, group_size)
    std = r.std(1, keepdim=True)
    return torch.where(
        std > 0, (r - r.mean(1, keepdim=True)) / torch.where(std > 0, std, 1), torch.zeros_like(r)
    ).view(-1)


@torch.no_grad()
def batch_mean_centering(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Subtracts the batch mean but divides by each group's std."""
    r = rewards.view(-1, group_size)
    std = r.std(1, unbiased=False, keepdim=True)
    centered = r - rewards.mean()
    return torch.where(std > 0, centered / torch.where(std > 0, std, 1), torch.zeros_like(r)).view(-1)


@torch.no_grad()
def sign_flip(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """mean - R instead of R - mean."""
    return -correct.paper_grouped(rewards.view(-1, group_size)).view(-1)


@torch.no_grad()
def float32_downcast(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Computes in float32 and forgets to cast back."""
    return correct.paper_grouped(rewards.float().view(-1, group_size)).view(-1)


@torch.no_grad()
def tie_break_noise(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Adds tiny noise to the rewards 'to avoid a zero std'."""
    noisy = rewards + 1e-6 * torch.randn_like(rewards)
    return correct.paper_grouped(noisy.view(-1, group_size)).view(-1)


@torch.no_grad()
def singleton_nan(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL intended, but a group of one gets std(ddof=1) = NaN."""
    r = rewards.view(-1, group_size)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)


@torch.no_grad()
def keep_only_k_positive(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """A DAPO filter that keeps every group with a correct answer, all-correct ones too."""
    return (rewards.view(-1, group_size).sum(1) > 0).repeat_interleave(group_size)


@torch.no_grad()
def index_as_runs(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl intended, but assumes each uid's responses are consecutive."""
    _, first, counts = np.unique(index, return_index=True, return_counts=True)
    out, start = [], 0
    for size in counts[np.argsort(first)]:
        g = rewards[start : start + size]
        std = g.std() if size > 1 else torch.tensor(1.0, dtype=g.dtype)
        mean = g.mean() if size > 1 else torch.tensor(0.0, dtype=g.dtype)
        out.append((g - mean) / (std + 1e-6))
        start += size
    return torch.cat(out)


def loss_wrong_sign(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Returns +mean(ratio * A): gradient descent lowers the good responses."""
    ratio = torch.exp(logp - old_logp)
    return (ratio * advantages.unsqueeze(1) * mask).sum() / mask.sum()


def _policy_loss_old_first(
    old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """A token-mean policy loss that takes the old log-probs first (verl's compute_policy_loss order)."""
    ratio = torch.exp(log_prob - old_log_prob)
    return (-advantages.unsqueeze(1) * ratio * response_mask).sum() / response_mask.sum()


def loss_swapped_logp(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Hands the suite's arguments positionally to a loss that takes ``old_log_prob`` first: the
    ratio it computes is exp(old_logp - logp)."""
    return _policy_loss_old_first(logp, old_logp, advantages, mask)


def loss_unmasked(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Averages over every position, padding included."""
    ratio = torch.exp(logp - old_logp)
    return -(ratio * advantages.unsqueeze(1)).mean()


def loss_detached_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Detaches logp inside the ratio: the loss has no policy gradient."""
    ratio = torch.exp(logp.detach() - old_logp)
    return -(ratio * advantages.unsqueeze(1) * mask).sum() / mask.sum() + 0 * logp.sum()


@dataclasses.dataclass(frozen=True)
class Case:
    """A wrong implementation: how to call it, what it meant, and what must fail.

    ``verdict``: FAIL for a bug that changes training; WARN for hygiene (a float32 result
    for float64 rewards, advantages still attached to a graph), which the suite reports
    without failing the run.
    """

    name: str
    fn: Callable
    layout: str
    intended: str
    breaks: str  # the property (spec test name without test_)
    says: str  # words the failure message must contain
    loss: Callable | None = None
    keep_mask: Callable | None = None
    verdict: str = "FAIL"

    @property
    def target(self) -> str:
        """``module:attr`` for --impl."""
        return f"{__name__}:{self.fn.__name__}"


_paper = correct.paper_grouped

WRONG = [
    Case("batch_std", batch_std, "grouped", "paper", "advantage_values", "one std over the whole batch"),
    Case("interleaved", interleaved, "contiguous", "paper", "group_centering", "interleaved"),
    Case(
        "eps_inside_sqrt", eps_inside_sqrt, "contiguous", "trl", "advantage_values", "eps is inside the sqrt"
    ),
    Case("no_centering", no_centering, "contiguous", "paper", "group_centering", "mean centering forgotten"),
    Case("in_place", in_place, "contiguous", "paper", "input_not_mutated", "in place"),
    Case("nan_on_silent", nan_on_silent, "contiguous", "paper", "silent_group_zero", "silent groups"),
    Case(
        "rloo_missing_factor",
        rloo_missing_factor,
        "contiguous",
        "rloo",
        "advantage_values",
        "(G-1)/G too small",
    ),
    Case(
        "grad_flow",
        grad_flow,
        "contiguous",
        "paper",
        "output_detached",
        "gradient flows into the advantages",
        verdict="WARN",
    ),
    Case("dropped_last_group", dropped_last_group, "contiguous", "paper", "advantage_values", "last group"),
    Case("half_overflow", half_overflow, "contiguous", "paper", "half_precision_range", "overflows"),
    Case("bessel_undeclared", bessel_undeclared, "contiguous", "paper", "advantage_values", "declare ddof=1"),
    Case(
        "batch_mean_centering", batch_mean_centering, "contiguous", "paper", "group_centering", "batch mean"
    ),
    Case("sign_flip", sign_flip, "contiguous", "paper", "advantage_values", "wrong sign"),
    Case("float32_downcast", float32_downcast, "contiguous", "paper", "output_dtype", "cast", verdict="WARN"),
    Case("tie_break_noise", tie_break_noise, "contiguous", "paper", "deterministic", "randomness"),
    Case("singleton_nan", singleton_nan, "contiguous", "trl", "singleton_groups", "group of one"),
    Case(
        "keep_only_k_positive",
        correct.post_contiguous,
        "contiguous",
        "post",
        "dapo_keep_mask",
        "the filter drops only",
        keep_mask=keep_only_k_positive,
    ),
    Case("index_as_runs", index_as_runs, "index", "verl", "interleaved_groups", "ignoring the index"),
    Case(
        "loss_wrong_sign",
        correct.post_contiguous,
        "contiguous",
        "post",
        "loss_is_policy_gradient",
        "wrong sign",
        loss=loss_wrong_sign,
    ),
    Case(
        "loss_swapped_logp",
        correct.post_contiguous,
        "contiguous",
        "post",
        "loss_is_policy_gradient",
        "swapped",
        loss=loss_swapped_logp,
    ),
    Case(
        "loss_unmasked",
        correct.post_contiguous,
        "contiguous",
        "post",
        "loss_ignores_padding",
        "padding",
        loss=loss_unmasked,
    ),
    Case(
        "loss_detached_ratio",
        correct.post_contiguous,
        "contiguous",
        "post",
        "loss_is_policy_gradient",
        "no gradient",
        loss=loss_detached_ratio,
    ),
]
