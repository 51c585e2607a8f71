"""Adapters for verl 0.9 (``verl.trainer.ppo.core_algos``): its own functions, called as its trainer does.

Advantages (layout ``index``: verl groups by the ``uid`` of each sample, ragged and
interleaved): ``get_adv_estimator_fn(name)(token_level_rewards=R[:, None],
response_mask=ones, index=uid, ...)``, as ``ray_trainer.compute_advantage`` does, which
passes only ``norm_adv_by_std_in_grpo`` (so ``epsilon`` keeps its default 1e-6):

* ``grpo`` / ``grpo_no_std``: ``compute_grpo_outcome_advantage`` with
  ``norm_adv_by_std_in_grpo`` True / False (declared ``verl`` / ``verl_no_std``);
* ``grpo_vectorized`` / ``grpo_vectorized_no_std``: ``compute_grpo_vectorized_outcome_advantage``;
* ``rloo`` / ``rloo_vectorized``: ``compute_rloo_outcome_advantage`` and its vectorised
  variant (declared ``rloo``).

Loss: ``compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode=mode, config=ActorConfig(...))`` with per-token advantages ``A_i mask_it``
and an empty ``global_batch_info`` (one local batch: ``dp_size=1``, the batch's own
token and sequence counts). The GRPO modes use the default ``token-mean``; the rows
``loss[<mode>]`` pair the GRPO advantage with each ``loss_agg_mode`` (declared as the
loss's aggregation). The rows ``<estimator>[token]`` call the estimators in their own
token-level signature (layout ``token``: the reward on each response's last valid token).

>>> sorted(ADAPTERS)[:3]
['grpo', 'grpo[token]', 'grpo_no_std']
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import torch

from sigma_ref.conformance import Adapter
from sigma_ref.conformance.scaleout import HORIZON
from sigma_ref.objectives import KL, Objective

from ._common import (
    LOSS_PROPERTIES,
    at_scale_name,
    ppo_objective,
    registry_estimators,
    row_builder,
    suite_loss,
    token_rows,
)
from ._peers import MODULE_API, Peer, ScaleOut, lazy, per_token

__all__ = [*MODULE_API, "LOSS_AGG_MODES", "LOSS_ONLY", "OBJECTIVE_NOTES", "SCALEOUT", "AT_SCALE"]

PEER = Peer("verl", "verl", "0.9.1", title="verl")

#: ``loss_agg_mode`` values of ``core_algos.agg_loss`` (verl 0.9.1); the default is ``token-mean``.
LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
available = PEER.available
unavailable = PEER.unavailable


#: ``verl.trainer.ppo.core_algos`` (imports verl, and with it ray, on first use).
_core_algos = PEER.importer("verl.trainer.ppo.core_algos")


@lazy
def _actor_config() -> Any:
    """A real ``ActorConfig``: the three fields its ``__post_init__`` requires, all else default."""
    _core_algos()
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)


#: verl's estimators (``core_algos.get_adv_estimator_fn(name)``, looked up at each call) on one reward
#: per response, and called as verl calls them: token-level rewards, the response mask, uids.
_estimator, _token_estimator = registry_estimators(
    lambda name: _core_algos().get_adv_estimator_fn(name), "verl"
)


def _verl_loss(
    loss_mode: str,
    agg: str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    global_info: dict[str, Any] | None = None,
    kl: str | None = None,
    kl_coef: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """verl's actor loss as ``workers/utils/losses.py:ppo_loss`` computes it: the registered policy
    loss ``loss_mode`` with ``config.global_batch_info`` set (cleared again after the call) and the
    batch's ``rollout_is_weights`` when given, plus ``kl_coef * agg_loss(kl_penalty(logp, ref_logp,
    kl))`` when ``kl`` is given."""
    ca = _core_algos()
    config = _actor_config()
    info = config.global_batch_info
    info.clear()
    info.update(global_info or {})
    try:
        out: torch.Tensor
        out, _metrics = ca.get_policy_loss_fn(loss_mode)(
            old_log_prob=old_logp,
            log_prob=logp,
            advantages=per_token(advantages, mask),
            response_mask=mask,
            loss_agg_mode=agg,
            config=config,
            rollout_is_weights=rollout_is_weights,
        )
        if kl is not None:
            ref = logp.detach() if ref_logp is None else ref_logp
            kld = ca.kl_penalty(logprob=logp, ref_logprob=ref, kl_penalty=kl)
            out = out + kl_coef * ca.agg_loss(loss_mat=kld, loss_mask=mask, loss_agg_mode=agg, **info)
    finally:
        info.clear()
    return out


def _policy_loss(mode: str, loss_mode: str = "vanilla") -> Callable[..., torch.Tensor]:
    return suite_loss(functools.partial(_verl_loss, loss_mode, mode), f"verl_policy_loss_{loss_mode}[{mode}]")


def _kl_loss(kl: str, coef: float) -> Callable[..., torch.Tensor]:
    """The vanilla policy loss (token-mean) plus verl's KL loss ``kl_loss_type=kl``."""
    call = functools.partial(_verl_loss, "vanilla", "token-mean", kl=kl, kl_coef=coef)
    return suite_loss(call, f"verl_policy_loss_vanilla+kl_loss[{kl}, coef={coef:g}]", extras=["ref_logp"])


