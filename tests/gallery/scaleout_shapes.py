"""Correct implementations in the call shapes trainers ship, checked at level 5 as a new user would.

Each is written the way its trainer writes it (float tensors built from lists, loops over ids, no
detach), from reading verl's ``compute_grpo_outcome_advantage`` and a dict-batch trainer loop, and
a PPO-clip loss with truncated importance sampling (TIS) and a k3 KL term as teams ship it:

* :func:`verl_token_advantages`: layout ``token``, ``(token_level_rewards, response_mask, index)
  -> (advantages, returns)``;
* :data:`DICT_ADAPTER`: a dict-in, dict-out function (string prompt ids) through an ``Adapter``'s
  ``inputs``/``output`` hooks, with a token-mean loss that takes the global token count;
* :func:`ppo_tis_k3_loss`: ``loss(logp, old_logp, advantages, mask, *, ref_logp, rollout_logp,
  global_num_tokens, world_size) -> (loss, metrics)``.

``tests/test_scaleout_shapes.py`` runs each through ``sigma-ref check --world-size 2
--micro-batches 2,3``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch

from sigma_ref.conformance import Adapter

#: The loss's constants: PPO clip, TIS cap, k3 coefficient (``--clip 0.2 --tis-cap 2 --kl-coef 0.04``).
CLIP, TIS_CAP, BETA = 0.2, 2.0, 0.04


def verl_token_advantages(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's outcome GRPO: the row's reward sum, normalised by its group's mean and (unbiased) std,
    broadcast over the response's tokens; ``(advantages, returns)``, the two equal."""
    scores = token_level_rewards.sum(dim=-1)
    id2score: dict[Any, list[torch.Tensor]] = defaultdict(list)
    id2mean: dict[Any, torch.Tensor] = {}
    id2std: dict[Any, torch.Tensor] = {}
    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            id2score[index[i]].append(scores[i])
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.tensor(0.0)
                id2std[idx] = torch.tensor(1.0)
            else:
                stacked = torch.stack(id2score[idx])
                id2mean[idx] = torch.mean(stacked)
                id2std[idx] = torch.std(stacked)
        for i in range(bsz):
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        scores = scores.unsqueeze(-1) * response_mask
    return scores, scores


def dict_advantages(batch: dict[str, Any]) -> dict[str, Any]:
    """A dict batch in (``rewards`` as a list of floats, ``prompt_ids`` as strings), a dict out."""
    rewards = torch.tensor(batch["rewards"], dtype=torch.float32)
    groups: dict[str, list[int]] = defaultdict(list)
    for row, prompt in enumerate(batch["prompt_ids"]):
        groups[prompt].append(row)
    advantages = torch.zeros_like(rewards)
    for rows in groups.values():
        r = rewards[rows]
        advantages[rows] = (r - r.mean()) / (r.std() + 1e-6)
    return {"advantages": advantages, "num_groups": len(groups)}


def _dict_inputs(rewards: torch.Tensor, index: np.ndarray, args: tuple[Any, ...]) -> Any:
    """The hook: the suite's ``(rewards, index)`` as the dict batch the function takes."""
    batch = {"rewards": rewards.tolist(), "prompt_ids": [f"prompt-{i}" for i in index.tolist()]}
    return (batch,), {}


def token_mean_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    global_num_tokens: int,
    world_size: int,
) -> torch.Tensor:
    """PPO-clip, token-mean over the whole batch: the micro-batch's token sum over the global count,
    times the world size (DDP averages the ranks' gradients)."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages.to(logp.dtype).unsqueeze(-1)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - CLIP, 1 + CLIP) * adv)
    return (per_token * mask).sum() / global_num_tokens * world_size


#: The dict-in, dict-out function with its hooks and loss (``sigma-ref check tests.gallery.
#: scaleout_shapes:DICT_ADAPTER``); it normalises by the unbiased std (verl's convention).
DICT_ADAPTER = Adapter(
    dict_advantages,
    "index",
    inputs=_dict_inputs,
    output="advantages",
    loss=token_mean_loss,
    aggregation="token-mean",
    name="dict_advantages",
)


def ppo_tis_k3_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    global_num_tokens: int,
    world_size: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip x truncated importance weight ``min(pi_old / pi_rollout, 2)`` plus ``0.04 * k3``,
    token-mean over the whole batch; ``(loss, metrics)``."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages.to(logp.dtype).unsqueeze(-1)
    surrogate = -torch.min(ratio * adv, torch.clamp(ratio, 1 - CLIP, 1 + CLIP) * adv)
    tis = torch.exp(old_logp - rollout_logp).clamp(max=TIS_CAP).detach()
    log_r = ref_logp - logp
    k3 = torch.exp(log_r) - log_r - 1
    per_token = surrogate * tis + BETA * k3
    loss = (per_token * mask).sum() / global_num_tokens * world_size
    return loss, {"kl": float((k3 * mask).sum() / mask.sum()), "tis_mean": float(tis.mean())}
