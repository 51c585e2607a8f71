"""The aggregation folded into the advantages (``--advantage-scale``, ``--advantage-scaler``): the
factor ``s_i`` each scaling gives, the per-piece class a scaling over a micro-batch or a rank shows,
and the class of a wrong scaling (:func:`name_advantage_scale`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import torch

from ..._options import ADVANTAGE_SCALES
from ...conventions import AGGREGATION_MODES
from ...objectives import aggregation_weights
from .hypotheses import Probe
from .splits import _close

# ---------------------------------------------------------------------------
# the aggregation folded into the advantages

#: ``--advantage-scale`` -> the aggregation mode a token-sum loss of the scaled advantages computes.
ADVANTAGE_SCALE_MODES: dict[str, str] = {
    "none": "token-sum",
    "batch-tokens": "token-mean",
    "sequence-tokens": "seq-mean-token-mean",
    "batch-sequences": "seq-mean-token-sum",
    "batch-sequences-horizon": "seq-mean-token-sum-norm",
}
if tuple(ADVANTAGE_SCALE_MODES) != ADVANTAGE_SCALES or set(ADVANTAGE_SCALE_MODES.values()) != set(
    AGGREGATION_MODES
):
    raise AssertionError("ADVANTAGE_SCALE_MODES must map each --advantage-scale to one aggregation mode")


def advantage_scales(
    mask: npt.ArrayLike,
    scale: str,
    *,
    num_tokens: float,
    num_seqs: float,
    constant: float | None = None,
) -> npt.NDArray[np.float64]:
    """The factor ``s_i`` a trainer multiplies advantage ``A_i`` by (``[n]``), with the counts given.

    ``none``: 1; ``batch-tokens``: ``1/N_tok``; ``sequence-tokens``: ``1/(N_seq L_i)`` (``L_i``:
    response i's unmasked tokens; 0 for a response without any); ``batch-sequences``:
    ``1/N_seq``; ``batch-sequences-horizon``: ``1/(N_seq C)`` (``C``: ``constant``, default the
    padded width T). ``s_i m_it`` is :func:`~sigma_ref.objectives.aggregation_weights` of
    the mode ``ADVANTAGE_SCALE_MODES[scale]`` with the same counts.

    >>> advantage_scales([[1, 1, 0], [1, 0, 0]], "sequence-tokens", num_tokens=3, num_seqs=2).tolist()
    [0.25, 0.5]
    """
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale={scale!r} must be one of {ADVANTAGE_SCALES}")
    m = np.asarray(mask, dtype=np.float64)
    n = m.shape[0]
    if scale == "none":
        return np.ones(n)
    if scale == "batch-tokens":
        return np.full(n, 1.0 / num_tokens)
    if scale == "sequence-tokens":
        lengths = m.sum(-1)
        return np.where(lengths > 0, 1.0 / (num_seqs * np.maximum(lengths, 1.0)), 0.0)
    if scale == "batch-sequences":
        return np.full(n, 1.0 / num_seqs)
    return np.full(n, 1.0 / (num_seqs * (m.shape[-1] if constant is None else constant)))


def advantage_scope_labels(scale: str, scope: str) -> dict[str, tuple[str, str]]:
    """The words of the per-piece class a scaling over ``scope`` (not the optimizer step) shows.

    A token-sum loss (times W) of advantages divided by the micro-batch's (the rank's) count
    weights each token by the piece's count: the hypothesis ``micro-sum`` (``rank-count``).

    >>> advantage_scope_labels("batch-tokens", "micro-batch")["micro-sum"][0]
    'advantages scaled per micro-batch, not per optimizer step'
    """
    if scale == "none" or scope == "step":
        return {}
    name = {"micro-batch": "micro-sum", "rank": "rank-count"}[scope]
    return {
        name: (
            f"advantages scaled per {scope}, not per optimizer step",
            f"--advantage-scale {scale} divides each advantage by the {scope}'s count "
            f"(--advantage-scale-on {scope}), so the token sum weights each {scope} by its own count; "
            "divide by the optimizer step's count (all ranks, all micro-batches)",
        )
    }


#: Wrong (scaling, declared aggregation) pairs with a name of their own.
_SCALE_CLASSES: dict[tuple[str, str], str] = {
    ("sequence-tokens", "token-mean"): "scale_by_own_tokens",
    ("batch-tokens", "seq-mean-token-mean"): "scale_by_batch_tokens",
}


def name_advantage_scale(
    grad: npt.ArrayLike,
    probe: Probe,
    *,
    scale: str,
    aggregation: str,
    constant: float | None = None,
) -> str | None:
    """Why the full-batch gradient (one process, one micro-batch, reading ``none``) of a loss given
    ``probe``'s advantages pre-scaled by ``scale`` is not the declared ``aggregation``'s, or None.

    Tried in turn, each a prediction of the whole gradient vector that must equal the measured
    one: the loss is a token sum, so the scaling reproduces another mode (``scale_by_own_tokens``:
    ``sequence-tokens`` under a declared ``token-mean``); the loss normalises the scaled
    advantages again with a mode's own normaliser (sum normalised twice).
    """
    if scale == "none" or aggregation not in AGGREGATION_MODES:
        return None
    m = np.asarray(probe.mask, dtype=np.float64)
    tok, seq = float(m.sum()), float((m.sum(-1) > 0).sum())
    c = constant
    s = advantage_scales(m, scale, num_tokens=tok, num_seqs=seq, constant=c)
    adv = np.asarray(probe.advantages, dtype=np.float64)
    g = np.asarray(grad, dtype=np.float64)
    reproduced = ADVANTAGE_SCALE_MODES[scale]
    for mode in ("token-sum", *(x for x in AGGREGATION_MODES if x != "token-sum")):
        w = aggregation_weights(
            torch.as_tensor(m), mode, constant=c if mode == "seq-mean-token-sum-norm" else None
        ).numpy()
        if not _close(g, -np.einsum("nt,n,ntd->d", s[:, None] * w, adv, probe.scores)):
            continue
        if mode == "token-sum":
            if reproduced == aggregation:
                return None
            name = _SCALE_CLASSES.get((scale, aggregation), "advantages scaled for another aggregation")
            return (
                f"{name}: --advantage-scale {scale} folds {reproduced} into the advantages, but the declared "
                f"aggregation is {aggregation} (confirmed: the token sum of the scaled advantages equals the "
                f"{reproduced} prediction); scale by --advantage-scale "
                + next(k for k, v in ADVANTAGE_SCALE_MODES.items() if v == aggregation)
            )
        return (
            f"sum normalised twice: the loss applies {mode}'s normaliser to advantages --advantage-scale "
            f"{scale} already divided (confirmed: the full-batch gradient equals that of the {mode} weights "
            f"applied to advantages scaled for {reproduced}); with pre-scaled advantages the loss must be a "
            "plain token sum (times world_size)"
        )
    return None


#: Keywords an advantage scaler (``--advantage-scaler``) may declare: the shape of the split.
SCALER_GLOBALS: tuple[str, ...] = ("world_size", "micro_batches", "horizon", "prompt_index")


def call_advantage_scaler(
    scaler: Callable[..., object],
    mask: npt.ArrayLike,
    *,
    world_size: int = 1,
    micro_batches: int = 1,
    prompt_index: npt.ArrayLike | None = None,
) -> npt.NDArray[np.float64]:
    """The factor ``s_i`` a trainer's own pre-scaling function gives each response (``[n]``).

    ``scaler(mask, **globals)`` gets the float64 mask ``[n, T]`` of the batch it scales over, its
    responses in the order the trainer holds them (rank by rank, micro-batch by micro-batch), and
    the :data:`SCALER_GLOBALS` its signature names (``horizon``: T; ``prompt_index``: each row's
    prompt, an int64 Tensor ``[n]``, by default each row its own). It returns one factor per
    response (``[n]``) or per token (``[n, T]``; a response's unmasked tokens must share one factor,
    as every aggregation's weights do, and it is read there). The loss then gets ``s_i A_i``.

    >>> call_advantage_scaler(lambda m: 1 / m.sum() * torch.ones_like(m), [[1, 1], [1, 0]]).tolist()
    [0.3333333333333333, 0.3333333333333333]
    """
    import inspect

    m = torch.as_tensor(np.asarray(mask, dtype=np.float64))
    index = torch.arange(m.shape[0]) if prompt_index is None else torch.as_tensor(np.asarray(prompt_index))
    values = {
        "world_size": world_size,
        "micro_batches": micro_batches,
        "horizon": int(m.shape[-1]),
        "prompt_index": index.to(torch.int64),
    }
    try:
        params = inspect.signature(scaler).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    any_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    out = scaler(m, **{k: v for k, v in values.items() if any_kw or k in params})
    if not isinstance(out, torch.Tensor | np.ndarray):
        raise TypeError(
            f"the advantage scaler returned {type(out).__name__}; it should return a Tensor or an array of "
            f"shape [n] or [n, T] ({tuple(m.shape)} here): each response's factor"
        )
    s = torch.as_tensor(out).detach().to(torch.float64).cpu()
    if s.shape == m.shape:
        valid = m > 0
        per_row = torch.where(valid, s, torch.nan).nanmean(-1).nan_to_num(0.0)
        spread = torch.where(valid, (s - per_row[:, None]).abs(), 0.0).amax(-1)
        if bool((spread > 1e-12 * per_row.abs().clamp(min=1e-300)).any()):
            row = int(torch.argmax(spread))
            raise ValueError(
                f"the advantage scaler gave response {row} different factors along its unmasked tokens; "
                "level 5 hands the loss one advantage per response: return one factor per response"
            )
        s = per_row
    if s.shape != (m.shape[0],):
        raise ValueError(
            f"the advantage scaler returned shape {tuple(s.shape)}; it should return [n] or [n, T] "
            f"({m.shape[0]} or {tuple(m.shape)} here)"
        )
    if not bool(torch.isfinite(s).all()):
        raise ValueError("the advantage scaler returned a non-finite factor; every factor must be finite")
    result: npt.NDArray[np.float64] = s.numpy()
    return result