def _rollout_weights(
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor | None,
    mask: torch.Tensor,
    level: str,
    threshold: float,
) -> torch.Tensor:
    """The batch's ``rollout_is_weights`` from verl's own
    ``compute_rollout_correction_and_rejection_mask`` (``rollout_logp`` None: the rollout is ``old_logp``)."""
    _core_algos()
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    rollout = old_logp if rollout_logp is None else rollout_logp
    proto, _mask, _metrics = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old_logp.detach(),
        rollout_log_prob=rollout.detach(),
        response_mask=mask,
        rollout_is=level,
        rollout_is_threshold=threshold,
    )
    weights: torch.Tensor = proto.batch["rollout_is_weights"]
    return weights


def _rollout_corr_loss(
    level: str, threshold: float, loss_mode: str = "vanilla"
) -> Callable[..., torch.Tensor]:
    """The policy loss ``loss_mode`` (default vanilla; token-mean) with verl's rollout correction
    (``algorithm.rollout_correction.rollout_is=level``, ``rollout_is_threshold=threshold``): the weights
    of ``compute_rollout_correction_and_rejection_mask(old_log_prob, rollout_log_prob, ...)`` (TIS:
    ``exp(old - rollout)`` per token or its product per sequence, clamped at the threshold, detached),
    passed to the loss as the batch's ``rollout_is_weights``, as ``ppo_loss`` passes them."""

    def call(rollout_logp: torch.Tensor | None, **inputs: Any) -> torch.Tensor:
        weights = _rollout_weights(inputs["old_logp"], rollout_logp, inputs["mask"], level, threshold)
        return _verl_loss(loss_mode, "token-mean", **inputs, rollout_is_weights=weights)

    name = f"verl_policy_loss_{loss_mode}+rollout_correction[rollout_is={level}, threshold={threshold:g}]"
    return suite_loss(call, name, extras=["rollout_logp"])


def _at_scale(
    mode: str,
    loss_mode: str = "vanilla",
    *,
    kl: str | None = None,
    kl_coef: float = 0.0,
    rollout_is: str | None = None,
) -> Callable[..., torch.Tensor]:
    """A row's loss with the global batch info verl's engine puts in ``global_batch_info``:
    ``dp_size``, ``batch_num_tokens`` (the loss-mask sum all-reduced over the DP group) and
    ``global_batch_size`` (the sequences of the global mini-batch); ``loss_scale_factor`` unset. The
    registered policy loss ``loss_mode``, verl's KL loss ``kl`` (on ``ref_logp``) and its rollout
    correction ``rollout_is`` (on ``rollout_logp``) as the row's single-process loss has them."""

    def call(
        dp_size: int,
        global_num_tokens: int,
        global_num_seqs: int,
        rollout_logp: torch.Tensor | None,
        **inputs: Any,
    ) -> torch.Tensor:
        info = {
            "dp_size": dp_size,
            "batch_num_tokens": global_num_tokens,
            "global_batch_size": global_num_seqs,
        }
        weights = None
        if rollout_is is not None:
            old_logp, mask = inputs["old_logp"], inputs["mask"]
            weights = _rollout_weights(old_logp, rollout_logp, mask, rollout_is, ROLLOUT_IS_THRESHOLD)
        return _verl_loss(
            loss_mode, mode, **inputs, global_info=info, kl=kl, kl_coef=kl_coef, rollout_is_weights=weights
        )

    extra = f", kl_loss_type={kl}" if kl else f", rollout_is={rollout_is}" if rollout_is else ""
    return suite_loss(
        call,
        f"verl_policy_loss_{loss_mode}[{mode}{extra}, global_batch_info]",
        keywords=["dp_size", "global_num_tokens", "global_num_seqs"],
        keyword_extras=["ref_logp", "rollout_logp"],
    )


