"""What the harness passes by keyword: a loss's global counts (:data:`GLOBALS`) and an advantage
function's process group (:data:`ADVANTAGE_GLOBALS`).

>>> declared_globals(lambda logp, old_logp, advantages, mask, *, world_size: 0)
['world_size']
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

#: What the harness can pass to a loss (by keyword, only the names its signature declares).
GLOBALS: dict[str, str] = {
    "global_num_tokens": "unmasked tokens in the whole batch (all ranks, all micro-batches)",
    "global_num_seqs": "responses with at least one unmasked token in the whole batch",
    "rank_num_tokens": "unmasked tokens in this rank's shard (all its micro-batches)",
    "rank_num_seqs": "responses in this rank's shard",
    "micro_num_tokens": "unmasked tokens in this micro-batch",
    "micro_num_seqs": "responses in this micro-batch",
    "horizon": "the padded response length T of the batch (seq-mean-token-sum-norm's constant)",
    "world_size": "W, the number of data-parallel ranks",
    "dp_size": "W again, under verl's name",
    "rank": "this process's rank in process_group",
    "micro_batches": "M, the micro-batches per rank per optimiser step",
    "micro_batch_index": "which micro-batch this is, 0 .. M - 1",
    "process_group": "the torch.distributed group of the W ranks (for losses that all-reduce)",
    "aggregation": "the declared aggregation mode, or None",
    "generation_num_tokens": "unmasked tokens in the generation batch (steps_per_generation optimizer steps)",
    "generation_num_seqs": "responses with an unmasked token in the generation batch",
    "global_num_prompts": "prompts (groups) with an unmasked token in the whole batch (prompt-mean's P)",
    "prompt_index": "Tensor [n]: each row's prompt (group id of the whole batch), as a trainer's uids",
    "prompt_num_tokens": "Tensor [n]: each row's prompt's unmasked tokens in the whole batch (all ranks, "
    "all micro-batches; prompt-mean's N_tok(g))",
}


def loss_globals(
    micro_mask: Any,
    *,
    rank_mask: Any = None,
    global_mask: Any = None,
    world_size: int = 1,
    rank: int = 0,
    micro_batches: int = 1,
    micro_batch_index: int = 0,
    process_group: ProcessGroup | None = None,
    aggregation: str | None = None,
    micro_index: Any = None,
    rank_index: Any = None,
    global_index: Any = None,
) -> dict[str, Any]:
    """The value of every :data:`GLOBALS` name for one micro-batch (masks ``[n, T]``, numpy or torch).

    ``rank_mask``, ``global_mask``: this rank's shard and the whole batch, by default the
    micro-batch itself (one process, one micro-batch: levels 0 to 4 call a loss that way).
    ``micro_index``, ``rank_index``, ``global_index``: each row's prompt (group id) in the same three,
    defaulting alike; without any, each row is its own prompt (one response per prompt). The prompt
    globals are ``P = global_num_prompts`` and, per row of the micro-batch, ``prompt_num_tokens =
    N_tok(g)`` over the whole batch: ``sum_i sum_t mask_it l_it / prompt_num_tokens_i / P`` over
    every micro-batch of every rank is the ``prompt-mean`` loss
    (:func:`~sigma_ref.objectives.prompt_mean_weights`), as SkyRL's ``loss_reduction=prompt_mean``
    scales its advantages by ``1 / (num_prompts * prompt_tokens)``.

    >>> m = np.array([[1, 1, 0], [0, 0, 0]])
    >>> g = loss_globals(m)
    >>> g["global_num_tokens"], g["global_num_seqs"], g["rank_num_seqs"], g["horizon"], g["world_size"]
    (2, 1, 2, 3, 1)
    >>> g = loss_globals(m[:1], global_mask=np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1]]),
    ...                  micro_index=[7], global_index=[7, 7, 9])
    >>> g["global_num_prompts"], g["prompt_num_tokens"].tolist(), g["prompt_index"].tolist()
    (2, [3.0], [7])
    """
    rank_mask = micro_mask if rank_mask is None else rank_mask
    global_mask = rank_mask if global_mask is None else global_mask
    micro_ids = _prompt_ids(micro_index, micro_mask, "micro_index")
    rank_ids = micro_ids if rank_index is None else _prompt_ids(rank_index, rank_mask, "rank_index")
    global_ids = rank_ids if global_index is None else _prompt_ids(global_index, global_mask, "global_index")
    global_tokens = _prompt_tokens(global_ids, global_mask)
    missing = sorted(set(micro_ids.tolist()) - set(global_tokens))
    if missing:
        raise ValueError(
            f"micro_index holds prompts {missing[:5]} that global_index does not: pass each row's group id "
            "of the whole batch"
        )
    return {
        "global_num_prompts": sum(1 for t in global_tokens.values() if t > 0),
        "prompt_index": torch.as_tensor(micro_ids, dtype=torch.int64),
        "prompt_num_tokens": torch.tensor(
            [global_tokens[g] for g in micro_ids.tolist()], dtype=torch.float64
        ),
        "global_num_tokens": int(global_mask.sum()),
        "global_num_seqs": int((global_mask.sum(-1) > 0).sum()),
        "rank_num_tokens": int(rank_mask.sum()),
        "rank_num_seqs": int(rank_mask.shape[0]),
        "micro_num_tokens": int(micro_mask.sum()),
        "micro_num_seqs": int(micro_mask.shape[0]),
        "horizon": int(global_mask.shape[-1]),
        "world_size": world_size,
        "dp_size": world_size,
        "rank": rank,
        "micro_batches": micro_batches,
        "micro_batch_index": micro_batch_index,
        "process_group": process_group,
        "aggregation": aggregation,
    }


def _prompt_ids(index: Any, mask: Any, name: str) -> npt.NDArray[np.int64]:
    """``index`` as int64 ``[n]`` (one prompt id per row of ``mask``); None: each row its own prompt."""
    n = int(mask.shape[0])
    if index is None:
        return np.arange(n, dtype=np.int64)
    ids = np.asarray(index.detach().cpu() if isinstance(index, torch.Tensor) else index)
    if ids.shape != (n,) or ids.dtype.kind not in "iu":
        raise ValueError(
            f"{name} has shape {ids.shape} and dtype {ids.dtype}; pass one integer prompt (group) id per row "
            f"of its mask ({n} rows)"
        )
    return ids.astype(np.int64)


def _prompt_tokens(ids: npt.NDArray[np.int64], mask: Any) -> dict[int, float]:
    """Each prompt's unmasked tokens in ``mask`` (rows by ``ids``)."""
    per_row = np.asarray(mask.detach().cpu() if isinstance(mask, torch.Tensor) else mask, dtype=np.float64)
    out: dict[int, float] = {}
    for g, t in zip(ids.tolist(), per_row.sum(-1).tolist(), strict=True):
        out[g] = out.get(g, 0.0) + t
    return out


def declared_globals(fn: Callable[..., Any]) -> list[str]:
    """The :data:`GLOBALS` names ``fn`` takes by keyword after its four positional inputs.

    >>> declared_globals(lambda logp, old_logp, advantages, mask, *, global_num_tokens, ref_logp=None: 0)
    ['global_num_tokens']
    """
    try:
        params = list(inspect.signature(fn).parameters.values())[4:]
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.name in GLOBALS and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


#: What the harness can pass to an advantage function.
ADVANTAGE_GLOBALS: tuple[str, ...] = ("process_group", "rank", "world_size", "dp_size")
