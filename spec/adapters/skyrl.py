"""Adapters for SkyRL 0.3 (``skyrl.backends.skyrl_train.utils.ppo_utils``): its own functions.

The package ``skyrl.backends`` imports its Tinker backends in ``__init__``, which fails on Python
3.11; the adapter imports ``skyrl.backends.skyrl_train.utils.ppo_utils`` with that package's
``__init__`` skipped (:func:`_ppo_utils`), so the functions are SkyRL's own, unchanged.

Advantages, from ``AdvantageEstimatorRegistry.get(name)`` as ``compute_advantages_and_returns``
calls them, ``(token_level_rewards, response_mask, index) -> (advantages, returns)``:

* ``grpo`` / ``grpo_no_std``: ``compute_grpo_outcome_advantage`` with ``grpo_norm_by_std`` True
  (Bessel std + ``epsilon`` 1e-6, a group of one gets mean 0 and std 1: ``verl``) / False
  (``dr_grpo``);
* ``rloo``: ``compute_rloo_outcome_advantage`` (``rloo``; a group of one gets 0);
* ``maxrl``: ``compute_maxrl_advantage``, ``(R - mean_g) / (mean_g + 1e-6)``: outside the presets.

The rows without a suffix call them with the reward in a ``[N, 1]`` token matrix (layout
``index``, as verl's rows do); the ``[token]`` rows in their token layout (the reward on each
response's last valid token).

Loss: SkyRL aggregates by pre-scaling the advantages
(``apply_loss_reduction_to_advantages_minibatch(advantages, loss_mask, loss_reduction,
micro_batch_size, max_seq_len)``, called by the trainer on each mini-batch) and then summing the
per-token loss (``reduce_loss``): the loss rows call both, the policy loss from
``PolicyLossRegistry.get(policy_loss_type)`` with a real ``AlgorithmConfig`` (clip 0.2 both sides,
``clip_ratio_c`` 3). One mini-batch is one micro-batch here (``micro_batch_size = N``) and
``max_seq_len`` is the padded width (SkyRL requires it set for ``seq_mean_token_sum_norm``). The
loss gets float32 log-probs and advantages, as SkyRL's workers hold them: its ratio is
``exp`` of a float32 log-ratio (``torch_utils.safe_exp_delta`` casts to float32 and back), so a
float64 call would return a float64 loss with a float32 gradient.
Rows ``loss[<loss_reduction>]`` (regular PPO), ``policy[<policy_loss_type>]`` (token_mean).

At scale (the level-5 column, :data:`SCALEOUT`): the trainer pre-scales each optimizer step's
mini-batch, every rank's responses, with that same function (``trainer.py``
``_normalize_advantages``); each worker takes the token sum of its fixed-size micro-batches and
multiplies it by ``dp_size`` (``worker.py``, ``grad_sum_correction_factor``) before DP averages. The
column runs SkyRL's function on the step's mask (``AT_SCALE.scale_<loss_reduction>``, level 5's
``advantage_scaler``) and its policy loss (``AT_SCALE.<policy_loss_type>``) in each rank.

>>> sorted(ADAPTERS)[:3]
['grpo', 'grpo[token]', 'grpo_no_std']
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from sigma_ref.conformance import Adapter
from sigma_ref.conformance.scaleout import HORIZON
from sigma_ref.objectives import Objective

from ._common import LOSS_PROPERTIES, ppo_objective, registry_estimators, row_builder, suite_loss, token_rows
from ._peers import MODULE_API, Peer, ScaleOut, lazy, per_token

__all__ = [*MODULE_API, "NOTES", "LOSS_ONLY", "OBJECTIVE_NOTES", "SCALEOUT", "AT_SCALE", "LOSS_REDUCTIONS"]

PEER = Peer("skyrl", "skyrl", "0.3.0", title="SkyRL")

#: SkyRL's ``loss_reduction`` values and the aggregation each sets (``prompt_mean``, a row of its own,
#: takes each row's prompt, ``prompt_index``).
LOSS_REDUCTIONS: dict[str, str] = {
    "token_mean": "token-mean",
    "token_mean_legacy": "token-mean",
    "sequence_mean": "seq-mean-token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
available = PEER.available
unavailable = PEER.unavailable


@lazy
def _ppo_utils() -> Any:
    """``skyrl.backends.skyrl_train.utils.ppo_utils``, imported without ``skyrl.backends.__init__``.

    That ``__init__`` imports the Tinker backend (``skyrl.backends.backend``), which needs Python
    3.12; the package is registered as a bare namespace over its own directory instead, so the
    submodules below it import from the installed files as they are.
    """
    PEER.require()
    name = "skyrl.backends"
    if name not in sys.modules:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations is not None
        package = types.ModuleType(name)
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules[name] = package
    from skyrl.backends.skyrl_train.utils import ppo_utils

    return ppo_utils


@lazy
def _config_class() -> Any:
    _ppo_utils()
    from skyrl.train.config import AlgorithmConfig

    return AlgorithmConfig


def _config(policy: str, reduction: str, max_seq_len: int) -> Any:
    """A real ``AlgorithmConfig`` with the policy loss type and reduction, all else default."""
    return _config_class()(policy_loss_type=policy, loss_reduction=reduction, max_seq_len=max_seq_len)


#: SkyRL's estimators (``AdvantageEstimatorRegistry.get(name)``, looked up at each call).
_estimator, _token_estimator = registry_estimators(
    lambda name: _ppo_utils().AdvantageEstimatorRegistry.get(name), "skyrl"
)


def _policy_call(
    policy: str,
    reduction: str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    prompt_boundaries: list[tuple[int, int]] | None = None,
) -> torch.Tensor:
    """SkyRL's policy loss ``policy`` after its advantage pre-scaling for ``reduction``, one mini-batch
    that is one micro-batch. In float32, as SkyRL's workers hold them: its ratio is exp of a float32
    log-ratio (torch_utils.safe_exp_delta), so float64 inputs would still get a float32 gradient."""
    pu = _ppo_utils()
    n, width = mask.shape
    logp, old_logp, mask = logp.float(), old_logp.float(), mask.float()
    extra = {} if prompt_boundaries is None else {"prompt_boundaries": prompt_boundaries}
    scaled = pu.apply_loss_reduction_to_advantages_minibatch(
        advantages=per_token(advantages.float(), mask),
        loss_mask=mask,
        loss_reduction=reduction,
        micro_batch_size=n,
        max_seq_len=width,
        **extra,
    )
    config = _config(policy, reduction, width)
    out, _metrics = pu.PolicyLossRegistry.get(policy)(
        logp, old_logp, scaled, config, loss_mask=mask, rollout_logprobs=None
    )
    result: torch.Tensor = out
    return result


def _loss(policy: str, reduction: str) -> Callable[..., torch.Tensor]:
    """SkyRL's policy loss ``policy`` after its advantage pre-scaling for ``reduction``."""
    name = f"skyrl_policy_loss[{policy}, loss_reduction={reduction}]"
    return suite_loss(functools.partial(_policy_call, policy, reduction), name)