_attr = at_scale_name


#: verl's PPO defaults (``ActorConfig``): clip_ratio 0.2 both sides, dual clip ``clip_ratio_c`` 3.0.
_EPS, _DUAL = 0.2, 3.0
#: The KL coefficient of the ``kl[...]`` rows (verl's default ``kl_loss_coef`` is 0.001; 0.1 makes
#: the term a visible part of the gradient).
KL_COEF = 0.1


def _ppo(mode: str, **kw: Any) -> Objective:
    return ppo_objective(mode, eps=_EPS, dual_clip=_DUAL, **kw)


_GRPO = _estimator("grpo", norm_adv_by_std_in_grpo=True)
_DEFAULT_LOSS = _policy_loss("token-mean")


_adapter = row_builder("verl", "index", ppo=_ppo, ragged=True)


ADAPTERS: dict[str, Adapter] = {
    "grpo": _adapter(_GRPO, "verl", "grpo", _DEFAULT_LOSS),
    "grpo_no_std": _adapter(
        _estimator("grpo", norm_adv_by_std_in_grpo=False),
        "dr_grpo",
        "grpo(norm_adv_by_std=False)",
        _DEFAULT_LOSS,
    ),
    "grpo_vectorized": _adapter(
        _estimator("grpo_vectorized", norm_adv_by_std_in_grpo=True), "verl", "grpo_vectorized", _DEFAULT_LOSS
    ),
    "grpo_vectorized_no_std": _adapter(
        _estimator("grpo_vectorized", norm_adv_by_std_in_grpo=False),
        "dr_grpo",
        "grpo_vectorized(norm_adv_by_std=False)",
        _DEFAULT_LOSS,
    ),
    "rloo": _adapter(_estimator("rloo"), "rloo", "rloo", _DEFAULT_LOSS),
    "rloo_vectorized": _adapter(_estimator("rloo_vectorized"), "rloo", "rloo_vectorized", _DEFAULT_LOSS),
}
ADAPTERS.update(
    {
        f"loss[{mode}]": _adapter(
            _GRPO, "verl", f"grpo + policy loss {mode}", _policy_loss(mode), aggregation=mode
        )
        for mode in LOSS_AGG_MODES
    }
)
# the outcome estimators in their own signature: (token_level_rewards [B, T], response_mask, index)
# -> (advantages [B, T], returns [B, T]), the reward on each response's last valid token
ADAPTERS.update(
    token_rows(
        _token_estimator,
        "verl",
        (
            ("grpo", {"norm_adv_by_std_in_grpo": True}, "verl"),
            ("grpo_vectorized", {"norm_adv_by_std_in_grpo": True}, "verl"),
            ("rloo", {}, "rloo"),
        ),
    )
)

