"""Correct advantage code, written the way open trainers write it (issue 8's false-alarm corpus).

Each function is our own code in the style of the trainer named in its :class:`Case`'s
``source`` (read, not copied): Python loops over ids with dictionaries (verl), ``view`` and
``repeat_interleave`` (TRL), ``reshape`` (OpenRLHF), numpy arrays (open-instruct, rllm),
``torch.unique`` / ``bincount`` / ``scatter_add`` vectorised paths, tensors rebuilt from
lists of Python floats (float32 whatever the input dtype), float32 statistics, code that
never detaches. Every one computes its stated convention exactly (up to its working
precision); ``tests/test_gallery_trainers.py`` checks each against the oracle.

The most commonly shipped patterns come first in :data:`CASES`.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from sigma_ref import Convention, grpo_advantage

from .cases import FULL_PRECISION, NO_FLOAT16, Case

# ---------------------------------------------------------------------------------------
# verl (volcengine/verl 0.8.0.dev, verl/trainer/ppo/core_algos.py)


def verl_grpo_id2score(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl's GRPO: scores grouped by uid in a dict of lists, torch.std (Bessel) + 1e-6."""
    scores = rewards.clone()
    id2score: dict = defaultdict(list)
    id2mean, id2std = {}, {}
    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            id2score[index[i]].append(scores[i])
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.tensor(0.0)
                id2std[idx] = torch.tensor(1.0)
            else:
                scores_tensor = torch.stack(id2score[idx])
                id2mean[idx] = torch.mean(scores_tensor)
                id2std[idx] = torch.std(scores_tensor)
        for i in range(bsz):
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + 1e-6)
    return scores


