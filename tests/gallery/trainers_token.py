"""Issue-10 shapes: token-level, dict-in/dict-out, (loss, metrics) and keep-mask functions.

The suite does not call these shapes yet; each :class:`Case` says its ``shape``:

* ``token``: ``fn(token_level_rewards [B, T], response_mask [B, T], index) -> (advantages
  [B, T], returns [B, T])`` as verl's ``core_algos`` estimators: the scalar reward sits on
  the last valid token of each row, the advantage is broadcast over the valid tokens and 0
  on masked ones. A row whose mask is all zero (a rejected response) or whose reward is NaN
  (an unscorable one) gets advantage 0 and does not enter its siblings' baseline.
* ``dict``: ``fn({"rewards": Tensor[N], "prompt_ids": list[str]}) -> {"advantages":
  Tensor[N], ...}`` (an in-house trainer's batch dict; string prompt ids, any order).
* ``loss-tuple``: ``loss(logp, old_logp, advantages, mask) -> (loss, metrics)``.
* ``keep-mask``: ``fn(rewards, index) -> bool[N]``, DAPO's dynamic-sampling filter on the
  accuracy signal. Here the reward is correctness (0 or 1) plus a format bonus in [0, 0.5),
  so the accuracy is ``rewards >= 1``; keep a group iff ``0 < k < G`` on it.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from .cases import Case

# ---------------------------------------------------------------------------------------
# token level


def _valid_rows(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row scalar reward (sum over tokens, as verl) and whether the row counts."""
    scores = (token_level_rewards * response_mask).sum(dim=-1)
    nan_row = torch.isnan(token_level_rewards).any(dim=-1)
    scores = torch.where(nan_row, torch.zeros_like(scores), scores)
    valid = (response_mask.sum(dim=-1) > 0) & ~nan_row
    return scores, valid


