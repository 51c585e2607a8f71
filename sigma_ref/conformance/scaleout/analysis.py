"""The analysis: the ranks' gradients and advantages against the full batch and the oracle's
prediction, one :class:`~.results.ScaleoutResult` per property and configuration, a FAIL naming the
bug class the probes confirm (:mod:`.diagnosis`, :class:`~sigma_ref.conformance.normalisers.Judge`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from ..._aggregation import PROMPT_MEAN
from ...conventions import AGGREGATION_MODES
from ...objectives import aggregation_weights, prompt_mean_weights
from ..normalisers import (
    Judge,
    Probe,
    advantage_scope_labels,
    judge_reading,
    name_advantage_scale,
    readings,
    token_scores,
)
from ..packing import identify_packed, packed_cause
from .design import PACKED_CAPACITY, _assignment, _Batch, _token_logp
from .diagnosis import _diagnose
from .fitting import _RTOL, LOSS_PRECISION_RTOL, _fit, _scale, prediction_rtol
from .protocol import _Key, _Run
from .results import ScaleoutResult


def _prediction(
    batch: _Batch, advantages: np.ndarray, mode: str, constant: float | None = None
) -> np.ndarray:
    theta = torch.tensor(batch.theta, requires_grad=True)
    logp = _token_logp(theta, torch.tensor(batch.feats), torch.tensor(batch.tokens))
    mask = torch.tensor(batch.mask)
    # the oracle's weights: seq-mean-token-sum-norm's 1 / (N_seq C), C = T unless declared
    if mode == PROMPT_MEAN:  # a token mean per prompt group, then a mean over prompts
        w = prompt_mean_weights(mask, batch.index)
    else:
        w = aggregation_weights(mask, mode, constant=constant if mode == "seq-mean-token-sum-norm" else None)
    torch.autograd.backward(-(w * torch.tensor(advantages)[:, None] * logp).sum())
    grad = theta.grad
    if grad is None:  # pragma: no cover - logp depends on theta
        raise RuntimeError("the prediction's loss does not depend on theta")
    return grad.numpy()


def _adv_gap(a: np.ndarray, ref: np.ndarray) -> tuple[float, int]:
    gap = np.abs(a - ref)
    i = int(np.argmax(gap))
    return float(gap[i]), i


def _analyse(
    runs: Mapping[_Key, _Run],
    batch: _Batch,
    *,
    W: int,
    Ms: Sequence[int],
    split: str,
    aggregation: str | None,
    loss_scale: str,
    constant: float | None = None,
    sizes: str = "equal",
    counts: Mapping[str, tuple[int, int]] | None = None,
    pad_value: float | None = None,
    packing: str = "none",
    lengths: np.ndarray | None = None,
    advantage_scale: str = "none",
    advantage_scale_on: str = "step",
    loss_precision: str = "float64",
) -> list[ScaleoutResult]:
    """Every property's results of one job's runs: the advantages, then per M the gradient against
    the full batch and against the declared aggregation's prediction (a NOTE when none is declared)."""
    pred_rtol = prediction_rtol(loss_precision)
    full = runs[(1, 1, "whole-groups")]
    a_full = np.asarray(full["advantages"])
    if full["grad"] is not None and not np.isfinite(np.asarray(full["grad"])).all():
        return [_not_finite(pad_value)]
    advantages = _advantages_result(runs, batch, a_full, W, max(Ms), split)
    results = [advantages]
    if full["grad"] is None:  # no loss: the advantages are all there is to check
        return results
    g_full = np.asarray(full["grad"])
    # the aggregation, on the full batch
    matches = [
        mode
        for mode in (*AGGREGATION_MODES, PROMPT_MEAN)
        if _fit(g_full, _prediction(batch, a_full, mode))[2] <= pred_rtol
    ]
    detected = (
        f"detected on the full batch: {matches[0]}"
        if matches
        else "the full batch matches none of the five modes nor prompt-mean"
    )
    if aggregation is None:
        results.append(
            ScaleoutResult("scaleout_aggregation", "NOTE", None, f"no aggregation declared; {detected}")
        )
    scores = token_scores(batch.theta, batch.feats, batch.tokens)
    judge = Judge(
        Probe(scores, a_full, batch.mask, index=batch.index, counts=counts),
        matches[0] if matches else None,
        lambda w, m, s: _assignment(batch, w, m, s, sizes),
        constant,
        advantage_scope_labels(advantage_scale, advantage_scale_on),
        rtol=pred_rtol,
    )
    cause = _call_shape_cause(
        runs, judge, g_full, aggregation, loss_scale, constant, packing, lengths, advantage_scale
    )
    adv_ok = advantages.verdict == "pass"
    for M in Ms:
        results += _per_split(
            runs,
            batch,
            g_full,
            a_full,
            W,
            M,
            split,
            aggregation,
            loss_scale,
            adv_ok,
            detected,
            constant,
            judge,
            cause,
            pred_rtol,
        )
    return results


