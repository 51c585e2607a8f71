"""Adapters for AReaL 1.0 (``areal.utils.data.Normalization``, ``areal.utils.functional``): its own code.

Advantages: AReaL's PPO actor (``areal/trainer/ppo/actor.py``) normalises the scalar rewards with
``reward_norm = Normalization(NormConfig(mean_level, std_level, group_size=G, ...))`` before its
GAE and, optionally, the token advantages again with ``adv_norm``. Groups are consecutive runs of
``group_size`` (layout ``contiguous``). The rows call ``Normalization(config)(rewards)`` (no loss
mask: one reward per response), one per documented setting of ``NormConfig`` (defaults:
``std_unbiased=True``, ``eps=1e-5``, ``mean_leave1out=False``):

* ``reward_norm[group]``: ``(R - mean_g) / (std_g(ddof=1) + 1e-5)``; a group of one gets 0
  (its mean is itself, its std 1);
* ``reward_norm[group, std_unbiased=False]``: the population std, ``+ 1e-5``;
* ``reward_norm[group, std=None]``: ``R - mean_g`` (``dr_grpo``; the eps is dropped with the std);
* ``reward_norm[leave1out, std=None]``: ``R - mean_{-i}``, the leave-one-out mean (``rloo``);
* ``reward_norm[leave1out, group]``: ``(R - mean_{-i}) / (sqrt(sum_j (R_j - mean_{-j})^2 / (G - 1)) +
  1e-5)``, a leave-one-out std;
* ``reward_norm[group, batch std]``: the group mean, then the Bessel std of the centered rewards over
  the whole batch;
* ``reward_norm[batch]``: AReaL's default ``NormConfig`` (``mean_level`` = ``std_level`` = ``batch``):
  one mean and std over the whole batch, no groups.

Loss: ``ppo_actor_loss_fn(logprobs, proximal_logprobs, old_logprobs, advantages, eps_clip, loss_mask,
...)`` with per-token advantages, the proximal and behaviour log-probs both ``old_logp`` (no decoupled
loss) and a boolean mask: the sum over valid tokens divided by their count (token-mean). The
clip defaults of ``PPOActorConfig``: ``eps_clip`` 0.2, ``eps_clip_higher`` and ``c_clip`` None. Rows
``policy[...]``: ``eps_clip_higher``, ``c_clip``, ``importance_sampling_level="sequence"`` (GSPO) and
``rejection_sampling`` at token level on the ratio of the trainer's (proximal) to the rollout's
(behaviour) log-probs, ``action`` ``clamp`` (truncate the weight at 2) or ``mask`` (drop the token).

Across micro-batches and ranks (level 5, :data:`SCALEOUT`, :data:`AT_SCALE`): ``ppo_actor_loss_fn``
is the micro-batch's token mean (``functional.py:483``, ``loss_mask.count_nonzero()`` taken before
rejection sampling's mask); AReaL's engine rescales it. ``PPOActor.ppo_update`` (``actor.py:336-364``)
calls ``engine.train_batch(mb, loss_fn=grpo_loss_fn, loss_weight_fn=lambda x:
x["loss_mask"].count_nonzero())`` once per mini-batch (``ppo_n_minibatches``; one optimizer step
each); ``FSDPEngine.train_batch`` (``fsdp_engine.py:760-798``) cuts it into micro-batches by a
token budget (``mb_spec``), takes ``total_loss_weight = compute_total_loss_weight(mb_list, loss_weight_fn,
dp_group)`` (``engine/core/train_engine.py:30-65``: the sum of ``loss_weight_fn`` over the rank's
micro-batches, ``dist.all_reduce`` over the data-parallel group, in float32) and scales each
micro-batch's loss by ``local_weight / total_loss_weight * loss_multiplier`` with
``loss_multiplier=self.parallel_helper.dp_size`` (``fsdp_engine.py:790, 2062-2064, 2120-2121``; a
micro-batch without valid tokens gives ``logits.mean() * 0.0``); FSDP averages the gradients over
the ``dp_size`` ranks. The step's gradient is ``(1/W) sum_rm (S_rm / n_rm)(n_rm / N) W = S / N``,
the mini-batch's token mean whatever the split (``proofs/12_scale_out.py``, "Re-weighted by the
engine"). The at-scale losses call ``ppo_actor_loss_fn`` and ``compute_total_loss_weight`` (AReaL's
own, over the level-5 process group) and reproduce the inline lambda and the scaling line; the
cells are predicted with ``token-mean`` on uneven micro-batches. ``MegatronEngine.train_batch``
(``megatron_engine.py:936-990``) has the same arithmetic with ``loss_multiplier`` the dp size times
the optimizer's loss scale times the micro-batch count (undoing Megatron Core's own division by
it); the cells model the FSDP engine.

>>> sorted(ADAPTERS)[:2]
['policy[c_clip=3]', 'policy[eps_clip_higher=0.28]']
>>> sorted(vars(AT_SCALE))[:3]
['c_clip_3', 'eps_clip_higher_0_28', 'importance_sampling_level_sequence']
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import torch

from sigma_ref.conformance import Adapter
from sigma_ref.objectives import Objective

from ._common import LOSS_PROPERTIES, at_scale_name, suite_loss
from ._peers import MODULE_API, Peer, ScaleOut, lazy, per_token

__all__ = [*MODULE_API, "NOTES", "LOSS_ONLY", "SCALEOUT", "AT_SCALE", "NORM_CONFIGS", "TRAILING"]

PEER = Peer("areal", "areal", "1.0.4", title="AReaL")

available = PEER.available
unavailable = PEER.unavailable


@lazy
def _areal() -> Any:
    """``(Normalization, NormConfig, ppo_actor_loss_fn, RejectionSamplingConfig)`` (imports areal on
    first use)."""
    PEER.require()
    from areal.api.cli_args import NormConfig, RejectionSamplingConfig
    from areal.utils.data import Normalization
    from areal.utils.functional.functional import ppo_actor_loss_fn

    return Normalization, NormConfig, ppo_actor_loss_fn, RejectionSamplingConfig


def _norm(options: dict[str, Any]) -> Callable[[torch.Tensor, int], torch.Tensor]:
    def advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        normalization, norm_config, _loss, _rejection = _areal()
        out: torch.Tensor = normalization(norm_config(group_size=group_size, **options))(rewards)
        return out

    advantages.__name__ = "areal_Normalization[" + ", ".join(f"{k}={v}" for k, v in options.items()) + "]"
    return advantages


def _loss(**options: Any) -> Callable[..., torch.Tensor]:
    """``ppo_actor_loss_fn`` with ``eps_clip`` 0.2 and ``options``; proximal = behaviour = ``old_logp``."""
    name = "areal_ppo_actor_loss_fn[" + ", ".join(f"{k}={v}" for k, v in options.items()) + "]"
    return suite_loss(functools.partial(_call, options=options), name)


def _call(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    options: dict[str, Any],
    rollout_logp: torch.Tensor | None = None,
) -> torch.Tensor:
    """``ppo_actor_loss_fn``: the proximal policy is the trainer's ``old_logp``, the behaviour policy
    the rollout's (``rollout_logp``; None: ``old_logp``)."""
    fn = _areal()[2]
    out, _stat = fn(
        logprobs=logp,
        proximal_logprobs=old_logp,
        old_logprobs=old_logp if rollout_logp is None else rollout_logp,
        advantages=per_token(advantages, mask),
        eps_clip=_EPS,
        loss_mask=mask.bool(),
        **options,
    )
    result: torch.Tensor = out
    return result