def verl_token_grpo(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's compute_grpo_outcome_advantage, rows with an empty mask or a NaN reward left out."""
    scores, valid = _valid_rows(token_level_rewards, response_mask)
    id2score: dict = defaultdict(list)
    id2mean, id2std = {}, {}
    with torch.no_grad():
        for i in range(scores.shape[0]):
            if valid[i]:
                id2score[index[i]].append(scores[i])
        for idx, values in id2score.items():
            if len(values) == 1:
                id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
            else:
                stacked = torch.stack(values)
                id2mean[idx], id2std[idx] = stacked.mean(), stacked.std()
        out = torch.zeros_like(scores)
        for i in range(scores.shape[0]):
            if valid[i]:
                out[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + 1e-6)
        advantages = out.unsqueeze(-1) * response_mask
    return advantages, advantages


def verl_token_rloo_vectorized(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's compute_rloo_vectorized_outcome_advantage on the valid rows (bincount with weights)."""
    scores, valid = _valid_rows(token_level_rewards, response_mask)
    with torch.no_grad():
        inv = torch.from_numpy(np.unique(index, return_inverse=True)[1].reshape(-1))
        w = valid.to(scores.dtype)
        c = torch.bincount(inv, weights=w)[inv].to(scores.dtype)
        sums = torch.bincount(inv, weights=scores * w)[inv].to(scores.dtype)
        adv = ((c * scores - sums) / (c - 1).clamp_min(1)) * (c > 1) * valid
        adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


def openrlhf_eos_gather(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reward gathered at the eos index T-1-argmax(fliplr(mask)) (OpenRLHF), group_norm by uid."""
    eos = response_mask.size(1) - 1 - response_mask.long().fliplr().argmax(dim=1, keepdim=True)
    r = token_level_rewards.gather(1, eos).squeeze(1)
    valid = (response_mask.sum(-1) > 0) & ~torch.isnan(r)
    out = torch.zeros_like(r)
    for uid in np.unique(index):
        rows = torch.from_numpy(index == uid) & valid
        if int(rows.sum()) > 1:
            g = r[rows]
            out[rows] = (g - g.mean()) / (g.std() + 1e-9)
    advantages = out.unsqueeze(-1) * response_mask
    return advantages, advantages


# ---------------------------------------------------------------------------------------
# dict in, dict out


def dict_batch_trl(batch: dict) -> dict:
    """An in-house trainer's batch dict: TRL's convention (Bessel + 1e-4, a lone response 0)."""
    rewards = batch["rewards"]
    rows: dict = defaultdict(list)
    for i, pid in enumerate(batch["prompt_ids"]):
        rows[pid].append(i)
    advantages = torch.zeros_like(rewards)
    reward_std = torch.zeros_like(rewards)
    for members in rows.values():
        g = rewards[members]
        std = g.std() if len(members) > 1 else torch.zeros((), dtype=rewards.dtype)
        advantages[members] = (g - g.mean()) / (std + 1e-4)
        reward_std[members] = std
    return {"advantages": advantages, "reward_std": reward_std}


def dict_sorted_prompt_order(batch: dict) -> dict:
    """Groups by sorting the prompt ids (itertools.groupby style) and returns sorted order."""
    rewards = batch["rewards"]
    order = sorted(range(len(batch["prompt_ids"])), key=lambda i: batch["prompt_ids"][i])
    out = []
    start = 0
    ids = [batch["prompt_ids"][i] for i in order]
    while start < len(order):
        stop = start
        while stop < len(order) and ids[stop] == ids[start]:
            stop += 1
        g = rewards[order[start:stop]]
        std = g.std() if stop - start > 1 else torch.zeros((), dtype=rewards.dtype)
        out.append((g - g.mean()) / (std + 1e-4))
        start = stop
    return {"advantages": torch.cat(out)}


# ---------------------------------------------------------------------------------------
# losses returning (loss, metrics)


def ppo_loss_with_metrics(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict]:
    """Clipped surrogate, token-mean over the batch, with clip fraction and approx KL metrics."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    loss1, loss2 = -adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.28)
    per_token = torch.maximum(loss1, loss2)
    n = mask.sum().clamp(min=1.0)
    loss = (per_token * mask).sum() / n
    metrics = {
        "clipfrac": (((loss2 > loss1).float() * mask).sum() / n).item(),
        "approx_kl": (((old_logp - logp) * mask).sum() / n).item(),
    }
    return loss, metrics


def verl_loss_tuple_seq_mean(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict]:
    """verl compute_policy_loss_vanilla style: (pg_loss, pg_metrics), seq-mean-token-mean."""
    ratio = torch.exp(torch.clamp(logp - old_logp, -20.0, 20.0))
    adv = advantages.unsqueeze(1)
    pg_losses = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.28))
    lengths = mask.sum(-1)
    seq = (pg_losses * mask).sum(-1) / lengths.clamp(min=1.0)
    keep = (lengths > 0).to(seq.dtype)
    pg_loss = (seq * keep).sum() / keep.sum()
    return pg_loss, {"actor/pg_loss": pg_loss.detach().item()}


def loss_tuple_padded_length(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict]:
    """Declared seq-mean-token-mean, but each sequence is averaged over the padded length."""
    ratio = torch.exp(logp - old_logp)
    pg = -advantages.unsqueeze(1) * ratio * mask
    loss = pg.mean(dim=-1).mean()
    return loss, {"pg_loss": loss.item()}


# ---------------------------------------------------------------------------------------
# DAPO keep masks on the accuracy signal


def dapo_accuracy_filter(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Keep a uid iff some but not all of its responses are correct (accuracy = reward >= 1)."""
    acc: dict = defaultdict(list)
    for uid, r in zip(index.tolist(), rewards.tolist(), strict=True):
        acc[uid].append(r >= 1.0)
    kept = {uid for uid, a in acc.items() if 0 < sum(a) < len(a)}
    return torch.tensor([uid in kept for uid in index.tolist()])


def keep_mask_reward_spread(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Drops on reward spread: a group whose shaped rewards differ is kept even when all are correct."""
    vals: dict = defaultdict(list)
    for uid, r in zip(index.tolist(), rewards.tolist(), strict=True):
        vals[uid].append(r)
    kept = {uid for uid, v in vals.items() if max(v) > min(v)}
    return torch.tensor([uid in kept for uid in index.tolist()])


# ---------------------------------------------------------------------------------------
# wrong token-level functions


def last_column_reward(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reads the reward from the last column, not the last valid token: short rows read 0."""
    scores = token_level_rewards[:, -1].clone()
    out = torch.zeros_like(scores)
    for uid in np.unique(index):
        rows = torch.from_numpy(index == uid)
        g = scores[rows]
        out[rows] = (g - g.mean()) / (g.std() + 1e-6)
    advantages = out.unsqueeze(-1) * response_mask
    return advantages, advantages


def advantages_not_masked(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """Broadcasts the advantage over every position: padding tokens get it too."""
    advantages, _ = verl_token_grpo(token_level_rewards, response_mask, index)
    scalar = advantages.sum(-1) / response_mask.sum(-1).clamp(min=1)
    full = scalar.unsqueeze(-1).expand_as(response_mask).clone()
    return full, full


def empty_row_in_baseline(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's function as shipped: an all-zero-mask row enters its uid's mean and std with reward 0."""
    scores = token_level_rewards.sum(dim=-1)
    id2score: dict = defaultdict(list)
    with torch.no_grad():
        for i in range(scores.shape[0]):
            id2score[index[i]].append(scores[i])
        stats = {}
        for idx, values in id2score.items():
            stacked = torch.stack(values)
            stats[idx] = (stacked.mean(), stacked.std()) if len(values) > 1 else (0.0, 1.0)
        for i in range(scores.shape[0]):
            mean, std = stats[index[i]]
            scores[i] = (scores[i] - mean) / (std + 1e-6)
        advantages = scores.unsqueeze(-1) * response_mask
    return advantages, advantages


def nan_reward_zeroed(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """nan_to_num(0) before the statistics: an unscorable row counts as a wrong answer."""
    clean = torch.nan_to_num(token_level_rewards, nan=0.0)
    return verl_token_grpo(clean, response_mask, index)


# ---------------------------------------------------------------------------------------

_V = "volcengine/verl 0.8.0.dev verl/trainer/ppo/core_algos.py"

CASES: list[Case] = [
    Case(
        "verl_token_grpo",
        verl_token_grpo,
        "token",
        True,
        f"{_V} compute_grpo_outcome_advantage (+ issue 10's empty/NaN-row rule)",
        "verl",
        shape="token",
        note="sum over tokens (reward on the last valid token), uid dict, Bessel + 1e-6, "
        "empty-mask and NaN-reward rows out of the baseline and 0",
    ),
    Case(
        "verl_token_rloo_vectorized",
        verl_token_rloo_vectorized,
        "token",
        True,
        f"{_V} compute_rloo_vectorized_outcome_advantage",
        "rloo",
        shape="token",
        note="bincount counts and sums over the valid rows only; broadcast times the mask",
    ),
    Case(
        "openrlhf_eos_gather",
        openrlhf_eos_gather,
        "token",
        True,
        "OpenRLHF/OpenRLHF main openrlhf/models/utils.py compute_reward (eos index via fliplr argmax) + "
        "group_norm",
        "openrlhf",
        shape="token",
        note="gathers the reward at the last valid token, Bessel + 1e-9 per uid over valid rows",
    ),
    Case(
        "dict_batch_trl",
        dict_batch_trl,
        "dict",
        True,
        "in-house trainer batch dict (issue 10) with TRL's convention (trl grpo_trainer "
        "scale_rewards='group')",
        "trl",
        shape="dict",
        note="{'rewards', 'prompt_ids': uuid strings} -> {'advantages', 'reward_std'}, input order kept",
    ),
    Case(
        "ppo_loss_with_metrics",
        verl_token_grpo,
        "token",
        True,
        "verl compute_policy_loss_vanilla / OpenRLHF PolicyLoss: (loss, {'clipfrac', 'approx_kl'})",
        "verl",
        loss=ppo_loss_with_metrics,
        aggregation="token-mean",
        shape="loss-tuple",
        note="clipped surrogate (0.8, 1.28), token-mean over the batch, metrics as Python floats",
    ),
    Case(
        "verl_loss_tuple_seq_mean",
        verl_token_grpo,
        "token",
        True,
        f"{_V} compute_policy_loss_vanilla + agg_loss('seq-mean-token-mean') returning (pg_loss, metrics)",
        "verl",
        loss=verl_loss_tuple_seq_mean,
        aggregation="seq-mean-token-mean",
        shape="loss-tuple",
        note="mean over each response's own tokens, then over responses with at least one token",
    ),
    Case(
        "dapo_accuracy_filter",
        verl_token_grpo,
        "keep-mask",
        True,
        "verl recipe/dapo filter_groups with metric='acc' (BytedTsinghua-SIA/DAPO)",
        "verl",
        keep_mask=dapo_accuracy_filter,
        shape="keep-mask",
        note="keep iff 0 < k < G on accuracy (reward >= 1): shaped rewards that differ but are all correct "
        "are dropped",
    ),
    Case(
        "last_column_reward",
        last_column_reward,
        "token",
        False,
        "verl-style estimator reading token_level_rewards[:, -1]",
        "verl",
        shape="token",
        breaks=("token_reward_position",),
        cause_words=("last column", "last valid token"),
        note="rows shorter than T read 0 from padding instead of their reward",
    ),
    Case(
        "advantages_not_masked",
        advantages_not_masked,
        "token",
        False,
        "verl-style estimator that forgets `* response_mask`",
        "verl",
        shape="token",
        breaks=("token_masked_zero",),
        cause_words=("masked", "padding"),
        note="advantage broadcast over padding positions too",
    ),
    Case(
        "empty_row_in_baseline",
        empty_row_in_baseline,
        "token",
        False,
        f"{_V} compute_grpo_outcome_advantage as shipped (no empty-row rule)",
        "verl",
        shape="token",
        breaks=("token_empty_row",),
        cause_words=("all-zero mask", "baseline"),
        note="a rejected response (mask all 0, reward 0) lowers its siblings' mean and widens their std",
    ),
    Case(
        "nan_reward_zeroed",
        nan_reward_zeroed,
        "token",
        False,
        "verl-style estimator with torch.nan_to_num(token_level_rewards) first",
        "verl",
        shape="token",
        breaks=("token_nan_row",),
        cause_words=("NaN", "baseline"),
        note="an unscorable response counts as reward 0 in its siblings' baseline (TRL excludes it)",
    ),
    Case(
        "dict_sorted_prompt_order",
        dict_sorted_prompt_order,
        "dict",
        False,
        "in-house batch dict grouped by sorting prompt ids (itertools.groupby pattern)",
        "trl",
        shape="dict",
        breaks=("string_id_order", "interleaved_groups"),
        cause_words=("sorted", "order"),
        note="advantages come back in sorted-prompt order, not the batch order",
    ),
    Case(
        "loss_tuple_padded_length",
        verl_token_grpo,
        "token",
        False,
        "(loss, metrics) loss declaring seq-mean-token-mean, written as (pg * mask).mean(-1).mean()",
        "verl",
        loss=loss_tuple_padded_length,
        aggregation="seq-mean-token-mean",
        shape="loss-tuple",
        breaks=("loss_aggregation",),
        cause_words=("padded length", "seq-mean-token-mean"),
        note="each response averaged over T, not its own length",
    ),
    Case(
        "keep_mask_reward_spread",
        verl_token_grpo,
        "keep-mask",
        False,
        "verl recipe/dapo filter_groups with metric='seq_reward' where accuracy was meant",
        "verl",
        keep_mask=keep_mask_reward_spread,
        shape="keep-mask",
        breaks=("dapo_keep_mask",),
        cause_words=("accuracy", "reward spread"),
        note="keeps all-correct (and all-wrong) groups whose format bonus differs: no accuracy signal",
    ),
]
