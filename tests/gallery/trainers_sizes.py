"""Advantage code for positionally grouped batches of uneven group sizes (layout ``sizes``).

Trainers that drop failed or filtered rollouts before grouping keep the survivors in place and pass the
group sizes along (a group of 5 between groups of 8): ``fn(rewards, group_sizes) -> advantages``. The
correct ones split by the sizes (``torch.split``) or spread group ids over the runs
(``repeat_interleave``); the wrong ones are the bugs such code ships: statistics over a zero-padded
``[B, max G]`` tensor, and one size taken for every group.
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence

from .cases import NO_FLOAT16, Case


def split_normalise_trl(rewards: torch.Tensor, group_sizes: list[int]) -> torch.Tensor:
    """TRL's convention per run: ``torch.split`` by the sizes, Bessel std + 1e-4, a singleton gets 0."""
    out = []
    with torch.no_grad():
        for group in torch.split(rewards, group_sizes):
            mean = group.mean()
            std = group.std() if group.numel() > 1 else torch.zeros((), dtype=group.dtype)
            out.append((group - mean) / (std + 1e-4))
    return torch.cat(out)


def repeat_interleave_verl(rewards: torch.Tensor, group_sizes: list[int]) -> torch.Tensor:
    """verl's convention, vectorised: group ids by ``repeat_interleave``, sums by ``index_add_``, Bessel
    std + 1e-6; a singleton gets mean 0 and std 1."""
    rewards = rewards.detach()
    sizes = torch.tensor(group_sizes, device=rewards.device)
    ids = torch.repeat_interleave(torch.arange(len(group_sizes), device=rewards.device), sizes)
    n = sizes.to(rewards.dtype)
    mean = (
        torch.zeros(len(group_sizes), dtype=rewards.dtype, device=rewards.device).index_add_(0, ids, rewards)
        / n
    )
    centered = rewards - mean[ids]
    ss = torch.zeros_like(mean).index_add_(0, ids, centered * centered)
    std = torch.sqrt(ss / (n - 1).clamp(min=1))
    single = (sizes == 1)[ids]
    mean_i = torch.where(single, torch.zeros_like(rewards), mean[ids])
    std_i = torch.where(single, torch.ones_like(rewards), std[ids])
    return (rewards - mean_i) / (std_i + 1e-6)


def padded_statistics(rewards: torch.Tensor, group_sizes: list[int]) -> torch.Tensor:
    """verl's convention meant; the groups are padded to ``[B, max G]`` with zeros (``pad_sequence``)
    and the mean and std taken over the padded row: a short group's statistics count the padding."""
    groups = torch.split(rewards, group_sizes)
    padded = pad_sequence(list(groups), batch_first=True)  # [B, max G], zeros after each group
    mean = padded.mean(dim=1)
    std = padded.std(dim=1)
    out = [(g - mean[j]) / (std[j] + 1e-6) for j, g in enumerate(groups)]
    return torch.cat(out)


def first_size_for_all(rewards: torch.Tensor, group_sizes: list[int]) -> torch.Tensor:
    """TRL's convention meant; the code takes ``group_sizes[0]`` as the size of every group (the
    equal-size reshape ``view(-1, G)``), which regroups every response after the first uneven group."""
    G = group_sizes[0]
    r = rewards.view(-1, G)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True)
    return ((r - mean) / (std + 1e-4)).view(-1)


_SRC = "variable group sizes (rollouts dropped before grouping), sizes passed beside the flat rewards"

CASES: list[Case] = [
    Case(
        "split_normalise_trl",
        split_normalise_trl,
        "sizes",
        True,
        f"TRL's convention over torch.split runs; {_SRC}",
        "trl",
        note="each run normalised on its own; the loop is over the groups of a tiny batch",
    ),
    Case(
        "repeat_interleave_verl",
        repeat_interleave_verl,
        "sizes",
        True,
        f"verl's convention with repeat_interleave ids and index_add_ sums; {_SRC}",
        "verl",
        note="vectorised: one index_add_ for the sums, one for the squares",
        dtypes=NO_FLOAT16,
    ),
    Case(
        "padded_statistics",
        padded_statistics,
        "sizes",
        False,
        f"pad_sequence to [B, max G], statistics over the padded row; {_SRC}",
        "verl",
        breaks=("uneven_group_sizes",),
        cause_words=("padded with zeros",),
        note="a group of 5 padded to 8 takes its mean and std over 3 zeros too",
    ),
    Case(
        "first_size_for_all",
        first_size_for_all,
        "sizes",
        False,
        f"view(-1, group_sizes[0]); {_SRC}",
        "trl",
        breaks=("uneven_group_sizes",),
        cause_words=("group_sizes[0]",),
        note="equal sizes assumed: every group after the first uneven one is regrouped",
    ),
]
