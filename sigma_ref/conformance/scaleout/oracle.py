"""The oracle at scale: the reference loss and advantages the ranks run, and :func:`spmd_loss`, the
form a ``jax.sharding`` trainer computes a loss in (one loss over the global micro-batch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from ...conventions import AGGREGATION_MODES
from ...objectives import aggregation_weights

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

# ---------------------------------------------------------------------------
# the prediction


def oracle_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: str | None,
    global_num_tokens: int,
    global_num_seqs: int,
    horizon: int,
    world_size: int,
) -> torch.Tensor:
    """The reference loss for a piece of the batch: ``W * sum_piece w_it l_it`` (clip 0.2).

    ``l_it = -min(r_it A_i, clip(r_it, 0.8, 1.2) A_i)``, ``w_it`` from
    :func:`aggregation_weights` with the global counts: the pieces' losses add up to the
    full-batch loss, and the factor W undoes DDP's average (``loss_scale="none"``).

    >>> lp = torch.zeros(1, 2, requires_grad=True)
    >>> oracle_loss(lp, lp.detach(), torch.tensor([1.0]), torch.ones(1, 2), aggregation="token-mean",
    ...             global_num_tokens=4, global_num_seqs=2, horizon=2, world_size=1)
    tensor(-0.5000, grad_fn=<MulBackward0>)
    """
    if aggregation is None:
        raise ValueError(
            "oracle_loss needs a declared aggregation: pass aggregation=one of " + str(AGGREGATION_MODES)
        )
    w = aggregation_weights(
        mask,
        aggregation,
        num_tokens=global_num_tokens,
        num_seqs=global_num_seqs,
        constant=horizon if aggregation == "seq-mean-token-sum-norm" else None,
    ).to(logp.dtype)
    keep = mask > 0  # padding (NaN, inf) is selected out before any arithmetic: NaN * 0 is NaN
    logp, old_logp = torch.where(keep, logp, 0.0), torch.where(keep, old_logp, 0.0)
    ratio = torch.exp(logp - old_logp)
    adv = advantages.reshape(-1, 1).to(logp.dtype)
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv)
    return (per_token * w).sum() * world_size


@torch.no_grad()
def oracle_advantages(rewards: torch.Tensor, index: npt.ArrayLike) -> torch.Tensor:
    """The oracle's GRPO advantages (paper convention), layout ``index``: ``(R - mu_g) / sigma_g``."""
    from ...advantages import grpo_advantage

    out: torch.Tensor = grpo_advantage(rewards, index=np.asarray(index))  # a Tensor in, a Tensor out
    return out


def _gather_rows(x: torch.Tensor, rank: int, world_size: int, group: ProcessGroup | None) -> torch.Tensor:
    """Every rank's ``x`` (rows of any count, same trailing shape) concatenated in rank order, this
    rank's own rows the live tensor (its autograd path kept), the others' copies without one."""
    import torch.distributed as dist

    if world_size == 1:
        return x
    count = torch.tensor([x.shape[0]], dtype=torch.int64, device=x.device)
    counts = [torch.zeros_like(count) for _ in range(world_size)]
    dist.all_gather(counts, count, group=group)
    most = max(int(c.item()) for c in counts)
    padded = torch.zeros((most, *x.shape[1:]), dtype=x.dtype, device=x.device)
    padded[: x.shape[0]] = x.detach()
    parts = [torch.zeros_like(padded) for _ in range(world_size)]
    dist.all_gather(parts, padded, group=group)
    rows = [x if r == rank else parts[r][: int(counts[r].item())] for r in range(world_size)]
    return torch.cat(rows)


def spmd_loss(loss: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``loss`` as a JAX SPMD trainer computes it: once, on the global micro-batch of every rank.

    Under ``jax.sharding`` (tunix's ``PeftTrainer``, MaxText) data parallelism is not a loss per
    device: the micro-batch is one global array sharded over the devices' batch axis, and the loss
    and its gradient are one global computation, so the loss's normaliser counts the micro-batch of
    all ranks. At level 5 each rank holds its part ``x_r`` of micro-batch ``j``; the at-scale form
    gathers ``X_j = concat_r x_r`` (rank order; rows of any count), computes ``L_j = loss(X_j)``
    and returns ``W L_j`` with the gradient flowing through this rank's rows only. The harness
    averages the ranks' gradients as DDP does, ``(1/W) sum_r W dL_j/dx_r dx_r/dtheta = dL_j/dtheta``:
    the SPMD gradient of micro-batch ``j`` exactly. ``loss(logp, old_logp, advantages, mask)`` is
    called with torch tensors (a JAX loss behind :func:`~.frameworks.jax_loss`); the wrapper takes
    ``rank``, ``world_size`` and ``process_group`` from :data:`GLOBALS`.

    >>> mean = spmd_loss(lambda lp, old, adv, mask: (lp * mask).sum() / mask.sum())
    >>> lp = torch.ones(1, 2, requires_grad=True)
    >>> mean(lp, lp.detach(), torch.ones(1), torch.ones(1, 2), rank=0, world_size=1, process_group=None)
    tensor(1., grad_fn=<MulBackward0>)
    """

    def at_scale(
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        *,
        rank: int,
        world_size: int,
        process_group: ProcessGroup | None,
    ) -> torch.Tensor:
        gathered = [
            _gather_rows(x, rank, world_size, process_group) for x in (logp, old_logp, advantages, mask)
        ]
        out = loss(*gathered)
        value = out[0] if isinstance(out, tuple | list) else out
        return value * world_size

    name = getattr(loss, "__name__", "loss")
    at_scale.__name__ = at_scale.__qualname__ = f"spmd[{name}]"
    at_scale.__sigma_ref_framework__ = "torch"  # type: ignore[attr-defined]  # torch glue: never re-bridged
    return at_scale
