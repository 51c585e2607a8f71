"""Issue 20 and issue 26 (items 4, 5): false alarms, a miss and filters beyond ``0 < k < G``.

Our own code, written the way trainers write it (``view(-1, G)`` filters, dict-of-lists
filters over uids, ``nan_to_num`` on rewards, ``std > 0`` guards). Each correct entry must
pass with nothing declared and with what a user would declare from the trainer's config, on
two seeds and both hypothesis profiles; each wrong one must FAIL the property it breaks with
a cause a probe confirmed (``tests/test_gallery_trust.py``).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from .cases import FULL_PRECISION, Case

_T = "huggingface/trl main (2026-07) trl/trainer/grpo_trainer.py GRPOTrainer._generate_and_score_completions"
_D = "verl recipe/dapo dapo_ray_trainer.py filter_groups"


# ---------------------------------------------------------------------------------------
# advantage functions the filters sit beside


def trl_group_std(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL's scale_rewards='group': view(-1, G), torch.std (Bessel) + 1e-4."""
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1).repeat_interleave(group_size, dim=0)
    if group_size == 1:  # one response has no baseline: TRL's nanstd of one value, then A = 0
        return torch.zeros_like(rewards)
    std = grouped.std(dim=1).repeat_interleave(group_size, dim=0)
    return (rewards - mean) / (std + 1e-4)


