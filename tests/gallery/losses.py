"""Policy losses in real trainers' signatures, correct and wrong, with their declared objective.

Every function is ``loss(logp, old_logp, advantages, mask, **extra) -> scalar | (scalar, metrics)``
with ``logp``, ``old_logp``, ``mask`` ``[N, T]``, ``advantages`` ``[N]`` and extras ``ref_logp``
(KL cases) and ``rollout_logp`` (importance-sampling cases). The code follows the trainer it
cites (TRL 1.16.0 ``GRPOTrainer._compute_loss``, verl 0.9.1 ``core_algos``); the wrong ones plant
one bug each, seen in open trainers' issue trackers. :data:`LOSSES` lists them as
:class:`LossCase`: the declared :class:`~sigma_ref.objectives.Objective`, the term a wrong case
breaks, words a failure message should contain, and, where one exists, the objective the wrong
code actually computes (``explained_by``), which the oracle's per-token gradient must match.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from sigma_ref.objectives import Objective

EPS_LOW, EPS_HIGH, DUAL_CLIP, BETA, TIS_CAP, MAX_LEN = 0.2, 0.28, 3.0, 0.04, 2.0, 16
LO, HI = 1 - EPS_LOW, 1 + EPS_HIGH


def _ppo_terms(logp, old_logp, advantages):
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    return -torch.min(ratio * adv, torch.clamp(ratio, LO, HI) * adv)


def _seq_count(mask):
    return (mask.sum(-1) > 0).to(mask.dtype).sum()


# --------------------------------------------------------------------------------------
# correct: each aggregation mode (verl 0.9.1 agg_loss, TRL 1.16.0 loss types)


def token_mean(logp, old_logp, advantages, mask):
    """TRL ``loss_type="dapo"`` / verl ``token-mean``: one mean over every token of the batch."""
    per_token = _ppo_terms(logp, old_logp, advantages)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def seq_mean_token_mean(logp, old_logp, advantages, mask):
    """TRL ``loss_type="grpo"``: each sequence's token mean over its own length, then the mean."""
    per_token = _ppo_terms(logp, old_logp, advantages)
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def seq_mean_token_sum(logp, old_logp, advantages, mask):
    """verl ``seq-mean-token-sum``: token sums, mean over sequences; returns ``(loss, metrics)``."""
    per_token = _ppo_terms(logp, old_logp, advantages)
    loss = (per_token * mask).sum(-1).sum() / _seq_count(mask)
    return loss, {"actor/pg_loss": loss.detach().item()}


def seq_mean_token_sum_norm(logp, old_logp, advantages, mask):
    """TRL ``loss_type="dr_grpo"``: token sum over ``B * max_completion_length``."""
    per_token = _ppo_terms(logp, old_logp, advantages)
    return (per_token * mask).sum() / (per_token.size(0) * MAX_LEN)


def token_sum(logp, old_logp, advantages, mask):
    """verl ``token-sum``: the plain sum over valid tokens."""
    return (_ppo_terms(logp, old_logp, advantages) * mask).sum()


def micro_batched_global_count(logp, old_logp, advantages, mask):
    """Two micro-batches accumulated, each divided by the *global* token count (verl, TRL dapo)."""
    total = mask.sum()
    half = mask.shape[0] // 2
    loss = 0
    for rows in (slice(0, half), slice(half, None)):
        per_token = _ppo_terms(logp[rows], old_logp[rows], advantages[rows])
        loss = loss + (per_token * mask[rows]).sum() / total
    return loss


# --------------------------------------------------------------------------------------
# correct: clipping variants, GSPO, CISPO, TIS, KL


def dual_clip(logp, old_logp, advantages, mask):
    """verl ``compute_policy_loss_vanilla``: dual clip ``c = 3`` for ``A < 0`` only."""
    adv = advantages.unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    clip1 = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, LO, HI))
    losses = torch.where(adv < 0, torch.min(-adv * DUAL_CLIP, clip1), clip1)
    return (losses * mask).sum() / mask.sum()