def _rejection_loss(action: str, upper: float) -> Callable[..., torch.Tensor]:
    """``ppo_actor_loss_fn`` with ``rejection_sampling=RejectionSamplingConfig(level="token",
    action=action, metric="ratio", upper=upper)``: the behaviour policy is the rollout's (the
    inference engine's log-probs), the proximal one the trainer's ``old_logp``."""

    def call(**inputs: Any) -> torch.Tensor:
        config = _areal()[3](level="token", action=action, metric="ratio", upper=upper)
        return _call(**inputs, options={"rejection_sampling": config})

    name = f"areal_ppo_actor_loss_fn[rejection_sampling token {action} ratio <= {upper:g}]"
    return suite_loss(call, name, extras=["rollout_logp"])


#: ``PPOActorConfig.eps_clip``'s default.
_EPS = 0.2

#: ``mode -> (NormConfig options, declared convention)``; ``None``: outside the presets (NOTES).
NORM_CONFIGS: dict[str, tuple[dict[str, Any], str | None]] = {
    "reward_norm[group]": ({"mean_level": "group", "std_level": "group"}, None),
    "reward_norm[group, std_unbiased=False]": (
        {"mean_level": "group", "std_level": "group", "std_unbiased": False},
        None,
    ),
    "reward_norm[group, std=None]": ({"mean_level": "group", "std_level": None}, "dr_grpo"),
    "reward_norm[leave1out, std=None]": (
        {"mean_level": "group", "mean_leave1out": True, "std_level": None},
        "rloo",
    ),
    "reward_norm[leave1out, group]": (
        {"mean_level": "group", "mean_leave1out": True, "std_level": "group"},
        None,
    ),
    "reward_norm[group, batch std]": ({"mean_level": "group", "std_level": "batch"}, None),
    "reward_norm[batch]": ({"mean_level": "batch", "std_level": "batch"}, None),
}
_DEFAULT_LOSS = _loss()
_PPO = Objective("ppo", eps_low=_EPS, eps_high=_EPS, aggregation="token-mean")

