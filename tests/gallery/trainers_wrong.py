"""Wrong advantage code of the kinds open trainers ship (issue 8's missed bug classes).

Each function is a realistic bug: float32 one-pass variance, trailing partial groups,
results returned in sorted-id order, first-seen vs sorted id confusion, ``torch.unique``
without its inverse, statistics over the wrong dim or the wrong shard, rounding that
defeats a ``std > 0`` guard, and wrong loss aggregation. Each :class:`Case` names what the
author intended (``convention``), the suite's properties that must fail (``breaks``; a
name not yet in ``sigma_ref.conformance.core.PROPERTIES`` is a property the suite needs),
and words a correct diagnosis contains. :data:`WITNESSES` holds, per advantage case, an
input where it departs from its intent (checked by ``tests/test_gallery_trainers.py``).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from .cases import Case
from .trainers_correct import trl_grpo_nanstd, verl_grpo_id2score

# ---------------------------------------------------------------------------------------
# numerics: one-pass variance, variance floors


def one_pass_variance_f32(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """TRL's convention, but var = E[x^2] - E[x]^2 in float32: cancels on near-equal rewards."""
    r = rewards.float().view(-1, group_size)
    mean = r.mean(dim=1, keepdim=True)
    var = ((r * r).mean(dim=1, keepdim=True) - mean * mean) * group_size / (group_size - 1)
    std = var.clamp(min=0).sqrt()
    return ((r - mean) / (std + 1e-4)).view(-1)