def gspo_sequence(logp, old_logp, advantages, mask):
    """TRL ``importance_sampling_level="sequence"``, ``loss_type="grpo"``: the GSPO paper's loss."""
    log_w = ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    coef_1 = torch.exp(log_w).unsqueeze(-1)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(coef_1 * adv, torch.clamp(coef_1, LO, HI) * adv)
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def gspo_token(logp, old_logp, advantages, mask):
    """verl ``compute_policy_loss_gspo``: ``s_it = sg(s_i) pi_it / sg(pi_it)``, seq-mean-token-mean."""
    seq = ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    s = torch.exp(logp - logp.detach() + seq.detach().unsqueeze(-1))
    adv = advantages.unsqueeze(1)
    losses = torch.maximum(-adv * s, -adv * torch.clamp(s, LO, HI))
    return ((losses * mask).sum(-1) / mask.sum(-1)).sum() / _seq_count(mask)


def cispo_verl(logp, old_logp, advantages, mask):
    """verl ``compute_policy_loss_cispo``: ``-sg(clip(r, 1 - eps_low, 1 + eps_high)) A logp``."""
    ratio = torch.exp(logp - old_logp)
    losses = -torch.clamp(ratio, LO, HI).detach() * advantages.unsqueeze(1) * logp
    return (losses * mask).sum() / mask.sum()


def cispo_trl(logp, old_logp, advantages, mask):
    """TRL ``loss_type="cispo"``, ``epsilon_high=5.0``: ``clamp(r, max=epsilon_high)``, absolute."""
    ratio = torch.exp(logp - old_logp)
    losses = -torch.clamp(ratio, max=5.0).detach() * advantages.unsqueeze(1) * logp
    return (losses * mask).sum() / mask.sum()


def tis_token(logp, old_logp, advantages, mask, *, rollout_logp):
    """Truncated importance sampling against the rollout engine (TRL ``token_truncate``, cap 2)."""
    rho = torch.clamp(torch.exp((old_logp - rollout_logp) * mask), max=TIS_CAP)
    per_token = _ppo_terms(logp, old_logp, advantages) * rho
    return (per_token * mask).sum() / mask.sum()


def kl_k3_loss(logp, old_logp, advantages, mask, *, ref_logp):
    """TRL ``beta=0.04``: ``per_token_loss + beta * (exp(ref - logp) - (ref - logp) - 1)``."""
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    per_token = _ppo_terms(logp, old_logp, advantages) + BETA * kl
    loss = (per_token * mask).sum() / mask.sum()
    return loss, {"kl": ((kl * mask).sum() / mask.sum()).item()}


def kl_k1_loss(logp, old_logp, advantages, mask, *, ref_logp):
    """verl ``use_kl_loss``, ``kl_loss_type="k1"``: ``pg_loss + kl_loss_coef * agg_loss(logp - ref)``."""
    kl = logp - ref_logp
    loss = token_mean(logp, old_logp, advantages, mask) + BETA * (kl * mask).sum() / mask.sum()
    return loss, {"actor/kl_loss": ((kl * mask).sum() / mask.sum()).item()}


def kl_k2_loss(logp, old_logp, advantages, mask, *, ref_logp):
    """verl ``kl_loss_type="mse"`` (k2): ``0.5 * (logp - ref).square()``, the reverse KL's gradient."""
    kl = 0.5 * (logp - ref_logp).square()
    return token_mean(logp, old_logp, advantages, mask) + BETA * (kl * mask).sum() / mask.sum()


def mis_token(logp, old_logp, advantages, mask, *, rollout_logp):
    """TRL ``vllm_importance_sampling_mode="token_mask"`` (MIS, IcePop): weights above the cap set to 0."""
    rho = torch.exp((old_logp - rollout_logp) * mask)
    rho = rho.masked_fill(rho > TIS_CAP, 0.0)
    per_token = _ppo_terms(logp, old_logp, advantages) * rho
    return (per_token * mask).sum() / mask.sum()


