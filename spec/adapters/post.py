"""Adapters for the seed blog post's code (``sigma_ref.compat.post``, always available).

The post's functions take one group (a 1-D tensor); the adapters use the ``grouped``
layout and map them over the rows of ``[B, G]``:

* ``grpo``: ``torch.vmap(post.grpo_advantage)``, ``(R - mean) / (R.std() + 1e-8)``;
  declared convention ``post`` (Bessel, eps 1e-8 added);
* ``dr_grpo``: ``torch.vmap(post.dr_grpo_advantage)``, ``R - mean``; declared ``dr_grpo``;
* ``dapo``: ``post.dapo_advantage`` row by row (it calls ``.item()`` and returns
  ``None`` for a silent group, so it cannot be mapped); a ``None`` group gets advantage
  0 (no update, as the post's "caller should skip this batch") and ``keep_mask`` is
  "the post returned a tensor". Declared ``post``.

The post publishes no policy loss, so the gradient-level checks are not applicable.
Its functions compute in float32 whatever the input dtype (``rewards.float()``).

>>> import torch
>>> ADAPTERS["grpo"].advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]])).tolist()
[[1.5, -0.5, -0.5, -0.5]]
>>> ADAPTERS["dapo"].keep_mask(torch.tensor([[1.0, 1.0], [1.0, 0.0]])).tolist()
[[False, False], [True, True]]
"""

from __future__ import annotations

import torch

from sigma_ref.compat import post
from sigma_ref.conformance import Adapter

from ._peers import MODULE_API, Peer

__all__ = [*MODULE_API]

PEER = Peer("sigma-ref", "sigma_ref.compat.post", "0.1", title="seed post")


def available() -> bool:
    """Always true: the post's code ships with sigma-ref."""
    return True


def unavailable() -> str | None:
    """Never a reason: the post's code ships with sigma-ref."""
    return None


def _grpo(rewards: torch.Tensor) -> torch.Tensor:
    return torch.vmap(post.grpo_advantage)(rewards)


def _dr_grpo(rewards: torch.Tensor) -> torch.Tensor:
    return torch.vmap(post.dr_grpo_advantage)(rewards)


def _dapo_rows(rewards: torch.Tensor) -> list[torch.Tensor | None]:
    # one call per group: dapo_advantage reads k with .item() and may return None
    return [post.dapo_advantage(row) for row in rewards]


def _dapo(rewards: torch.Tensor) -> torch.Tensor:
    rows = _dapo_rows(rewards)
    dtype = next((r.dtype for r in rows if r is not None), torch.float32)
    zero = torch.zeros(rewards.shape[-1], dtype=dtype, device=rewards.device)
    return torch.stack([zero if r is None else r for r in rows])


def _dapo_keep(rewards: torch.Tensor) -> torch.Tensor:
    kept = torch.tensor([r is not None for r in _dapo_rows(rewards)], device=rewards.device)
    return kept.unsqueeze(-1).expand(rewards.shape)


ADAPTERS: dict[str, Adapter] = {
    "grpo": Adapter(_grpo, "grouped", convention="post", name="post grpo_advantage"),
    "dr_grpo": Adapter(_dr_grpo, "grouped", convention="dr_grpo", name="post dr_grpo_advantage"),
    "dapo": Adapter(_dapo, "grouped", keep_mask=_dapo_keep, convention="post", name="post dapo_advantage"),
}

NOT_APPLICABLE: dict[str, str] = {
    "loss": "the post publishes advantage functions only, no policy loss",
}
