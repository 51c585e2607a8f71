"""Aggregation weights ``w_it`` of a GRPO-family loss and what splits make of them.

The private half of :mod:`sigma_ref.objectives` (which re-exports every public name here):
:func:`aggregation_weights` (the five modes), ``prompt-mean`` (:func:`prompt_mean_weights`),
:func:`detect_aggregation` (the mode back from measured weights) and :func:`effective_weights` /
:func:`prompt_mean_effective_weights` (what micro-batches and data-parallel ranks make of them).
Derivations: ``proofs/08_aggregation.py``, ``proofs/12_scale_out.py``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch

from .conventions import resolve_aggregation

_TOL = 1e-6


def _mask(mask: Any, name: str = "mask") -> torch.Tensor:
    m = torch.as_tensor(mask).detach().cpu()
    if m.ndim != 2:
        raise ValueError(
            f"{name} has shape {tuple(m.shape)}; pass a [N, T] response mask (1 = token, 0 = pad)"
        )
    m = m.to(torch.float64)
    if not bool(((m == 0) | (m == 1)).all()):
        bad = m[(m != 0) & (m != 1)][0].item()
        raise ValueError(f"{name} contains {bad!r}; a response mask holds only 0 and 1 (or booleans)")
    return m


def _tokens(x: Any, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    t = torch.as_tensor(x).detach().cpu().to(torch.float64)
    if tuple(t.shape) != shape:
        raise ValueError(
            f"{name} has shape {tuple(t.shape)} but mask has shape {shape}; pass {name} as [N, T]"
        )
    return t


def _weights_from_counts(
    m: torch.Tensor, mode: str, n_tok: torch.Tensor, n_seq: torch.Tensor, constant: float
) -> torch.Tensor:
    """``w_it`` with the batch counts given per token (broadcastable to ``m``)."""
    if mode == "token-mean":
        return m / n_tok
    if mode == "seq-mean-token-mean":
        return m / (n_seq * m.sum(-1, keepdim=True).clamp(min=1))
    if mode == "seq-mean-token-sum":
        return m / n_seq
    if mode == "seq-mean-token-sum-norm":
        return m / (n_seq * constant)
    return m.clone()


def _constant(mode: str, constant: float | None, horizon: int) -> float:
    if constant is None:
        return float(horizon)
    if mode != "seq-mean-token-sum-norm":
        raise ValueError(
            f"constant={constant!r} is only used by 'seq-mean-token-sum-norm', not {mode!r}; drop constant="
        )
    if not (isinstance(constant, int | float) and math.isfinite(constant) and constant > 0):
        raise ValueError(f"constant={constant!r} must be a positive number (e.g. max_completion_length)")
    return float(constant)


def aggregation_weights(
    mask: Any,
    mode: str,
    *,
    constant: float | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> torch.Tensor:
    """Per-token loss weights ``w [N, T]`` of an aggregation mode, with ``L = sum_it w_it ell_it``
    (float64, on ``mask``'s device).

    With ``N_tok = sum mask``, ``N_seq`` = rows with at least one token (verl drops empty rows
    from the count), ``|y_i| = sum_t mask_it`` and ``C = constant`` (default: the padded
    length ``T``), on unmasked tokens:

    * ``token-mean``: ``w_it = 1 / N_tok``;
    * ``seq-mean-token-mean``: ``w_it = 1 / (N_seq |y_i|)``;
    * ``seq-mean-token-sum``: ``w_it = 1 / N_seq``;
    * ``seq-mean-token-sum-norm``: ``w_it = 1 / (N_seq C)`` (verl 0.9.1 and TRL 1.16.0's
      ``dr_grpo``; verl 0.4.1 to 0.6.0 divided by ``C`` alone);
    * ``token-sum``: ``w_it = 1``;

    and 0 on masked tokens. ``mode`` also takes TRL's ``loss_type`` names
    (:func:`resolve_aggregation`). The identity's per-response score is
    ``s_i = G * sum_t w_it grad log pi(y_it)``.

    ``num_tokens``, ``num_seqs``: the counts ``N_tok``, ``N_seq`` of the *whole* batch when
    ``mask`` is one piece of it (a rank's micro-batch): the pieces' weights are then the
    full batch's rows (docs/spec.md §7, level 5). Default: counted on ``mask``.

    >>> mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    >>> aggregation_weights(mask, "seq-mean-token-mean")
    tensor([[0.2500, 0.2500, 0.0000, 0.0000],
            [0.1250, 0.1250, 0.1250, 0.1250]], dtype=torch.float64)
    >>> aggregation_weights(mask, "dr_grpo", constant=8)[0, 0].item()
    0.0625
    """
    mode = resolve_aggregation(mode)
    m = _mask(mask)
    c = _constant(mode, constant, m.shape[1])
    n_tok = m.sum() if num_tokens is None else _count(num_tokens, "num_tokens", "unmasked tokens")
    if mode == "token-mean" and n_tok == 0:
        raise ValueError("mask has no unmasked token; token-mean of an empty batch is undefined")
    n_seq = (
        (m.sum(-1) > 0).sum().to(torch.float64)
        if num_seqs is None
        else _count(num_seqs, "num_seqs", "non-empty responses")
    )
    if mode.startswith("seq-mean") and n_seq == 0:
        raise ValueError(f"mask has no non-empty row; {mode} of an empty batch is undefined")
    weights = _weights_from_counts(m, mode, n_tok, n_seq, c)
    return weights.to(mask.device) if isinstance(mask, torch.Tensor) else weights


def _count(value: float, name: str, what: str) -> torch.Tensor:
    """A whole batch's count, validated: a positive finite number."""
    if isinstance(value, bool) or not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={value!r} must be a positive number: the {what} of the whole batch")
    return torch.tensor(float(value), dtype=torch.float64)


#: The aggregation beside the five modes that needs the prompt (group) of every row.
PROMPT_MEAN = "prompt-mean"


def resolve_declared_aggregation(name: str) -> str:
    """A declared aggregation: :data:`PROMPT_MEAN` (``prompt-mean`` or SkyRL's ``prompt_mean``) or a
    mode :func:`resolve_aggregation` names; an unknown name raises ValueError listing both.

    >>> resolve_declared_aggregation("prompt_mean"), resolve_declared_aggregation("dapo")
    ('prompt-mean', 'token-mean')
    """
    if isinstance(name, str) and name.replace("_", "-") == PROMPT_MEAN:
        return PROMPT_MEAN
    try:
        return resolve_aggregation(name)
    except ValueError as exc:
        raise ValueError(
            f"{exc}; or {PROMPT_MEAN!r} (a token mean per prompt, then a mean over prompts)"
        ) from None


def prompt_mean_weights(mask: Any, index: Any) -> torch.Tensor:
    """Per-token weights of the ``prompt-mean`` aggregation: a token mean per prompt group, then a mean
    over the prompts, ``w_it = mask_it / (P * N_tok(g(i)))``.

    ``index [N]``: each row's prompt (group id, any integers); ``N_tok(g)`` the unmasked tokens of
    group ``g``; ``P`` the groups with at least one token. Every non-empty group's weights sum to
    ``1/P`` and all weights to 1; it equals ``token-mean`` iff every group holds as many tokens,
    and ``seq-mean-token-mean`` when each group is one response (``proofs/08_aggregation.py``).

    >>> mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    >>> prompt_mean_weights(mask, [0, 0, 1])
    tensor([[0.1667, 0.1667, 0.0000],
            [0.1667, 0.0000, 0.0000],
            [0.1667, 0.1667, 0.1667]], dtype=torch.float64)
    """
    m = _mask(mask)
    ids = torch.as_tensor(index).detach().cpu()
    if tuple(ids.shape) != (m.shape[0],) or ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(
            f"index has shape {tuple(ids.shape)} and dtype {ids.dtype}; pass one integer group id per row "
            f"of mask ({m.shape[0]} rows)"
        )
    _, inverse = torch.unique(ids.to(torch.int64), return_inverse=True)
    n_groups = int(inverse.max()) + 1 if m.shape[0] else 0
    tokens = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, m.sum(-1))
    prompts = (tokens > 0).sum()
    if prompts == 0:
        raise ValueError("mask has no unmasked token; prompt-mean of an empty batch is undefined")
    return m / (prompts * tokens[inverse].clamp(min=1.0))[:, None]


def detect_aggregation(
    weights: Any, mask: Any, *, rtol: float = _TOL, index: Any = None
) -> tuple[str, float | None] | None:
    """Recognise the aggregation mode from measured per-token weights: ``(mode, constant)`` or None.

    ``weights [N, T]`` are measured ``w_it`` (e.g. ``-dL/dlogp_it / A_i`` at ratio 1). They must
    vanish on masked tokens (within ``rtol * max|w|``) and match one mode's
    :func:`aggregation_weights` to relative tolerance ``rtol``. Ties (e.g. every response of
    the same length, where token-mean, seq-mean-token-mean and a constant ``C = |y|`` agree)
    resolve to the simplest mode, in the order ``token-mean``, ``seq-mean-token-mean``,
    ``seq-mean-token-sum``, ``token-sum``, then ``seq-mean-token-sum-norm`` with
    ``C = 1 / (N_seq w)`` (rounded to an integer when within ``rtol``), which any other
    weight constant over the batch's tokens matches. ``constant`` is None except for that mode.
    With ``index`` (each row's prompt), ``prompt-mean`` (:func:`prompt_mean_weights`) is tried
    after the four count modes.

    >>> mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    >>> detect_aggregation(torch.tensor([[1 / 32, 1 / 32, 0], [1 / 32, 1 / 32, 1 / 32]]), mask)
    ('seq-mean-token-sum-norm', 16)
    >>> detect_aggregation(aggregation_weights(mask, "grpo"), mask)
    ('seq-mean-token-mean', None)
    """
    m = _mask(mask)
    w = _tokens(weights, "weights", tuple(m.shape))
    if not bool(torch.isfinite(w).all()):
        raise ValueError("weights contains a NaN or infinity; measure the weights of a finite loss")
    on = m.bool()
    if not bool(on.any()):
        raise ValueError("mask has no unmasked token; there is nothing to detect")
    scale = float(w.abs().max())
    if scale == 0:
        return None
    if bool((~on).any()) and float(w[~on].abs().max()) > rtol * scale:
        return None

    def close(expected: torch.Tensor) -> bool:
        return bool(torch.allclose(w[on], expected[on], rtol=rtol, atol=rtol * scale * 1e-3))

    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"):
        if close(aggregation_weights(m, mode)):
            return mode, None
    if index is not None and close(prompt_mean_weights(m, index)):
        return PROMPT_MEAN, None
    value = w[on]
    if float(value.min()) <= 0 or not bool(
        torch.allclose(value, value[0].expand_as(value), rtol=rtol, atol=0)
    ):
        return None
    n_seq = float((m.sum(-1) > 0).sum())
    c = 1.0 / (n_seq * float(value.mean()))
    if abs(c - round(c)) <= rtol * c:
        return "seq-mean-token-sum-norm", round(c)
    return "seq-mean-token-sum-norm", c


Normaliser = Literal["global", "rank", "micro-batch"]


def effective_weights(
    mask: Any,
    mode: str,
    *,
    rank: Any = None,
    micro_batch: Any = None,
    world_size: int | None = None,
    normaliser: Normaliser = "global",
    loss_scale: float = 1.0,
    constant: float | None = None,
) -> torch.Tensor:
    """Per-token weights of the gradient a split batch accumulates: ``[N, T]``.

    Row ``i`` goes to data-parallel rank ``rank[i]`` (in ``0..W-1``) and its micro-batch
    ``micro_batch[i]``. Each piece ``(r, m)`` computes its loss with the mode's weights, the
    counts (``N_tok``, ``N_seq``) taken over the ``normaliser`` scope: the whole ``global``
    batch, the rank's shard, or the ``micro-batch``; multiplies it by ``loss_scale`` (``1/M``
    for a trainer that divides by the accumulation steps, ``W`` for verl's ``dp_size``) and
    back-propagates; gradients add over micro-batches and DDP averages them over ranks. So

    ``w_eff_it = (loss_scale / W) * w_mode(counts of the scope of i)_it``,

    and the ratio to the full-batch weight is ``(loss_scale / W) * count_global / count_scope``
    (1 for ``token-sum`` and its constant-normalised cousins: no count). Exact with the global
    scope iff ``loss_scale = W``; with the rank scope iff ``loss_scale = 1`` and every rank
    holds the same count; with the micro-batch scope iff ``loss_scale = 1/M`` and every piece
    holds the same count (``proofs/12_scale_out.py``). ``C`` (``constant``) defaults to the
    padded length ``T`` of the whole mask.

    >>> mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    >>> effective_weights(mask, "token-mean", micro_batch=[0, 1], normaliser="micro-batch", loss_scale=0.5)
    tensor([[0.5000, 0.0000, 0.0000],
            [0.1667, 0.1667, 0.1667]], dtype=torch.float64)
    """
    mode = resolve_aggregation(mode)
    m = _mask(mask)
    n = m.shape[0]
    c = _constant(mode, constant, m.shape[1])

    r, mb, world_size = _split_of_rows(n, rank, micro_batch, world_size, loss_scale)
    if normaliser not in ("global", "rank", "micro-batch"):
        raise ValueError(f"normaliser={normaliser!r} must be 'global', 'rank' or 'micro-batch'")
    key = _scope_key(r, mb, normaliser)
    _, inverse = torch.unique(key, return_inverse=True)
    groups = int(inverse.max()) + 1 if n else 0
    tok = torch.zeros(groups, dtype=torch.float64).index_add_(0, inverse, m.sum(-1))
    seq = torch.zeros(groups, dtype=torch.float64).index_add_(0, inverse, (m.sum(-1) > 0).to(torch.float64))
    n_tok = tok[inverse][:, None]
    n_seq = seq[inverse][:, None]
    w = _weights_from_counts(m, mode, n_tok.clamp(min=1), n_seq.clamp(min=1), c)
    return (loss_scale / world_size) * w


def _split_of_rows(
    n: int, rank: Any, micro_batch: Any, world_size: int | None, loss_scale: float
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Each row's rank and micro-batch (validated, zeros when None) and the world size."""

    def assignment(x: Any, name: str) -> torch.Tensor:
        if x is None:
            return torch.zeros(n, dtype=torch.int64)
        a = torch.as_tensor(x).detach().cpu()
        if tuple(a.shape) != (n,) or a.is_floating_point() or a.dtype == torch.bool or bool((a < 0).any()):
            raise ValueError(
                f"{name} must be {n} non-negative integers (one per row of mask), got shape "
                f"{tuple(a.shape)} dtype {a.dtype}"
            )
        return a.to(torch.int64)

    r = assignment(rank, "rank")
    mb = assignment(micro_batch, "micro_batch")
    w_ranks = int(r.max()) + 1 if n else 1
    if world_size is None:
        world_size = w_ranks
    if not isinstance(world_size, int) or world_size < w_ranks:
        raise ValueError(f"world_size={world_size!r} must be an integer >= the largest rank + 1 = {w_ranks}")
    if not (isinstance(loss_scale, int | float) and math.isfinite(loss_scale)):
        raise ValueError(f"loss_scale={loss_scale!r} must be a finite number (1, 1/M, W, ...)")
    return r, mb, world_size


def _scope_key(r: torch.Tensor, mb: torch.Tensor, scope: str) -> torch.Tensor:
    """One id per piece of the ``scope`` (``global``, ``rank``, ``micro-batch``) each row belongs to."""
    if scope == "global":
        return torch.zeros_like(r)
    if scope == "rank":
        return r
    if scope == "micro-batch":
        return r * (int(mb.max()) + 1 if mb.numel() else 1) + mb
    raise ValueError(f"scope {scope!r} must be 'global', 'rank' or 'micro-batch'")


def prompt_mean_effective_weights(
    mask: Any,
    index: Any,
    *,
    rank: Any = None,
    micro_batch: Any = None,
    world_size: int | None = None,
    prompts: Normaliser = "global",
    tokens: Normaliser = "global",
    loss_scale: float = 1.0,
) -> torch.Tensor:
    """Per-token weights of the gradient a split batch accumulates under ``prompt-mean``: ``[N, T]``.

    As :func:`effective_weights`, for :func:`prompt_mean_weights`: piece ``(r, m)`` weights a token
    of response ``i`` (prompt ``g = index[i]``) by ``1 / (P * N_tok(g))``, with the prompt count ``P``
    (the prompts holding an unmasked token) taken over the ``prompts`` scope of ``i`` and the
    prompt's token count ``N_tok(g)`` over the ``tokens`` scope of ``i`` (``global``: the whole
    step; ``rank``: the rank's shard; ``micro-batch``: the piece itself). Scaled by ``loss_scale``,
    added over micro-batches and averaged over ranks:

    ``w_eff_it = (loss_scale / W) * mask_it / (P(prompts scope of i) * N_tok(g(i), tokens scope of i))``.

    ``prompts = tokens = "global"`` with ``loss_scale = W`` is :func:`prompt_mean_weights` for every
    split (the correct loss); ``tokens = "micro-batch"`` with global prompts is a prompt whose tokens
    are counted only within the micro-batch: exact iff no prompt's group straddles micro-batches
    (``proofs/12_scale_out.py``, "prompt-mean at scale").

    >>> mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    >>> prompt_mean_effective_weights(mask, [0, 0, 1], micro_batch=[0, 1, 1], tokens="micro-batch")
    tensor([[0.2500, 0.2500],
            [0.5000, 0.0000],
            [0.2500, 0.2500]], dtype=torch.float64)
    """
    m = _mask(mask)
    n = m.shape[0]
    ids = torch.as_tensor(index).detach().cpu()
    if tuple(ids.shape) != (n,) or ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(
            f"index has shape {tuple(ids.shape)} and dtype {ids.dtype}; pass one integer group id per row "
            f"of mask ({n} rows)"
        )
    r, mb, world_size = _split_of_rows(n, rank, micro_batch, world_size, loss_scale)
    _, group = torch.unique(ids.to(torch.int64), return_inverse=True)
    n_groups = int(group.max()) + 1 if n else 1
    row_tokens = m.sum(-1)

    def counts(scope: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's prompt's tokens within its ``scope`` piece, and the prompts holding a token there."""
        _, piece = torch.unique(_scope_key(r, mb, scope), return_inverse=True)
        pairs, inverse = torch.unique(piece * n_groups + group, return_inverse=True)
        pair_tokens = torch.zeros(pairs.shape[0], dtype=torch.float64).index_add_(0, inverse, row_tokens)
        prompts_in = torch.zeros(int(piece.max()) + 1 if n else 0, dtype=torch.float64)
        prompts_in.index_add_(0, pairs // n_groups, (pair_tokens > 0).to(torch.float64))
        return pair_tokens[inverse], prompts_in[piece]

    n_tok, _ = counts(tokens)
    _, n_prompts = counts(prompts)
    denom = (n_prompts * n_tok).clamp(min=1.0)
    return (loss_scale / world_size) * m / denom[:, None]