def tis_sequence(logp, old_logp, advantages, mask, *, rollout_logp):
    """TRL ``sequence_truncate``: one weight per sequence, ``exp(sum_t (old - rollout))``, capped at 2."""
    diff = ((old_logp - rollout_logp) * mask).sum(dim=-1, keepdim=True)
    rho = torch.clamp(torch.exp(diff), max=TIS_CAP)
    per_token = _ppo_terms(logp, old_logp, advantages) * rho
    return (per_token * mask).sum() / mask.sum()


def kl_in_reward(logp, old_logp, advantages, mask, *, ref_logp):
    """KL as a reward penalty (already inside ``advantages``): the loss has no KL term; logs it."""
    loss = token_mean(logp, old_logp, advantages, mask)
    return loss, {"kl": (((logp - ref_logp) * mask).sum() / mask.sum()).item()}


def kl_k3_bias_corrected(logp, old_logp, advantages, mask, *, ref_logp):
    """TRL 1.16.0's default ``use_bias_correction_kl=True``: ``per_token_kl * coef_1``, ratio in the graph."""
    coef_1 = torch.exp(logp - old_logp)
    per_token_kl = (torch.exp(ref_logp - logp) - (ref_logp - logp) - 1) * coef_1
    adv = advantages.unsqueeze(1)
    per_token_loss = -torch.min(coef_1 * adv, torch.clamp(coef_1, LO, HI) * adv) + BETA * per_token_kl
    loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    return loss, {"kl": ((per_token_kl * mask).sum() / mask.sum()).item()}


def tis_geometric(logp, old_logp, advantages, mask, *, rollout_logp):
    """A length-free sequence weight: the geometric mean of the token weights, ``exp(mean_t log rho_t)``,
    truncated at 2 (verl 0.9.1 ``geo_mean``'s sequence weight)."""
    log_rho = (old_logp - rollout_logp) * mask
    seq_is_weights = torch.exp(log_rho.sum(-1) / mask.sum(-1).clamp(min=1)).clamp(max=TIS_CAP).detach()
    per_token = _ppo_terms(logp, old_logp, advantages) * seq_is_weights.unsqueeze(-1)
    return (per_token * mask).sum() / mask.sum()


def gspo_token_rollout_is(logp, old_logp, advantages, mask, *, rollout_logp):
    """verl ``compute_policy_loss_gspo`` with token rollout weights (``rollout_is=token``, threshold 2)
    multiplying ``pg_losses``, seq-mean-token-mean."""
    rollout_is_weights = torch.exp((old_logp - rollout_logp) * mask).clamp(max=TIS_CAP).detach()
    negative_approx_kl = logp - old_logp
    seq = (negative_approx_kl * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    log_seq_importance_ratio = logp - logp.detach() + seq.detach().unsqueeze(-1)
    s = torch.exp(torch.clamp(log_seq_importance_ratio, max=10.0))
    adv = advantages.unsqueeze(1)
    pg_losses = torch.maximum(-adv * s, -adv * torch.clamp(s, LO, HI)) * rollout_is_weights
    return ((pg_losses * mask).sum(-1) / mask.sum(-1)).sum() / _seq_count(mask)


def float32_ratio(logp, old_logp, advantages, mask):
    """token-mean PPO with the ratio in float32 (log-probs as a float32 policy computes them) and the loss
    returned in the advantages' float64: a float32 working precision under a float64 output."""
    ratio = torch.exp(logp.float() - old_logp.float())
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, LO, HI) * adv)
    return (per_token * mask).sum() / mask.sum()


# --------------------------------------------------------------------------------------
# wrong


def padded_length_mean(logp, old_logp, advantages, mask):
    """seq-mean-token-mean meant, but each sequence is averaged over the *padded* length T."""
    per_token = _ppo_terms(logp, old_logp, advantages)
    return ((per_token * mask).sum(-1) / mask.shape[-1]).mean()