#: SkyRL's clip defaults (``AlgorithmConfig``): ``eps_clip_low`` = ``eps_clip_high`` = 0.2,
#: ``clip_ratio_c`` 3 (dual clip); CISPO ``cispo_eps_clip_low`` 0, ``cispo_eps_clip_high`` 5.
_EPS, _DUAL = 0.2, 3.0


def _ppo(aggregation: str, **kw: Any) -> Objective:
    return ppo_objective(aggregation, eps=_EPS, **kw)


_GRPO = _estimator("grpo", grpo_norm_by_std=True)
_DEFAULT_LOSS = _loss("regular", "token_mean")


_adapter = row_builder("skyrl", "index", ppo=_ppo, loss=_DEFAULT_LOSS, ragged=True)


ADAPTERS: dict[str, Adapter] = {
    "grpo": _adapter(_GRPO, "verl", "advantage_estimator=grpo"),
    "grpo_no_std": _adapter(
        _estimator("grpo", grpo_norm_by_std=False),
        "dr_grpo",
        "advantage_estimator=grpo, grpo_norm_by_std=False",
    ),
    "rloo": _adapter(_estimator("rloo"), "rloo", "advantage_estimator=rloo"),
    "maxrl": _adapter(_estimator("maxrl"), None, "advantage_estimator=maxrl"),
}
ADAPTERS.update(
    token_rows(
        _token_estimator,
        "skyrl",
        (
            ("grpo", {"grpo_norm_by_std": True}, "verl"),
            ("rloo", {}, "rloo"),
        ),
    )
)
ADAPTERS.update(
    {
        f"loss[{reduction}]": _adapter(
            _GRPO, "verl", f"grpo + regular, loss_reduction={reduction}", _loss("regular", reduction), agg
        )
        for reduction, agg in LOSS_REDUCTIONS.items()
    }
)