def verl_vectorized_one_pass(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl's grpo_vectorized: float32 sums, var = (s2 - s1^2/n)/(n-1) floored at 1e-6, then + 1e-6."""
    with torch.no_grad():
        codes: dict = {}
        g = torch.tensor([codes.setdefault(u, len(codes)) for u in index.tolist()], dtype=torch.long)
        scores = rewards.reshape(-1).to(torch.float32)
        k = int(g.max()) + 1
        count = torch.zeros(k).index_add_(0, g, torch.ones_like(scores))
        s1 = torch.zeros(k).index_add_(0, g, scores)
        s2 = torch.zeros(k).index_add_(0, g, scores * scores)
        mean = s1 / count.clamp_min(1.0)
        var = (s2 - s1 * s1 / count.clamp_min(1.0)) / (count - 1.0).clamp_min(1.0)
        std = torch.sqrt(torch.clamp(var, min=1e-6))
        single = count <= 1.0
        mean = torch.where(single, torch.zeros_like(mean), mean)
        std = torch.where(single, torch.ones_like(std), std)
        return (scores - mean[g]) / (std[g] + 1e-6)


def nemo_style_one_pass_std(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Population std as sqrt(E[x^2] - baseline^2) in the input dtype (float32 rewards): cancels."""
    baseline = torch.zeros_like(rewards)
    sq_baseline = torch.zeros_like(rewards)
    for uid in np.unique(index):
        rows = torch.from_numpy(np.flatnonzero(index == uid))
        n = len(rows)
        ones = torch.ones(n, n, dtype=rewards.dtype)
        baseline[rows] = ones @ rewards[rows] / n
        sq_baseline[rows] = ones @ rewards[rows].pow(2) / n
    std = (sq_baseline - baseline.square()).sqrt().nan_to_num(0)
    adv = rewards - baseline
    live = std > 0
    adv[live] = adv[live] / std[live]
    return adv


# ---------------------------------------------------------------------------------------
# partial trailing groups (N not a multiple of G)


@torch.no_grad()
def partial_group_eps(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Statistics buffers start at 0 and only full groups fill them: the tail is R / 1e-4."""
    means = torch.zeros_like(rewards)
    stds = torch.zeros_like(rewards)
    for g in range(rewards.numel() // group_size):
        chunk = rewards[g * group_size : (g + 1) * group_size]
        means[g * group_size : (g + 1) * group_size] = chunk.mean()
        stds[g * group_size : (g + 1) * group_size] = chunk.std()
    return (rewards - means) / (stds + 1e-4)


@torch.no_grad()
def partial_group_dropped(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Normalises the first N // G * G rewards with view(-1, G); the tail silently keeps 0."""
    out = torch.zeros_like(rewards)
    n_full = rewards.numel() // group_size * group_size
    r = rewards[:n_full].view(-1, group_size)
    out[:n_full] = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)
    return out


@torch.no_grad()
def partial_group_assumed_size(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Group sums by bincount(arange(N) // G) but divided by G: the tail's mean and std are off."""
    gid = torch.arange(rewards.numel()) // group_size
    mean = torch.bincount(gid, weights=rewards).to(rewards.dtype)[gid] / group_size
    centered = rewards - mean
    var = torch.bincount(gid, weights=centered * centered).to(rewards.dtype)[gid] / (group_size - 1)
    return centered / (var.sqrt() + 1e-8)


# ---------------------------------------------------------------------------------------
# id order: sorted order, first-seen order, unique without inverse


@torch.no_grad()
def sorted_id_order(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Sorts by uid to make groups contiguous, normalises, and returns them in sorted order."""
    order = np.argsort(index, kind="stable")
    _, counts = np.unique(index, return_counts=True)
    out = []
    for group in torch.split(rewards[torch.from_numpy(order)], counts.tolist()):
        if group.numel() == 1:
            out.append(group / (1 + 1e-6))
        else:
            out.append((group - group.mean()) / (group.std() + 1e-6))
    return torch.cat(out)


@torch.no_grad()
def first_seen_vs_sorted(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """Statistics listed in first-seen uid order, looked up by np.unique's sorted-rank inverse."""
    keys = list(dict.fromkeys(index.tolist()))
    means, stds = [], []
    for key in keys:
        group = rewards[torch.from_numpy(index == key)]
        single = group.numel() == 1
        means.append(torch.zeros((), dtype=rewards.dtype) if single else group.mean())
        stds.append(torch.ones((), dtype=rewards.dtype) if single else group.std())
    inverse = torch.from_numpy(np.unique(index, return_inverse=True)[1].reshape(-1))
    return (rewards - torch.stack(means)[inverse]) / (torch.stack(stds)[inverse] + 1e-6)


@torch.no_grad()
def unique_without_inverse(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """torch.unique with counts but no inverse: per-uid stats broadcast by repeat_interleave."""
    codes = torch.from_numpy(np.unique(index, return_inverse=True)[1].reshape(-1))
    uniq, counts = torch.unique(codes, return_counts=True)
    means = torch.stack([rewards[codes == u].mean() for u in uniq])
    stds = torch.stack(
        [
            rewards[codes == u].std() if c > 1 else rewards.new_tensor(1.0)
            for u, c in zip(uniq, counts, strict=True)
        ]
    )
    means = torch.where(counts > 1, means, torch.zeros_like(means))
    return (rewards - means.repeat_interleave(counts)) / (stds.repeat_interleave(counts) + 1e-6)


# ---------------------------------------------------------------------------------------
# wrong scope: dim, batch mean, shards


@torch.no_grad()
def std_over_wrong_dim(rewards: torch.Tensor) -> torch.Tensor:
    """Mean over the group (dim=1) but std over the prompts (dim=0)."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=0, unbiased=False, keepdim=True)
    return torch.nan_to_num((rewards - mean) / std)


@torch.no_grad()
def batch_mean_index(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl intended, but every response is centered on the batch mean (std still per uid)."""
    scores = rewards.clone()
    id2rows: dict = defaultdict(list)
    for i, uid in enumerate(index.tolist()):
        id2rows[uid].append(i)
    batch_mean = rewards.mean()
    for rows in id2rows.values():
        std = rewards[rows].std() if len(rows) > 1 else rewards.new_tensor(1.0)
        scores[rows] = (rewards[rows] - batch_mean) / (std + 1e-6)
    return scores


@torch.no_grad()
def shard_local_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each of 2 data-parallel ranks normalises its own shard: a group split across ranks is split."""
    out = []
    for shard in rewards.chunk(2):
        for group in torch.split(shard, group_size):
            std = group.std() if group.numel() > 1 else torch.zeros((), dtype=group.dtype)
            out.append((group - group.mean()) / (torch.nan_to_num(std) + 1e-4))
    return torch.cat(out)


@torch.no_grad()
def batch_std_of_centered(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """trl_batch intended, but the batch std is taken of the group-centered rewards, not the rewards."""
    r = rewards.view(-1, group_size)
    centered = (r - r.mean(1, keepdim=True)).view(-1)
    return centered / (centered.std() + 1e-4)


@torch.no_grad()
def eps_inside_sqrt_verl(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl intended, but d = sqrt(var + 1e-6) instead of std + 1e-6."""
    scores = rewards.clone()
    id2rows: dict = defaultdict(list)
    for i, uid in enumerate(index.tolist()):
        id2rows[uid].append(i)
    for rows in id2rows.values():
        g = rewards[rows]
        if len(rows) == 1:
            scores[rows] = g / (1 + 1e-6)
        else:
            scores[rows] = (g - g.mean()) / torch.sqrt(g.var() + 1e-6)
    return scores


@torch.no_grad()
def fp16_eps_underflow(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """OpenRLHF's group_norm (std + 1e-9) run on float16 rewards: 1e-9 rounds to 0 in float16."""
    r = rewards.reshape(-1, group_size)
    r = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-9)
    return r.reshape(-1)


# ---------------------------------------------------------------------------------------
# contract: mutation, NaN, rounding, singletons, clamps, randomness, integer arithmetic


def in_place_no_clone(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl's loop with `scores = rewards` (the .clone() forgotten): the caller's rewards change."""
    scores = rewards
    id2score: dict = defaultdict(list)
    with torch.no_grad():
        for i in range(scores.shape[0]):
            id2score[index[i]].append(float(scores[i]))
        stats = {}
        for uid, vals in id2score.items():
            t = torch.tensor(vals, dtype=scores.dtype)
            stats[uid] = (t.mean(), t.std()) if len(vals) > 1 else (t.new_tensor(0.0), t.new_tensor(1.0))
        for i in range(scores.shape[0]):
            mean, std = stats[index[i]]
            scores[i] = (scores[i] - mean) / (std + 1e-6)
    return scores


@torch.no_grad()
def nan_on_silent_index(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """The paper's population std with no guard: a silent uid is 0/0."""
    out = torch.empty_like(rewards)
    for uid in np.unique(index):
        rows = torch.from_numpy(index == uid)
        g = rewards[rows]
        out[rows] = (g - g.mean()) / g.std(unbiased=False)
    return out


@torch.no_grad()
def std_gt_zero_guard(rewards: torch.Tensor) -> torch.Tensor:
    """The paper's std written by hand, guarded by std > 0: on [0.1, 0.1, 0.1] the float mean is not
    0.1, so the centered values and the std are ~1e-17 and the guard lets them through."""
    mean = rewards.mean(dim=1, keepdim=True)
    centered = rewards - mean
    std = centered.pow(2).mean(dim=1, keepdim=True).sqrt()
    return torch.where(std > 0, centered / torch.where(std > 0, std, 1.0), torch.zeros_like(centered))


@torch.no_grad()
def singleton_nan_index(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl intended, but without the len == 1 branch: torch.std of one reward is NaN."""
    scores = rewards.clone()
    id2score: dict = defaultdict(list)
    for i in range(scores.shape[0]):
        id2score[index[i]].append(scores[i])
    stats = {uid: (torch.stack(v).mean(), torch.stack(v).std()) for uid, v in id2score.items()}
    for i in range(scores.shape[0]):
        mean, std = stats[index[i]]
        scores[i] = (scores[i] - mean) / (std + 1e-6)
    return scores


@torch.no_grad()
def clamp_undeclared(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """The paper's convention, then an undeclared clamp to [-3, 3] ('for stability')."""
    r = rewards.view(-1, group_size)
    std = r.std(1, unbiased=False, keepdim=True)
    silent = (r == r[:, :1]).all(1, keepdim=True)
    adv = ((r - r.mean(1, keepdim=True)) / torch.where(silent, 1.0, std)).masked_fill(silent, 0.0)
    return adv.clamp(-3.0, 3.0).view(-1)


@torch.no_grad()
def random_subset_baseline(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr. GRPO intended, but the baseline is the mean of a random half of the group."""
    r = rewards.view(-1, group_size)
    pick = torch.randperm(group_size)[: max(1, group_size // 2)]
    return (r - r[:, pick].mean(1, keepdim=True)).view(-1)


@torch.no_grad()
def integer_floor_mean(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr. GRPO intended, but the group mean is a floor division: sum // G."""
    r = rewards.view(-1, group_size)
    mean = torch.div(r.sum(1, keepdim=True), group_size, rounding_mode="floor")
    return (r - mean).view(-1)


@torch.no_grad()
def rloo_divides_by_g(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO intended, but the leave-one-out sum is divided by G instead of G - 1."""
    r = rewards.view(-1, group_size)
    baseline = (r.sum(1, keepdim=True) - r) / group_size
    return (r - baseline).view(-1)


def dapo_np_std_filter(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl's DAPO recipe literally: keep iff np.std(vals) > 0 or len == 1 (np.std of
    [0.1, 0.1, 0.1] is 1.4e-17 > 0, so that silent group is kept)."""
    vals: dict = defaultdict(list)
    for uid, v in zip(index.tolist(), rewards.tolist(), strict=True):
        vals[uid].append(v)
    kept = {uid for uid, v in vals.items() if np.std(v) > 0 or len(v) == 1}
    return torch.tensor([uid in kept for uid in index.tolist()])


# ---------------------------------------------------------------------------------------
# losses (declared aggregation in the Case; gradient at ratio 1 should be -A w)


def loss_sign_flip(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """seq-mean-token-mean, but returns +surrogate: gradient descent lowers good responses."""
    ratio = torch.exp(logp - old_logp)
    per_token = torch.min(
        ratio * advantages.unsqueeze(1), torch.clamp(ratio, 0.8, 1.2) * advantages.unsqueeze(1)
    )
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def loss_padding_included(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """token-mean declared, but the mean runs over every position, padding included."""
    ratio = torch.exp(logp - old_logp)
    return -(ratio * advantages.unsqueeze(1)).mean()


def loss_padded_length_mean(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """seq-mean-token-mean declared, but each sequence is averaged over the padded length T."""
    ratio = torch.exp(logp - old_logp)
    per_token = -ratio * advantages.unsqueeze(1) * mask
    return per_token.mean(dim=-1).mean()


def loss_constant_normaliser(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """token-mean declared, but the token sum is divided by a hard-coded 1024 (max tokens)."""
    ratio = torch.exp(logp - old_logp)
    return -(ratio * advantages.unsqueeze(1) * mask).sum() / 1024.0


def loss_ratio_detached(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """token-mean declared, but the ratio is detached: the policy gets no gradient."""
    ratio = torch.exp(logp - old_logp).detach()
    clipped = torch.clamp(ratio, 0.8, 1.2)
    adv = advantages.unsqueeze(1)
    return -(torch.min(ratio * adv, clipped * adv) * mask).sum() / mask.sum() + 0.0 * logp.sum()


def loss_microbatch_token_mean(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """token-mean declared, but each of 2 micro-batches is normalised by its own token count."""
    total = logp.new_zeros(())
    chunks = list(zip(logp.chunk(2), old_logp.chunk(2), advantages.chunk(2), mask.chunk(2), strict=True))
    for lp, olp, adv, m in chunks:
        ratio = torch.exp(lp - olp)
        total = total + (-(ratio * adv.unsqueeze(1)) * m).sum() / m.sum() / len(chunks)
    return total


# ---------------------------------------------------------------------------------------

_V = "volcengine/verl 0.8.0.dev"
_ILL = ("cancellation", "E[x^2] - E[x]^2")
_UUID_IDS = ["c47e10", "9f1c2a", "5a0d93", "c47e10", "03be7d", "9f1c2a", "5a0d93", "03be7d"]

CASES: list[Case] = [
    Case(
        "one_pass_variance_f32",
        one_pass_variance_f32,
        "contiguous",
        False,
        "TRL-style group statistics fused into one pass (common in hand-written GRPO loops)",
        "trl",
        breaks=("ill_conditioned_groups", "dtype_accuracy"),
        cause_words=_ILL,
        note="float32 E[x^2] - E[x]^2: ~1.5% error on [5.0, 5.01, 5.0, 5.02]; exact on dyadic |R| <= 10",
        precision="float32",
    ),
    Case(
        "verl_vectorized_one_pass",
        verl_vectorized_one_pass,
        "index",
        False,
        f"{_V} core_algos.compute_grpo_vectorized_outcome_advantage + utils/groupwise.group_mean_std",
        "verl",
        breaks=("ill_conditioned_groups", "advantage_values"),
        cause_words=("cancellation", "floor"),
        note="as shipped: float32 one-pass variance floored at 1e-6 (std >= 1e-3) and then + 1e-6: "
        "wrong on near-equal rewards and on any group with std < 1e-3",
        precision="float32",
    ),
    Case(
        "nemo_style_one_pass_std",
        nemo_style_one_pass_std,
        "index",
        False,
        "NVIDIA-NeMo/RL nemo_rl/algorithms/utils.py calculate_baseline_and_std_per_prompt "
        "(leave_one_out_baseline=False): std = sqrt(E[x^2] - baseline^2)",
        "paper",
        breaks=("ill_conditioned_groups", "dtype_accuracy"),
        cause_words=_ILL,
        note="population std by one pass in the input dtype, std > 0 guard: float32 rewards near 5 lose "
        "~1% (or the whole std)",
    ),
    Case(
        "partial_group_eps",
        partial_group_eps,
        "contiguous",
        False,
        "hand-written group loop over range(N // G) with zero-initialised mean/std buffers",
        "trl",
        breaks=("partial_trailing_group",),
        cause_words=("trailing", "partial group", "eps"),
        note="N % G != 0: the tail keeps mean 0 and std 0, so its advantages are R / 1e-4 (10^4 x)",
    ),
    Case(
        "partial_group_dropped",
        partial_group_dropped,
        "contiguous",
        False,
        "hand-written view(-1, G) on rewards[: N // G * G] (tail 'handled' by zeros)",
        "trl",
        breaks=("partial_trailing_group",),
        cause_words=("trailing", "dropped"),
        note="N % G != 0: the tail responses silently get advantage 0 instead of an error or their own group",
    ),
    Case(
        "partial_group_assumed_size",
        partial_group_assumed_size,
        "contiguous",
        False,
        "bincount(arange(N) // G) group sums divided by the nominal G",
        "post",
        breaks=("partial_trailing_group",),
        cause_words=("trailing", "group size"),
        note="N % G != 0: the tail group's mean and std are divided by G, not by its own size",
    ),
    Case(
        "sorted_id_order",
        sorted_id_order,
        "index",
        False,
        "argsort-by-uid to reuse a contiguous kernel (verl-style uids), inverse permutation forgotten",
        "verl",
        breaks=("interleaved_groups", "string_id_order"),
        cause_words=("sorted", "order"),
        note="returns advantages in sorted-uid order: invisible when the ids are sorted contiguous integers",
    ),
    Case(
        "first_seen_vs_sorted",
        first_seen_vs_sorted,
        "index",
        False,
        "dict.fromkeys(uids) for the statistics, np.unique(return_inverse) for the lookup",
        "verl",
        breaks=("string_id_order",),
        cause_words=("first-seen", "sorted"),
        note="correct whenever first-seen order equals sorted order (integer ids in order); uuid strings mix "
        "groups' statistics",
    ),
    Case(
        "unique_without_inverse",
        unique_without_inverse,
        "index",
        False,
        "torch.unique(return_counts=True) + repeat_interleave, return_inverse not used",
        "verl",
        breaks=("interleaved_groups", "string_id_order"),
        cause_words=("return_inverse", "contiguous"),
        note="broadcasts per-uid stats as if rows were sorted by uid; right only for contiguous sorted ids",
    ),
    Case(
        "std_over_wrong_dim",
        std_over_wrong_dim,
        "grouped",
        False,
        "reference GRPO on [B, G] with std(dim=0)",
        "paper",
        breaks=("advantage_values", "group_independence"),
        cause_words=("std", "dim"),
        note="std per column across prompts instead of per row: each group's scale depends on the others",
    ),
    Case(
        "eps_inside_sqrt_verl",
        eps_inside_sqrt_verl,
        "index",
        False,
        f"{_V} compute_grpo_outcome_advantage with sqrt(var + eps)",
        "verl",
        breaks=("advantage_values",),
        cause_words=("eps", "inside the sqrt"),
        note="sqrt(var + 1e-6) instead of std + 1e-6: equal to first order at std 0.5, 30% off at std 1e-3",
    ),
    Case(
        "batch_mean_index",
        batch_mean_index,
        "index",
        False,
        "verl-style uid loop with the batch mean as baseline",
        "verl",
        breaks=("group_centering", "advantage_values"),
        cause_words=("batch mean",),
        note="advantages do not sum to zero per group; a group's baseline depends on other groups",
    ),
    Case(
        "shard_local_groups",
        shard_local_groups,
        "contiguous",
        False,
        "advantages computed per data-parallel rank after the batch is sharded (rewards.chunk(world_size))",
        "trl",
        breaks=("advantage_values", "group_independence"),
        cause_words=("shard", "split"),
        note="when B * G / world_size is not a multiple of G a group straddles two ranks and is normalised "
        "as two groups",
    ),
    Case(
        "batch_std_of_centered",
        batch_std_of_centered,
        "contiguous",
        False,
        "huggingface/trl scale_rewards='batch' re-implemented as whitening of the centered advantages",
        "trl_batch",
        breaks=("advantage_values",),
        cause_words=("batch std", "centered"),
        note="TRL divides by the std of the raw batch rewards; this by the std of the group-centered ones",
    ),
    Case(
        "fp16_eps_underflow",
        fp16_eps_underflow,
        "contiguous",
        False,
        "OpenRLHF/OpenRLHF main openrlhf/trainer/ppo_utils/experience_maker.py group_norm on float16 rewards",
        "openrlhf",
        breaks=("half_precision_silent",),
        cause_words=("float16", "smallest subnormal"),
        verdict="WARN",
        note="in float16, std + 1e-9 of a silent group is 0 + 0 (1e-9 is below the smallest subnormal 6e-8): "
        "0/0 = NaN; correct in float32/bfloat16, so only a silent-group probe in float16 finds it. Hygiene, "
        "a WARN (test_half_precision_silent): trainers feed float32 rewards, and OpenRLHF's own group_norm "
        "does the same in float16",
    ),
    Case(
        "in_place_no_clone",
        in_place_no_clone,
        "index",
        False,
        f"{_V} compute_grpo_outcome_advantage with the scores tensor aliased to the caller's",
        "verl",
        breaks=("input_not_mutated",),
        cause_words=("in place", "mutat"),
        note="right values, but the caller's rewards tensor now holds advantages",
    ),
    Case(
        "nan_on_silent_index",
        nan_on_silent_index,
        "index",
        False,
        "reference GRPO per uid with no guard",
        "paper",
        breaks=("silent_group_zero", "finite_output"),
        cause_words=("silent", "NaN"),
        note="a silent group (all rewards equal) is 0/0 = NaN",
    ),
    Case(
        "std_gt_zero_guard",
        std_gt_zero_guard,
        "grouped",
        False,
        "reference GRPO guarded by torch.where(std > 0, ...)",
        "paper",
        breaks=("silent_group_zero", "non_dyadic_silent_group"),
        cause_words=("silent", "rounding"),
        note="[0.1, 0.1, 0.1]: the float mean is not 0.1, centered values and std ~1.4e-17 > 0, so A = -1 "
        "for every response of a silent group; exact on dyadic rewards (torch.std's Welford pass would "
        "give 0)",
    ),
    Case(
        "singleton_nan_index",
        singleton_nan_index,
        "index",
        False,
        f"{_V} compute_grpo_outcome_advantage without the len == 1 branch",
        "verl",
        breaks=("singleton_groups", "finite_output"),
        cause_words=("group of one", "NaN"),
        note="torch.std of a single reward is NaN (Bessel divides by 0)",
    ),
    Case(
        "clamp_undeclared",
        clamp_undeclared,
        "contiguous",
        False,
        "reference GRPO plus an advantage clamp 'for stability'",
        "paper",
        breaks=("advantage_values", "large_group"),
        cause_words=("clamp",),
        note="A+ = sqrt((G-k)/k) exceeds 3 once G >= 11 with k = 1: a rare right answer is under-credited",
    ),
    Case(
        "random_subset_baseline",
        random_subset_baseline,
        "contiguous",
        False,
        "a subsampled baseline (half the group) to 'save compute'",
        "dr_grpo",
        breaks=("deterministic", "group_centering"),
        cause_words=("random",),
        note="torch.randperm picks the baseline's responses: different advantages on every call",
    ),
    Case(
        "integer_floor_mean",
        integer_floor_mean,
        "contiguous",
        False,
        "group mean written as sum // G",
        "dr_grpo",
        breaks=("group_centering", "advantage_values"),
        cause_words=("floor", "integer division"),
        note="[1, 0, 0, 0]: mean 0 instead of 0.25, advantages do not sum to zero",
    ),
    Case(
        "rloo_divides_by_g",
        rloo_divides_by_g,
        "contiguous",
        False,
        "OpenRLHF-style leave-one-out baseline with / n instead of / (n - 1)",
        "rloo",
        breaks=("advantage_values", "group_centering"),
        cause_words=("G - 1",),
        note="baseline (sum - r) / G: not the mean of the others; advantages are not zero-sum",
    ),
    Case(
        "dapo_np_std_filter",
        verl_grpo_id2score,
        "index",
        False,
        "verl recipe/dapo dapo_ray_trainer.py filter_groups: kept iff np.std(metric_vals) > 0 or len == 1",
        "verl",
        keep_mask=dapo_np_std_filter,
        breaks=("dapo_keep_mask", "non_dyadic_silent_group"),
        cause_words=("silent", "rounding"),
        note="np.std([0.1, 0.1, 0.1]) = 1.4e-17 > 0: a silent group of non-dyadic rewards is kept",
        shape="keep-mask",
    ),
    Case(
        "loss_sign_flip",
        trl_grpo_nanstd,
        "contiguous",
        False,
        "TRL loss_type='grpo' with the minus sign lost",
        "trl",
        loss=loss_sign_flip,
        aggregation="seq-mean-token-mean",
        breaks=("loss_is_policy_gradient", "loss_gradient_identity"),
        cause_words=("sign",),
        note="returns +surrogate: descent lowers the probability of the good responses",
    ),
    Case(
        "loss_padding_included",
        trl_grpo_nanstd,
        "contiguous",
        False,
        "TRL loss_type='bnpo' with the completion mask forgotten",
        "trl",
        loss=loss_padding_included,
        aggregation="token-mean",
        breaks=("loss_ignores_padding",),
        cause_words=("padding", "mask"),
        note="mean over every position: padding tokens get gradient and the normaliser counts them",
    ),
    Case(
        "loss_padded_length_mean",
        trl_grpo_nanstd,
        "contiguous",
        False,
        "verl agg_loss('seq-mean-token-mean') written as (loss * mask).mean(-1).mean()",
        "trl",
        loss=loss_padded_length_mean,
        aggregation="seq-mean-token-mean",
        breaks=("loss_aggregation",),
        cause_words=("padded length", "seq-mean-token-mean"),
        note="each sequence averaged over T (padded), not its own length: short responses are down-weighted "
        "(this is seq-mean-token-sum-norm, not the declared mode)",
    ),
    Case(
        "loss_constant_normaliser",
        trl_grpo_nanstd,
        "contiguous",
        False,
        "token-mean loss normalised by a hard-coded max-token budget",
        "trl",
        loss=loss_constant_normaliser,
        aggregation="token-mean",
        breaks=("loss_aggregation", "loss_gradient_identity"),
        cause_words=("constant", "normaliser"),
        note="sum / 1024 instead of sum / (number of valid tokens): the step size depends on the budget",
    ),
    Case(
        "loss_ratio_detached",
        trl_grpo_nanstd,
        "contiguous",
        False,
        "PPO surrogate with ratio = exp(logp - old_logp).detach()",
        "trl",
        loss=loss_ratio_detached,
        aggregation="token-mean",
        breaks=("loss_is_policy_gradient",),
        cause_words=("detach", "no gradient"),
        note="the ratio carries no graph: the loss has zero policy gradient",
    ),
    Case(
        "loss_microbatch_token_mean",
        trl_grpo_nanstd,
        "contiguous",
        False,
        "token-mean normalised per micro-batch (TRL 'bnpo' under gradient accumulation; verl before "
        "global batch_num_tokens)",
        "trl",
        loss=loss_microbatch_token_mean,
        aggregation="token-mean",
        breaks=("loss_aggregation",),
        cause_words=("micro-batch", "normaliser"),
        note="each micro-batch divides by its own token count: tokens in short micro-batches weigh more",
    ),
]


#: ``name -> (rewards, index or None, group_size or None, dtype)``: an input on which the
#: advantage case departs from its intended convention (index None: contiguous groups of G,
#: the last one partial when G does not divide N).
WITNESSES: dict[str, tuple] = {
    "fp16_eps_underflow": ([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0], None, 4, torch.float16),
    "one_pass_variance_f32": ([5.0, 5.01, 5.0, 5.02, 1.0, 0.0, 0.0, 1.0], None, 4, torch.float64),
    "verl_vectorized_one_pass": (
        [5.0, 5.01, 5.0, 5.02, 0.0, 2e-4, 0.0, 1e-4],
        [0, 0, 0, 0, 1, 1, 1, 1],
        None,
        torch.float64,
    ),
    "nemo_style_one_pass_std": (
        [5.0, 5.01, 5.0, 5.02, 1.0, 0.0, 0.0, 1.0],
        [0, 0, 0, 0, 1, 1, 1, 1],
        None,
        torch.float32,
    ),
    "partial_group_eps": ([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0], None, 4, torch.float64),
    "partial_group_dropped": ([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0], None, 4, torch.float64),
    "partial_group_assumed_size": (
        [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        None,
        4,
        torch.float64,
    ),
    "sorted_id_order": (
        [1.0, 0.0, 0.0, 1.0, 0.5, 1.0, 0.0, 0.25],
        [2, 0, 1, 0, 2, 1, 0, 2],
        None,
        torch.float64,
    ),
    "first_seen_vs_sorted": ([1.0, 0.0, 0.5, 1.0, 0.0, 1.0, 0.0, 0.25], _UUID_IDS, None, torch.float64),
    "unique_without_inverse": (
        [1.0, 0.0, 0.0, 1.0, 0.5, 1.0, 0.0, 0.25],
        [2, 0, 1, 0, 2, 1, 0, 2],
        None,
        torch.float64,
    ),
    "std_over_wrong_dim": ([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0], None, 4, torch.float64),
    "eps_inside_sqrt_verl": (
        [0.0, 0.002, 0.0, 0.002, 1.0, 0.0, 1.0, 0.0],
        [0, 0, 0, 0, 1, 1, 1, 1],
        None,
        torch.float64,
    ),
    "batch_mean_index": (
        [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0],
        [0, 0, 0, 0, 1, 1, 1, 1],
        None,
        torch.float64,
    ),
    "shard_local_groups": (
        [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0],
        None,
        4,
        torch.float64,
    ),
    "batch_std_of_centered": ([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0], None, 4, torch.float64),
    "in_place_no_clone": (
        [1.0, 0.0, 0.0, 1.0, 0.5, 1.0, 0.0, 0.25],
        [2, 0, 1, 0, 2, 1, 0, 2],
        None,
        torch.float64,
    ),
    "nan_on_silent_index": ([1.0, 1.0, 1.0, 0.0, 1.0, 0.0], [0, 0, 0, 1, 1, 1], None, torch.float64),
    "std_gt_zero_guard": ([0.1, 0.1, 0.1, 0.0, 1.0, 0.0], None, 3, torch.float64),
    "singleton_nan_index": ([1.0, 0.0, 0.5, 1.0, 0.0], ["a", "b", "a", "c", "b"], None, torch.float64),
    "clamp_undeclared": ([1.0] + [0.0] * 15, None, 16, torch.float64),
    "random_subset_baseline": ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 100.0], None, 8, torch.float64),
    "integer_floor_mean": ([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0], None, 4, torch.float64),
    "rloo_divides_by_g": ([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0], None, 4, torch.float64),
}