def _not_finite(pad_value: float | None) -> ScaleoutResult:
    """The FAIL of a full-batch gradient that is not finite (padding that reaches the loss)."""
    why = (
        f" with logp = {pad_value} at the masked positions: it reaches the loss (NaN * 0 is NaN, and so "
        "is its gradient); select with torch.where or masked_fill on the inputs before any arithmetic, "
        "not by multiplying with the mask"
        if pad_value is not None
        else ""
    )
    prop = f"scaleout_gradient[padding={pad_value}]"
    message = f"the full-batch gradient is not finite{why}"
    bug_class = "masked positions reach the loss" if pad_value is not None else None
    return ScaleoutResult(prop, "FAIL", None, message, bug_class, {"pad_value": pad_value})


def _advantages_result(
    runs: Mapping[_Key, _Run], batch: _Batch, a_full: np.ndarray, W: int, M: int, split: str
) -> ScaleoutResult:
    """The advantages on W ranks against the full batch's (computed before micro-batching: one M
    is enough); a FAIL names the statistics taken on a rank's shard."""
    a = np.asarray(runs[(W, M, split)]["advantages"])
    adv_tol = 1e-9 * max(1.0, float(np.abs(a_full).max()))
    gap, i = _adv_gap(a, a_full)
    prop = f"scaleout_advantages[{split},W={W}]"
    if gap <= adv_tol:
        return ScaleoutResult(prop, "pass", None, f"advantages on {W} ranks equal the full batch's")
    facts = {"gap": gap, "row": i, "group": int(batch.index[i])}
    where = f"max |A_split - A_full| = {gap:.3g} at row {i} (group {int(batch.index[i])})"
    if split != "split-groups":
        bug_class = "batch statistics computed on a rank's shard"
        msg = (
            f"{bug_class}: with whole groups per rank the advantages differ from the full batch's "
            f"({where}), e.g. a batch-wide std taken per rank; gather the rewards across ranks before "
            "normalising"
        )
        return ScaleoutResult(prop, "FAIL", None, msg, bug_class, facts)
    whole = runs.get((W, M, "whole-groups"))
    if whole is None or _adv_gap(np.asarray(whole["advantages"]), a_full)[0] > adv_tol:
        msg = f"advantages differ on {W} ranks even with whole groups per rank ({where})"
        return ScaleoutResult(prop, "FAIL", None, msg, None, facts)
    bug_class = "group statistics computed on a rank's shard"
    msg = (
        f"{bug_class}: advantages differ when a group is split across ranks ({where}; with whole groups "
        "per rank they agree). Gather each group's statistics over process_group, or shard by whole "
        "groups and check with split='whole-groups'"
    )
    return ScaleoutResult(prop, "FAIL", None, msg, bug_class, facts)


