"""Reference policy losses for the gradient level (the suite's default ``--loss``).

``loss(logp, old_logp, advantages, mask) -> scalar``: the clipped surrogate
``-sum_it w_it min(r_it A_i, clip(r_it, 1 - c, 1 + c) A_i)`` with ``r_it = exp(logp_it -
old_logp_it)`` and aggregation weights ``w_it`` (SPEC section 4):

* ``token_mean``: ``w_it = mask_it / sum mask`` (one mean over every token of the batch);
* ``seq_mean_token_mean``: ``w_it = mask_it / (N * T_i)`` (mean over each response's
  tokens, then over responses);
* ``seq_mean_token_sum_norm``: ``w_it = mask_it / (N * T)`` (sum over tokens divided by
  a constant, Dr. GRPO's).

At ratio 1 the gradient is ``-sum_it w_it A_i grad log pi(y_it)``, so the identity's
score is ``s_i = G sum_t w_it grad log pi(y_it)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["policy_loss", "make_policy_loss", "AGGREGATIONS"]

AGGREGATIONS: tuple[str, ...] = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: str = "token_mean",
    clip: float = 0.2,
) -> torch.Tensor:
    """The clipped policy-gradient surrogate (module doc), a scalar tensor.

    >>> logp = torch.zeros(2, 3, requires_grad=True)
    >>> mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    >>> policy_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), mask)
    tensor(0.2000, grad_fn=<NegBackward0>)
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation={aggregation!r} must be one of {AGGREGATIONS}")
    if logp.shape != mask.shape or logp.shape != old_logp.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask "
            f"{tuple(mask.shape)} must have one shape [N, T]"
        )
    adv = advantages.reshape(-1, 1).to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    m = mask.to(logp.dtype)
    if aggregation == "token_mean":
        total = (surrogate * m).sum() / m.sum()
    elif aggregation == "seq_mean_token_mean":
        total = ((surrogate * m).sum(-1) / m.sum(-1)).mean()
    else:
        total = (surrogate * m).sum() / (m.shape[0] * m.shape[1])
    return -total


def make_policy_loss(aggregation: str = "token_mean") -> Callable[..., torch.Tensor]:
    """``policy_loss`` with a fixed aggregation, in the suite's loss signature."""

    def loss(
        logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        return policy_loss(logp, old_logp, advantages, mask, aggregation=aggregation)

    loss.__name__ = f"policy_loss_{aggregation}"
    return loss