# verl's policy-loss registry (core_algos.POLICY_LOSS_REGISTRY, actor.policy_loss.loss_mode), each with
# the default loss_agg_mode token-mean; declared where the oracle has the objective (GPG's -A log pi
# is CISPO with the weight clipped to [1, 1])
_REGISTRY_OBJECTIVES: dict[str, Objective | None] = {
    "gspo": Objective("gspo-token", eps_low=_EPS, eps_high=_EPS),  # sg(s_i) pi / sg(pi): GSPO-token
    "cispo": Objective("cispo", eps_low=_EPS, eps_high=_EPS),
    "gpg": Objective("cispo", eps_low=0.0, eps_high=0.0),
    "bypass_mode": _ppo("token-mean"),
    "sapo": None,
    "geo_mean": None,
    "clip_cov": None,
    "kl_cov": None,
    "dppo_tv": None,
    "dppo_kl": None,
}
ADAPTERS.update(
    {
        f"policy[{name}]": _adapter(
            _GRPO,
            "verl",
            f"grpo + policy loss_mode={name}",
            _policy_loss("token-mean", name),
            objective=objective,
        )
        for name, objective in _REGISTRY_OBJECTIVES.items()
    }
)
# verl's KL loss (actor.use_kl_loss, kl_loss_type; "+" is k2's gradient under the estimator's value),
# added to the vanilla policy loss as workers/utils/losses.py:ppo_loss adds it
_KL_TYPES: dict[str, KL] = {"kl": "k1", "mse": "k2", "low_var_kl": "k3", "k3+": "k2"}
ADAPTERS.update(
    {
        f"kl[{kl}]": _adapter(
            _GRPO,
            "verl",
            f"grpo + vanilla + kl_loss_type={kl}, kl_loss_coef={KL_COEF:g}",
            _kl_loss(kl, KL_COEF),
            objective=_ppo("token-mean", kl=est, kl_coef=KL_COEF),
        )
        for kl, est in _KL_TYPES.items()
    }
)

# verl's rollout correction (algorithm.rollout_correction: rollout_is token or sequence, TIS at the default
# rollout_is_threshold 2), the weights multiplying the vanilla policy loss
ROLLOUT_IS_THRESHOLD = 2.0
_ROLLOUT_IS: tuple[str, ...] = ("token", "sequence")
ADAPTERS.update(
    {
        f"rollout_corr[{level}]": _adapter(
            _GRPO,
            "verl",
            f"grpo + vanilla + rollout_is={level}, rollout_is_threshold={ROLLOUT_IS_THRESHOLD:g}",
            _rollout_corr_loss(level, ROLLOUT_IS_THRESHOLD),
            objective=_ppo("token-mean", tis_cap=ROLLOUT_IS_THRESHOLD, tis_level=level),
        )
        for level in _ROLLOUT_IS
    }
)
# GSPO with token rollout weights: the weights vary along a response, where verl's GSPO-token form and
# the sequence form (TRL's, OpenRLHF's) part (proofs/11_objectives.py §2)
ADAPTERS["policy[gspo, rollout_is=token]"] = _adapter(
    _GRPO,
    "verl",
    f"grpo + policy loss_mode=gspo + rollout_is=token, rollout_is_threshold={ROLLOUT_IS_THRESHOLD:g}",
    _rollout_corr_loss("token", ROLLOUT_IS_THRESHOLD, "gspo"),
    objective=Objective(
        "gspo-token", eps_low=_EPS, eps_high=_EPS, tis_cap=ROLLOUT_IS_THRESHOLD, tis_level="token"
    ),
)

#: What the registry's losses without an oracle objective compute (the objective cell).
OBJECTIVE_NOTES: dict[str, str] = {
    "policy[sapo]": "sapo: sigmoid gate 4/tau sigmoid(tau (r - 1)), not in the oracle",
    "policy[geo_mean]": "geo_mean (GMPO): clipped geometric mean of the token ratios, not in the oracle",
    "policy[clip_cov]": "clip_cov: PPO clip with covariance-selected tokens unclipped, not in the oracle",
    "policy[kl_cov]": "kl_cov: KL penalty on covariance-selected tokens, not in the oracle",
    "policy[dppo_tv]": "dppo_tv: divergence-based trust region (TV), not in the oracle",
    "policy[dppo_kl]": "dppo_kl: divergence-based trust region (KL), not in the oracle",
}