ADAPTERS: dict[str, Adapter] = {
    mode: Adapter(
        _norm(options),
        "contiguous",
        loss=_DEFAULT_LOSS,
        convention=convention,
        name=f"areal {mode}",
        aggregation="token-mean",
        objective=_PPO,
    )
    for mode, (options, convention) in NORM_CONFIGS.items()
}
#: ``ppo_actor_loss_fn`` options beside the defaults: ``mode -> (options, declared objective)``.
POLICIES: dict[str, tuple[dict[str, Any], Objective]] = {
    "policy[eps_clip_higher=0.28]": (
        {"eps_clip_higher": 0.28},
        Objective("ppo", eps_low=_EPS, eps_high=0.28, aggregation="token-mean"),
    ),
    "policy[c_clip=3]": (
        {"c_clip": 3.0},
        Objective("ppo", eps_low=_EPS, eps_high=_EPS, dual_clip=3.0, aggregation="token-mean"),
    ),
    "policy[importance_sampling_level=sequence]": (
        {"importance_sampling_level": "sequence"},
        Objective("gspo", eps_low=_EPS, eps_high=_EPS, aggregation="token-mean"),
    ),
}
_GROUP = ADAPTERS["reward_norm[group, std=None]"].advantages
#: Rejection sampling (``PPOActorConfig.rejection_sampling``, token level, ratio metric, threshold 2):
#: ``clamp`` truncates the behaviour importance weight at ``upper``, ``mask`` drops tokens above it.
REJECTION_UPPER = 2.0
_REJECTION: dict[str, tuple[str, Objective]] = {
    f"policy[rejection_sampling token {action} {REJECTION_UPPER:g}]": (
        action,
        Objective(
            "ppo",
            eps_low=_EPS,
            eps_high=_EPS,
            aggregation="token-mean",
            tis_cap=REJECTION_UPPER,
            tis_level="token",
            tis_mode="truncate" if action == "clamp" else "mask",
        ),
    )
    for action in ("clamp", "mask")
}
ADAPTERS.update(
    {
        mode: Adapter(
            _GROUP,
            "contiguous",
            loss=_loss(**options),
            convention="dr_grpo",
            name=f"areal reward_norm[group, std=None] + ppo_actor_loss_fn({mode[7:-1]})",
            aggregation="token-mean",
            objective=objective,
        )
        for mode, (options, objective) in POLICIES.items()
    }
)
ADAPTERS.update(
    {
        mode: Adapter(
            _GROUP,
            "contiguous",
            loss=_rejection_loss(action, REJECTION_UPPER),
            convention="dr_grpo",
            name=f"areal reward_norm[group, std=None] + ppo_actor_loss_fn({mode[7:-1]})",
            aggregation="token-mean",
            objective=objective,
        )
        for mode, (action, objective) in _REJECTION.items()
    }
)
#: The loss options share a ``reward_norm`` row's advantage: the matrix runs their loss properties only.
LOSS_ONLY: dict[str, tuple[str, ...]] = {mode: LOSS_PROPERTIES for mode in [*POLICIES, *_REJECTION]}