def constant_for_count(logp, old_logp, advantages, mask):
    """token-mean meant, but the normaliser is ``mask.numel()`` (a constant) instead of ``mask.sum()``."""
    per_token = _ppo_terms(logp, old_logp, advantages)
    return (per_token * mask).sum() / mask.numel()


def per_micro_batch_count(logp, old_logp, advantages, mask):
    """token-mean meant; two micro-batches each divided by its own token count, then by M = 2."""
    half = mask.shape[0] // 2
    loss = 0
    for rows in (slice(0, half), slice(half, None)):
        per_token = _ppo_terms(logp[rows], old_logp[rows], advantages[rows])
        loss = loss + (per_token * mask[rows]).sum() / mask[rows].sum() / 2
    return loss


def gspo_token_summed(logp, old_logp, advantages, mask):
    """GSPO meant; the sequence ratio is broadcast over tokens and token-averaged: length-weighted."""
    log_w = ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    coef_1 = torch.exp(log_w).unsqueeze(-1)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(coef_1 * adv, torch.clamp(coef_1, LO, HI) * adv)
    return (per_token * mask).sum() / mask.sum()


def gspo_summed_log_ratio(logp, old_logp, advantages, mask):
    """GSPO meant; the sequence log-ratio is summed instead of averaged (a product of ratios)."""
    coef_1 = torch.exp(((logp - old_logp) * mask).sum(-1)).unsqueeze(-1)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(coef_1 * adv, torch.clamp(coef_1, LO, HI) * adv)
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def cispo_wrong_bound(logp, old_logp, advantages, mask):
    """verl's CISPO meant (``1 + eps_high``), TRL's absolute bound used with ``eps_high = 0.28``."""
    ratio = torch.exp(logp - old_logp)
    losses = -torch.clamp(ratio, max=EPS_HIGH).detach() * advantages.unsqueeze(1) * logp
    return (losses * mask).sum() / mask.sum()


def kl_sign_flipped(logp, old_logp, advantages, mask, *, ref_logp):
    """k3 in the loss meant; the penalty is subtracted, so the KL is maximised."""
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    per_token = _ppo_terms(logp, old_logp, advantages) - BETA * kl
    return (per_token * mask).sum() / mask.sum()


def k3_in_loss_for_k1_reward(logp, old_logp, advantages, mask, *, ref_logp):
    """k1 in the reward declared (advantages carry it); the code also adds k3 to the loss."""
    return kl_k3_loss(logp, old_logp, advantages, mask, ref_logp=ref_logp)


def tis_cap_from_below(logp, old_logp, advantages, mask, *, rollout_logp):
    """Token TIS meant (``min(rho, C)``); written ``torch.clamp(rho, min=C)``: every weight is >= C."""
    rho = torch.clamp(torch.exp((old_logp - rollout_logp) * mask), min=TIS_CAP)
    per_token = _ppo_terms(logp, old_logp, advantages) * rho
    return (per_token * mask).sum() / mask.sum()


def tis_not_detached(logp, old_logp, advantages, mask, *, rollout_logp):
    """Token TIS meant; the weight is ``min(pi / pi_rollout, C)`` of the *training* log-probs, not
    detached: equal to ``pi_old / pi_rollout`` on-policy, but it carries a gradient."""
    rho = torch.clamp(torch.exp((logp - rollout_logp) * mask), max=TIS_CAP)
    per_token = _ppo_terms(logp, old_logp, advantages) * rho
    return (per_token * mask).sum() / mask.sum()


def tis_sequence_geo_mean(logp, old_logp, advantages, mask, *, rollout_logp):
    """Sequence TIS meant (``prod_t rho_t``, TRL ``sequence_truncate``); the log-ratios are averaged
    over the sequence (its geometric mean), as TRL PR 5815 proposed and its maintainers declined."""
    diff = ((old_logp - rollout_logp) * mask).sum(dim=-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(
        min=1
    )
    rho = torch.clamp(torch.exp(diff), max=TIS_CAP)
    per_token = _ppo_terms(logp, old_logp, advantages) * rho
    return (per_token * mask).sum() / mask.sum()


def dual_clip_both_signs(logp, old_logp, advantages, mask):
    """Dual clip meant for ``A < 0``; applied to every token, it zeroes every ``A > 0`` gradient."""
    adv = advantages.unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    clip1 = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, LO, HI))
    losses = torch.min(-adv * DUAL_CLIP, clip1)
    return (losses * mask).sum() / mask.sum()


