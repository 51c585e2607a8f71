"""Reference policy losses for the gradient level (the suite's default ``--loss``).

``loss(logp, old_logp, advantages, mask) -> scalar``: the clipped surrogate
``-sum_it w_it min(r_it A_i, clip(r_it, 1 - c, 1 + c) A_i)`` with ``r_it = exp(logp_it -
old_logp_it)`` and the aggregation weights ``w_it`` of
:func:`sigma_ref.objectives.aggregation_weights` (docs/spec.md §4), in any of
:data:`sigma_ref.conventions.AGGREGATION_MODES` (or a TRL ``loss_type``, or the ``_`` spelling):
``token-mean`` ``w_it = 1 / N_tok``, ``seq-mean-token-mean`` ``1 / (N_seq |y_i|)``,
``seq-mean-token-sum`` ``1 / N_seq``, ``seq-mean-token-sum-norm`` ``1 / (N_seq T)``,
``token-sum`` ``1``, on unmasked tokens.

At ratio 1 the gradient is ``-sum_it w_it A_i grad log pi(y_it)``, so the identity's
score is ``s_i = G sum_t w_it grad log pi(y_it)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..conventions import resolve_aggregation
from ..objectives import aggregation_weights

__all__ = ["policy_loss", "make_policy_loss"]


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: str = "token-mean",
    clip: float = 0.2,
) -> torch.Tensor:
    """The clipped policy-gradient surrogate (module doc), a scalar tensor.

    >>> logp = torch.zeros(2, 3, requires_grad=True)
    >>> mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    >>> policy_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), mask)
    tensor(0.2000, grad_fn=<NegBackward0>)
    """
    if logp.shape != mask.shape or logp.shape != old_logp.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask "
            f"{tuple(mask.shape)} must have one shape [N, T]"
        )
    w = aggregation_weights(mask, aggregation).to(device=logp.device, dtype=logp.dtype)
    adv = advantages.reshape(-1, 1).to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    return -(w * surrogate).sum()


def make_policy_loss(aggregation: str = "token-mean") -> Callable[..., torch.Tensor]:
    """``policy_loss`` with a fixed aggregation, in the suite's loss signature."""
    mode = resolve_aggregation(aggregation)

    def loss(
        logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        return policy_loss(logp, old_logp, advantages, mask, aggregation=mode)

    loss.__name__ = f"policy_loss_{mode.replace('-', '_')}"
    return loss