def _call_shape_cause(
    runs: Mapping[_Key, _Run],
    judge: Judge,
    g_full: np.ndarray,
    aggregation: str | None,
    loss_scale: str,
    constant: float | None,
    packing: str,
    lengths: np.ndarray | None,
    advantage_scale: str,
) -> str | None:
    """A cause of the call shape (packing, pre-scaled advantages) that every run confirms, or None."""
    if aggregation not in AGGREGATION_MODES:
        return None
    cause = None
    if packing != "none" and lengths is not None:
        grads = {key: readings(np.asarray(r["grad"]), key[1], loss_scale)["none"] for key, r in runs.items()}
        found = identify_packed(
            grads,
            judge.probe,
            lengths,
            aggregation,
            assign=judge.assign,
            capacity=PACKED_CAPACITY,
            constant=constant,
        )
        cause = packed_cause(found, grads)
    if cause is None:
        cause = name_advantage_scale(
            g_full,
            judge.probe,
            scale=advantage_scale,
            aggregation=aggregation,
            constant=constant,
        )
    return cause


def _cause_class(cause: str) -> str:
    """The class a call-shape cause leads with (``packed_row_seq_mean: ...``: ``packed_row_seq_mean``)."""
    return cause.split(":", 1)[0]


#: float32's tolerance (:func:`prediction_rtol`): a float64 loss off by no more is off by roundings.
_F32_RTOL = LOSS_PRECISION_RTOL["float32"]


def _rounding_level(c: float, err: float, rtol: float) -> bool:
    """A gradient beyond ``rtol`` (float64's) of its reference but within float32's roundings of it
    (factor and error): hygiene, not a normaliser (which moves it by an O(1) factor)."""
    return rtol < _F32_RTOL and err <= _F32_RTOL and abs(c - 1.0) <= _F32_RTOL


def _rounding_message(reference: str, err: float) -> str:
    return (
        f"equals {reference} to rel. error {err:.1g} only: float32's rounding level, not float64's "
        f"{_RTOL:g} (a count, weight or ratio rounded to float32 on the gradient's path); no normaliser "
        "differs. Declare the loss's working precision float32 if that is its design"
    )


@dataclasses.dataclass(frozen=True)
class _AtSplit:
    """What the results at one (W, M) are judged with: the runs, the full batch's gradient, the
    declarations, and the class namers (the :class:`Judge`, a call-shape ``cause``)."""

    runs: Mapping[_Key, _Run]
    g_full: np.ndarray
    W: int
    M: int
    split: str
    aggregation: str | None
    loss_scale: str
    adv_ok: bool
    judge: Judge | None
    cause: str | None
    pred_rtol: float


def _per_split(
    runs: Mapping[_Key, _Run],
    batch: _Batch,
    g_full: np.ndarray,
    a_full: np.ndarray,
    W: int,
    M: int,
    split: str,
    aggregation: str | None,
    loss_scale: str,
    adv_ok: bool,
    detected: str,
    constant: float | None = None,
    judge: Judge | None = None,
    cause: str | None = None,
    pred_rtol: float = _RTOL,
) -> list[ScaleoutResult]:
    """The results at (W, M): the split gradient against the same code's full-batch gradient, under
    both readings of the trainer's accumulation scaling (measured, not declared:
    :func:`~sigma_ref.conformance.normalisers.readings`), then against the declared aggregation."""
    split_grad = runs[(W, M, split)]["grad"]
    assert split_grad is not None  # _per_split runs only with a loss
    g, _, reading_text = judge_reading(split_grad, g_full, M, loss_scale, rtol=pred_rtol)
    at = _AtSplit(runs, g_full, W, M, split, aggregation, loss_scale, adv_ok, judge, cause, pred_rtol)
    results = [_gradient_result(at, g)]
    if results[0].verdict == "pass":
        results[0] = dataclasses.replace(results[0], message=results[0].message + reading_text)
    if aggregation is not None:
        pred = _prediction(batch, a_full, aggregation, constant)
        results.append(_prediction_result(at, g, pred, aggregation, detected))
    return results