def verl_uid_lists(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl's GRPO: uid -> list of scores, torch.std (Bessel) + 1e-6, a lone response R / (1 + 1e-6)."""
    scores = rewards.clone()
    id2score: dict = defaultdict(list)
    for i, uid in enumerate(index.tolist()):
        id2score[uid].append(scores[i])
    id2mean, id2std = {}, {}
    for uid, vals in id2score.items():
        if len(vals) == 1:
            id2mean[uid], id2std[uid] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            stacked = torch.stack(vals)
            id2mean[uid], id2std[uid] = stacked.mean(), stacked.std()
    for i, uid in enumerate(index.tolist()):
        scores[i] = (scores[i] - id2mean[uid]) / (id2std[uid] + 1e-6)
    return scores


# ---------------------------------------------------------------------------------------
# issue 20 item 1: a per-group filter over view(-1, G)


def dapo_view_filter(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """DAPO's dynamic sampling over contiguous groups: one bool per group, kept iff max > min."""
    grouped = rewards.view(-1, group_size)
    return grouped.max(dim=1).values > grouped.min(dim=1).values


# ---------------------------------------------------------------------------------------
# issue 20 item 2: a spread skip beside TRL's normalisation


def trl_spread_skip(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL's group normalisation, but a group whose rewards span less than 1e-4 is skipped (A = 0)."""
    grouped = rewards.view(-1, group_size)
    narrow = (grouped.max(dim=1).values - grouped.min(dim=1).values) < 1e-4
    adv = (grouped - grouped.mean(dim=1, keepdim=True)) / (grouped.std(dim=1, keepdim=True) + 1e-4)
    return adv.masked_fill(narrow.unsqueeze(1), 0.0).view(-1)


# ---------------------------------------------------------------------------------------
# issue 20 item 3: a guard that divides a rounding residue by a std of the same size


def std_guard_no_eps(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """WRONG (non_dyadic_silent_group): population std with a ``std > 0`` guard and no eps; six rewards
    of 0.3 leave R - mean = 5.6e-17 and std = 5.6e-17, so every member gets A = 1."""
    grouped = rewards.view(-1, group_size)
    std = grouped.std(dim=1, unbiased=False, keepdim=True)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    return torch.where(std > 0, centered / torch.where(std > 0, std, 1.0), 0.0).view(-1)


# ---------------------------------------------------------------------------------------
# issue 20 item 4: a filter that tests silence with std != 0


def keep_std_nonzero(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """WRONG (dapo_keep_mask): keeps a uid iff np.std of its rewards != 0; [0.1, 0.1, 0.1] has std
    1.4e-17 in floating point and is kept."""
    metric: dict = defaultdict(list)
    for uid, r in zip(index.tolist(), rewards.tolist(), strict=True):
        metric[uid].append(r)
    kept = {uid for uid, vals in metric.items() if np.std(vals) != 0}
    return torch.tensor([uid in kept for uid in index.tolist()])


def keep_mean_between(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """WRONG (dapo_keep_mask): keeps a uid iff 0 < mean < 1, i.e. drops only the all-wrong and all-right
    groups, so a silent group of 0.5s is kept."""
    acc: dict = defaultdict(list)
    for uid, r in zip(index.tolist(), rewards.tolist(), strict=True):
        acc[uid].append(r)
    kept = {uid for uid, vals in acc.items() if 0 < sum(vals) / len(vals) < 1}
    return torch.tensor([uid in kept for uid in index.tolist()])


CASES: list[Case] = [
    Case(
        "dapo_view_filter",
        trl_group_std,
        "contiguous",
        True,
        f"{_D} (per-group bools over rewards.view(-1, G)) beside {_T}",
        "trl",
        keep_mask=dapo_view_filter,
        note="one bool per contiguous group, kept iff max > min: never to be called with interleaved ids",
        dtypes=FULL_PRECISION,
    ),
    Case(
        "trl_spread_skip",
        trl_spread_skip,
        "contiguous",
        True,
        f"{_T} scale_rewards='group', plus a skip of groups whose rewards span < 1e-4",
        "trl",
        note="TRL's values; a group with max - min < 1e-4 is treated as silent (a data policy the probes "
        "find and the declared convention keeps)",
        dtypes=FULL_PRECISION,
    ),
    Case(
        "std_guard_no_eps",
        std_guard_no_eps,
        "contiguous",
        False,
        "a 'std > 0' guard instead of an eps (population std)",
        "paper",
        breaks=("non_dyadic_silent_group",),
        cause_words=("rounding residue", "no eps"),
        note="a silent group of 0.3s gets A = 1 on every member: an O(1) same-direction update",
        dtypes=FULL_PRECISION,
    ),
    Case(
        "keep_std_nonzero",
        verl_uid_lists,
        "index",
        False,
        f"{_D} with the spread tested as np.std(vals) != 0",
        "verl",
        keep_mask=keep_std_nonzero,
        breaks=("dapo_keep_mask",),
        cause_words=("floating-point std",),
        note="keeps the silent group [0.1, 0.1, 0.1] (np.std 1.4e-17)",
    ),
    Case(
        "keep_mean_between",
        verl_uid_lists,
        "index",
        False,
        f"{_D} with the metric's mean tested against 0 and 1",
        "verl",
        keep_mask=keep_mean_between,
        breaks=("dapo_keep_mask",),
        cause_words=("only all-wrong",),
        note="keeps the silent groups [0.5, 0.5, 0.5] and [0.25, 0.25, 0.25]",
    ),
]


# ---------------------------------------------------------------------------------------
# issue 26 item 4: NaN rewards


def trl_nan_aware(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL's group statistics with nanmean / a nan-aware Bessel std: a NaN reward is left out of its
    group (its own advantage stays NaN)."""
    grouped = rewards.view(-1, group_size)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    count = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    var = torch.nanmean((grouped - mean) ** 2, dim=1, keepdim=True) * count / (count - 1).clamp(min=1)
    std = torch.where(count > 1, var.sqrt(), torch.zeros_like(var))
    return ((grouped - mean) / (std + 1e-4)).view(-1)


def nan_to_num_rewards(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """HYGIENE (nan_rewards, a WARN): an unscored response's NaN becomes 0 and is counted in its group."""
    grouped = torch.nan_to_num(rewards, nan=0.0).view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    return ((grouped - mean) / (std + 1e-4)).view(-1)


CASES += [
    Case(
        "trl_nan_aware",
        trl_nan_aware,
        "contiguous",
        True,
        f"{_T} scale_rewards='group' (nanmean, nanstd + 1e-4)",
        "trl",
        note="a NaN reward is left out of its group's mean and std",
        dtypes=FULL_PRECISION,
    ),
    Case(
        "nan_to_num_rewards",
        nan_to_num_rewards,
        "contiguous",
        False,
        "rewards.nan_to_num(0) before TRL-style group statistics",
        "trl",
        breaks=("nan_rewards",),
        cause_words=("nan_to_num",),
        verdict="WARN",
        note="an unscored response counts as reward 0 in its group's mean and std",
        dtypes=FULL_PRECISION,
    ),
]


# ---------------------------------------------------------------------------------------
# issue 20 item 8: estimators trainers ship outside one divisor per group (sigma_ref.estimators)


def areal_leave1out_group_std(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """AReaL-style NormConfig(mean_leave1out=True, std_level='group', std_unbiased=True, eps=1e-5):
    the mean of the other responses as baseline, the group's Bessel std as scale."""
    grouped = rewards.view(-1, group_size)
    loo_mean = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
    return ((grouped - loo_mean) / (grouped.std(dim=1, keepdim=True) + 1e-5)).view(-1)


def leave_one_out_std(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Leave-one-out baseline and leave-one-out Bessel std, by masking each response out in turn."""
    grouped = rewards.view(-1, group_size)
    out = torch.empty_like(grouped)
    for i in range(group_size):  # a loop over positions, as the masked code writes it
        others = torch.cat([grouped[:, :i], grouped[:, i + 1 :]], dim=1)
        out[:, i] = (grouped[:, i] - others.mean(dim=1)) / (others.std(dim=1) + 1e-6)
    silent = grouped.max(dim=1, keepdim=True).values == grouped.min(dim=1, keepdim=True).values
    return out.masked_fill(silent, 0.0).view(-1)


def normalize_then_renormalize(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Group normalisation (population std), then the whole batch normalised again (GDPO, one reward)."""
    grouped = rewards.view(-1, group_size)
    std = grouped.std(dim=1, unbiased=False, keepdim=True)
    silent = grouped.max(dim=1, keepdim=True).values == grouped.min(dim=1, keepdim=True).values
    a = torch.where(
        silent, 0.0, (grouped - grouped.mean(dim=1, keepdim=True)) / torch.where(silent, 1.0, std)
    )
    return (a / a.pow(2).mean().sqrt().clamp(min=1e-12)).view(-1)


def maxrl_mean_scaled(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """MaxRL: the centered reward over the group's mean reward (pass rate); 0 where nothing passed."""
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    return torch.where(mean > 0, (grouped - mean) / mean.clamp(min=1e-12), 0.0).view(-1)


def _estimator_case(name: str, fn, words: str, note: str) -> Case:  # type: ignore[no-untyped-def]
    return Case(
        name,
        fn,
        "contiguous",
        False,
        "a named estimator (sigma_ref.estimators) run as if it claimed GRPO",
        "paper",
        breaks=("advantage_values",),
        cause_words=(f"named estimator {words!r}",),
        note=note,
        dtypes=FULL_PRECISION,
    )


CASES += [
    _estimator_case("areal_leave1out_group_std", areal_leave1out_group_std, "rloo_std", "RLOO over the std"),
    _estimator_case("leave_one_out_std", leave_one_out_std, "loo_std", "leave-one-out baseline and std"),
    _estimator_case(
        "normalize_then_renormalize",
        normalize_then_renormalize,
        "group_then_batch",
        "two-stage normalisation",
    ),
    _estimator_case("maxrl_mean_scaled", maxrl_mean_scaled, "maxrl", "(R - mean) / mean"),
]


# ---------------------------------------------------------------------------------------
# issue 26 item 5: filters beyond 0 < k < G (layout keep-mask; their declarations are Adapter fields)


def _uid_lists(rewards: torch.Tensor, index: np.ndarray) -> dict:
    vals: dict = defaultdict(list)
    for uid, r in zip(index.tolist(), rewards.tolist(), strict=True):
        vals[uid].append(r)
    return vals


def keep_acc_band(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Online filtering on the accuracy's mean: keep a uid iff 0.2 < mean(acc) < 0.8 (acc = R > 0.5)."""
    acc = {uid: [float(r > 0.5) for r in v] for uid, v in _uid_lists(rewards, index).items()}
    kept = {uid for uid, a in acc.items() if 0.2 < sum(a) / len(a) < 0.8}
    return torch.tensor([uid in kept for uid in index.tolist()])


def keep_band_on_reward(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """WRONG when declared on the accuracy: the band is applied to the shaped reward's mean."""
    vals = _uid_lists(rewards, index)
    kept = {uid for uid, v in vals.items() if 0.2 < sum(v) / len(v) < 0.8 and max(v) > min(v)}
    return torch.tensor([uid in kept for uid in index.tolist()])


def keep_reward_std(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """DAPO's filter on the reward with a std threshold: keep a uid iff np.std(rewards) > 0.05."""
    kept = {uid for uid, v in _uid_lists(rewards, index).items() if np.std(v) > 0.05}
    return torch.tensor([uid in kept for uid in index.tolist()])


#: ``(name, filter, declarations, correct, cause words)``: a correct filter passes with its
#: declarations (and FAILs without them, its extra rule named); a wrong one FAILs declared.
FILTERS: list[tuple[str, object, dict, bool, str]] = [
    ("keep_acc_band", keep_acc_band, {"keep_metric": "accuracy", "keep_band": (0.2, 0.8)}, True, "band"),
    (
        "keep_reward_std",
        keep_reward_std,
        {"keep_metric": "reward", "keep_min_std": 0.05},
        True,
        "std threshold",
    ),
    (
        "keep_band_on_reward",
        keep_band_on_reward,
        {"keep_metric": "accuracy", "keep_band": (0.2, 0.8)},
        False,
        "shaped reward, not the accuracy",
    ),
]


# ---------------------------------------------------------------------------------------
# issue 20 item 7: a size check that falls back to one group


def one_group_fallback(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """WRONG (partial_trailing_group): when N is not a multiple of G, the whole batch is normalised as
    one group (TRL-style statistics)."""
    if rewards.numel() % group_size:
        return (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    return ((grouped - mean) / (std + 1e-4)).view(-1)


CASES += [
    Case(
        "one_group_fallback",
        one_group_fallback,
        "contiguous",
        False,
        "a size check that normalises the whole batch as one group when N % G != 0",
        "trl",
        breaks=("partial_trailing_group",),
        cause_words=("whole batch as one", "group"),
        note="N % G != 0: every response is judged against the batch's mean and std",
        dtypes=FULL_PRECISION,
    ),
]


# ---------------------------------------------------------------------------------------
# issue 20 item 9: the sort order used where its inverse belongs


def sort_order_as_inverse(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """WRONG (advantage_values): sorts by uid to make groups contiguous, normalises (verl's values),
    then indexes the sorted result with the sort order again instead of scattering it back."""
    order = torch.from_numpy(np.argsort(index, kind="stable"))
    r = rewards[order]
    ids = index[order.numpy()]
    out = torch.empty_like(r)
    start = 0
    while start < len(ids):
        stop = start
        while stop < len(ids) and ids[stop] == ids[start]:
            stop += 1
        chunk = r[start:stop]
        if stop - start == 1:
            out[start:stop] = chunk / (1.0 + 1e-6)
        else:
            out[start:stop] = (chunk - chunk.mean()) / (chunk.std() + 1e-6)
        start = stop
    return out[order]  # should be: result = empty; result[order] = out


CASES += [
    Case(
        "sort_order_as_inverse",
        sort_order_as_inverse,
        "index",
        False,
        "argsort by uid, a contiguous kernel, then out[order] where the inverse permutation belongs",
        "verl",
        breaks=("advantage_values",),
        cause_words=("instead of its inverse",),
        note="right values per group, permuted twice",
    ),
]


# ---------------------------------------------------------------------------------------
# issue 20 item 5: a singleton rule that depends on the rest of the batch


@torch.no_grad()
def verl_scatter_singleton(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """WRONG (singleton_groups, under verl): verl's per-uid statistics rewritten with scatter-adds.
    verl's rule for a lone response (mean 0, std 1) survives only on the early exit for a batch of
    lone responses; beside larger groups a lone response gets its own mean and a Bessel variance whose
    denominator is clamped to 1, so std 0 and A = 0 / (0 + 1e-6) = 0 instead of R / (1 + 1e-6)."""
    _, inv_np, counts_np = np.unique(index, return_inverse=True, return_counts=True)
    inv, counts = torch.from_numpy(inv_np.reshape(-1)), torch.from_numpy(counts_np).to(rewards.dtype)
    if int(counts_np.max()) == 1:  # every prompt sampled once: verl's mean 0, std 1
        return rewards / (1.0 + 1e-6)
    mean = torch.zeros(len(counts), dtype=rewards.dtype).index_add_(0, inv, rewards) / counts
    centered = rewards - mean[inv]
    sq = torch.zeros(len(counts), dtype=rewards.dtype).index_add_(0, inv, centered * centered)
    std = (sq / (counts - 1).clamp(min=1)).sqrt()
    return centered / (std[inv] + 1e-6)


CASES += [
    Case(
        "verl_scatter_singleton",
        verl_scatter_singleton,
        "index",
        False,
        "verl compute_grpo_outcome_advantage vectorised with scatter-adds; mean 0, std 1 for a lone "
        "response only when every group is one",
        "verl",
        breaks=("singleton_groups",),
        cause_words=("only when the batch has larger groups",),
        note="a lone response beside a larger group gets A = 0 (std 0), not R / (1 + 1e-6)",
        dtypes=FULL_PRECISION,
    ),
]