def symmetric_clip(logp, old_logp, advantages, mask):
    """Clip-higher (``eps_high = 0.28``) declared; the code clips at ``1 +- eps_low``."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, LO, 1 + EPS_LOW) * adv)
    return (per_token * mask).sum() / mask.sum()


def k3_without_bias_correction(logp, old_logp, advantages, mask, *, ref_logp):
    """TRL's default (bias-corrected ``r k3``) declared; the code adds plain k3, as TRL did before
    ``use_bias_correction_kl``: a biased reverse-KL gradient (the forward KL's, on-policy)."""
    return kl_k3_loss(logp, old_logp, advantages, mask, ref_logp=ref_logp)


def k3_ratio_detached(logp, old_logp, advantages, mask, *, ref_logp):
    """Bias-corrected ``r k3`` declared; the ratio is detached (``coef_1.detach()``), so its gradient
    ``r k3`` is lost and the slope is ``r (1 - exp(-delta))``, not ``r delta``."""
    coef_1 = torch.exp(logp - old_logp)
    per_token_kl = (torch.exp(ref_logp - logp) - (ref_logp - logp) - 1) * coef_1.detach()
    per_token = _ppo_terms(logp, old_logp, advantages) + BETA * per_token_kl
    return (per_token * mask).sum() / mask.sum()


def tis_geometric_as_product(logp, old_logp, advantages, mask, *, rollout_logp):
    """The geometric-mean sequence weight declared; the log-ratios are summed, not averaged: the
    product ``prod_t rho_t``, which grows or shrinks with the length."""
    seq_is_weights = torch.exp(((old_logp - rollout_logp) * mask).sum(-1)).clamp(max=TIS_CAP).detach()
    per_token = _ppo_terms(logp, old_logp, advantages) * seq_is_weights.unsqueeze(-1)
    return (per_token * mask).sum() / mask.sum()


def gspo_token_through_sequence(logp, old_logp, advantages, mask, *, rollout_logp):
    """verl's GSPO-token declared (token rollout weights); the code keeps ``exp(mean_t log r)`` in the
    graph instead of ``sg(s_i) pi_it / sg(pi_it)``: the sequence form, whose every token gets the row's
    mean of weight times advantage."""
    rollout_is_weights = torch.exp((old_logp - rollout_logp) * mask).clamp(max=TIS_CAP).detach()
    seq = ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    s = torch.exp(seq).unsqueeze(-1)
    adv = advantages.unsqueeze(1)
    pg_losses = torch.maximum(-adv * s, -adv * torch.clamp(s, LO, HI)) * rollout_is_weights
    return ((pg_losses * mask).sum(-1) / mask.sum(-1)).sum() / _seq_count(mask)


def bfloat16_ratio(logp, old_logp, advantages, mask):
    """token-mean PPO with the ratio in bfloat16 (a mixed-precision policy's log-probs): 8 bits of
    mantissa, so every token's gradient is off by up to 2**-9 and ratios near a bound fall on its wrong
    side (the training-inference mismatch of bf16 RL)."""
    ratio = torch.exp(logp.to(torch.bfloat16) - old_logp.to(torch.bfloat16))
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, LO, HI) * adv)
    return (per_token * mask).sum() / mask.sum()


# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LossCase:
    """A loss, what its author declared, and (wrong ones) the term it breaks and how to say so."""

    name: str
    fn: Callable
    correct: bool
    declared: Objective
    breaks: str = ""  # the term: aggregation, clip, gspo, cispo, kl, tis, scale-out
    cause_words: str = ""  # words the confirmed cause of the failure contains
    source: str = ""
    extras: tuple[str, ...] = ()  # keyword inputs: ref_logp, rollout_logp
    explained_by: Objective | None = None  # what the wrong code computes, when the oracle can say
    precision: str = "float64"  # the precision its gradient is computed in (float32: a float32 ratio)


