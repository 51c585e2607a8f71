"""Issue-10 shapes: token-level, dict-in/dict-out, (loss, metrics) and keep-mask functions.

The suite calls each shape as it is (``python -m tests.gallery --markdown --shapes`` runs every
case through it; ``tests/test_gallery_shapes.py`` checks the verdicts). Each :class:`Case`
says its ``shape``:

* ``token``: ``fn(token_level_rewards [B, T], response_mask [B, T], index) -> (advantages
  [B, T], returns [B, T])`` as verl's ``core_algos`` estimators: the scalar reward sits on
  the last valid token of each row, the advantage is broadcast over the valid tokens and 0
  on masked ones. A row whose mask is all zero (a rejected response) or whose reward is NaN
  (an unscorable one) gets advantage 0 and, in the correct cases here, does not enter its
  siblings' baseline; verl as shipped counts a rejected row as reward 0, a hygiene WARN.
* ``dict``: ``fn({"rewards": Tensor[N], "prompt_ids": list[str]}) -> {"advantages":
  Tensor[N], ...}`` (an in-house trainer's batch dict; string prompt ids, any order), called
  through the ``inputs=`` hook (:func:`tests.gallery.shapes.dict_inputs`) and ``output="advantages"``.
* ``loss-tuple``: ``loss(logp, old_logp, advantages, mask) -> (loss, metrics)`` or a scalar,
  one correct loss per aggregation mode and the modes' known bugs, each with its declared
  ``aggregation`` (and constant).
* ``keep-mask``: ``fn(rewards, index) -> bool[N]``, DAPO's dynamic-sampling filter on the
  accuracy signal. Here the reward is correctness (0 or 1) plus a format bonus in [0, 0.5),
  so the accuracy is ``rewards >= 1``; keep a group iff ``0 < k < G`` on it.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from .cases import Case
from .shapes import dict_inputs

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


def _pg_losses(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """verl compute_policy_loss_vanilla's per-token clipped surrogate (clip 0.2 / 0.28)."""
    ratio = torch.exp(torch.clamp(logp - old_logp, -20.0, 20.0))
    adv = advantages.unsqueeze(1)
    return torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.28))


def verl_agg_seq_mean_token_sum(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict]:
    """verl agg_loss('seq-mean-token-sum'): token sums, masked mean over sequences with a token."""
    seq_losses = torch.sum(_pg_losses(logp, old_logp, advantages) * mask, dim=-1)
    seq_mask = (torch.sum(mask, dim=-1) > 0).to(seq_losses.dtype)
    loss = (seq_losses * seq_mask).sum() / seq_mask.sum()
    return loss, {"actor/pg_loss": loss.detach().item()}


#: TRL's ``max_completion_length`` in the dr_grpo cases: the constant C, declared with
#: ``--aggregation-constant 16`` (the suite's policy has T = 5, so C = T would be wrong).
MAX_COMPLETION_LENGTH = 16