#: The matrix runs the loss properties on the objective variants (their advantage is ``grpo``'s).
_LOSS_PROPERTIES = LOSS_PROPERTIES
#: The losses of :data:`SCALEOUT` in their at-scale form (child processes import them by name): the
#: vanilla loss in each ``loss_agg_mode``, and every objective row's loss (token-mean, verl's default).
AT_SCALE = types.SimpleNamespace(
    **{mode: _at_scale(mode) for mode in LOSS_AGG_MODES},
    **{_attr(f"policy[{name}]"): _at_scale("token-mean", name) for name in _REGISTRY_OBJECTIVES},
    **{_attr(f"kl[{kl}]"): _at_scale("token-mean", kl=kl, kl_coef=KL_COEF) for kl in _KL_TYPES},
    **{_attr(f"rollout_corr[{level}]"): _at_scale("token-mean", rollout_is=level) for level in _ROLLOUT_IS},
    **{_attr("policy[gspo, rollout_is=token]"): _at_scale("token-mean", "gspo", rollout_is="token")},
)

LOSS_ONLY: dict[str, tuple[str, ...]] = {
    **{f"policy[{name}]": _LOSS_PROPERTIES for name in _REGISTRY_OBJECTIVES},
    **{f"rollout_corr[{level}]": _LOSS_PROPERTIES for level in _ROLLOUT_IS},
    "policy[gspo, rollout_is=token]": _LOSS_PROPERTIES,
    # a KL term has a gradient at ratio 1 too: only the objective property applies
    **{f"kl[{kl}]": ("loss_objective",) for kl in _KL_TYPES},
}

_HOW = "dp_size, batch_num_tokens, global_batch_size in global_batch_info"
_SCALE: dict[str, ScaleOut] = {
    mode: ScaleOut(mode, mode, constant=HORIZON if mode == "seq-mean-token-sum-norm" else None, how=_HOW)
    for mode in LOSS_AGG_MODES
}
#: The level-5 column: the vanilla loss of every row in each ``loss_agg_mode``, with verl's global
#: counts (seq-mean-token-sum-norm's constant is the padded width, ``loss_scale_factor`` unset).
SCALEOUT: dict[str, ScaleOut | str] = {
    **{
        mode: _SCALE["token-mean"] for mode in ADAPTERS if ADAPTERS[mode].loss is not None and "[" not in mode
    },
    **{f"loss[{mode}]": _SCALE[mode] for mode in LOSS_AGG_MODES},
    # the objective rows: their own loss at scale, token-mean (each gets the neutral ref_logp and
    # rollout_logp of its micro-batch: the oracle's prediction is the policy gradient at ratio 1)
    **{
        row: ScaleOut(_attr(row), "token-mean", how=_HOW)
        for row in (
            *(f"policy[{name}]" for name, objective in _REGISTRY_OBJECTIVES.items() if objective is not None),
            *(f"kl[{kl}]" for kl in _KL_TYPES if _KL_TYPES[kl] != "k1"),
            *(f"rollout_corr[{level}]" for level in _ROLLOUT_IS),
            "policy[gspo, rollout_is=token]",
        )
    },
    # an objective the oracle does not have (OBJECTIVE_NOTES), and k1 in the loss (its gradient
    # kl_coef * w_it is on every token at ratio 1 too), have no policy-gradient prediction (aggregation
    # None): the split-vs-full gradient is still checked
    **{
        f"policy[{name}]": ScaleOut(_attr(f"policy[{name}]"), None, how=_HOW)
        for name, objective in _REGISTRY_OBJECTIVES.items()
        if objective is None
    },
    **{
        f"kl[{kl}]": ScaleOut(_attr(f"kl[{kl}]"), None, how=_HOW)
        for kl, est in _KL_TYPES.items()
        if est == "k1"
    },
}

NOT_APPLICABLE: dict[str, str] = {
    "dapo_filter": "verl's DAPO group filter (drop a group iff np.std == 0, size > 1) lives in the v1 "
    "replay buffer (trainer/ppo/v1/replay_buffer.py) on TransferQueue and cannot be driven on its own",
    "policy[dro]": "loss_mode=dro needs policy_loss.dro_beta, which has no default (verl raises without it)",
}
