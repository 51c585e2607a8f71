"""Level 5's normaliser patterns: uneven splits, the accumulation reading, the normaliser a gradient used.

The scale-out check (:mod:`sigma_ref.conformance.scaleout`) splits a designed batch over W
ranks and M micro-batches and compares the accumulated, rank-averaged gradient with the
full-batch one. This module holds what turns a mismatch into a named bug class:

**Uneven splits** (:data:`SIZES`, the knob verl calls ``use_dynamic_bsz`` and TRL fixes with
``per_device_train_batch_size``): with ``sizes="uneven"`` (the default) rank ``r`` holds a
share of the groups proportional to ``r + 1`` and micro-batch ``j`` a share of the rank's rows
proportional to ``j + 1`` (:func:`uneven_sizes`), so ranks and micro-batches hold different
numbers of responses *and* tokens: every per-piece normaliser differs from the global one and
a mean of per-piece means is not the global mean. ``sizes="equal"`` keeps equal response
counts (``np.array_split``), as a trainer with a fixed per-device batch does.

**The accumulation reading** (:data:`READINGS`, issue 26): whether the trainer divides each
micro-batch's loss by M is outside the loss. Back-propagation is linear, so the gradient under
the reading ``mean-over-micro-batches`` is exactly ``1/M`` times the one under ``none``; the
check measures one and judges both (:func:`readings`), reports the reading the loss is right
under, and fails only when it is right under neither. A user's declaration (``--loss-scale``)
never changes a verdict; it is reported beside the reading the loss needs.

**Normaliser hypotheses** (:data:`HYPOTHESES`): the per-token weight of the gradient a split
accumulates is the oracle's :func:`~sigma_ref.objectives.effective_weights`,
``w_eff_it = (tau / W) * w_mode(counts of the scope of i)_it`` (``proofs/12_scale_out.py``),
for a counting *scope* (the whole step, the rank's shard, the micro-batch, the generation
batch) and a total scale ``tau`` (``W`` when the loss multiplies by the world size and nothing
divides, ``W / M`` when M divides on top, ``1`` without the world size, ...). Each hypothesis
predicts the whole gradient vector ``-sum_it w_eff_it A_i grad log pi(y_it)`` at every
configuration the check ran ((W, M) and its probes (1, M), (1, M + 1), (W, 1)); a class is
named only when its prediction equals the measured gradient at every one of them
(:func:`identify`), so a cause is printed only when the probes confirm it. Under ``prompt-mean``
both of its counts (the prompts ``P`` and each prompt's tokens) are taken over the scope
(:func:`~sigma_ref.objectives.prompt_mean_effective_weights`), and one class is its own: a
prompt's tokens counted per micro-batch with the step's ``P``.

**Aggregation folded into the advantages** (:data:`ADVANTAGE_SCALE_MODES`, ``--advantage-scale``):
a trainer may divide each advantage by a count of its mini-batch and then take a plain token sum.
Each scaling reproduces one aggregation mode exactly (:func:`advantage_scales`: ``s_i m_it`` is
the mode's weight); the check hands the loss ``s_i A_i`` with the counts of the batch
``--advantage-scale-on`` names, and judges the token sum against the declared aggregation. A
scaling over a micro-batch or a rank instead of the step is named as the per-piece normaliser it
is (:func:`advantage_scope_labels`); a scaling for another mode (``scale_by_own_tokens``) or a loss
that normalises the scaled advantages again (sum normalised twice) by
:func:`name_advantage_scale`.

>>> uneven_sizes(6, 3)
[1, 2, 3]
>>> [len(p) for p in split_pieces(7, 2, "equal")], [len(p) for p in split_pieces(7, 2, "uneven")]
([4, 3], [2, 5])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import torch

from .._aggregation import PROMPT_MEAN
from .._options import ADVANTAGE_SCALES, LOSS_SCALES, SPLIT_SIZES
from ..conventions import AGGREGATION_MODES
from ..objectives import aggregation_weights, effective_weights, prompt_mean_effective_weights

__all__ = [
    "SIZES",
    "READINGS",
    "Hypothesis",
    "HYPOTHESES",
    "uneven_sizes",
    "split_pieces",
    "readings",
    "token_scores",
    "hypothesis_gradient",
    "identify",
    "ADVANTAGE_SCALE_MODES",
    "advantage_scales",
    "advantage_scope_labels",
    "name_advantage_scale",
    "SCALER_GLOBALS",
    "call_advantage_scaler",
]

#: How a batch is cut into ranks and micro-batches (module doc; ``--split-sizes``).
SIZES: tuple[str, ...] = SPLIT_SIZES
#: The two readings of the trainer's accumulation scaling (``--loss-scale``).
READINGS: tuple[str, ...] = LOSS_SCALES

#: Relative tolerance of a match: float64 throughout, only summation order separates an exact
#: prediction from the measured gradient (the scale-out check's own ``_RTOL``; a loss computed in
#: float32 is matched at the scale-out check's float32 tolerance, passed as ``rtol``).
_RTOL = 1e-8


def uneven_sizes(n: int, parts: int) -> list[int]:
    """Sizes of ``parts`` consecutive pieces of ``n`` items, about proportional to ``1, 2, ..., parts``.

    Every piece holds at least one item; the cumulative sizes are ``round(n * j (j + 1) /
    (parts (parts + 1)))`` pushed apart where rounding would leave a piece empty.

    >>> uneven_sizes(12, 2), uneven_sizes(4, 2), uneven_sizes(6, 4), uneven_sizes(5, 1)
    ([4, 8], [1, 3], [1, 1, 2, 2], [5])
    """
    if not isinstance(parts, int) or parts < 1:
        raise ValueError(f"parts={parts!r} must be a positive int")
    if not isinstance(n, int) or n < parts:
        raise ValueError(f"n={n!r} must be an int >= parts={parts}: every piece needs an item")
    total = parts * (parts + 1) // 2
    ends: list[int] = []
    for j in range(1, parts + 1):
        target = round(Fraction(n * j * (j + 1), 2 * total))
        low = (ends[-1] if ends else 0) + 1
        high = n - (parts - j)
        ends.append(min(max(target, low), high))
    return [e - s for s, e in zip([0, *ends[:-1]], ends, strict=True)]


def split_pieces(n: int, parts: int, sizes: str) -> list[npt.NDArray[np.int64]]:
    """Positions ``0 .. n - 1`` in ``parts`` consecutive pieces, ``equal`` or ``uneven`` (:data:`SIZES`).

    >>> [p.tolist() for p in split_pieces(5, 2, "uneven")]
    [[0, 1], [2, 3, 4]]
    """
    if sizes not in SIZES:
        raise ValueError(f"sizes={sizes!r} must be one of {SIZES}")
    positions = np.arange(n, dtype=np.int64)
    if sizes == "equal" or parts > n:
        return list(np.array_split(positions, parts))
    return list(np.split(positions, np.cumsum(uneven_sizes(n, parts))[:-1]))


def readings(grad: npt.ArrayLike, micro_batches: int, measured_under: str) -> dict[str, np.ndarray]:
    """The gradient under each accumulation reading, from one measured under ``measured_under``.

    Back-propagation is linear: dividing each micro-batch's loss by M divides the accumulated
    gradient by M. So ``g_none = M g_mean`` exactly.

    >>> readings([2.0, 4.0], 2, "none")["mean-over-micro-batches"].tolist()
    [1.0, 2.0]
    """
    if measured_under not in READINGS:
        raise ValueError(f"measured_under={measured_under!r} must be one of {READINGS}")
    g = np.asarray(grad, dtype=np.float64)
    g_none = g * micro_batches if measured_under == "mean-over-micro-batches" else g
    return {"none": g_none, "mean-over-micro-batches": g_none / micro_batches}


# ---------------------------------------------------------------------------
# hypotheses


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    """A normaliser pattern: a loss counting over ``scope``, times ``tau = W^world M^micro``.

    ``label``: the class as a report names it; ``why``: what the code does. The hypothesis is
    about the loss alone, so it is matched against the gradient under the reading ``none``
    (the trainer's 1/M, if any, is the reading's, :func:`readings`).

    ``scope``: ``global`` (the optimizer step's whole batch), ``rank``, ``micro-batch`` or
    ``generation`` (the generation batch of several optimizer steps). Under the reading
    ``none`` the harness adds the micro-batch gradients and DDP averages over ranks, so a loss
    computing ``s * sum_piece w(scope) l`` accumulates ``w_eff = (s / W) w(scope)``: the correct
    loss has ``s = W`` (``world = 1, micro = 0``).

    Under ``prompt-mean`` (a token mean per prompt, then a mean over the P prompts) the scope is
    that of both counts, P and each prompt's tokens, unless ``prompt_scope`` names the scope P is
    counted over (:func:`~sigma_ref.objectives.prompt_mean_effective_weights`). ``modes``: the
    aggregations the hypothesis applies to (empty: every one).

    >>> HYPOTHESES[0].name, HYPOTHESES[0].tau(2, 3)
    ('correct', 2.0)
    """

    name: str
    scope: str
    world: int
    micro: int
    label: str
    why: str
    prompt_scope: str = ""
    modes: tuple[str, ...] = ()

    def applies(self, mode: str, counts: Mapping[str, tuple[float, float]] | None) -> bool:
        """Whether the hypothesis can predict a gradient of ``mode`` (a scope outside the batch needs
        its counts; ``prompt-mean`` has none outside the batch's own mask)."""
        if self.modes and mode not in self.modes:
            return False
        if self.scope in ("global", "rank", "micro-batch"):
            return True
        return mode != PROMPT_MEAN and counts is not None and self.scope in counts

    def tau(self, world_size: int, micro_batches: int) -> float:
        """The loss's scale ``W^world M^micro``."""
        return float(world_size) ** self.world * float(micro_batches) ** self.micro


_EQUAL = "exact only when every micro-batch on every rank holds the same count"
#: The patterns the analysis can name, in order of preference when two predict the same gradient.
#: The first two are right (under the readings ``none`` and ``mean-over-micro-batches``).
HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis("correct", "global", 1, 0, "the global normaliser, times W", ""),
    Hypothesis("correct-mean", "global", 1, 1, "the global normaliser, times W and M", ""),
    Hypothesis(
        "division-twice",
        "global",
        1,
        -1,
        "accumulation division applied twice",
        "the normaliser already spans the step's micro-batches and the loss divides by M as well",
    ),
    Hypothesis(
        "no-world-size",
        "global",
        0,
        0,
        "world size not applied",
        "DDP divides by W; the loss must multiply by world_size (verl's dp_size)",
    ),
    Hypothesis(
        "micro-sum",
        "micro-batch",
        1,
        0,
        "normaliser computed per micro-batch",
        "each micro-batch is normalised by its own count (times W)",
    ),
    Hypothesis(
        "micro-mean",
        "micro-batch",
        0,
        0,
        "normaliser computed per micro-batch and averaged over micro-batches and ranks",
        "each micro-batch is normalised by its own count; with the trainer's 1/M and DDP's 1/W that is a "
        f"mean of per-micro-batch means, {_EQUAL}",
    ),
    Hypothesis(
        "micro-divided",
        "micro-batch",
        1,
        -1,
        "normaliser computed per micro-batch and divided by M in the loss",
        f"a mean of per-micro-batch means on each rank, {_EQUAL}",
    ),
    Hypothesis(
        "micro-divided-no-world-size",
        "micro-batch",
        0,
        -1,
        "normaliser computed per micro-batch and divided by M in the loss, world size not applied",
        f"a mean of per-micro-batch means over micro-batches and ranks, {_EQUAL}",
    ),
    Hypothesis(
        "rank-count",
        "rank",
        1,
        0,
        "{unit} count not gathered across ranks",
        "each rank normalises by its own shard's count; all-reduce it over process_group",
    ),
    Hypothesis(
        "rank-mean",
        "rank",
        0,
        0,
        "normaliser computed per rank and averaged over ranks",
        "a mean of per-rank means, exact only when every rank holds the same count",
    ),
    Hypothesis(
        "generation-count",
        "generation",
        1,
        0,
        "counted over the generation batch, not the optimizer step's batch",
        "with several optimizer steps per generation batch each step must be normalised by its own "
        "batch's count",
    ),
    Hypothesis(
        "count-before-mask",
        "before-mask",
        1,
        0,
        "count taken before the mask changed",
        "the normaliser counts responses or tokens the mask has since removed (truncated or filtered "
        "responses); count the mask the loss is applied with",
    ),
    Hypothesis(
        "generation-count-mean",
        "generation",
        1,
        1,
        "counted over the generation batch, not the optimizer step's batch (times M)",
        "with several optimizer steps per generation batch each step must be normalised by its own "
        "batch's count",
    ),
    Hypothesis(
        "prompt-tokens-micro-batch",
        "micro-batch",
        1,
        0,
        "prompt's tokens counted per micro-batch",
        "each prompt's token count is taken over its rows in the micro-batch, not over the optimizer "
        "step, so a prompt whose group straddles micro-batches is weighted as a whole prompt in each; "
        "count each prompt's tokens over the step (all ranks, all micro-batches: prompt_num_tokens)",
        prompt_scope="global",
        modes=(PROMPT_MEAN,),
    ),
)


def token_scores(
    theta: npt.ArrayLike, feats: npt.ArrayLike, tokens: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """``grad_theta log pi(y_it)`` of the softmax policy ``logits = feats @ theta``: ``[N, T, D]``.

    ``grad log softmax(z)_y = f_y - sum_v p_v f_v`` with ``z_v = f_v . theta``.

    >>> token_scores([0.0], [[[[1.0], [3.0]]]], [[0]]).tolist()
    [[[-1.0]]]
    """
    th = np.asarray(theta, dtype=np.float64)
    f = np.asarray(feats, dtype=np.float64)
    tok = np.asarray(tokens, dtype=np.int64)
    z = f @ th
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    chosen = np.take_along_axis(f, tok[..., None, None], axis=-2)[..., 0, :]
    out: npt.NDArray[np.float64] = chosen - np.einsum("ntv,ntvd->ntd", p, f)
    return out


def hypothesis_gradient(
    hypothesis: Hypothesis,
    scores: npt.NDArray[np.float64],
    advantages: npt.ArrayLike,
    mask: npt.ArrayLike,
    mode: str,
    *,
    rank: npt.ArrayLike,
    micro_batch: npt.ArrayLike,
    world_size: int,
    micro_batches: int,
    constant: float | None = None,
    counts: Mapping[str, tuple[float, float]] | None = None,
    index: npt.ArrayLike | None = None,
) -> npt.NDArray[np.float64]:
    """The gradient the hypothesis predicts under the reading ``none``: ``-sum_it w_eff_it A_i s_it``.

    ``w_eff`` is :func:`~sigma_ref.objectives.effective_weights` for the hypothesis's scope and
    ``tau``; a scope counted outside the batch's final mask (``generation``: the generation
    batch; ``before-mask``: the mask before truncated responses were masked) uses
    :func:`~sigma_ref.objectives.aggregation_weights` with ``counts[scope] = (tokens, responses)``.
    ``prompt-mean`` needs ``index`` (each row's prompt) and uses
    :func:`~sigma_ref.objectives.prompt_mean_effective_weights`.
    """
    m = torch.as_tensor(np.asarray(mask, dtype=np.float64))
    tau = hypothesis.tau(world_size, micro_batches)
    c = constant if mode == "seq-mean-token-sum-norm" else None
    if hypothesis.modes and mode not in hypothesis.modes:
        raise ValueError(f"hypothesis {hypothesis.name!r} applies to {hypothesis.modes}, not mode={mode!r}")
    if mode == PROMPT_MEAN:
        if index is None or hypothesis.scope not in ("global", "rank", "micro-batch"):
            raise ValueError(
                f"hypothesis {hypothesis.name!r} under prompt-mean needs index= (each row's prompt) and a "
                f"scope of the batch, not {hypothesis.scope!r}"
            )
        w = prompt_mean_effective_weights(
            m,
            torch.as_tensor(np.asarray(index, dtype=np.int64)),
            rank=torch.as_tensor(np.asarray(rank, dtype=np.int64)),
            micro_batch=torch.as_tensor(np.asarray(micro_batch, dtype=np.int64)),
            world_size=world_size,
            prompts=hypothesis.prompt_scope or hypothesis.scope,  # type: ignore[arg-type]  # checked above
            tokens=hypothesis.scope,  # type: ignore[arg-type]
            loss_scale=tau,
        )
    elif hypothesis.scope not in ("global", "rank", "micro-batch"):
        if counts is None or hypothesis.scope not in counts:
            raise ValueError(
                f"scope {hypothesis.scope!r} needs counts[{hypothesis.scope!r}] = (tokens, responses)"
            )
        tok, seq = counts[hypothesis.scope]
        w = (tau / world_size) * aggregation_weights(m, mode, num_tokens=tok, num_seqs=seq, constant=c)
    else:
        w = effective_weights(
            m,
            mode,
            rank=torch.as_tensor(np.asarray(rank, dtype=np.int64)),
            micro_batch=torch.as_tensor(np.asarray(micro_batch, dtype=np.int64)),
            world_size=world_size,
            normaliser=hypothesis.scope,  # type: ignore[arg-type]  # global, rank or micro-batch here
            loss_scale=tau,
            constant=c,
        )
    adv = np.asarray(advantages, dtype=np.float64)
    out: npt.NDArray[np.float64] = -np.einsum("nt,n,ntd->d", w.numpy(), adv, scores)
    return out


#: ``assign(w, m, split) -> (rank of each row, micro-batch of each row)`` of one configuration.
Assign = Callable[[int, int, str], tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]


def _close(g: np.ndarray, pred: np.ndarray, rtol: float = _RTOL) -> bool:
    return float(np.linalg.norm(g - pred)) <= rtol * max(float(np.linalg.norm(pred)), 1e-300)


def identify(
    grads: Mapping[tuple[int, int, str], npt.ArrayLike],
    scores: npt.NDArray[np.float64],
    advantages: npt.ArrayLike,
    mask: npt.ArrayLike,
    mode: str,
    *,
    assign: Assign,
    constant: float | None = None,
    counts: Mapping[str, tuple[float, float]] | None = None,
    candidates: Sequence[Hypothesis] = HYPOTHESES,
    rtol: float = _RTOL,
    index: npt.ArrayLike | None = None,
) -> list[Hypothesis]:
    """The hypotheses whose predicted gradient equals the measured one at *every* configuration.

    ``grads``: the measured gradient (reading ``none``) per configuration ``(w, m, split)``;
    ``assign`` gives each configuration's rows' ranks and micro-batches. The list is in the
    order of :data:`HYPOTHESES`; more than one means the probes cannot tell them apart. A scope
    outside the batch (``generation``, ``before-mask``) is tried only when ``counts`` has it
    (:meth:`Hypothesis.applies`); ``prompt-mean`` needs ``index``, each row's prompt.
    """
    found = []
    for h in candidates:
        if not h.applies(mode, counts):
            continue
        ok = True
        for (w, m, split), g in grads.items():
            rank, micro = assign(w, m, split)
            pred = hypothesis_gradient(
                h,
                scores,
                advantages,
                mask,
                mode,
                rank=rank,
                micro_batch=micro,
                world_size=w,
                micro_batches=m,
                constant=constant,
                counts=counts,
                index=index,
            )
            if not _close(np.asarray(g, dtype=np.float64), pred, rtol):
                ok = False
                break
        if ok:
            found.append(h)
    return found


# ---------------------------------------------------------------------------
# what the scale-out analysis says


def _rel(g: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(g - ref)) / max(float(np.linalg.norm(ref)), 1e-300)


_NEEDS = {
    "none": "the trainer adds the micro-batch gradients undivided (the loss normalises over the whole step)",
    "mean-over-micro-batches": "the trainer divides each micro-batch loss by M (the Hugging Face Trainer "
    "without num_items_in_batch, DeepSpeed's 1/gas)",
}


def judge_reading(
    grad: npt.ArrayLike, reference: npt.ArrayLike, micro_batches: int, declared: str, *, rtol: float = _RTOL
) -> tuple[np.ndarray, str, str]:
    """The gradient under the reading the loss is right under, that reading, and the words for a report.

    ``grad`` was measured under the ``declared`` reading. Under the reading that makes it equal
    ``reference`` (the declared one when both do, i.e. ``M = 1``) it is returned with
    ``"; right under loss_scale=..."``; when neither does, under the declared reading with ``""``.

    >>> g, reading, words = judge_reading([4.0, 8.0], [2.0, 4.0], 2, "none")
    >>> reading, g.tolist()
    ('mean-over-micro-batches', [2.0, 4.0])
    """
    reads = readings(grad, micro_batches, declared)
    ref = np.asarray(reference, dtype=np.float64)
    if micro_batches == 1:
        return reads[declared], declared, ""
    right = [r for r in READINGS if _rel(reads[r], ref) <= rtol]
    if not right:
        return reads[declared], declared, ""
    reading = declared if declared in right else right[0]
    words = f"; right under loss_scale={reading!r}: {_NEEDS[reading]}"
    if reading != declared:
        c = float(reads[declared] @ ref) / float(ref @ ref)
        words += (
            f". Declared loss_scale={declared!r}, under which it is {c:.3g}x: if the trainer does that, "
            "its update is off by that factor"
        )
    return reads[reading], reading, words


@dataclasses.dataclass(frozen=True)
class Judge:
    """Names the normaliser class of a failing split gradient (:func:`identify` at every probe).

    ``scores``: :func:`token_scores` of the designed batch; ``advantages``: the code's own
    full-batch advantages; ``mode``: the aggregation its full-batch gradient matches (None: no
    class can be named); ``assign``: each configuration's rows' ranks and micro-batches;
    ``counts``: ``(tokens, responses)`` of the scopes outside the batch's mask.
    """

    scores: npt.NDArray[np.float64]
    advantages: npt.NDArray[np.float64]
    mask: npt.NDArray[np.float64]
    mode: str | None
    assign: Assign
    constant: float | None = None
    counts: Mapping[str, tuple[float, float]] | None = None
    #: hypothesis name -> (label, why) where the pattern has its own words (:func:`advantage_scope_labels`)
    relabel: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    #: relative tolerance of a match (the loss's working precision's: :data:`_RTOL` for float64)
    rtol: float = _RTOL
    #: each row's prompt (group id): the ``prompt-mean`` hypotheses count per prompt
    index: npt.NDArray[np.int64] | None = None

    def _found(
        self,
        runs: Mapping[tuple[int, int, str], Mapping[str, object]],
        keys: Sequence[tuple[int, int, str]],
        declared: str,
        mode: str,
    ) -> tuple[list[Hypothesis], list[tuple[int, int, str]]]:
        grads = {}
        for key in dict.fromkeys(keys):
            run = runs.get(key)
            if run is not None and run.get("grad") is not None:
                grads[key] = readings(np.asarray(run["grad"]), key[1], declared)["none"]
        found = identify(
            grads,
            self.scores,
            self.advantages,
            self.mask,
            mode,
            assign=self.assign,
            constant=self.constant,
            counts=self.counts,
            candidates=HYPOTHESES[2:],
            rtol=self.rtol,
            index=self.index,
        )
        return found, list(grads)

    def _words(self, found: Sequence[Hypothesis], mode: str, where: Sequence[tuple[int, int, str]]) -> str:
        h = found[0]
        if h.name in self.relabel:
            label, why = self.relabel[h.name]
            h = dataclasses.replace(h, label=label, why=why)
        unit = {"token-mean": "token", PROMPT_MEAN: "prompt"}.get(mode, "response")
        probes = ", ".join(f"({w}, {m})" for w, m, _ in where)
        text = (
            f"{h.why}. Confirmed: the gradient this normaliser predicts ({mode}) equals the measured one at "
            f"every probe (W, M) = {probes}"
        )
        if len(found) > 1:
            text += f" (so does {', '.join(o.name for o in found[1:])}: these probes cannot tell them apart)"
        return h.label.format(unit=unit) + ": {measured}; " + text

    def name(
        self,
        runs: Mapping[tuple[int, int, str], Mapping[str, object]],
        W: int,
        M: int,
        split: str,
        declared: str,
        c: float,
        resid: float = 0.0,
    ) -> str | None:
        """``scaleout_gradient[W, M]``'s FAIL message naming the class every probe confirms, or None.

        ``c``: the least-squares factor of the measured gradient against the full batch's under the
        declared reading; ``resid``: the share of the gradient it leaves (``~c`` when above 1e-6).
        """
        if self.mode is None:
            return None
        keys = [(W, M, split), (1, M, "whole-groups"), (1, M + 1, "whole-groups"), (W, 1, split)]
        found, where = self._found(runs, keys, declared, self.mode)
        if not found:
            return None
        other = READINGS[1 - READINGS.index(declared)]
        c_other = c / M if other == "mean-over-micro-batches" else c * M
        approx = "~" if resid > 1e-6 else ""
        measured = (
            f"the accumulated, rank-averaged gradient is {approx}{c:.3g}x the full-batch gradient at "
            f"W = {W}, M = {M} under loss_scale={declared!r} ({approx}{c_other:.3g}x under {other!r})"
        )
        if approx:
            measured += f"; {resid:.0%} of it is not a multiple of the full-batch gradient"
        return self._words(found, self.mode, where).format(measured=measured)

    def name_prediction(
        self,
        runs: Mapping[tuple[int, int, str], Mapping[str, object]],
        aggregation: str,
        declared: str,
        c: float,
    ) -> str | None:
        """Why the full-batch gradient is ``c`` times the declared ``aggregation``'s prediction: the
        class (a count outside the mask the loss is applied with) that every run confirms, or None."""
        found, where = self._found(runs, list(runs), declared, aggregation)
        if not found:
            return None
        measured = f"the full-batch gradient is {c:.3g}x the {aggregation} prediction"
        return self._words(found, aggregation, where).format(measured=measured)


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
    scores: npt.NDArray[np.float64],
    advantages: npt.ArrayLike,
    mask: npt.ArrayLike,
    *,
    scale: str,
    aggregation: str,
    constant: float | None = None,
) -> str | None:
    """Why the full-batch gradient (one process, one micro-batch, reading ``none``) of a loss given
    advantages pre-scaled by ``scale`` is not the declared ``aggregation``'s, or None.

    Tried in turn, each a prediction of the whole gradient vector that must equal the measured
    one: the loss is a token sum, so the scaling reproduces another mode (``scale_by_own_tokens``:
    ``sequence-tokens`` under a declared ``token-mean``); the loss normalises the scaled
    advantages again with a mode's own normaliser (sum normalised twice).
    """
    if scale == "none" or aggregation not in AGGREGATION_MODES:
        return None
    m = np.asarray(mask, dtype=np.float64)
    tok, seq = float(m.sum()), float((m.sum(-1) > 0).sum())
    c = constant
    s = advantage_scales(m, scale, num_tokens=tok, num_seqs=seq, constant=c)
    adv = np.asarray(advantages, dtype=np.float64)
    g = np.asarray(grad, dtype=np.float64)
    reproduced = ADVANTAGE_SCALE_MODES[scale]
    for mode in ("token-sum", *(x for x in AGGREGATION_MODES if x != "token-sum")):
        w = aggregation_weights(
            torch.as_tensor(m), mode, constant=c if mode == "seq-mean-token-sum-norm" else None
        ).numpy()
        if not _close(g, -np.einsum("nt,n,ntd->d", s[:, None] * w, adv, scores)):
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
