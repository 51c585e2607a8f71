"""The designed batch, built identically in every process from the seed, and how it is cut: each
row's rank (:func:`_shard_rows`) and micro-batch (:func:`_assignment`), the scopes a count is taken
over (:func:`_scope_order`, :func:`_outside_counts`).

>>> _design_batch(0, 4).mask.shape, HORIZON, PACKED_CAPACITY
((24, 8), 8, 16)
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..normalisers import split_pieces

if TYPE_CHECKING:
    from .protocol import _JobConfig

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
