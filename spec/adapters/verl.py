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

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from sigma_ref.conformance import Adapter

from ._peers import Peer, lazy, per_token

__all__ = ["PEER", "ADAPTERS", "NOT_APPLICABLE", "LOSS_AGG_MODES", "available", "unavailable"]

PEER = Peer("verl", "verl", "0.9.1", title="verl")

#: ``loss_agg_mode`` values of ``core_algos.agg_loss`` (verl 0.9.1); the default is ``token-mean``.
LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def available() -> bool:
    """Whether verl is installed."""
    return PEER.unavailable() is None


def unavailable() -> str | None:
    """Why verl cannot be used, or ``None``."""
    return PEER.unavailable()


@lazy
def _core_algos() -> Any:
    """``verl.trainer.ppo.core_algos`` (imports verl, and with it ray, on first use)."""
    PEER.require()
    from verl.trainer.ppo import core_algos

    return core_algos


@lazy
def _actor_config() -> Any:
    """A real ``ActorConfig``: the three fields its ``__post_init__`` requires, all else default."""
    _core_algos()
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)


def _estimator(name: str, **options: Any) -> Callable[[torch.Tensor, np.ndarray], torch.Tensor]:
    def advantages(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
        fn = _core_algos().get_adv_estimator_fn(name)
        scores = rewards.reshape(-1, 1)
        adv, _returns = fn(
            token_level_rewards=scores,
            response_mask=torch.ones_like(scores),
            index=np.asarray(index),
            **options,
        )
        return adv[:, 0]

    advantages.__name__ = f"verl_{name}"
    return advantages


def _token_estimator(name: str, **options: Any) -> Callable[..., Any]:
    """verl's estimator called as verl calls it: token-level rewards, the response mask, uids."""

    def advantages(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray) -> Any:
        fn = _core_algos().get_adv_estimator_fn(name)
        return fn(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            index=np.asarray(index),
            **options,
        )

    advantages.__name__ = f"verl_{name}_token_level"
    return advantages


def _policy_loss(mode: str) -> Callable[..., torch.Tensor]:
    def loss(
        logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        out, _metrics = _core_algos().compute_policy_loss_vanilla(
            old_logp, logp, per_token(advantages, mask), mask, loss_agg_mode=mode, config=_actor_config()
        )
        return out

    loss.__name__ = f"verl_policy_loss_vanilla[{mode}]"
    return loss


_GRPO = _estimator("grpo", norm_adv_by_std_in_grpo=True)
_DEFAULT_LOSS = _policy_loss("token-mean")


def _adapter(
    fn: Callable[..., Any], convention: str, name: str, loss: Callable[..., Any] | None, **kw: Any
) -> Adapter:
    return Adapter(fn, "index", loss=loss, convention=convention, ragged=True, name=f"verl {name}", **kw)


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
    {
        f"{name}[token]": Adapter(
            _token_estimator(name, **options),
            "token",
            convention=convention,
            returns="advantages",
            name=f"verl {name} (token level)",
        )
        for name, options, convention in (
            ("grpo", {"norm_adv_by_std_in_grpo": True}, "verl"),
            ("grpo_vectorized", {"norm_adv_by_std_in_grpo": True}, "verl"),
            ("rloo", {}, "rloo"),
        )
    }
)

NOT_APPLICABLE: dict[str, str] = {
    "dapo_filter": "verl's DAPO group filter (drop a group iff np.std == 0, size > 1) lives in the v1 "
    "replay buffer (trainer/ppo/v1/replay_buffer.py) on TransferQueue and cannot be driven on its own",
}