def trl_dr_grpo_max_completion_length(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """TRL loss_type='dr_grpo': the token sum over batch size * max_completion_length (a constant)."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    per_token_loss = -torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.28) * adv)
    return (per_token_loss * mask).sum() / (per_token_loss.size(0) * MAX_COMPLETION_LENGTH)


def verl_token_sum(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, dp_size: int = 1
) -> tuple[torch.Tensor, dict]:
    """verl agg_loss('token-sum'): the masked token sum, times dp_size (undoes DDP's mean; 1 here)."""
    loss = (_pg_losses(logp, old_logp, advantages) * mask).sum() * dp_size
    return loss, {"actor/pg_loss": loss.detach().item()}


def seq_mean_token_sum_over_length(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Declared seq-mean-token-sum, but each token sum is divided by its length, as verl's DAPO README
    showed it (verl issue #1233): that is seq-mean-token-mean."""
    pg_losses = _pg_losses(logp, old_logp, advantages)
    pg_loss = torch.sum(pg_losses * mask, dim=-1) / torch.sum(mask, dim=-1)
    return torch.mean(pg_loss)


def sum_norm_without_batch_mean(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Declared seq-mean-token-sum-norm, written as verl 0.4.1-0.6.0's agg_loss (verl issue #3741):
    torch.sum(seq_losses) / loss_mask.shape[-1], no division by the number of sequences."""
    seq_losses = torch.sum(_pg_losses(logp, old_logp, advantages) * mask, dim=-1)
    return torch.sum(seq_losses) / mask.shape[-1]


def dr_grpo_batch_padded_length(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Declared Dr. GRPO with C = max_completion_length = 16, but divided by the batch's padded length
    mask.size(1), which changes with each batch's longest response (verl issue #3741's TODO)."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    per_token_loss = -torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.28) * adv)
    return (per_token_loss * mask).sum() / (per_token_loss.size(0) * mask.size(1))


def token_sum_left_normalised(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict]:
    """Declared token-sum, but the sum is still divided by the token count: the reducer switched to a sum
    while the normaliser stayed the token-mean's (the flag conflict reviewed in radixark/miles PR #872)."""
    loss = (_pg_losses(logp, old_logp, advantages) * mask).sum()
    loss = loss / mask.sum().clamp(min=1.0)  # the per-token normaliser, left in place
    return loss, {"actor/pg_loss": loss.detach().item()}


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
        returns="advantages",
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
        returns="advantages",
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
        returns="advantages",
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
        inputs=dict_inputs,
        output="advantages",
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
        "verl_agg_seq_mean_token_sum",
        verl_token_grpo,
        "token",
        True,
        f"{_V} compute_policy_loss_vanilla + agg_loss('seq-mean-token-sum') returning (pg_loss, metrics)",
        "verl",
        loss=verl_agg_seq_mean_token_sum,
        aggregation="seq-mean-token-sum",
        shape="loss-tuple",
        note="token sums, masked mean over the sequences with at least one token",
    ),
    Case(
        "trl_dr_grpo_max_completion_length",
        verl_token_grpo,
        "token",
        True,
        "huggingface/trl 1.16.0 trl/trainer/grpo_trainer.py GRPOTrainer._compute_loss loss_type='dr_grpo'",
        "verl",
        loss=trl_dr_grpo_max_completion_length,
        aggregation="dr_grpo",
        aggregation_constant=MAX_COMPLETION_LENGTH,
        shape="loss-tuple",
        note="(per_token_loss * mask).sum() / (B * max_completion_length), C = 16 declared",
    ),
    Case(
        "verl_token_sum",
        verl_token_grpo,
        "token",
        True,
        "verl-project/verl PR #7197 core_algos.agg_loss('token-sum'): masked sum * dp_size",
        "verl",
        loss=verl_token_sum,
        aggregation="token-sum",
        shape="loss-tuple",
        note="the plain masked token sum (dp_size = 1 in one process)",
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
        keep_metric="accuracy",
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
        returns="advantages",
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
        breaks=("token_broadcast",),
        cause_words=("padding", "not multiplied by response_mask"),
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
        breaks=("rejected_rows_ignored",),
        cause_words=("counted as a response with reward 0", "baseline"),
        note="hygiene (WARN): a rejected response (mask all 0) is a reward-0 member of its group, as verl "
        "ships it; it lowers its siblings' mean and widens their std",
        verdict="WARN",
        returns="advantages",
    ),
    Case(
        "nan_reward_zeroed",
        nan_reward_zeroed,
        "token",
        False,
        "verl-style estimator with torch.nan_to_num(token_level_rewards) first",
        "verl",
        shape="token",
        breaks=("nan_rows_confined",),
        cause_words=("NaN", "nan_to_num", "baseline"),
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
        breaks=("advantage_values", "permutation_equivariance"),
        cause_words=("sorted-id order", "permuted"),
        note="advantages come back in sorted-prompt order, not the batch order",
        inputs=dict_inputs,
        output="advantages",
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
        "seq_mean_token_sum_over_length",
        verl_token_grpo,
        "token",
        False,
        "verl recipe/dapo README's seq-mean-token-sum (verl-project/verl issue #1233, fixed 2025-06)",
        "verl",
        loss=seq_mean_token_sum_over_length,
        aggregation="seq-mean-token-sum",
        shape="loss-tuple",
        breaks=("loss_aggregation",),
        cause_words=("divided by its own length", "seq-mean-token-mean"),
        note="each token sum divided by its length: long responses lose the weight seq-mean-token-sum gives",
    ),
    Case(
        "sum_norm_without_batch_mean",
        verl_token_grpo,
        "token",
        False,
        "verl 0.4.1-0.6.0 core_algos.agg_loss('seq-mean-token-sum-norm') (verl-project/verl issue #3741)",
        "verl",
        loss=sum_norm_without_batch_mean,
        aggregation="seq-mean-token-sum-norm",
        shape="loss-tuple",
        breaks=("loss_aggregation",),
        cause_words=("divided by C alone", "N_seq"),
        note="torch.sum(seq_losses) / loss_mask.shape[-1]: the step grows with the batch size",
    ),
    Case(
        "dr_grpo_batch_padded_length",
        verl_token_grpo,
        "token",
        False,
        "TRL loss_type='dr_grpo' with mask.size(1) for max_completion_length (verl-project/verl issue #3741)",
        "verl",
        loss=dr_grpo_batch_padded_length,
        aggregation="dr_grpo",
        aggregation_constant=MAX_COMPLETION_LENGTH,
        shape="loss-tuple",
        breaks=("loss_aggregation",),
        cause_words=("padded length", "declared C = 16"),
        note="the constant of Dr. GRPO taken from the batch: the normaliser follows the longest response",
    ),
    Case(
        "token_sum_left_normalised",
        verl_token_grpo,
        "token",
        False,
        "token-sum declared while the token-mean normaliser stays (radixark/miles PR #872 review: "
        "--loss-agg-mode vs --calculate-per-token-loss out of sync)",
        "verl",
        loss=token_sum_left_normalised,
        aggregation="token-sum",
        shape="loss-tuple",
        breaks=("loss_aggregation",),
        cause_words=("divided by the batch's token count", "token-mean"),
        note="masked sum / mask.sum(): token-mean, not the declared token-sum",
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
        breaks=("keep_mask_rule",),
        cause_words=("accuracy", "shaped reward"),
        note="keeps all-correct (and all-wrong) groups whose format bonus differs: no accuracy signal",
        keep_metric="accuracy",
    ),
]