def _prompt_boundaries(prompt_index: torch.Tensor) -> list[tuple[int, int]]:
    """SkyRL's ``prompt_boundaries``: ``(start, end)`` of each run of rows of one prompt (its trainer
    keeps a prompt's samples together, ``trainer.py`` ``_normalize_advantages``)."""
    ids = prompt_index.reshape(-1).tolist()
    starts = [i for i in range(len(ids)) if i == 0 or ids[i] != ids[i - 1]]
    return list(zip(starts, [*starts[1:], len(ids)], strict=True))


def _prompt_mean_loss() -> Callable[..., torch.Tensor]:
    """SkyRL's ``regular`` policy loss after its ``prompt_mean`` pre-scaling, given each row's prompt.

    The rows are put in prompt order first (a stable sort: SkyRL's mini-batches hold each prompt's
    samples together) and the token sum is taken there, so the loss does not depend on the order.
    """

    def call(
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        prompt_index: torch.Tensor,
    ) -> torch.Tensor:
        order = torch.argsort(prompt_index.reshape(-1).cpu(), stable=True).to(mask.device)
        boundaries = _prompt_boundaries(prompt_index.reshape(-1)[order.cpu()])
        sorted_inputs = (logp[order], old_logp[order], advantages[order], mask[order])
        return _policy_call("regular", "prompt_mean", *sorted_inputs, prompt_boundaries=boundaries)

    return suite_loss(
        call, "skyrl_policy_loss[regular, loss_reduction=prompt_mean]", keywords=["prompt_index"]
    )


# The oracle's Objective aggregates with the five modes; prompt-mean's weights need the prompts, so
# this row declares the aggregation and no objective (loss_aggregation judges prompt-mean; the clip is
# detected).
ADAPTERS["loss[prompt_mean]"] = _adapter(
    _GRPO, "verl", "grpo + regular, loss_reduction=prompt_mean", _prompt_mean_loss()
).replace(aggregation="prompt-mean", objective=None)
#: ``policy_loss_type`` values beside ``regular`` (token_mean), with the objective where the oracle has it.
POLICIES: dict[str, Objective | None] = {
    "dual_clip": _ppo("token-mean", dual_clip=_DUAL),
    "gspo": Objective("gspo", eps_low=_EPS, eps_high=_EPS),
    "cispo": Objective("cispo", eps_low=0.0, eps_high=5.0),
    "sapo": None,
}
ADAPTERS.update(
    {
        f"policy[{policy}]": _adapter(
            _GRPO,
            "verl",
            f"grpo + policy_loss_type={policy}, loss_reduction=token_mean",
            _loss(policy, "token_mean"),
            objective=objective,
        )
        for policy, objective in POLICIES.items()
    }
)

OBJECTIVE_NOTES: dict[str, str] = {
    "policy[sapo]": "sapo: sigmoid gate 4/tau sigmoid(tau (r - 1)), tau 1 / 1.05, not in the oracle",
}
#: The loss variants share the ``grpo`` row's advantage: the matrix runs their loss properties only.
LOSS_ONLY: dict[str, tuple[str, ...]] = {f"policy[{p}]": LOSS_PROPERTIES for p in POLICIES}

NOTES: dict[str, str] = {
    "loss[token_mean_legacy]": "Level 5 by design: SkyRL's legacy reduction divides each micro-batch by "
    "its own token count and the micro-batch count (ppo_utils.apply_loss_reduction_to_advantages_minibatch: "
    "'legacy token-mean that normalizes per-microbatch then averages across microbatches'), a mean of "
    "per-micro-batch token means, not the step's token mean; token_mean is the step-wide one.",
    "maxrl": "Outside the presets: MaxRL, (R - mean_g) / (mean_g + 1e-6) (a group of one keeps R - 0).",
}


def _at_scale(policy: str) -> Callable[..., torch.Tensor]:
    """One worker's micro-batch loss at scale: SkyRL's policy loss ``policy`` (a masked token sum,
    ``reduce_loss``) of the advantages the trainer pre-scaled, times the data-parallel size.

    ``worker.py`` (``forward_backward``): ``loss = policy_loss * grad_sum_correction_factor + ...``
    with ``grad_sum_correction_factor = self.mesh_rank.dp_size``, because DP averages the gradients
    and the pre-scaled policy losses are sums; each micro-batch's loss is back-propagated as it is
    (no division by the micro-batches: ``loss_scale`` ``none``).
    """

    def call(
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        world_size: int,
    ) -> torch.Tensor:
        config = _config(policy, "token_mean", mask.shape[1])
        out, _metrics = _ppo_utils().PolicyLossRegistry.get(policy)(
            logp, old_logp, per_token(advantages, mask), config, loss_mask=mask, rollout_logprobs=None
        )
        result: torch.Tensor = out * world_size
        return result

    return suite_loss(call, f"skyrl_policy_loss_at_scale[{policy}]", keywords=["world_size"])


