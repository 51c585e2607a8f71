"""Adapters for ms-swift 4.6 (``swift.rl_core.advantage``): its own advantage functions, called as its
GRPO trainer calls them.

``swift/rlhf_trainers/grpo_trainer.py:_compute_advantages`` passes the rewards of every reward
function ``rewards_per_func [N, n_funcs]`` with ``reward_weights`` (float32, ones by default), the
trainer's ``advantage_estimator`` (``grpo``, ``rloo``, ``reinforce_plus_plus``) and ``scale_rewards``
(``group``, ``batch``, ``none``, ``gdpo``), to

* ``compute_advantages(..., num_generations=K)`` (layout ``contiguous``: groups are consecutive runs
  of ``K``), the default; rows ``<estimator>[<scale_rewards>]``;
* ``compute_advantages_dynamic(..., prompt_ids, request_ids)`` when ``dynamic_num_samples`` is set
  (layout ``index``: groups by the prompt id string, ragged and interleaved; every response its own
  request id); rows ``dynamic:<estimator>[<scale_rewards>]``. It takes float32 rewards only: its
  group means are a float32 ``torch.zeros`` buffer, so float64 or bfloat16 rewards raise ``Index
  put requires the source and destination dtypes match``. The trainer always passes float32
  (``rl_core/grpo_algorithm.py`` fills a float32 ``torch.zeros`` buffer ``rewards_per_func``), and so
  does the adapter: the rewards go into a float32 ``rewards_per_func`` as there.

The suite's scalar reward is one reward function (``rewards_per_func = R[:, None]``).

What each computes (read in ``advantage.py``; ``A = (R - mean_g) / (d + 1e-4)``):

* ``grpo[group]``: ``d`` = the group's Bessel std (TRL's convention, ``trl``); ``grpo[batch]``: the
  batch's Bessel std of the raw rewards (``trl_batch``); ``grpo[none]``: ``d = 1`` with no epsilon
  (``dr_grpo``);
* ``rloo[none]``: ``K/(K-1) (R - mean_g)`` (``rloo``); ``rloo[group]`` / ``rloo[batch]``: that RLOO
  advantage divided by the group's / the batch's Bessel std of the rewards plus 1e-4 (RLOO over a
  std: outside the presets);
* ``reinforce_plus_plus[group]``: the group-centered reward over the Bessel std of the centered
  rewards, which is the group's std (``trl``); ``[batch]``: over the batch's Bessel std of the
  group-centered rewards (group centering then batch scaling: outside the presets); ``[none]``:
  ``dr_grpo``;
* ``grpo[gdpo]``: each reward function normalised in its group (``nanstd``, Bessel, + 1e-8), the
  weighted sum then normalised over the batch (mean and Bessel std + 1e-8): two-stage group then
  batch normalisation, outside the presets.

The loss: ms-swift's ``GRPOTrainer`` subclasses TRL's and needs ``trl<1.0``, which cannot live beside
TRL 1.16 in one environment; ``NOT_APPLICABLE`` says so (its loss types are TRL's).

>>> sorted(ADAPTERS)[:2]
['dynamic:grpo[batch]', 'dynamic:grpo[group]']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from sigma_ref.conformance import Adapter

from ._peers import MODULE_API, Peer

__all__ = [*MODULE_API, "NOTES"]

PEER = Peer("ms-swift", "swift", "4.6.0", title="ms-swift")
available = PEER.available
unavailable = PEER.unavailable


#: ``swift.rl_core.advantage`` (imports swift on first use).
_advantage_module = PEER.importer("swift.rl_core.advantage")


def _weights() -> torch.Tensor:
    """The trainer's ``reward_weights``: one reward function, weight 1, float32 (grpo_trainer.py)."""
    return torch.ones(1, dtype=torch.float32)


def _compute(function: str, estimator: str, scale: str, **inputs: Any) -> torch.Tensor:
    """``advantage.<function>(..., reward_weights, advantage_estimator, scale_rewards)``'s advantages."""
    out, _rewards = getattr(_advantage_module(), function)(
        reward_weights=_weights(), advantage_estimator=estimator, scale_rewards=scale, **inputs
    )
    result: torch.Tensor = out
    return result