def verl_grpo_python_floats(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Early verl / its forks: per-uid lists of Python floats, torch.tensor(list) is float32."""
    scores = [float(x) for x in rewards.tolist()]
    id2score: dict = defaultdict(list)
    for uid, s in zip(index.tolist(), scores, strict=True):
        id2score[uid].append(s)
    id2mean, id2std = {}, {}
    for uid, values in id2score.items():
        if len(values) == 1:
            id2mean[uid], id2std[uid] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            id2mean[uid] = torch.mean(torch.tensor(values))
            id2std[uid] = torch.std(torch.tensor([values]))
    out = [(s - id2mean[uid]) / (id2std[uid] + 1e-6) for uid, s in zip(index.tolist(), scores, strict=True)]
    return torch.stack(out)


def verl_rloo_loop(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl's RLOO: A = R * n/(n-1) - mean * n/(n-1), a group of one keeps its reward."""
    scores = rewards.clone()
    id2score: dict = defaultdict(list)
    id2mean = {}
    with torch.no_grad():
        for i in range(scores.shape[0]):
            id2score[index[i]].append(scores[i])
        for idx in id2score:
            id2mean[idx] = torch.mean(torch.stack(id2score[idx])) if len(id2score[idx]) > 1 else 0.0
        for i in range(scores.shape[0]):
            n = len(id2score[index[i]])
            if n > 1:
                scores[i] = scores[i] * n / (n - 1) - id2mean[index[i]] * n / (n - 1)
    return scores


def verl_rloo_bincount(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl's rloo_vectorized: np.unique(return_inverse) then bincount counts and sums."""
    with torch.no_grad():
        inv = torch.from_numpy(np.unique(index, return_inverse=True)[1].reshape(-1)).to(rewards.device)
        c = torch.bincount(inv)[inv].to(rewards.dtype)
        sums = torch.bincount(inv, weights=rewards)[inv].to(rewards.dtype)
        return ((c * rewards - sums) / (c - 1).clamp_min(1)) * (c > 1)


def verl_dr_grpo_no_std(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl with norm_adv_by_std_in_grpo=False (Dr. GRPO): scores minus the uid's mean."""
    scores = rewards.clone()
    groups: dict = defaultdict(list)
    with torch.no_grad():
        for i in range(scores.shape[0]):
            groups[index[i]].append(i)
        for rows in groups.values():
            mean = scores[rows].mean() if len(rows) > 1 else torch.zeros((), dtype=scores.dtype)
            scores[rows] = scores[rows] - mean
    return scores


def dapo_uid_filter_exact(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """DAPO dynamic sampling in verl's recipe style, with an exact spread test: keep a uid iff
    its metric takes more than one value (max > min)."""
    prompt_uid2metric_vals: dict = defaultdict(list)
    for uid, metric_val in zip(index.tolist(), rewards.tolist(), strict=True):
        prompt_uid2metric_vals[uid].append(metric_val)
    kept = {uid for uid, vals in prompt_uid2metric_vals.items() if max(vals) > min(vals)}
    return torch.tensor([uid in kept for uid in index.tolist()])


# ---------------------------------------------------------------------------------------
# TRL (huggingface/trl main, trl/trainer/grpo_trainer.py and rloo_trainer.py, utils.nanstd)


def _nanstd(tensor: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """TRL-style std ignoring NaNs, with Bessel's correction (count / (count - 1) of int64 counts is
    computed in torch's default float32, as in TRL)."""
    if dim is None:
        tensor, dim = tensor.reshape(-1), 0
    mean = torch.nanmean(tensor, dim=dim, keepdim=True)
    variance = torch.nanmean((tensor - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(tensor), dim=dim, keepdim=True)
    correction = torch.where(count > 1, count / (count - 1), torch.full_like(variance, float("nan")))
    return torch.sqrt(variance * correction).squeeze(dim)


def trl_grpo_nanstd(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL GRPOTrainer, scale_rewards='group': nanmean/nanstd over view(-1, G), + 1e-4."""
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, group_size), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(group_size, dim=0)
    if group_size > 1:
        std_rewards = _nanstd(rewards.view(-1, group_size), dim=1).repeat_interleave(group_size, dim=0)
    else:
        std_rewards = torch.zeros_like(rewards)
    advantages = rewards - mean_grouped_rewards
    advantages = advantages / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def trl_grpo_batch_scale(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL scale_rewards='batch': centered per group, one nanstd over the whole batch, + 1e-4."""
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, group_size), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(group_size, dim=0)
    if rewards.numel() > 1:
        std_rewards = _nanstd(rewards).expand_as(rewards)
    else:
        std_rewards = torch.zeros_like(rewards)
    return torch.nan_to_num((rewards - mean_grouped_rewards) / (std_rewards + 1e-4), nan=0.0)


def trl_grpo_scale_none(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL scale_rewards='none' (Dr. GRPO): only the group mean is subtracted."""
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, group_size), dim=1)
    return rewards - mean_grouped_rewards.repeat_interleave(group_size, dim=0)


def trl_rewards_per_func(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL's reward path: rewards_per_func is a float32 buffer filled from Python floats."""
    outputs = [float(r) for r in rewards.tolist()]  # what a reward function returns
    rewards_per_func = torch.zeros(len(outputs), 1, device=rewards.device)
    rewards_per_func[:, 0] = torch.tensor(outputs, dtype=torch.float32, device=rewards.device)
    reward_weights = torch.ones(1, device=rewards.device)
    summed = (rewards_per_func * reward_weights.unsqueeze(0)).nansum(dim=1)
    return trl_grpo_nanstd(summed, group_size)


def trl_rloo_trainer(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL RLOOTrainer: leave-one-out baseline from nansum over the group's scorable siblings."""
    grouped_rewards = rewards.view(-1, group_size)
    scorable_counts = (~torch.isnan(grouped_rewards)).sum(dim=1, keepdim=True)
    grouped_sum = grouped_rewards.nansum(dim=1, keepdim=True)
    baselines = (grouped_sum - grouped_rewards) / (scorable_counts - 1)
    return torch.nan_to_num(rewards - baselines.view(-1), nan=0.0)


# ---------------------------------------------------------------------------------------
# OpenRLHF (OpenRLHF/OpenRLHF main, openrlhf/trainer/ppo_utils/experience_maker.py)


@torch.no_grad()
def openrlhf_group_norm(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """OpenRLHF advantage_estimator='group_norm': reshape(-1, n), std (Bessel) + 1e-9."""
    r = rewards.reshape(-1, group_size)
    r = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-9)
    return r.reshape(-1)


@torch.no_grad()
def openrlhf_group_norm_clipped(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """group_norm followed by compute_reward's clamp to reward.clip_range (default -10, 10)."""
    r = rewards.reshape(-1, group_size)
    r = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-9)
    return r.reshape(-1).clamp(min=-10.0, max=10.0)


@torch.no_grad()
def openrlhf_rloo(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """OpenRLHF advantage_estimator='rloo': baseline (sum - r) / (n - 1)."""
    r = rewards.reshape(-1, group_size)
    baseline = (r.sum(-1, keepdim=True) - r) / (group_size - 1)
    return (r - baseline).reshape(-1)


@torch.no_grad()
def openrlhf_dr_grpo(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """OpenRLHF advantage_estimator='dr_grpo' (and reinforce_baseline's first step)."""
    r = rewards.reshape(-1, group_size)
    return (r - r.mean(-1, keepdim=True)).reshape(-1)


# ---------------------------------------------------------------------------------------
# open-instruct, oat / understand-r1-zero, rllm, NeMo-RL


def open_instruct_numpy(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """open-instruct grpo_fast: numpy reshape, ndarray.std (ddof 0) + 1e-8, back to torch."""
    scores = np.array(rewards.tolist())  # open-instruct's scores arrive as a list of floats
    scores_per_prompt = scores.reshape(-1, group_size)
    mean_grouped_rewards = np.repeat(scores_per_prompt.mean(axis=-1), group_size, axis=0)
    std_grouped_rewards = np.repeat(scores_per_prompt.std(axis=-1), group_size, axis=0)
    advantages = (scores - mean_grouped_rewards) / (std_grouped_rewards + 1e-8)
    return torch.from_numpy(advantages).to(rewards.device)


def open_instruct_centered(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """open-instruct advantage_normalization_type='centered': numpy mean-centering only."""
    scores = np.array(rewards.tolist())
    mean_grouped_rewards = np.repeat(scores.reshape(-1, group_size).mean(axis=-1), group_size, axis=0)
    return torch.from_numpy(scores - mean_grouped_rewards).to(rewards.device)


def oat_monte_carlo_grpo(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """oat / understand-r1-zero critic_type='grpo': view(-1, n), tensor.std() (Bessel) + 1e-8."""
    values = rewards.view(-1, group_size).mean(dim=1).repeat_interleave(group_size, dim=0)
    advantages = rewards - values
    std_grouped_rewards = rewards.view(-1, group_size).std(dim=1).repeat_interleave(group_size, dim=0)
    return advantages / (std_grouped_rewards + 1e-8)


def oat_monte_carlo_drgrpo(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """oat / understand-r1-zero critic_type='drgrpo': the same code without the std."""
    values = rewards.view(-1, group_size).mean(dim=1).repeat_interleave(group_size, dim=0)
    return rewards - values


def rllm_numpy_per_group(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """rllm rl_algo: numpy per group, np.std (ddof 0) + 1e-6; a group of one gets mean 0, std 1."""
    r = np.asarray(rewards.tolist(), dtype=np.float64)
    out = np.empty_like(r)
    groups: dict = defaultdict(list)
    for i, uid in enumerate(index.tolist()):
        groups[uid].append(i)
    for rows in groups.values():
        values = r[rows]
        if len(values) <= 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = np.mean(values), np.std(values)
        out[rows] = (values - mean) / (std + 1e-6)
    return torch.as_tensor(out, dtype=rewards.dtype, device=rewards.device)


def nemo_rl_loo_matmul(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """NeMo-RL calculate_baseline_and_std_per_prompt, leave_one_out_baseline=True: a (1 - I) matmul."""
    baseline = torch.zeros_like(rewards)
    uids, inverse = np.unique(index, return_inverse=True)
    inverse = inverse.reshape(-1)
    for u in range(len(uids)):
        prompt_idx = torch.from_numpy(np.flatnonzero(inverse == u))
        n = len(prompt_idx)
        if n <= 1:
            baseline[prompt_idx] = rewards[prompt_idx]  # no sibling: advantage 0
            continue
        mask_matrix = 1 - torch.eye(n, dtype=rewards.dtype, device=rewards.device)
        baseline[prompt_idx] = mask_matrix @ rewards[prompt_idx] / (n - 1)
    return rewards - baseline


def cs336_group_normalized(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """stanford-cs336 assignment 5 compute_group_normalized_rewards, as students write it:
    float32 tensor from the reward list, view(n_groups, G), std (Bessel) + advantage_eps (1e-6)."""
    raw_reward_list = [float(r) for r in rewards.tolist()]  # reward_fn(resp, gt)["reward"] per rollout
    raw_rewards = torch.tensor(raw_reward_list, dtype=torch.float32)
    reshaped_rewards = raw_rewards.view(len(raw_reward_list) // group_size, group_size)
    group_means = reshaped_rewards.mean(dim=1, keepdim=True)
    group_stds = reshaped_rewards.std(dim=1, keepdim=True)
    advantages = (reshaped_rewards - group_means) / (group_stds + 1e-6)
    return advantages.flatten()


def cs336_mean_only(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """The same with normalize_by_std=False (Dr. GRPO): float32 from the list, mean-centering only."""
    raw_rewards = torch.tensor([float(r) for r in rewards.tolist()], dtype=torch.float32)
    rewards_per_group = raw_rewards.reshape((-1, group_size))
    return (rewards_per_group - rewards_per_group.mean(dim=-1, keepdim=True)).reshape(-1)


# ---------------------------------------------------------------------------------------
# Vectorised index paths (verl utils/groupwise.as_torch_index factorisation, scatter/index_add)


def _factorize(index: np.ndarray) -> torch.Tensor:
    """Group ids 0..K-1 for any labels (ints or strings), first-seen order."""
    codes: dict = {}
    return torch.tensor([codes.setdefault(uid, len(codes)) for uid in index.tolist()], dtype=torch.long)


@torch.no_grad()
def scatter_add_grpo(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Two-pass group statistics with scatter_add: verl's convention (Bessel + 1e-6, singleton 0/1)."""
    g = _factorize(index).to(rewards.device)
    k = int(g.max()) + 1
    count = torch.zeros(k, dtype=rewards.dtype, device=rewards.device).scatter_add_(
        0, g, torch.ones_like(rewards)
    )
    mean = torch.zeros_like(count).scatter_add_(0, g, rewards) / count
    dev = rewards - mean[g]
    ss = torch.zeros_like(count).scatter_add_(0, g, dev * dev)
    std = torch.sqrt(ss / (count - 1).clamp_min(1))
    single = count <= 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    return (rewards - mean[g]) / (std[g] + 1e-6)


def unique_inverse_float32(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """torch.unique(return_inverse=True) + index_add_, statistics in float32, cast back (post)."""
    codes = torch.as_tensor(np.unique(index, return_inverse=True)[1].reshape(-1))
    _, inv, counts = torch.unique(codes, return_inverse=True, return_counts=True)
    if bool((counts < 2).any()):
        raise ValueError("every prompt needs at least 2 responses for a group std")
    r = rewards.float()
    k = counts.shape[0]
    mean = torch.zeros(k, device=r.device).index_add_(0, inv, r) / counts
    centered = r - mean[inv]
    var = torch.zeros(k, device=r.device).index_add_(0, inv, centered * centered) / (counts - 1)
    return (centered / (var.sqrt()[inv] + 1e-8)).to(rewards.dtype)


def numpy_add_at_verl(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """numpy np.unique(return_inverse) + np.add.at, two-pass, verl's convention; torch out."""
    r = rewards.detach().cpu().double().numpy()
    _, inv, counts = np.unique(index, return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    sums = np.zeros(len(counts))
    np.add.at(sums, inv, r)
    mean = sums / counts
    ss = np.zeros(len(counts))
    np.add.at(ss, inv, (r - mean[inv]) ** 2)
    std = np.sqrt(ss / np.maximum(counts - 1, 1))
    mean[counts == 1], std[counts == 1] = 0.0, 1.0
    return torch.as_tensor((r - mean[inv]) / (std[inv] + 1e-6)).to(rewards)


# ---------------------------------------------------------------------------------------
# Precision and graph patterns: float32 statistics, bf16 upcast, code that never detaches


def float32_stats_cast_back(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL-style, statistics in float32 (`.float()` first), result cast back to the input dtype."""
    r = rewards.float().view(-1, group_size)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    return ((r - mean) / (std + 1e-4)).view(-1).to(rewards.dtype)


def bf16_upcast_float32_out(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Upcasts to float32 for the statistics and returns float32 (bf16 in, float32 out)."""
    r = rewards.to(torch.float32).view(-1, group_size)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-8)).view(-1)


def seed_post_python_loop(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """The seed post's grpo_advantage per group: a tensor from Python floats, tensor.std() + 1e-8."""
    out = []
    values = rewards.tolist()
    for start in range(0, len(values), group_size):
        r = torch.tensor([float(x) for x in values[start : start + group_size]])
        out.append((r - r.mean()) / (r.std() + 1e-8))
    return torch.cat(out)


def paper_never_detached(rewards: torch.Tensor) -> torch.Tensor:
    """The paper's A = (R - mu) / sigma (population std), no no_grad, no detach; silent groups 0."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, unbiased=False, keepdim=True)
    silent = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)
    adv = (rewards - mean) / torch.where(silent, torch.ones_like(std), std)
    return adv.masked_fill(silent, 0.0)


# ---------------------------------------------------------------------------------------
# Conventions outside the presets: a spread filter, an eps floor


def verl_spread_filter(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl's GRPO, but a uid whose reward std is below 1e-4 gets advantage 0 (its own filter)."""
    scores = rewards.clone()
    id2rows: dict = defaultdict(list)
    with torch.no_grad():
        for i, uid in enumerate(index.tolist()):
            id2rows[uid].append(i)
        for rows in id2rows.values():
            group = scores[rows]
            if len(rows) == 1:
                scores[rows] = group / (1.0 + 1e-6)
                continue
            std = group.std()
            if std < 1e-4:
                scores[rows] = 0.0
            else:
                scores[rows] = (group - group.mean()) / (std + 1e-6)
    return scores


def variance_floor_grouped(rewards: torch.Tensor) -> torch.Tensor:
    """Two-pass Bessel variance floored at 1e-6 (std floored at 1e-3), no added eps."""
    mean = rewards.mean(dim=1, keepdim=True)
    var = ((rewards - mean) ** 2).sum(dim=1, keepdim=True) / (rewards.shape[1] - 1)
    return (rewards - mean) / torch.sqrt(torch.clamp(var, min=1e-6))


# ---------------------------------------------------------------------------------------
# What the convention=None cases compute, through the oracle

_RLLM = Convention("rllm", ddof=0, eps=1e-6, singleton="unit_std", source="rllm rl_algo (ddof 0 + 1e-6)")
_OPEN_INSTRUCT = Convention(
    "open_instruct", ddof=0, eps=1e-8, source="open-instruct grpo_fast (np.std + 1e-8)"
)
_CS336 = Convention("cs336", ddof=1, eps=1e-6, source="torch.std + advantage_eps=1e-6, contiguous groups")
_FLOOR = Convention("variance_floor", ddof=1, eps=1e-3, eps_placement="floor", source="sqrt(max(var, 1e-6))")


def _rllm_expected(rewards: np.ndarray, index: np.ndarray) -> np.ndarray:
    return grpo_advantage(rewards, convention=_RLLM, index=index)


def _open_instruct_expected(rewards: np.ndarray, index: np.ndarray) -> np.ndarray:
    return grpo_advantage(rewards, convention=_OPEN_INSTRUCT, index=index)


def _cs336_expected(rewards: np.ndarray, index: np.ndarray) -> np.ndarray:
    return grpo_advantage(rewards, convention=_CS336, index=index)


def _floor_expected(rewards: np.ndarray, index: np.ndarray) -> np.ndarray:
    return grpo_advantage(rewards, convention=_FLOOR, index=index)


def _spread_filter_expected(rewards: np.ndarray, index: np.ndarray) -> np.ndarray:
    """verl's values, except groups whose Bessel std is below 1e-4 get 0."""
    adv = grpo_advantage(rewards, convention="verl", index=index)
    sizes = {u: c for u, c in zip(*np.unique(index, return_counts=True), strict=True)}
    narrow = np.zeros(len(rewards), dtype=bool)
    for uid in sizes:
        rows = index == uid
        if sizes[uid] > 1 and np.std(rewards[rows], ddof=1) < 1e-4:
            narrow[rows] = True
    return np.where(narrow, 0.0, adv)


# ---------------------------------------------------------------------------------------
# Losses (per-token weights w_it at ratio 1; verl's aggregation names)


def trl_grpo_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """TRL loss_type='grpo': clipped surrogate, mean over each completion, then over completions."""
    coef_1 = torch.exp(logp - old_logp)
    coef_2 = torch.clamp(coef_1, 1 - 0.2, 1 + 0.2)
    adv = advantages.unsqueeze(1)
    per_token_loss = -torch.min(coef_1 * adv, coef_2 * adv)
    return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def trl_bnpo_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """TRL loss_type='bnpo': one mean over every completion token of the batch."""
    coef_1 = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    per_token_loss = -torch.min(coef_1 * adv, torch.clamp(coef_1, 0.8, 1.2) * adv)
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)


def trl_dr_grpo_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """TRL loss_type='dr_grpo': token sum over (batch size * max completion length)."""
    coef_1 = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    per_token_loss = -torch.min(coef_1 * adv, torch.clamp(coef_1, 0.8, 1.2) * adv)
    return (per_token_loss * mask).sum() / (per_token_loss.size(0) * mask.size(1))


def verl_seq_mean_token_mean_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """verl compute_policy_loss_vanilla + agg_loss('seq-mean-token-mean'), fully masked rows excluded."""
    negative_approx_kl = torch.clamp(logp - old_logp, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    adv = advantages.unsqueeze(1)
    pg_losses = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - 0.2, 1 + 0.28))
    seq_tokens = torch.sum(mask, dim=-1)
    seq_losses = torch.sum(pg_losses * mask, dim=-1) / (seq_tokens + 1e-8)
    seq_mask = (seq_tokens > 0).float()
    return (seq_losses * seq_mask).sum() / seq_mask.sum()


# ---------------------------------------------------------------------------------------

_V = "volcengine/verl 0.8.0.dev verl/trainer/ppo/core_algos.py"
_T = "huggingface/trl main (2026-07) trl/trainer/grpo_trainer.py GRPOTrainer._generate_and_score_completions"
_O = "OpenRLHF/OpenRLHF main (2026-08) openrlhf/trainer/ppo_utils/experience_maker.py"

CASES: list[Case] = [
    Case(
        "verl_grpo_id2score",
        verl_grpo_id2score,
        "index",
        True,
        f"{_V} compute_grpo_outcome_advantage",
        "verl",
        loss=verl_seq_mean_token_mean_loss,
        aggregation="seq-mean-token-mean",
        note="uid -> list of 0-d tensors, torch.std (Bessel) + 1e-6, a group of one gets mean 0 and std 1",
    ),
    Case(
        "trl_grpo_nanstd",
        trl_grpo_nanstd,
        "contiguous",
        True,
        f"{_T} scale_rewards='group'",
        "trl",
        loss=trl_grpo_loss,
        aggregation="seq-mean-token-mean",
        note="nanmean / nanstd (Bessel) over view(-1, G), + 1e-4; never detaches (no no_grad); nanstd's "
        "Bessel factor count / (count - 1) divides int64 tensors, i.e. in float32: ~3e-8 relative in float64",
        dtypes=FULL_PRECISION,
        precision="float32",
    ),
    Case(
        "trl_rewards_per_func",
        trl_rewards_per_func,
        "contiguous",
        True,
        f"{_T} _calculate_rewards (rewards_per_func float32 buffer)",
        "trl",
        note="rewards go through a float32 buffer of Python floats: float32 output whatever the input dtype",
        precision="float32",
    ),
    Case(
        "openrlhf_group_norm",
        openrlhf_group_norm,
        "contiguous",
        True,
        f"{_O} estimator 'group_norm'",
        "openrlhf",
        note="reshape(-1, n), tensor.std (Bessel) + 1e-9, under no_grad",
        dtypes=NO_FLOAT16,
    ),
    Case(
        "trl_grpo_batch_scale",
        trl_grpo_batch_scale,
        "contiguous",
        True,
        f"{_T} scale_rewards='batch'",
        "trl_batch",
        loss=trl_bnpo_loss,
        aggregation="token-mean",
        note="group mean subtracted, divided by one nanstd of the raw batch rewards + 1e-4",
        dtypes=FULL_PRECISION,
        precision="float32",
    ),
    Case(
        "trl_grpo_scale_none",
        trl_grpo_scale_none,
        "contiguous",
        True,
        f"{_T} scale_rewards='none'",
        "dr_grpo",
        loss=trl_dr_grpo_loss,
        aggregation="seq-mean-token-sum-norm",
        note="Dr. GRPO: R minus the group nanmean; the loss divides the token sum by B * T (TRL 'dr_grpo')",
    ),
    Case(
        "verl_rloo_loop",
        verl_rloo_loop,
        "index",
        True,
        f"{_V} compute_rloo_outcome_advantage",
        "rloo",
        note="R * n/(n-1) - mean * n/(n-1) = R - mean of the others; a group of one keeps R (not probed)",
    ),
    Case(
        "verl_rloo_bincount",
        verl_rloo_bincount,
        "index",
        True,
        f"{_V} compute_rloo_vectorized_outcome_advantage",
        "rloo",
        note="np.unique(return_inverse) + torch.bincount counts and weighted sums; singletons get 0",
    ),
    Case(
        "verl_dr_grpo_no_std",
        verl_dr_grpo_no_std,
        "index",
        True,
        f"{_V} compute_grpo_outcome_advantage(norm_adv_by_std_in_grpo=False)",
        "dr_grpo",
        note="uid's mean subtracted, no division; a group of one keeps R (verl's mean 0), not probed",
    ),
    Case(
        "openrlhf_rloo",
        openrlhf_rloo,
        "contiguous",
        True,
        f"{_O} estimator 'rloo'",
        "rloo",
        note="leave-one-out baseline (sum - r) / (n - 1) on reshape(-1, n)",
    ),
    Case(
        "openrlhf_dr_grpo",
        openrlhf_dr_grpo,
        "contiguous",
        True,
        f"{_O} estimator 'dr_grpo'",
        "dr_grpo",
        note="r - r.mean(-1) on reshape(-1, n)",
    ),
    Case(
        "open_instruct_numpy",
        open_instruct_numpy,
        "contiguous",
        True,
        "allenai/open-instruct main open_instruct/grpo_fast.py data preparation "
        "(advantage_normalization_type='standard')",
        None,
        note="numpy: ndarray.std is the POPULATION std (ddof 0) + 1e-8, not a preset; numpy in, torch out",
        expected=_open_instruct_expected,
    ),
    Case(
        "open_instruct_centered",
        open_instruct_centered,
        "contiguous",
        True,
        "allenai/open-instruct main open_instruct/grpo_fast.py (advantage_normalization_type='centered')",
        "dr_grpo",
        note="numpy mean-centering only",
    ),
    Case(
        "oat_monte_carlo_grpo",
        oat_monte_carlo_grpo,
        "contiguous",
        True,
        "sail-sg/understand-r1-zero train_zero_math.py compute_monte_carlo_advantages (oat), "
        "critic_type='grpo'",
        "post",
        note="view(-1, n).std() (Bessel) + 1e-8: the seed post's convention",
        dtypes=NO_FLOAT16,
    ),
    Case(
        "oat_monte_carlo_drgrpo",
        oat_monte_carlo_drgrpo,
        "contiguous",
        True,
        "sail-sg/understand-r1-zero train_zero_math.py compute_monte_carlo_advantages, critic_type='drgrpo'",
        "dr_grpo",
        note="Dr. GRPO as its authors ship it: values = group mean, advantages = rewards - values",
    ),
    Case(
        "trl_rloo_trainer",
        trl_rloo_trainer,
        "contiguous",
        True,
        "huggingface/trl main (2026-07) trl/trainer/rloo_trainer.py (normalize_advantages=False)",
        "rloo",
        note="baseline (nansum - r) / (scorable count - 1); NaN rewards would be left out of the baseline",
    ),
    Case(
        "cs336_group_normalized",
        cs336_group_normalized,
        "contiguous",
        True,
        "stanford-cs336 assignment 5 (alignment) compute_group_normalized_rewards, many public solutions",
        None,
        note="float32 from a list of rewards, Bessel std + 1e-6 on view(n, G): verl's divisor with no "
        "singleton rule (G = 1 gives NaN), so not a preset; float32 output",
        precision="float32",
        expected=_cs336_expected,
    ),
    Case(
        "cs336_mean_only",
        cs336_mean_only,
        "contiguous",
        True,
        "stanford-cs336 assignment 5 compute_group_normalized_rewards(normalize_by_std=False)",
        "dr_grpo",
        note="float32 from a list, reshape(-1, G) minus the group mean",
        precision="float32",
    ),
    Case(
        "verl_grpo_python_floats",
        verl_grpo_python_floats,
        "index",
        True,
        "volcengine/verl <= 0.3 core_algos.compute_grpo_outcome_advantage (torch.tensor(id2score[idx])), "
        "here rebuilt from Python floats",
        "verl",
        note="per-uid lists of Python floats: torch.tensor(list) is float32, so statistics and output "
        "are float32",
        precision="float32",
    ),
    Case(
        "seed_post_python_loop",
        seed_post_python_loop,
        "contiguous",
        True,
        "seed blog post grpo_advantage (per-group torch.tensor(list of floats), tensor.std() + 1e-8)",
        "post",
        note="a Python loop over groups; torch.tensor([float(x) ...]) makes float32 whatever the input dtype",
        precision="float32",
    ),
    Case(
        "scatter_add_grpo",
        scatter_add_grpo,
        "index",
        True,
        "volcengine/verl 0.8.0.dev verl/utils/groupwise.py as_torch_index + group_mean_std (two-pass here)",
        "verl",
        note="ids factorised first-seen, scatter_add counts/sums, two-pass Bessel std + 1e-6, singleton 0/1",
        dtypes=FULL_PRECISION,
    ),
    Case(
        "unique_inverse_float32",
        unique_inverse_float32,
        "index",
        True,
        "torch.unique(return_inverse=True) + index_add_ pattern (NeMo-RL torch.unique over prompts)",
        "post",
        note="float32 statistics (.float()), two-pass, Bessel + 1e-8, cast back; raises on a group of one",
        precision="float32",
    ),
    Case(
        "numpy_add_at_verl",
        numpy_add_at_verl,
        "index",
        True,
        "volcengine/verl 0.8.0.dev verl/utils/groupwise.py (np.unique factorisation), numpy np.add.at",
        "verl",
        note="numpy float64 two-pass statistics with np.add.at, verl's eps and singleton rule, torch out",
    ),
    Case(
        "rllm_numpy_per_group",
        rllm_numpy_per_group,
        "index",
        True,
        "rllm rllm/experimental/common/rl_algo.py calculate_grpo_advantages_per_group (read in the fork "
        "winnieyangwannan/rllm)",
        None,
        note="numpy per group: np.std (ddof 0) + 1e-6, a group of one gets mean 0 and std 1: not a preset",
        expected=_rllm_expected,
    ),
    Case(
        "nemo_rl_loo_matmul",
        nemo_rl_loo_matmul,
        "index",
        True,
        "NVIDIA-NeMo/RL nemo_rl/algorithms/utils.py calculate_baseline_and_std_per_prompt "
        "(leave_one_out_baseline=True, normalize_rewards=False)",
        "rloo",
        note="leave-one-out baseline as (1 - I) @ r / (n - 1) per np.unique id; a lone response gets 0",
    ),
    Case(
        "float32_stats_cast_back",
        float32_stats_cast_back,
        "contiguous",
        True,
        "TRL-style group statistics computed after rewards.float() (trl main grpo_trainer)",
        "trl",
        note="statistics in float32, output cast back to the input dtype: float32 accuracy for float64 input",
        precision="float32",
    ),
    Case(
        "bf16_upcast_float32_out",
        bf16_upcast_float32_out,
        "contiguous",
        True,
        "stanford-cs336 assignment 5 compute_group_normalized_rewards pattern (torch.std + advantage_eps, "
        "here 1e-8)",
        "post",
        note="upcasts to float32 and returns float32 (more precise than bf16/fp16 input, less than float64)",
        precision="float32",
    ),
    Case(
        "paper_never_detached",
        paper_never_detached,
        "grouped",
        True,
        "arXiv 2607.00152 reference GRPO (population std), written without no_grad",
        "paper",
        note="population std, silent groups detected by equality (exact 0); keeps the rewards' graph",
    ),
    Case(
        "openrlhf_group_norm_clipped",
        openrlhf_group_norm_clipped,
        "contiguous",
        True,
        f"{_O} group_norm + openrlhf/models/utils.py compute_reward(reward_clip_range=(-10, 10))",
        "openrlhf",
        note="group_norm then the default reward clip (-10, 10); |A| <= (G-1)/sqrt(G) so the clip bites only "
        "for G >= 102: the openrlhf preset has no clip field",
        clip=10.0,
        dtypes=NO_FLOAT16,
    ),
    Case(
        "verl_spread_filter",
        verl_spread_filter,
        "index",
        True,
        "verl GRPO + a spread filter (open-instruct grpo_fast drops zero-std groups; DAPO filters by std)",
        None,
        note="verl's values, but any uid whose Bessel std < 1e-4 gets 0 (its own filter, eps 1e-6 kept)",
        expected=_spread_filter_expected,
    ),
    Case(
        "variance_floor_grouped",
        variance_floor_grouped,
        "grouped",
        True,
        "volcengine/verl 0.8.0.dev verl/utils/groupwise.py group_mean_std (variance floored at eps)",
        None,
        note="Bessel variance floored at 1e-6, i.e. d = max(std_b, 1e-3): floor placement, not a preset",
        expected=_floor_expected,
        dtypes=FULL_PRECISION,
    ),
    Case(
        "dapo_uid_filter_exact",
        verl_grpo_id2score,
        "index",
        True,
        "verl recipe/dapo dapo_ray_trainer.py filter_groups (per-uid metric lists), spread tested as "
        "max > min",
        "verl",
        keep_mask=dapo_uid_filter_exact,
        note="keeps a uid iff its rewards are not all equal (exact, unlike np.std > 0); a lone response is "
        "dropped as by the oracle (verl's recipe keeps it)",
    ),
]