def _scaler(reduction: str) -> Callable[..., torch.Tensor]:
    """SkyRL's pre-scaling of one optimizer step's mini-batch (``trainer.py``
    ``_normalize_advantages``: ``apply_loss_reduction_to_advantages_minibatch`` on each mini-batch,
    every rank's responses, before the workers split it): each token's factor (unit advantages).

    ``micro_batch_size`` is ``micro_train_batch_size_per_gpu``: the step's ``n`` responses over W
    ranks of M fixed-size micro-batches (SkyRL's sizes are fixed: ``ScaleOut.sizes`` ``equal``);
    ``max_seq_len`` the padded width, as in the loss rows.
    """

    def scale(
        mask: torch.Tensor, *, world_size: int, micro_batches: int, prompt_index: torch.Tensor
    ) -> torch.Tensor:
        n, width = mask.shape
        out: torch.Tensor = _ppo_utils().apply_loss_reduction_to_advantages_minibatch(
            advantages=torch.ones_like(mask),
            loss_mask=mask,
            loss_reduction=reduction,
            micro_batch_size=n // (world_size * micro_batches),
            max_seq_len=width,
            prompt_boundaries=_prompt_boundaries(prompt_index) if reduction == "prompt_mean" else None,
        )
        return out

    scale.__name__ = f"skyrl_advantage_prescaling[{reduction}]"
    return scale


#: The at-scale losses (``<policy>``) and SkyRL's pre-scalings (``scale_<loss_reduction>``), by name.
AT_SCALE = types.SimpleNamespace(
    **{policy: _at_scale(policy) for policy in ("regular", *POLICIES)},
    **{f"scale_{reduction}": _scaler(reduction) for reduction in (*LOSS_REDUCTIONS, "prompt_mean")},
)
_HOW = (
    "advantages pre-scaled on the optimizer step's mini-batch by SkyRL's "
    "apply_loss_reduction_to_advantages_minibatch; token-sum loss times dp_size"
)
#: The level-5 column: SkyRL's own pre-scaling on the step's mask, then each worker's token-sum
#: policy loss times dp_size, at fixed micro-batch sizes. ``token_mean_legacy`` normalises each
#: micro-batch by its own tokens and divides by the micro-batch count (SkyRL's docstring: "legacy
#: token-mean that normalizes per-microbatch then averages across microbatches"): against the
#: declared token-mean, the level-5 cell measures that normaliser. The ratio is ``exp`` of a float32
#: log-ratio (``safe_exp_delta``), so the gradient carries float32 roundings: ``loss_precision``.
SCALEOUT: dict[str, ScaleOut | str] = {
    f"loss[{reduction}]": ScaleOut(
        "regular",
        agg,
        constant=HORIZON if agg == "seq-mean-token-sum-norm" else None,
        how=_HOW,
        sizes="equal",
        scaler=f"scale_{reduction}",
        loss_precision="float32",
    )
    for reduction, agg in {**LOSS_REDUCTIONS, "prompt_mean": "prompt-mean"}.items()
}
SCALEOUT.update(
    {
        f"policy[{policy}]": ScaleOut(
            policy,
            "token-mean" if objective is not None else None,
            how=_HOW,
            sizes="equal",
            scaler="scale_token_mean",
            loss_precision="float32",
        )
        for policy, objective in POLICIES.items()
    }
)
for _mode, _a in ADAPTERS.items():  # the estimator rows use the default loss (regular, token_mean)
    if _a.loss is not None and _mode not in SCALEOUT:
        SCALEOUT[_mode] = SCALEOUT["loss[token_mean]"]

NOT_APPLICABLE: dict[str, str] = {
    "kl_loss": "the KL loss (use_kl_loss, on by default: k3, kl_loss_coef 0.001) is added in the worker "
    "(worker.py: masked_mean(compute_approx_kl(...), loss_mask, dim=-1).mean(), a per-sequence token "
    "mean whatever loss_reduction is), not in a function of ppo_utils that can be called with the "
    "policy loss",
    "reinforce++": "advantage_estimator=reinforce++ whitens the discounted returns over every token of "
    "the batch (masked_whiten), ignoring the groups: no group advantage to check",
    "advantage_batch_normalize": "advantage_batch_normalize (a second, batch z-score after the group "
    "estimator) is inline in the trainer (trainer.py normalize_minibatch_advantages), not a function "
    "that can be called on its own",
}