def _grouped(estimator: str, scale: str) -> Callable[[torch.Tensor, int], torch.Tensor]:
    def advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        per_func = rewards.reshape(-1, 1)
        return _compute(
            "compute_advantages", estimator, scale, rewards_per_func=per_func, num_generations=group_size
        )

    advantages.__name__ = f"swift_compute_advantages[{estimator}, scale_rewards={scale}]"
    return advantages


def _dynamic(estimator: str, scale: str) -> Callable[[torch.Tensor, np.ndarray], torch.Tensor]:
    def advantages(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
        ids = [f"prompt-{i}" for i in np.asarray(index).tolist()]
        per_func = torch.zeros((rewards.shape[0], 1), dtype=torch.float32, device=rewards.device)
        per_func[:, 0] = rewards.detach()
        requests = [f"request-{j}" for j in range(len(ids))]
        return _compute(
            "compute_advantages_dynamic",
            estimator,
            scale,
            rewards_per_func=per_func,
            prompt_ids=ids,
            request_ids=requests,
        )

    advantages.__name__ = f"swift_compute_advantages_dynamic[{estimator}, scale_rewards={scale}]"
    return advantages


#: ``(advantage_estimator, scale_rewards) -> declared convention`` (None: outside the presets).
GROUPED: dict[tuple[str, str], str | None] = {
    ("grpo", "group"): "trl",
    ("grpo", "batch"): "trl_batch",
    ("grpo", "none"): "dr_grpo",
    ("grpo", "gdpo"): None,
    ("rloo", "group"): None,
    ("rloo", "batch"): None,
    ("rloo", "none"): "rloo",
    ("reinforce_plus_plus", "group"): "trl",
    ("reinforce_plus_plus", "batch"): None,
    ("reinforce_plus_plus", "none"): "dr_grpo",
}
#: The request-aware path: the same estimators grouped by prompt id (``gdpo`` is not offered there).
DYNAMIC: dict[tuple[str, str], str | None] = {k: v for k, v in GROUPED.items() if k[1] != "gdpo"}

ADAPTERS: dict[str, Adapter] = {
    f"{est}[{scale}]": Adapter(
        _grouped(est, scale),
        "contiguous",
        convention=conv,
        name=f"ms-swift advantage_estimator={est}, scale_rewards={scale}",
    )
    for (est, scale), conv in GROUPED.items()
}
ADAPTERS.update(
    {
        f"dynamic:{est}[{scale}]": Adapter(
            _dynamic(est, scale),
            "index",
            convention=conv,
            ragged=True,
            name=f"ms-swift dynamic_num_samples, advantage_estimator={est}, scale_rewards={scale}",
        )
        for (est, scale), conv in DYNAMIC.items()
    }
)

#: What the rows outside the presets compute (the matrix's notes column; the estimators the lead
#: names as conventions at merge).
_OUTSIDE: dict[str, str] = {
    "grpo[gdpo]": "Outside the presets: two-stage group then batch normalisation "
    "((R - mean_g)/(std_g(ddof=1) + 1e-8), then (x - mean_batch)/(std_batch(ddof=1) + 1e-8)).",
    "rloo[group]": "Outside the presets: RLOO over the group std, "
    "K/(K-1) (R - mean_g) / (std_g(ddof=1) + 1e-4).",
    "rloo[batch]": "Outside the presets: RLOO over the batch std, "
    "K/(K-1) (R - mean_g) / (std_batch(R, ddof=1) + 1e-4).",
    "reinforce_plus_plus[batch]": "Outside the presets: group centering, batch scaling of the centered "
    "rewards, (R - mean_g) / (std_batch(R - mean_g, ddof=1) + 1e-4).",
}
NOTES: dict[str, str] = {
    **_OUTSIDE,
    **{f"dynamic:{k}": v for k, v in _OUTSIDE.items() if k != "grpo[gdpo]"},
}

NOT_APPLICABLE: dict[str, str] = {
    "loss": "ms-swift's GRPO loss is a method of its GRPOTrainer (a TRL GRPOTrainer subclass) and needs "
    "trl<1.0, which cannot be installed beside TRL 1.16; its loss types are TRL's (the TRL rows)",
}