#: What the settings outside the presets compute (the lead names them as conventions at merge).
NOTES: dict[str, str] = {
    "reward_norm[group]": "Outside the presets by its eps only: (R - mean_g) / (std_g(ddof=1) + 1e-5) "
    "(NormConfig.eps 1e-5; TRL adds 1e-4, verl 1e-6); a group of one gets 0.",
    "reward_norm[group, std_unbiased=False]": "Outside the presets by its eps only: "
    "(R - mean_g) / (std_g(ddof=0) + 1e-5).",
    "reward_norm[leave1out, group]": "Outside the presets: leave-one-out mean and a leave-one-out std, "
    "(R_i - mean_{-i}) / (sqrt(sum_j (R_j - mean_{-j})^2 / (G - 1)) + 1e-5).",
    "reward_norm[group, batch std]": "Outside the presets: group centering, then the Bessel std of the "
    "centered rewards over the batch, (R - mean_g) / (std_batch(R - mean_g, ddof=1) + 1e-5).",
    "reward_norm[batch]": "Outside the presets: NormConfig's default (mean_level = std_level = batch), "
    "(R - mean_batch) / (std_batch(ddof=1) + 1e-5), no group structure; AReaL's GRPO examples set "
    "mean_level/std_level to group.",
}

#: Every ``reward_norm`` row: the deviation ``partial_trailing_group`` finds (a real one).
TRAILING = (
    "Deviation: with N not a multiple of group_size, Normalization loops over bs // group_size groups "
    "and leaves the trailing responses at mean 0 and std 0; input: rewards [1, 0, 0, 0, 1], group_size "
    "4: the fifth gets 1/(0 + 1e-5) = 100000.0 ([group]; R itself with std=None) instead of an error or "
    'a group of its own (NormConfig.group_size: "Group size for group-level normalization").'
)
NOTES.update({mode: f"{NOTES[mode]} {TRAILING}" if mode in NOTES else TRAILING for mode in NORM_CONFIGS})


@lazy
def _total_loss_weight() -> Any:
    """AReaL's ``compute_total_loss_weight`` (``areal/engine/core/train_engine.py``)."""
    PEER.require()
    from areal.engine.core.train_engine import compute_total_loss_weight

    return compute_total_loss_weight


def _loss_weight(mb: dict[str, torch.Tensor]) -> torch.Tensor:
    """The PPO actor's ``loss_weight_fn``, a lambda inline in ``PPOActor.ppo_update``
    (``areal/trainer/ppo/actor.py:363``: ``loss_weight_fn=lambda x: x["loss_mask"].count_nonzero()``):
    the micro-batch's valid tokens.

    >>> int(_loss_weight({"loss_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])}))
    3
    """
    return mb["loss_mask"].count_nonzero()