def _gradient_result(at: _AtSplit, g: np.ndarray) -> ScaleoutResult:
    """``scaleout_gradient[W, M]``: pass, a WARN at float32's rounding level, or a FAIL naming the
    class the probes confirm (a call-shape cause, a normaliser hypothesis, else :func:`_diagnose`)."""
    W, M = at.W, at.M
    prop = f"scaleout_gradient[W={W},M={M}]"
    c, resid, err = _fit(g, at.g_full)
    facts = {"residual": resid, "error": err}
    if err <= at.pred_rtol:  # the same code split and whole: only its working precision's roundings differ
        message = (
            f"the accumulated, rank-averaged gradient equals the full-batch gradient (rel. error {err:.1g})"
        )
        return ScaleoutResult(prop, "pass", c, message, None, facts)
    if _rounding_level(c, err, at.pred_rtol):
        return ScaleoutResult(prop, "WARN", c, _rounding_message("the full-batch gradient", err), None, facts)
    if at.cause is not None and at.adv_ok:
        message = (
            f"{at.cause}: the accumulated, rank-averaged gradient is {_scale(c, resid)} the full-batch "
            f"gradient at W = {W}, M = {M}"
        )
        return ScaleoutResult(prop, "FAIL", c, message, _cause_class(at.cause), facts)
    judge = at.judge
    named = judge.name(at.runs, W, M, at.split, at.loss_scale, c, resid) if judge and at.adv_ok else None
    if named is None:
        named = _diagnose(
            at.runs,
            at.g_full,
            W,
            M,
            at.split,
            c,
            resid,
            at.adv_ok,
            at.loss_scale,
            at.aggregation,
            at.pred_rtol,
        )
    bug_class, message = named
    return ScaleoutResult(prop, "FAIL", c, message, bug_class, facts)


def _prediction_result(
    at: _AtSplit, g: np.ndarray, pred: np.ndarray, aggregation: str, detected: str
) -> ScaleoutResult:
    """``scaleout_prediction[mode, W, M]``: the gradient against the declared aggregation's
    prediction with global normalisers; a FAIL says whether the full batch already differs."""
    cp, rp, ep = _fit(g, pred)
    prop = f"scaleout_prediction[{aggregation},W={at.W},M={at.M}]"
    facts: dict[str, object] = {"aggregation": aggregation, "residual": rp, "error": ep}
    if ep <= at.pred_rtol:
        precision = f", judged at the loss's working precision (rel. tol. {at.pred_rtol:.2g})"
        tolerance = "" if at.pred_rtol == _RTOL else precision
        message = (
            f"equals -sum_it w_it A_i grad log pi_it with global normalisers (rel. error {ep:.1g}{tolerance})"
        )
        return ScaleoutResult(prop, "pass", cp, message, None, facts)
    if _rounding_level(cp, ep, at.pred_rtol):
        message = _rounding_message(f"the {aggregation} prediction", ep)
        return ScaleoutResult(prop, "WARN", cp, message, None, facts)
    cf, rf, ef = _fit(at.g_full, pred)
    facts["full_batch_differs"] = ef > at.pred_rtol
    why = (
        "the full-batch gradient already differs"
        f" ({_scale(cf, rf)} the prediction; {detected}): the loss does not aggregate as declared"
        if ef > at.pred_rtol
        else "the full-batch gradient matches it, the split one does not (see scaleout_gradient)"
    )
    judge = at.judge
    countable = judge is not None and ef > at.pred_rtol and aggregation in AGGREGATION_MODES
    named = judge.name_prediction(at.runs, aggregation, at.loss_scale, cf) if judge and countable else None
    own = at.cause if at.cause and at.adv_ok and not named else None  # its class leads the line
    bug_class = named[0] if named else _cause_class(own) if own else None
    why += f". {named[1]}" if named else f". {own}" if own else ""
    lead = bug_class + ": " if own and bug_class else ""
    message = (
        f"{lead}the gradient at W={at.W}, M={at.M} is {_scale(cp, rp)} the {aggregation} prediction; " + why
    )
    return ScaleoutResult(prop, "FAIL", cp, message, bug_class, facts)
