"""Call shapes as trainers write them: token-level estimators, dict batches, (loss, metrics), filters.

Correct entries pass the suite with no FAIL; each wrong entry breaks one property (named in
its docstring). verl-style code follows verl 0.9.1's ``compute_grpo_outcome_advantage``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch

from sigma_ref.conformance import Adapter

from .cases import Case


# --- layout token ------------------------------------------------------------------
@torch.no_grad()
def verl_token(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's outcome GRPO: scores = row sums, Bessel std + 1e-6, groups of one (0, 1); (adv, returns)."""
    scores = token_level_rewards.sum(dim=-1)
    by_id: dict[Any, list[torch.Tensor]] = defaultdict(list)
    for i in range(scores.shape[0]):
        by_id[index[i]].append(scores[i])
    mean, std = {}, {}
    for gid, vals in by_id.items():
        if len(vals) == 1:
            # verl writes torch.tensor(0.0) and torch.tensor(1.0), float32: 1 + 1e-6 then rounds to
            # float32 and groups of one differ from R / (1 + eps) by 3e-8; here in the scores' dtype
            mean[gid], std[gid] = scores.new_tensor(0.0), scores.new_tensor(1.0)
        else:
            stacked = torch.stack(vals)
            mean[gid], std[gid] = stacked.mean(), stacked.std()
    out = torch.stack([(scores[i] - mean[index[i]]) / (std[index[i]] + epsilon) for i in range(len(scores))])
    out = out.to(scores.dtype).unsqueeze(-1) * response_mask
    return out, out


@torch.no_grad()
def token_excluding_rejected(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray
) -> torch.Tensor:
    """Vectorised verl-style GRPO that leaves rejected responses (all-zero mask) and NaN rewards out."""
    lengths = response_mask.sum(-1)
    last = (lengths.long() - 1).clamp(min=0)
    scores = token_level_rewards.gather(-1, last.unsqueeze(-1)).squeeze(-1)
    live = (lengths > 0) & torch.isfinite(scores)
    _, inverse = np.unique(np.asarray(index).astype(str), return_inverse=True)
    g = torch.as_tensor(inverse.reshape(-1), device=scores.device)
    n_groups = int(g.max()) + 1
    w = live.to(torch.float64)
    s = torch.where(live, scores.double(), 0.0)
    count = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, w)
    mean = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, s) / count.clamp(min=1)
    dev = torch.where(live, s - mean[g], 0.0)
    var = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, dev * dev) / (count - 1).clamp(min=1)
    std = torch.where(count[g] > 1, var.sqrt()[g], 1.0)
    base = torch.where(count[g] > 1, mean[g], 0.0)
    adv = torch.where(live, (s - base) / (std + 1e-6), 0.0)
    return (adv.unsqueeze(-1) * response_mask.double()).to(token_level_rewards.dtype)