def _at_scale(inner: Callable[..., torch.Tensor], rollout: bool = False) -> Callable[..., torch.Tensor]:
    """``inner`` (a row's ``ppo_actor_loss_fn`` call, the micro-batch's token mean) scaled as AReaL's
    FSDP engine scales it in ``train_batch`` on one of W data-parallel ranks:

    ``loss_mb * local_weight / total_loss_weight * dp_size``, ``local_weight`` = ``loss_weight_fn``
    of the micro-batch (its valid tokens ``n_rm``), ``total_loss_weight`` =
    ``compute_total_loss_weight`` (AReaL's own function, called here): the sum of ``loss_weight_fn``
    over the rank's micro-batches, all-reduced (SUM) over the data-parallel group, so ``N``.
    The factor ``dp_size`` undoes FSDP's gradient average, so the step's gradient is
    ``(1/W) sum_r sum_m (S_rm / n_rm) (n_rm / N) W = S / N``: the global token mean
    (``proofs/12_scale_out.py``, "re-weighted by the engine").

    ``compute_total_loss_weight`` reads only ``loss_weight_fn`` of each micro-batch, so the rank's
    micro-batches are handed to it as this micro-batch's ``loss_mask`` and the rest of the rank's
    valid tokens (``rank_num_tokens - n_rm``) as one more ``loss_mask``: the same sum. It runs once
    per micro-batch here (AReaL runs it once per ``train_batch``, before the micro-batches): the same
    value, and every rank calls it M times, so the collectives match.

    >>> _at_scale(_DEFAULT_LOSS).__name__
    'areal_ppo_actor_loss_fn[] x loss_weight_fn / compute_total_loss_weight x dp_size'
    """

    def call(
        mask: torch.Tensor, rank_num_tokens: int, world_size: int, process_group: Any, **inputs: Any
    ) -> torch.Tensor:
        loss = inner(mask=mask, **inputs)
        local = _loss_weight({"loss_mask": mask})
        rest = torch.ones(rank_num_tokens - int(local), device=mask.device)
        mb_list = types.SimpleNamespace(mbs=[{"loss_mask": mask}, {"loss_mask": rest}])
        total = _total_loss_weight()(mb_list, _loss_weight, process_group)
        # fsdp_engine.py:2062-2064 (inline in FSDPEngine._compute_logprobs_and_loss):
        #     local_weight = loss_weight_fn(ctx.mb_input)
        #     if local_weight == 0:
        #         return logits.mean() * 0.0
        if local == 0:
            return loss * 0.0
        # fsdp_engine.py:2120-2121, with loss_multiplier=self.parallel_helper.dp_size (fsdp_engine.py:790):
        #     loss_scale = local_weight / total_loss_weight * loss_multiplier
        #     return loss * loss_scale
        # AReaL divides in float32 (compute_total_loss_weight casts the total to float32, exact for
        # counts below 2**24); the quotient is taken here in the loss's dtype (float64 at level 5),
        # where only summation order may separate the split gradient from the full batch's: in
        # float32 its rounding (relative 6e-8) alone reads as a 1x "normaliser" FAIL.
        loss_scale: torch.Tensor = local.to(loss.dtype) / total.to(loss.dtype) * world_size
        return loss * loss_scale

    return suite_loss(
        call,
        f"{inner.__name__} x loss_weight_fn / compute_total_loss_weight x dp_size",
        keywords=["rank_num_tokens", "world_size", "process_group"],
        keyword_extras=["rollout_logp"] if rollout else [],
    )


def _attr(mode: str) -> str:
    """A row's loss as an attribute of :data:`AT_SCALE`: ``policy[c_clip=3]`` -> ``c_clip_3``.

    >>> _attr("policy[rejection_sampling token clamp 2]")
    'rejection_sampling_token_clamp_2'
    """
    return at_scale_name(mode, "policy[")


#: The losses of :data:`SCALEOUT` in their at-scale form (child processes import them by name):
#: ``ppo`` (every ``reward_norm`` row's default loss) and one per ``policy[...]`` row.
AT_SCALE = types.SimpleNamespace(
    ppo=_at_scale(_DEFAULT_LOSS),
    **{_attr(mode): _at_scale(_loss(**options)) for mode, (options, _objective) in POLICIES.items()},
    **{
        _attr(mode): _at_scale(_rejection_loss(action, REJECTION_UPPER), rollout=True)
        for mode, (action, _objective) in _REJECTION.items()
    },
)
_HOW = (
    "loss_weight_fn (valid tokens), compute_total_loss_weight (all-reduced over dp), loss_multiplier dp_size"
)
#: The level-5 column: every loss row, its micro-batch token mean scaled by AReaL's engine; AReaL's
#: micro-batches are cut by a token budget (``MicroBatchSpec.max_tokens_per_mb``): uneven sizes.
SCALEOUT: dict[str, ScaleOut | str] = {
    mode: ScaleOut("ppo" if mode in NORM_CONFIGS else _attr(mode), "token-mean", how=_HOW, sizes="uneven")
    for mode in ADAPTERS
}

NOT_APPLICABLE: dict[str, str] = {
    "adv_norm": "adv_norm normalises the token advantages after AReaL's GAE inside "
    "PPOActor.compute_advantages (a method on the actor's whole batch dict), not a function of the "
    "rewards alone",
}