def _ppo(aggregation="token-mean", **kw) -> Objective:
    return Objective("ppo", eps_low=EPS_LOW, eps_high=EPS_HIGH, aggregation=aggregation, **kw)


_GSPO = Objective("gspo", eps_low=EPS_LOW, eps_high=EPS_HIGH, aggregation="seq-mean-token-mean")
_GSPO_TOKEN = dataclasses.replace(_GSPO, kind="gspo-token")
_TRL = "TRL 1.16.0 GRPOTrainer._compute_loss"
_VERL = "verl 0.9.1 core_algos"

LOSSES: list[LossCase] = [
    LossCase("token_mean", token_mean, True, _ppo(), source=f"{_TRL} dapo; {_VERL} token-mean"),
    LossCase("seq_mean_token_mean", seq_mean_token_mean, True, _ppo("grpo"), source=f"{_TRL} grpo"),
    LossCase("seq_mean_token_sum", seq_mean_token_sum, True, _ppo("seq-mean-token-sum"), source=_VERL),
    LossCase(
        "seq_mean_token_sum_norm",
        seq_mean_token_sum_norm,
        True,
        _ppo("dr_grpo", constant=MAX_LEN),
        source=f"{_TRL} dr_grpo",
    ),
    LossCase("token_sum", token_sum, True, _ppo("token-sum"), source=f"{_VERL} token-sum"),
    LossCase(
        "micro_batched_global_count",
        micro_batched_global_count,
        True,
        _ppo(),
        source=f"{_VERL} batch_num_tokens",
    ),
    LossCase("dual_clip", dual_clip, True, _ppo(dual_clip=DUAL_CLIP), source=f"{_VERL} vanilla"),
    LossCase(
        "gspo_sequence", gspo_sequence, True, _GSPO, source=f"{_TRL} importance_sampling_level=sequence"
    ),
    LossCase("gspo_token", gspo_token, True, _GSPO_TOKEN, source=f"{_VERL} compute_policy_loss_gspo"),
    LossCase(
        "cispo_verl",
        cispo_verl,
        True,
        Objective("cispo", eps_low=EPS_LOW, eps_high=EPS_HIGH),
        source=f"{_VERL} compute_policy_loss_cispo",
    ),
    LossCase(
        "cispo_trl",
        cispo_trl,
        True,
        Objective("cispo", eps_low=math.inf, eps_high=4.0),
        source=f"{_TRL} cispo",
    ),
    LossCase(
        "tis_token",
        tis_token,
        True,
        _ppo(tis_cap=TIS_CAP),
        source=f"{_TRL} vllm_importance_sampling_mode=token_truncate",
        extras=("rollout_logp",),
    ),
    LossCase(
        "kl_k3_loss",
        kl_k3_loss,
        True,
        _ppo(kl="k3", kl_coef=BETA),
        source=f"{_TRL} beta",
        extras=("ref_logp",),
    ),
    LossCase(
        "kl_k1_loss",
        kl_k1_loss,
        True,
        _ppo(kl="k1", kl_coef=BETA),
        source=f"{_VERL} kl_penalty k1, use_kl_loss",
        extras=("ref_logp",),
    ),
    LossCase(
        "kl_k2_loss",
        kl_k2_loss,
        True,
        _ppo(kl="k2", kl_coef=BETA),
        source=f"{_VERL} kl_penalty mse (k2), use_kl_loss",
        extras=("ref_logp",),
    ),
    LossCase(
        "mis_token",
        mis_token,
        True,
        _ppo(tis_cap=TIS_CAP, tis_mode="mask"),
        source="TRL 1.16.0 _generate_and_score_completions vllm_importance_sampling_mode=token_mask",
        extras=("rollout_logp",),
    ),
    LossCase(
        "tis_sequence",
        tis_sequence,
        True,
        _ppo(tis_cap=TIS_CAP, tis_level="sequence"),
        source="TRL 1.16.0 _generate_and_score_completions vllm_importance_sampling_mode=sequence_truncate",
        extras=("rollout_logp",),
    ),
    LossCase(
        "kl_in_reward",
        kl_in_reward,
        True,
        _ppo(kl="k1", kl_coef=BETA, kl_placement="reward"),
        source="KL as a reward penalty (verl use_kl_in_reward)",
        extras=("ref_logp",),
    ),
    LossCase(
        "kl_k3_bias_corrected",
        kl_k3_bias_corrected,
        True,
        _ppo(kl="k3-is", kl_coef=BETA),
        source=f"{_TRL} beta, use_bias_correction_kl=True (the default)",
        extras=("ref_logp",),
    ),
    LossCase(
        "tis_geometric",
        tis_geometric,
        True,
        _ppo(tis_cap=TIS_CAP, tis_level="geometric"),
        source=f"{_VERL} compute_policy_loss_geo_mean's sequence weight exp(mean_t log rho_t)",
        extras=("rollout_logp",),
    ),
    LossCase(
        "gspo_token_rollout_is",
        gspo_token_rollout_is,
        True,
        dataclasses.replace(_GSPO_TOKEN, tis_cap=TIS_CAP),
        source=f"{_VERL} compute_policy_loss_gspo with rollout_is=token",
        extras=("rollout_logp",),
    ),
    LossCase(
        "float32_ratio",
        float32_ratio,
        True,
        _ppo(),
        source=f"{_TRL} dapo with float32 log-probs (fp32 policy), loss in the advantages' dtype",
        precision="float32",
    ),
    # wrong
    LossCase(
        "padded_length_mean",
        padded_length_mean,
        False,
        _ppo("seq-mean-token-mean"),
        "aggregation",
        "aggregates with seq-mean-token-sum-norm, not seq-mean-token-mean",
        "issue 10: averages each sequence over T, not its length",
        explained_by=_ppo("seq-mean-token-sum-norm"),
    ),
    LossCase(
        "constant_for_count",
        constant_for_count,
        False,
        _ppo("token-mean"),
        "aggregation",
        "aggregates with seq-mean-token-sum-norm, not token-mean",
        "mask.numel() where mask.sum() was meant",
        explained_by=_ppo("seq-mean-token-sum-norm"),
    ),
    LossCase(
        "per_micro_batch_count",
        per_micro_batch_count,
        False,
        _ppo("token-mean"),
        "scale-out",
        "token count is taken per micro-batch",
        "TRL bnpo under gradient accumulation; issue 11",
    ),
    LossCase(
        "gspo_token_summed",
        gspo_token_summed,
        False,
        _GSPO,
        "gspo",
        "each sequence is weighted by its length",
        f"{_TRL} warns against sequence level with dapo/bnpo",
        explained_by=dataclasses.replace(_GSPO, aggregation="token-mean"),
    ),
    LossCase(
        "gspo_summed_log_ratio",
        gspo_summed_log_ratio,
        False,
        _GSPO,
        "gspo",
        "log-ratio is summed over the response, not averaged",
        "issue 14",
    ),
    LossCase(
        "cispo_wrong_bound",
        cispo_wrong_bound,
        False,
        Objective("cispo", eps_low=EPS_LOW, eps_high=EPS_HIGH),
        "cispo",
        "capped at eps_high = 0.28 itself",
        "TRL's absolute epsilon_high read as verl's 1 + eps_high",
    ),
    LossCase(
        "kl_sign_flipped",
        kl_sign_flipped,
        False,
        _ppo(kl="k3", kl_coef=BETA),
        "kl",
        "KL term's gradient has the wrong sign",
        "issue 14",
        extras=("ref_logp",),
        explained_by=_ppo(kl="k3", kl_coef=-BETA),
    ),
    LossCase(
        "k3_in_loss_for_k1_reward",
        k3_in_loss_for_k1_reward,
        False,
        _ppo(kl="k1", kl_coef=BETA, kl_placement="reward"),
        "kl",
        "k3 estimator in the loss",
        "issue 14: KL counted twice, and k3-in-loss is the forward KL's gradient",
        extras=("ref_logp",),
        explained_by=_ppo(kl="k3", kl_coef=BETA),
    ),
    LossCase(
        "tis_cap_from_below",
        tis_cap_from_below,
        False,
        _ppo(tis_cap=TIS_CAP),
        "tis",
        "cap is applied from below",
        "min(rho, C) written as torch.clamp(rho, min=C)",
        extras=("rollout_logp",),
    ),
    LossCase(
        "tis_not_detached",
        tis_not_detached,
        False,
        _ppo(tis_cap=TIS_CAP),
        "tis",
        "importance weight carries a gradient",
        "weight min(exp(new_logp - rollout_logp), C) from the training log-probs (UniRL issue 94's plan)",
        extras=("rollout_logp",),
    ),
    LossCase(
        "tis_sequence_geo_mean",
        tis_sequence_geo_mean,
        False,
        _ppo(tis_cap=TIS_CAP, tis_level="sequence"),
        "tis",
        "geometric mean",
        "TRL PR 5815 (declined in issue 5814): mean of the log-ratios, not their sum",
        extras=("rollout_logp",),
        explained_by=_ppo(tis_cap=TIS_CAP, tis_level="geometric"),
    ),
    LossCase(
        "dual_clip_both_signs",
        dual_clip_both_signs,
        False,
        _ppo(dual_clip=DUAL_CLIP),
        "clip",
        "dual clip is applied for A > 0 too",
        "torch.where(advantages < 0, ...) missing",
    ),
    LossCase(
        "symmetric_clip",
        symmetric_clip,
        False,
        _ppo(),
        "clip",
        "clip is symmetric at 1 +- eps_low",
        "eps_high ignored",
        explained_by=Objective("ppo", eps_low=EPS_LOW, eps_high=EPS_LOW),
    ),
    LossCase(
        "k3_without_bias_correction",
        k3_without_bias_correction,
        False,
        _ppo(kl="k3-is", kl_coef=BETA),
        "kl",
        "the KL term is the k3 estimator in the loss",
        "TRL before use_bias_correction_kl; k3 in the loss is the forward KL's gradient",
        extras=("ref_logp",),
        explained_by=_ppo(kl="k3", kl_coef=BETA),
    ),
    LossCase(
        "k3_ratio_detached",
        k3_ratio_detached,
        False,
        _ppo(kl="k3-is", kl_coef=BETA),
        "kl",
        "ratio weighting k3 is detached",
        "coef_1.detach() in the KL's importance weight",
        extras=("ref_logp",),
    ),
    LossCase(
        "tis_geometric_as_product",
        tis_geometric_as_product,
        False,
        _ppo(tis_cap=TIS_CAP, tis_level="geometric"),
        "tis",
        "taken per sequence (prod_t rho_t)",
        "the log-ratios summed where their mean was meant",
        extras=("rollout_logp",),
        explained_by=_ppo(tis_cap=TIS_CAP, tis_level="sequence"),
    ),
    LossCase(
        "gspo_token_through_sequence",
        gspo_token_through_sequence,
        False,
        dataclasses.replace(_GSPO_TOKEN, tis_cap=TIS_CAP),
        "gspo",
        "the sequence form",
        "GSPO-token meant (verl); s_i left in the graph instead of sg(s_i) pi / sg(pi)",
        extras=("rollout_logp",),
        explained_by=dataclasses.replace(_GSPO, tis_cap=TIS_CAP),
    ),
    LossCase(
        "bfloat16_ratio",
        bfloat16_ratio,
        False,
        _ppo(),
        "precision",
        "coarser than float32",
        "log-probs and ratio in bfloat16 (bf16 training-inference mismatch)",
        precision="bfloat16",
    ),
]