@torch.no_grad()
def token_last_column(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """WRONG (token_reward_position): the score is read from the last column, padding for short responses."""
    last = torch.zeros_like(token_level_rewards)
    last[:, -1] = token_level_rewards[:, -1]
    return verl_token(last, response_mask, index)


@torch.no_grad()
def token_unmasked(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """WRONG (token_broadcast): the advantages are broadcast over padding too (no * response_mask)."""
    adv, _ = verl_token(token_level_rewards, torch.ones_like(response_mask), index)
    return adv, adv


# --- hooks: a dict batch with string prompt ids, (loss, metrics) -------------------------
@torch.no_grad()
def dict_batch(batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    """An in-house trainer's GRPO: {"rewards", "prompt_ids": [str]} in, {"advantages", "stats"} out
    (population std + 1e-4 placed outside, groups by prompt id)."""
    rewards, ids = batch["rewards"], batch["prompt_ids"]
    out = torch.zeros_like(rewards)
    for pid in dict.fromkeys(ids):
        rows = torch.tensor([i for i, p in enumerate(ids) if p == pid])
        r = rewards[rows]
        out[rows] = (r - r.mean()) / (r.std(unbiased=False) + 1e-4)
    return {"advantages": out, "stats": {"groups": len(set(ids))}}


def dict_inputs(rewards: torch.Tensor, index: np.ndarray, layout_args: tuple[Any, ...]) -> Any:
    """The input builder of :data:`DICT_ADAPTER`: string prompt ids like ``"prompt-7"``."""
    return ({"rewards": rewards, "prompt_ids": [f"prompt-{i}" for i in index.tolist()]},), {}


DICT_ADAPTER = Adapter(dict_batch, "index", inputs=dict_inputs, output="advantages", name="dict_batch")


def loss_with_metrics(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """A token-mean PPO loss that returns (loss, metrics), as verl's and OpenRLHF's do."""
    ratio = torch.exp(logp - old_logp)
    per_token = -torch.minimum(
        ratio * advantages.unsqueeze(-1), ratio.clamp(0.8, 1.28) * advantages.unsqueeze(-1)
    )
    loss = (per_token * mask).sum() / mask.sum()
    return loss, {"clipfrac": float(((ratio - 1).abs() > 0.2).float().mean())}


# --- layout keep-mask -----------------------------------------------------------------
def keep_by_accuracy(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """DAPO's filter on accuracy (R > 0.5): keep a response iff its group is neither all right nor all
    wrong; one bool per response."""
    acc = (rewards > 0.5).double()
    ids = index.tolist()
    k = defaultdict(float)
    n = defaultdict(int)
    for a, gid in zip(acc.tolist(), ids, strict=True):
        k[gid] += a
        n[gid] += 1
    return torch.tensor([0 < k[g] < n[g] for g in ids])


def keep_per_group_sorted(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """DAPO's filter on the reward, one bool per group in sorted id order (as np.unique gives them)."""
    ids, inverse = np.unique(index, return_inverse=True)
    r = rewards.numpy()
    return torch.tensor([bool(np.ptp(r[inverse == j]) > 0) for j in range(len(ids))])


def keep_reward_spread(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """WRONG (keep_mask_rule) when declared keep_metric='accuracy': drops on the rewards' spread, so a
    group of shaped rewards that are all right is kept."""
    ids, inverse = np.unique(index, return_inverse=True)
    r = rewards.numpy()
    live = np.array([np.ptp(r[inverse == j]) > 0 for j in range(len(ids))])
    return torch.from_numpy(live[inverse.reshape(-1)])


KEEP_ACCURACY = Adapter(keep_by_accuracy, "keep-mask", keep_metric="accuracy", name="keep_by_accuracy")
KEEP_SORTED = Adapter(keep_per_group_sorted, "keep-mask", name="keep_per_group_sorted")
KEEP_SPREAD_AS_ACCURACY = Adapter(
    keep_reward_spread, "keep-mask", keep_metric="accuracy", name="keep_reward_spread"
)


_V = "volcengine/verl 0.9.1 verl/trainer/ppo/core_algos.py"

#: The entries above as gallery cases (run through the suite by ``python -m tests.gallery --shapes``).
CASES: list[Case] = [
    Case(
        "verl_token",
        verl_token,
        "token",
        False,
        f"{_V} compute_grpo_outcome_advantage as shipped",
        "verl",
        shape="token",
        breaks=("rejected_rows_ignored",),
        cause_words=("counted as a response with reward 0", "baseline"),
        note="hygiene (WARN): verl's algorithm, but a rejected response is a reward-0 member of its group",
        verdict="WARN",
        returns="advantages",
    ),
    Case(
        "token_excluding_rejected",
        token_excluding_rejected,
        "token",
        True,
        f"{_V} compute_grpo_vectorized_outcome_advantage's scatter form, rejected and NaN rows left out",
        "verl",
        shape="token",
        note="reward gathered at the last valid token, index_add_ statistics over the live rows",
    ),
    Case(
        "token_last_column",
        token_last_column,
        "token",
        False,
        "verl-style estimator fed token_level_rewards[:, -1] only",
        "verl",
        shape="token",
        breaks=("token_reward_position",),
        cause_words=("last column", "last valid token"),
        note="rows shorter than T read 0 from padding instead of their reward",
        returns="advantages",
    ),
    Case(
        "token_unmasked",
        token_unmasked,
        "token",
        False,
        "verl-style estimator called with torch.ones_like(response_mask)",
        "verl",
        shape="token",
        breaks=("token_broadcast",),
        cause_words=("padding", "not multiplied by response_mask"),
        note="advantages broadcast over the padding too",
        returns="advantages",
    ),
    Case(
        "dict_batch",
        dict_batch,
        "dict",
        True,
        "an in-house trainer's batch dict (issue 10): population std + 1e-4, grouped by prompt id",
        None,
        shape="dict",
        note="{'rewards', 'prompt_ids': [str]} -> {'advantages', 'stats'} through inputs= and output=",
        inputs=dict_inputs,
        output="advantages",
    ),
    Case(
        "loss_with_metrics",
        token_excluding_rejected,
        "token",
        True,
        "verl compute_policy_loss_vanilla / OpenRLHF PolicyLoss: (loss, {'clipfrac'}), token-mean",
        "verl",
        loss=loss_with_metrics,
        aggregation="token-mean",
        shape="loss-tuple",
        note="clipped surrogate (0.8, 1.28), token-mean, metrics as Python floats",
    ),
    Case(
        "keep_by_accuracy",
        keep_by_accuracy,
        "keep-mask",
        True,
        "verl recipe/dapo filter_groups, metric='acc' (accuracy R > 0.5)",
        None,
        shape="keep-mask",
        note="one bool per response: keep iff 0 < k < G on the accuracy",
        keep_metric="accuracy",
    ),
    Case(
        "keep_per_group_sorted",
        keep_per_group_sorted,
        "keep-mask",
        True,
        "verl recipe/dapo filter_groups, metric='seq_reward' (np.std > 0), one bool per group",
        None,
        shape="keep-mask",
        note="one bool per group in np.unique (sorted) id order; the order is detected",
        keep_metric="reward",
    ),
    Case(
        "keep_reward_spread",
        keep_reward_spread,
        "keep-mask",
        False,
        "verl recipe/dapo filter_groups with metric='seq_reward' where the accuracy was meant",
        None,
        shape="keep-mask",
        breaks=("keep_mask_rule",),
        cause_words=("accuracy", "shaped reward"),
        note="keeps all-correct (and all-wrong) groups whose shaping bonus differs",
        keep_metric="accuracy",
    ),
]
