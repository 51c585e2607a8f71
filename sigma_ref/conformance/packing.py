"""Level 5's sequence packing: several responses per row, their boundaries, and the row-as-sequence class.

Trainers that remove padding (verl's ``use_remove_padding``, TRL's ``padding_free``, flash-attn's
varlen kernels) concatenate the responses of a micro-batch into rows and mark where each one
starts: ``position_ids`` restart at 0 for each response, or ``cu_seqlens`` lists the cumulative
lengths. With ``--packing position_ids`` or ``--packing cu_seqlens`` the scale-out check
(:mod:`~.scaleout`) calls the loss on such rows:

* each rank's micro-batch packs its responses, in order, greedily into rows of ``capacity``
  tokens (:func:`pack`; a response that does not fit opens a new row), each response with its
  whole length ``L_i`` (its masked tokens too: a truncated response keeps its tokens under a
  zero mask); a row's unused tail is padding under a zero mask and belongs to its last response
  (its ``position_ids`` keep counting), so the boundaries cut exactly ``n`` segments, one per
  response;
* ``logp``, ``old_logp``, ``mask`` (and ``ref_logp``/``rollout_logp``) are ``[R, capacity]``;
  ``advantages`` stays one per response, ``[n]``, in packing order (row by row, left to right);
* ``position_ids`` is ``[R, capacity]`` (int64), ``cu_seqlens`` is ``[n + 1]`` (int32), the
  segment boundaries over the rows flattened row-major (``cu_seqlens[-1] = R * capacity``).

The loss must give the gradient of the unpacked batch under the declared aggregation. The bug
this exposes: a sequence-mean loss that takes each *row* as a sequence (a token mean per packed
row, ``packed_row_seq_mean``; or rows counted in the sequence normaliser, ``packed_row_count``).
Its per-token weight is ``1 / (N L_row)`` instead of ``1 / (N L_i)`` (``L_row``: the unmasked
tokens of the row, the sum of its responses' ``L_i``), and ``1 / N_rows`` instead of
``1 / N_seq`` (``proofs/12_scale_out.py``, "Sequence packing"). :func:`identify_packed` names a
class only when its predicted gradient equals the measured one at every configuration the check
ran, each packed its own way.

At levels 0 to 4 a loss that takes ``position_ids=``/``cu_seqlens=`` gets the unpacked layout's
boundaries, one response per row (:func:`unpacked_inputs`).

>>> p = pack([3, 2, 4], capacity=6)
>>> p.rows, p.position_ids.tolist(), p.cu_seqlens.tolist()
([[0, 1], [2]], [[0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 4, 5]], [0, 3, 6, 12])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from .._options import PACKINGS
from .normalisers.hypotheses import Assign, Probe

__all__ = [
    "PACKINGS",
    "PACKING_INPUTS",
    "Packing",
    "pack",
    "pack_tensor",
    "packing_inputs",
    "unpacked_inputs",
    "row_ids",
    "row_weights",
    "PackedHypothesis",
    "PACKED_HYPOTHESES",
    "identify_packed",
    "check_packing",
    "packed_cause",
]

#: The keywords a packed loss takes its boundaries by (``--packing`` names the one the trainer uses).
PACKING_INPUTS: tuple[str, ...] = ("position_ids", "cu_seqlens")

#: Relative tolerance of a match (float64: only summation order separates an exact prediction).
_RTOL = 1e-8


def _rows(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    rows: list[list[int]] = []
    used = capacity
    for i, length in enumerate(lengths):
        if length > capacity:
            raise ValueError(
                f"a response of length {length} does not fit a row of capacity={capacity}; use a capacity "
                "of at least the longest response"
            )
        if used + length > capacity:
            rows.append([])
            used = 0
        rows[-1].append(i)
        used += length
    return rows


@dataclasses.dataclass(frozen=True)
class Packing:
    """Responses ``0 .. n - 1`` of lengths ``lengths`` packed into rows of ``capacity`` tokens.

    ``rows``: the responses of each row, in order; ``source``: ``[R, capacity]``, the flat
    position ``i * horizon + t`` of the token a slot holds (``-1``: padding); ``position_ids``:
    ``[R, capacity]``, ``t`` of the token (padding continues its row's last response);
    ``cu_seqlens``: ``[n + 1]``, where each response's segment starts in the flattened rows.
    """

    lengths: tuple[int, ...]
    capacity: int
    horizon: int
    rows: list[list[int]]
    source: npt.NDArray[np.int64]
    position_ids: npt.NDArray[np.int64]
    cu_seqlens: npt.NDArray[np.int64]

    @property
    def order(self) -> list[int]:
        """The responses in packing order (row by row): the order of the advantages a loss gets."""
        return [i for row in self.rows for i in row]


def pack(lengths: Sequence[int] | npt.ArrayLike, capacity: int, horizon: int | None = None) -> Packing:
    """Pack responses of ``lengths`` (in order, greedily) into rows of ``capacity`` tokens.

    ``horizon``: the padded width ``T`` of the unpacked ``[n, T]`` batch (default: the longest
    length), which ``source`` indexes flattened.

    >>> pack([2, 2], capacity=5).source.tolist()
    [[0, 1, 2, 3, -1]]
    """
    lens = [int(v) for v in np.asarray(lengths).reshape(-1)]
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"capacity={capacity!r} must be a positive int (tokens per packed row)")
    if any(v < 1 for v in lens):
        raise ValueError(f"lengths={lens!r} must be >= 1: every response holds a token to pack")
    T = max(lens, default=1) if horizon is None else horizon
    if any(v > T for v in lens):
        raise ValueError(f"horizon={T} is shorter than the longest response ({max(lens)})")
    rows = _rows(lens, capacity)
    source = np.full((len(rows), capacity), -1, dtype=np.int64)
    position_ids = np.zeros((len(rows), capacity), dtype=np.int64)
    starts = []
    for r, row in enumerate(rows):
        at = 0
        for i in row:
            starts.append(r * capacity + at)
            source[r, at : at + lens[i]] = i * T + np.arange(lens[i])
            position_ids[r, at : at + lens[i]] = np.arange(lens[i])
            at += lens[i]
        if row:  # the tail is padding of the row's last response
            position_ids[r, at:] = lens[row[-1]] + np.arange(capacity - at)
    cu = np.asarray([*starts, len(rows) * capacity], dtype=np.int64)
    return Packing(tuple(lens), capacity, T, rows, source, position_ids, cu)


def pack_tensor(x: torch.Tensor, packing: Packing, fill: float = 0.0) -> torch.Tensor:
    """``x`` (``[n, T]``, responses in their original order) as packed rows ``[R, capacity]``.

    Differentiable (a gather): the gradient of a packed loss reaches ``x``. Padding slots hold
    ``fill``.

    >>> p = pack([1, 2], capacity=4, horizon=2)
    >>> pack_tensor(torch.tensor([[1.0, 9.0], [2.0, 3.0]]), p).tolist()
    [[1.0, 2.0, 3.0, 0.0]]
    """
    if x.dim() != 2 or x.shape[1] != packing.horizon or x.shape[0] != len(packing.lengths):
        raise ValueError(
            f"x has shape {tuple(x.shape)}; the packing holds {len(packing.lengths)} responses of width "
            f"{packing.horizon}"
        )
    flat = torch.cat([x.reshape(-1), torch.full((1,), fill, dtype=x.dtype, device=x.device)])
    index = torch.as_tensor(np.where(packing.source < 0, flat.numel() - 1, packing.source), device=x.device)
    return flat[index]


def packing_inputs(names: Sequence[str], packing: Packing, device: Any = None) -> dict[str, torch.Tensor]:
    """The boundaries the loss takes (``names`` among :data:`PACKING_INPUTS`), as tensors.

    >>> packing_inputs(["cu_seqlens"], pack([1, 2], capacity=4))["cu_seqlens"].tolist()
    [0, 1, 4]
    """
    out = {
        "position_ids": torch.as_tensor(packing.position_ids, device=device),
        "cu_seqlens": torch.as_tensor(packing.cu_seqlens, dtype=torch.int32, device=device),
    }
    return {k: out[k] for k in names if k in out}


def unpacked_inputs(names: Sequence[str], mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The boundaries of the unpacked layout (one response per row, its padding its own), for a
    loss that takes ``position_ids=``/``cu_seqlens=`` called at levels 0 to 4.

    >>> {k: v.tolist() for k, v in unpacked_inputs(PACKING_INPUTS, torch.ones(2, 3)).items()}
    {'position_ids': [[0, 1, 2], [0, 1, 2]], 'cu_seqlens': [0, 3, 6]}
    """
    n, T = mask.shape
    out = {
        "position_ids": torch.arange(T, device=mask.device).expand(n, T).clone(),
        "cu_seqlens": torch.arange(0, (n + 1) * T, T, dtype=torch.int32, device=mask.device),
    }
    return {k: out[k] for k in names if k in out}


# ---------------------------------------------------------------------------
# the row-as-sequence hypotheses


def row_ids(
    lengths: npt.ArrayLike,
    rank: npt.ArrayLike,
    micro_batch: npt.ArrayLike,
    capacity: int,
) -> npt.NDArray[np.int64]:
    """Each response's packed row, numbered over the whole configuration: every (rank, micro-batch)
    packs its responses (in index order) into rows of its own.

    >>> row_ids([3, 3, 3, 3], [0, 0, 1, 1], [0, 0, 0, 0], capacity=6).tolist()
    [0, 0, 1, 1]
    """
    lens = np.asarray(lengths, dtype=np.int64)
    rk, mb = np.asarray(rank, dtype=np.int64), np.asarray(micro_batch, dtype=np.int64)
    out = np.zeros(len(lens), dtype=np.int64)
    next_row = 0
    for key in sorted(set(zip(rk.tolist(), mb.tolist(), strict=True))):
        members = np.flatnonzero((rk == key[0]) & (mb == key[1]))
        for row in pack(lens[members], capacity, int(lens.max())).rows:
            out[members[row]] = next_row
            next_row += 1
    return out


def row_weights(
    mask: npt.ArrayLike,
    mode: str,
    rows: npt.ArrayLike,
    *,
    num_seqs: float,
    constant: float | None = None,
) -> npt.NDArray[np.float64]:
    """The per-token weight of a ``mode`` loss that takes each packed row as one sequence.

    ``seq-mean-token-mean``: ``m_it / (num_seqs L_row(i))``, ``L_row`` the unmasked tokens of the
    row; ``seq-mean-token-sum``: ``m_it / num_seqs``; ``seq-mean-token-sum-norm``:
    ``m_it / (num_seqs C)``. ``num_seqs`` is what the loss divides by: the responses
    (``global_num_seqs``) or the rows with a token.

    >>> row_weights([[1, 1, 0], [1, 0, 0]], "seq-mean-token-mean", [0, 0], num_seqs=2).tolist()
    [[0.16666666666666666, 0.16666666666666666, 0.0], [0.16666666666666666, 0.0, 0.0]]
    """
    m = np.asarray(mask, dtype=np.float64)
    row = np.asarray(rows, dtype=np.int64)
    if mode == "seq-mean-token-mean":
        per_row = np.bincount(row, weights=m.sum(-1))
        out: npt.NDArray[np.float64] = m / (num_seqs * np.maximum(per_row[row], 1.0))[:, None]
        return out
    if mode == "seq-mean-token-sum":
        return m / num_seqs
    if mode == "seq-mean-token-sum-norm":
        return m / (num_seqs * (m.shape[-1] if constant is None else constant))
    raise ValueError(
        f"mode={mode!r}: packing changes only the sequence-mean modes (seq-mean-token-mean, "
        "seq-mean-token-sum, seq-mean-token-sum-norm); token-mean and token-sum do not see rows"
    )


@dataclasses.dataclass(frozen=True)
class PackedHypothesis:
    """A packed loss that takes rows as sequences: ``name`` (the class), the aggregation ``modes``
    it applies to, what it divides by (``count``: ``responses`` or ``rows``), and the words."""

    name: str
    modes: tuple[str, ...]
    count: str
    why: str


PACKED_HYPOTHESES: tuple[PackedHypothesis, ...] = (
    PackedHypothesis(
        "packed_row_seq_mean",
        ("seq-mean-token-mean",),
        "responses",
        "a token mean per packed row, not per response: each row's responses share one 1/L_row; split "
        "each row at its position_ids restarts (or cu_seqlens) and take each response's own token mean",
    ),
    PackedHypothesis(
        "packed_row_seq_mean",
        ("seq-mean-token-mean",),
        "rows",
        "a token mean per packed row, averaged over the rows: each row taken as one sequence; split "
        "each row at its position_ids restarts (or cu_seqlens) and average over the responses",
    ),
    PackedHypothesis(
        "packed_row_count",
        ("seq-mean-token-sum", "seq-mean-token-sum-norm"),
        "rows",
        "the sequence count is the packed rows, not the responses (N_seq / N_rows); count the segments "
        "the boundaries cut, or take global_num_seqs",
    ),
)


def identify_packed(
    grads: Mapping[tuple[int, int, str], npt.ArrayLike],
    probe: Probe,
    lengths: npt.ArrayLike,
    mode: str,
    *,
    assign: Assign,
    capacity: int,
    constant: float | None = None,
) -> list[PackedHypothesis]:
    """The :data:`PACKED_HYPOTHESES` whose predicted gradient of ``probe`` (reading ``none``: the
    loss times W, DDP's 1/W) equals the measured one at *every* configuration ``grads`` holds, each
    with its own packing (:func:`row_ids` of the responses' ``lengths``)."""
    m = np.asarray(probe.mask, dtype=np.float64)
    adv = np.asarray(probe.advantages, dtype=np.float64)
    seqs = float((m.sum(-1) > 0).sum())
    found = []
    for h in PACKED_HYPOTHESES:
        if mode not in h.modes:
            continue
        ok = bool(grads)
        for (w, mb, split), g in grads.items():
            rank, micro = assign(w, mb, split)
            rows = row_ids(lengths, rank, micro, capacity)
            live_rows = float(len(set(rows[m.sum(-1) > 0].tolist())))
            n = seqs if h.count == "responses" else live_rows
            weights = row_weights(m, mode, rows, num_seqs=n, constant=constant)
            pred = -np.einsum("nt,n,ntd->d", weights, adv, probe.scores)
            got = np.asarray(g, dtype=np.float64)
            if float(np.linalg.norm(got - pred)) > _RTOL * max(float(np.linalg.norm(pred)), 1e-300):
                ok = False
                break
        if ok:
            found.append(h)
    return found


def packed_cause(found: Sequence[PackedHypothesis], runs: Iterable[tuple[int, int, str]]) -> str | None:
    """The words of the first row-as-sequence class in ``found`` (:func:`identify_packed` at the
    configurations ``runs``), led by its name, or None when none was confirmed."""
    if not found:
        return None
    probes = ", ".join(f"({w}, {m})" for w, m, _ in runs)
    return (
        f"{found[0].name}: {found[0].why} (confirmed: the gradient of a loss taking each packed row as a "
        f"sequence equals the measured one at every run (W, M) = {probes}, each packed its own way)"
    )


def check_packing(packing: str, loss_params: Sequence[str] | None) -> None:
    """A usage error unless ``packing`` is one of :data:`PACKINGS` and the loss takes its boundaries
    (``loss_params``: the loss's parameter names; None: no loss was given).

    >>> check_packing("cu_seqlens", ["cu_seqlens", "global_num_seqs"])
    """
    if packing not in PACKINGS:
        raise ValueError(f"packing={packing!r} must be one of {PACKINGS}")
    if packing == "none":
        return
    if loss_params is None:
        raise ValueError(
            f"--packing {packing} packs the rows a loss is called on: give the loss (--loss "
            "PKG.MODULE:ATTR), or drop --packing"
        )
    if packing in loss_params:
        return
    takes = [k for k in PACKING_INPUTS if k in loss_params]
    if takes:
        raise ValueError(
            f"--packing {packing} passes the responses' boundaries as {packing}=, but the loss takes "
            f"{takes[0]}= only: use --packing {takes[0]}, or add {packing}= to the loss's signature"
        )
    raise ValueError(
        f"--packing {packing} calls the loss on packed rows with the responses' boundaries by keyword, but "
        "the loss takes neither position_ids= nor cu_seqlens=; add the one your trainer passes to the "
        "loss's signature (and split each row at it), or drop --packing"
    )
