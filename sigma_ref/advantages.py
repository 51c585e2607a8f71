"""Group-relative advantages: GRPO, Dr. GRPO, RLOO, and DAPO's keep mask.

All four take rewards in either layout:

* ``[..., G]``: one group per row along ``dim`` (default the last axis);
* flat ``[N]`` with ``index=``: one group id per reward (any hashables or integers),
  groups ragged and interleaved, as verl's ``uid``.

They accept numpy arrays and torch tensors (CPU or CUDA; float64, float32, float16,
bfloat16, integer or bool), compute in float64, and return the caller's type, device
and floating dtype (float64 for integer or bool rewards). The input is never mutated
and the output never requires grad.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from . import _arrays
from ._arrays import Array, Groups
from .conventions import DR_GRPO, PAPER, Convention, get_convention

__all__ = ["grpo_advantage", "dr_grpo_advantage", "rloo_advantage", "dapo_keep_mask"]


@dataclasses.dataclass(frozen=True)
class GroupStatistics:
    """Per-group quantities shared by the advantages and the identity.

    ``centered``: ``R_i - mu`` per element (exactly 0 in silent and singleton-zero
    groups); ``divisor``: ``d`` per group; ``sigma``: population std per group;
    ``silent``: all rewards of the group equal; ``singleton``: group of one.
    """

    centered: torch.Tensor
    divisor: torch.Tensor
    sigma: torch.Tensor
    silent: torch.Tensor
    singleton: torch.Tensor


def _apply_eps(std: torch.Tensor, convention: Convention) -> torch.Tensor:
    if convention.eps_placement == "add":
        return std + convention.eps
    return torch.clamp(std, min=convention.eps)


def group_statistics(flat: torch.Tensor, groups: Groups, convention: Convention) -> GroupStatistics:
    """Mean-centred rewards and the divisor ``d`` of each group under ``convention``.

    ``d`` is ``std_ddof`` of the group (or of the batch) with ``eps`` added or used as a
    floor, or 1 for ``scale="none"``; singleton groups follow ``convention.singleton``.
    """
    sizes = groups.sizes
    silent = groups.all_equal(flat)
    centered = flat - groups.mean(flat)[groups.inverse]
    centered = torch.where(silent[groups.inverse], torch.zeros_like(centered), centered)
    squares = groups.sum(centered * centered)
    sigma = torch.sqrt(squares / sizes)
    singleton = sizes == 1

    if convention.scale == "none":
        divisor = torch.ones_like(sigma)
    elif convention.scale == "group":
        dof = torch.clamp(sizes - convention.ddof, min=1)  # singletons are replaced below
        divisor = _apply_eps(torch.sqrt(squares / dof), convention)
    else:
        n = flat.shape[0]
        if n - convention.ddof < 1:
            raise ValueError(
                f"rewards has {n} element(s): a batch std with ddof={convention.ddof} "
                "needs at least 2; use scale='group' or more rewards"
            )
        batch_centered = flat - flat.mean()
        if bool((flat == flat[0]).all()):
            batch_centered = torch.zeros_like(flat)
        std = torch.sqrt((batch_centered * batch_centered).sum() / (n - convention.ddof))
        divisor = _apply_eps(std, convention).expand_as(sigma).clone()

    if bool(singleton.any()):
        if convention.singleton == "error":
            group = int(torch.nonzero(singleton)[0, 0])
            raise ValueError(
                f"rewards has a group of size 1 ({groups.describe(group)}); GRPO needs "
                f"G >= 2 responses per prompt under convention {convention.name!r}. Sample "
                "more responses, drop the group, or use a convention with singleton='zero' "
                "or 'unit_std'"
            )
        member = singleton[groups.inverse]
        if convention.singleton == "zero":
            centered = torch.where(member, torch.zeros_like(centered), centered)
            one = torch.ones_like(divisor)
        else:  # "unit_std": mean 0 and std 1, so A = R / (1 + eps)
            centered = torch.where(member, flat, centered)
            one = _apply_eps(torch.ones_like(divisor), convention)
            if convention.scale == "none":
                one = torch.ones_like(divisor)
        divisor = torch.where(singleton, one, divisor)
    return GroupStatistics(centered, divisor, sigma, silent, singleton)


def _prepare(rewards: Any, index: Any, dim: int) -> tuple[torch.Tensor, Groups, _arrays.Backend]:
    x, backend = _arrays.as_float64(rewards, "rewards")
    flat, groups = _arrays.layout(x, index, dim, "rewards")
    _arrays.check_finite(flat, groups, "rewards")
    return flat, groups, backend


def _divide(centered: torch.Tensor, divisor: torch.Tensor) -> torch.Tensor:
    """``centered / divisor`` with 0/0 = 0 (a silent group with eps = 0)."""
    safe = torch.where(divisor > 0, divisor, torch.ones_like(divisor))
    return torch.where(divisor > 0, centered / safe, torch.zeros_like(centered))


def grpo_advantage(
    rewards: Array, *, convention: Convention | str = PAPER, index: Any = None, dim: int = -1
) -> Array:
    """GRPO advantages ``A_i = (R_i - mu) / d`` per group.

    With the default ``convention=PAPER``, ``d = sigma = sqrt(k (G - k)) / G`` for
    binary rewards (the population std), so ``A+ = sqrt((G - k) / k)`` and
    ``A- = -sqrt(k / (G - k))``. A silent group (all rewards equal) gets 0.

    >>> import numpy as np
    >>> grpo_advantage(np.array([[1.0, 0.0, 0.0, 0.0]]))
    array([[ 1.73205081, -0.57735027, -0.57735027, -0.57735027]])
    >>> grpo_advantage(np.array([1.0, 0.0, 0.0, 1.0, 1.0]), index=["a", "b", "a", "b", "a"])
    array([ 0.70710678, -1.        , -1.41421356,  1.        ,  0.70710678])
    """
    conv = get_convention(convention)
    flat, groups, backend = _prepare(rewards, index, dim)
    stats = group_statistics(flat, groups, conv)
    adv = _divide(stats.centered, stats.divisor[groups.inverse])
    return backend.out(_arrays.restore(adv, groups))


def dr_grpo_advantage(
    rewards: Array, *, convention: Convention | str = DR_GRPO, index: Any = None, dim: int = -1
) -> Array:
    """Dr. GRPO advantages ``A_i = R_i - mu``: mean-centring, no division.

    Only ``convention.singleton`` is used (its divisor fields are ignored).

    >>> import numpy as np
    >>> dr_grpo_advantage(np.array([1.0, 0.0, 0.0, 0.0]))
    array([ 0.75, -0.25, -0.25, -0.25])
    """
    conv = get_convention(convention).replace(scale="none")
    return grpo_advantage(rewards, convention=conv, index=index, dim=dim)


def rloo_advantage(rewards: Array, *, index: Any = None, dim: int = -1) -> Array:
    """RLOO advantages ``A_i = R_i - mean_{j != i} R_j = G / (G - 1) * (R_i - mu)``.

    Needs ``G >= 2`` in every group (a leave-one-out baseline of nothing is undefined).

    >>> import numpy as np
    >>> rloo_advantage(np.array([1.0, 0.0, 0.0, 0.0]))
    array([ 1.        , -0.33333333, -0.33333333, -0.33333333])
    """
    flat, groups, backend = _prepare(rewards, index, dim)
    lonely = groups.sizes == 1
    if bool(lonely.any()):
        group = int(torch.nonzero(lonely)[0, 0])
        raise ValueError(
            f"rewards has a group of size 1 ({groups.describe(group)}); RLOO's leave-one-out "
            "baseline needs G >= 2 responses per group. Sample more responses or drop the group"
        )
    stats = group_statistics(flat, groups, PAPER)
    sizes = groups.sizes[groups.inverse]
    adv = stats.centered * sizes / (sizes - 1)
    return backend.out(_arrays.restore(adv, groups))


def dapo_keep_mask(rewards: Array, *, index: Any = None, dim: int = -1) -> Array:
    """DAPO's dynamic-sampling rule, per response: keep iff its group is not silent.

    ``keep_i = (0 < k < G)`` for binary rewards (iff ``sigma > 0``); for real
    rewards iff not all rewards of the group are equal. A group of one response is
    never kept. Returns a boolean array shaped like ``rewards``.

    >>> import numpy as np
    >>> dapo_keep_mask(np.array([[1, 0, 1], [1, 1, 1]]))
    array([[ True,  True,  True],
           [False, False, False]])
    """
    flat, groups, backend = _prepare(rewards, index, dim)
    keep = ~(groups.all_equal(flat) | (groups.sizes == 1))
    mask = _arrays.restore(keep[groups.inverse], groups)
    return backend.out(mask, "bool")
