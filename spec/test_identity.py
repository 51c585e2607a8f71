"""Level 2, the identity.

The update built from the implementation's advantages (and, with ``--loss``, the
gradient of its own loss at ratio 1 on a small random policy) equals the oracle's
``(sigma^2/d) * (s+ - s-)`` per group; the convention is detected from probes
(docs/spec.md §7, level 2).

Each ``test_<name>`` is one property, written once under ``@conformance_property`` (``spec/__init__.py``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from sigma_ref import strategies as sst
from sigma_ref._aggregation import PROMPT_MEAN
from sigma_ref._compare import find_mismatch
from sigma_ref.conformance.adapter import Batch
from sigma_ref.conformance.core import Context, Finding, PropertyFailure, conformance_property, guarded
from sigma_ref.conformance.inputs import (
    BINARY,
    LOSS_EXTRAS,
    POLICY_T,
    WITH_SILENT,
    Policy,
    batches,
    call_loss,
    groups_of,
    keyword_inputs,
    loss_keywords,
    needs_loss,
    needs_policy_loss,
    prescaled_advantages,
    scalar_loss,
    seeded,
)
from sigma_ref.conformance.loss_precision import loss_precision, precision_cause
from sigma_ref.conformance.precision import (
    COUNT_EPS_RTOL,
    PRECISIONS,
    SAFETY,
    objective_tolerance,
    unit_roundoff,
)
from sigma_ref.conformance.reference import as_numpy
from sigma_ref.identity import decompose, policy_gradient
from sigma_ref.objectives import (
    AGGREGATION_MODES,
    Objective,
    aggregation_weights,
    detect_aggregation,
    gradient_terms_by_name,
    importance_weights,
    kl_estimate,
    loss_gradient,
    prompt_mean_weights,
    resolve_aggregation,
    resolve_declared_aggregation,
)


def _prediction(ctx: Context, batch: Batch, scores: np.ndarray) -> np.ndarray:
    """The oracle's per-group update: (sigma^2/d) delta_s (RLOO: (1/G) sum A_i s_i)."""
    ref = ctx.reference
    if ref.convention is None:
        return as_numpy(policy_gradient(ctx.expected(batch), scores, index=batch.index))
    return as_numpy(decompose(batch.rewards, scores, convention=ref.convention, index=batch.index).prediction)


def _binary_with_scores(ctx: Context, p: Any) -> st.SearchStrategy[tuple[Batch, np.ndarray]]:
    return batches(ctx, binary=True).flatmap(lambda b: st.tuples(st.just(b), sst.score_vectors(n=b.n, dim=3)))


@conformance_property(
    level="identity",
    examples=lambda ctx, p: [(b, np.arange(3.0 * b.n).reshape(b.n, 3) % 5 - 2) for b in BINARY + WITH_SILENT],
    strategy=_binary_with_scores,
)
def test_advantage_identity(ctx: Context, ex: tuple[Batch, np.ndarray], p: Any) -> None:
    """With the implementation's advantages, g = (1/G) sum_i A_i s_i = (sigma^2/d)(s+ - s-) per group
    for binary rewards and any scores s_i in R^3.
    """
    batch, scores = ex
    a = ctx.flat(batch)
    if not np.isfinite(a).all():
        ctx.fail("the update is undefined: advantages hold NaN or infinity", batch, a, kind="not-finite")
    g = as_numpy(policy_gradient(a, scores, index=batch.index))
    pred = _prediction(ctx, batch, scores)
    # |g - pred| <= (1/G) sum_i tol_i |s_i|: the advantages' tolerance carried through the sum
    tol = as_numpy(policy_gradient(ctx.tolerance(batch), np.abs(scores), index=batch.index))
    found = find_mismatch(
        g.reshape(-1), pred.reshape(-1), rtol=0.0, atol=tol.reshape(-1) + 1e-300, noun="update entries"
    )
    if found:
        ctx.fail(
            f"update g = (1/G) sum A_i s_i vs (sigma^2/d)(s+ - s-): {found.render()}",
            batch,
            a,
            kind="mismatch",
            mismatch=found,
        )


@conformance_property(
    level="identity",
    examples=lambda ctx, p: [None],
    applies=lambda ctx, p: None if ctx.detection is not None else "convention detection was not run",
    required=lambda ctx: False,
)
def test_convention_detected(ctx: Context, ex: Any, p: Any) -> None:
    """Probing with designed rewards identifies the convention (ddof, eps and placement, scale,
    singleton and silent groups, a spread filter) and the working precision: a NOTE, never a failure.
    """
    det = ctx.detection
    if det is None:
        return
    facts = [f"detected convention: {det.summary()}", f"working precision: {ctx.precision}"]
    if ctx.declared is not None and det.preset != ctx.declared:
        facts.append(f"declared {ctx.declared!r}, judged against it")
    if det.notes:
        facts.append("probes: " + "; ".join(det.notes))
    if ctx.adapter.loss is not None:
        facts.append(loss_precision(ctx).describe())
    detected = {"convention": det.summary(), "preset": det.preset, "precision": ctx.precision}
    raise PropertyFailure(Finding("; ".join(facts), kind="convention", facts=detected), verdict="NOTE")


def _token_weights(
    ctx: Context, pol: Policy, batch: Batch, adv: torch.Tensor, log_ratio: float = 0.0
) -> torch.Tensor:
    """``dL/dlogp_it`` at ratio 1 for advantages ``adv`` (at ratio ``exp(log_ratio)`` on every token
    when it is given: ``old_logp = logp - log_ratio``)."""
    leaf = pol.logp().detach().requires_grad_(True)
    old = None if log_ratio == 0.0 else leaf.detach() - log_ratio
    loss = call_loss(ctx, leaf, adv, pol.mask, batch, old_logp=old)
    (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
    return torch.zeros_like(leaf) if grad is None else grad


#: The cause of a loss whose gradient at ratio 1 is 0 everywhere.
_NO_GRADIENT = "the loss has no gradient at ratio 1 (is logp detached inside the loss?)"


def _unit_weights(ctx: Context, pol: Policy, batch: Batch, what: str) -> torch.Tensor:
    """The loss's weights ``w_it = -dL/dlogp_it`` at ratio 1 for advantage 1; a loss with none (0 on
    every token) fails, ``what`` saying what that is."""
    w = -_token_weights(ctx, pol, batch, torch.ones(batch.n, dtype=torch.float64))
    if not w.any():
        ctx.fail(what, batch, cause=_NO_GRADIENT, kind="value")
    return w


def _loss_unit(ctx: Context, pol: Policy, batch: Batch) -> float:
    """The unit roundoff of the loss's working precision: the coarser of its output dtype's and the
    precision its gradient is computed in (declared or measured, :mod:`sigma_ref.conformance.loss_precision`;
    a float32 ratio inside a float64 loss is float32), float64's at best."""
    leaf = pol.logp().detach()
    out = call_loss(ctx, leaf, torch.ones(batch.n, dtype=torch.float64), pol.mask, batch)
    return max(
        unit_roundoff(out.dtype),
        unit_roundoff(loss_precision(ctx).judged),
        unit_roundoff(ctx.precision) if out.dtype != torch.float64 else 0.0,
    )


@conformance_property(
    level="identity",
    examples=lambda ctx, p: [(BINARY[0], 0), (WITH_SILENT[0], 1)],
    strategy=lambda ctx, p: seeded(batches(ctx, binary=True, max_groups=3, max_size=5)),
    applies=needs_policy_loss,
    cost=3,
)
def test_loss_gradient_identity(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    """At ratio 1 on a small softmax policy, the gradient of the implementation's loss per group,
    -dL_g/dtheta, equals (sigma^2/d)(s+ - s-) with s_i = G sum_t w_it grad log pi(y_it) and w_it the
    loss's own aggregation weights.
    """
    batch, s = ex
    pol = Policy.make(batch.n, s)
    a = torch.from_numpy(ctx.flat(batch))
    w = _unit_weights(  # aggregation weights w_it
        ctx,
        pol,
        batch,
        "the loss gradient at ratio 1 is 0 for every token, but should be the policy gradient",
    )
    logp = pol.logp()
    g_idx = torch.from_numpy(groups_of(batch))
    sizes = torch.bincount(g_idx).to(torch.float64)[g_idx]
    # scores s_i = G * grad sum_t w_it logp_it (docs/spec.md §4), one batched backward
    per_response = (w * logp).sum(-1)
    (jac,) = torch.autograd.grad(
        per_response,
        pol.W,
        grad_outputs=torch.eye(batch.n, dtype=torch.float64),
        retain_graph=True,
        is_grads_batched=True,
    )
    scores = jac.reshape(batch.n, -1) * sizes.unsqueeze(1)
    actual = []
    for j in range(int(g_idx.max()) + 1):  # one backward per group of a small test batch
        masked = torch.where(g_idx == j, a, torch.zeros_like(a))
        loss = call_loss(ctx, logp, masked, pol.mask, batch)
        (grad,) = torch.autograd.grad(loss, pol.W, retain_graph=True, allow_unused=True)
        actual.append(-(torch.zeros_like(pol.W) if grad is None else grad).reshape(-1))
    got = torch.stack(actual).numpy()
    sc = scores.detach().numpy()
    pred = _prediction(ctx, batch, sc).reshape(got.shape)
    own = as_numpy(policy_gradient(a.numpy(), sc, index=batch.index)).reshape(got.shape)
    # the advantages' working-precision tolerance carried through (1/G) sum_i A_i s_i, plus the
    # loss's own rounding (its working precision over the n T terms of the sum)
    u_loss = _loss_unit(ctx, pol, batch)
    carried = as_numpy(policy_gradient(ctx.tolerance(batch), np.abs(sc), index=batch.index))
    terms = as_numpy(policy_gradient(np.abs(a.numpy()), np.abs(sc), index=batch.index))
    tol = carried + SAFETY * (2 + math.log2(pol.mask.numel())) * u_loss * terms
    found = find_mismatch(
        got.reshape(-1), pred.reshape(-1), rtol=0.0, atol=tol.reshape(-1) + 1e-300, noun="gradient entries"
    )
    if found:
        loss_tol = (SAFETY * (2 + math.log2(pol.mask.numel())) * u_loss * terms).reshape(-1) + 1e-300
        if not np.any(got):
            cause = _NO_GRADIENT
        elif (precision := precision_cause(ctx)) is not None:
            cause = precision
        elif (
            find_mismatch(got.reshape(-1), own.reshape(-1), rtol=0.0, atol=loss_tol, noun="gradient entries")
            is None
        ):
            cause = (
                "the loss is a correct weighted policy gradient of the advantages it is given; the "
                "advantages themselves differ from the convention (see test_advantage_values)"
            )
        else:
            cause = (
                "the loss's gradient for one group's advantages is not (1/G) sum_i A_i s_i with the "
                "loss's own per-token weights: it is not linear in the advantages, or it mixes groups"
            )
        ctx.fail(
            f"per-group gradient -dL/dtheta vs (sigma^2/d)(s+ - s-): {found.render()}",
            batch,
            cause=cause,
            kind="mismatch",
            mismatch=found,
        )


#: The log-ratio of the sign probe: ratio exp(0.05) ~ 1.051, inside every clip range trainers use.
_SIGN_PROBE = 0.05


def _sign_cause(ctx: Context, pol: Policy, batch: Batch, w: torch.Tensor) -> str | None:
    """Why the gradient at ratio 1 has the wrong sign, from a probe at ratio ``exp(+-0.05)``.

    A surrogate ``+ratio * A`` (the sign flipped) has a gradient that grows with the ratio, as the
    right one does: ``w(ratio) = ratio * w(1)``. A loss handed ``logp`` and ``old_logp`` swapped
    computes ``exp(old_logp - logp) = 1/ratio``, whose gradient is ``w(1) / ratio``. Neither (a clip
    or another term): no cause.
    """
    try:
        ones = torch.ones(batch.n, dtype=torch.float64)
        moved = -_token_weights(ctx, pol, batch, ones, log_ratio=_SIGN_PROBE)
    except PropertyFailure:
        return None
    live = pol.mask > 0
    base = float(w[live].sum())
    if base == 0.0:
        return None
    scale = float(moved[live].sum()) / base
    if math.isclose(scale, math.exp(_SIGN_PROBE), rel_tol=1e-6):
        return "the loss has the wrong sign: return -mean(ratio * A), not +mean(ratio * A)"
    if math.isclose(scale, math.exp(-_SIGN_PROBE), rel_tol=1e-6):
        return (
            "logp and old_logp are swapped: the ratio is exp(old_logp - logp) (its gradient falls as the "
            "ratio rises); pass the current policy's log-probs first, loss(logp, old_logp, advantages, mask)"
        )
    return None


@conformance_property(
    level="identity",
    examples=lambda ctx, p: [(BINARY[0], 0)],
    strategy=lambda ctx, p: seeded(batches(ctx, binary=True, max_groups=3, max_size=5)),
    applies=needs_policy_loss,
    cost=3,
)
def test_loss_is_policy_gradient(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    """At ratio 1 the loss gradient is a weighted policy gradient: dL/dlogp_it = -w_it A_i with w_it >=
    0 not depending on A.
    """
    batch, s = ex
    pol = Policy.make(batch.n, s)
    w = _unit_weights(
        ctx, pol, batch, "dL/dlogp = 0 at ratio 1 for advantage 1, but should be < 0 on every response token"
    )
    live = pol.mask > 0
    u_loss = _loss_unit(ctx, pol, batch)
    floor = SAFETY * (2 + math.log2(pol.mask.numel())) * u_loss * float(w.abs().max())
    if (w[live] < -floor).any() or not (w[live] > 0).any():
        ctx.fail(
            f"loss weights at ratio 1 dL/dlogp = {(-w[0]).tolist()} for advantage 1, but should be <= 0 "
            "(minimising the loss must raise log pi of responses with positive advantage)",
            batch,
            cause=_sign_cause(ctx, pol, batch, w),
            kind="value",
        )
    adv = torch.linspace(-1.5, 2.0, batch.n, dtype=torch.float64)
    w_adv = -_token_weights(ctx, pol, batch, adv)
    expected = w * adv.unsqueeze(1)
    if not torch.allclose(w_adv, expected, rtol=SAFETY * u_loss, atol=floor * float(adv.abs().max())):
        ctx.fail(
            "dL/dlogp_it at ratio 1 is not -w_it A_i with weights w independent of the advantages",
            batch,
            cause=precision_cause(ctx) or "the loss re-normalises or clips the advantages at ratio 1",
            kind="value",
        )


@conformance_property(
    level="identity",
    examples=lambda ctx, p: [(BINARY[0], 0)],
    applies=needs_loss,
)
def test_loss_ignores_padding(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    """Padding tokens (mask = 0) get no gradient: dL/dlogp_it = 0 where mask_it = 0."""
    batch, s = ex
    pol = Policy.make(batch.n, s)
    adv = torch.linspace(-1.0, 1.5, batch.n, dtype=torch.float64)
    grad = _token_weights(ctx, pol, batch, adv)
    pad = pol.mask == 0
    if pad.any() and (grad[pad] != 0).any():
        i, t = (int(v) for v in torch.nonzero(pad & (grad != 0))[0])
        ctx.fail(
            f"dL/dlogp[{i}, {t}]={float(grad[i, t]):.4g} at a padding token (mask=0), but should be 0",
            batch,
            cause="the loss averages over padding tokens: multiply by the mask before reducing",
            kind="value",
            facts={"index": [i, t], "actual": float(grad[i, t]), "expected": 0.0},
        )


def _agg_policy(n: int, seed: int) -> Policy:
    """A policy whose responses have lengths 1, T and in between (and no empty row)."""
    pol = Policy.make(n, seed)
    lengths = torch.tensor([1, POLICY_T, *[2 + (i % (POLICY_T - 1)) for i in range(max(0, n - 2))]][:n])
    pol.mask = (torch.arange(POLICY_T).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    return pol


@conformance_property(
    level="identity",
    examples=lambda ctx, p: [(BINARY[0], 0)],
    applies=needs_policy_loss,
)
def test_loss_aggregation(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    """The per-token weights w_it = -dL/dlogp_it / A_i at ratio 1 are a known aggregation (token-mean,
    seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm, token-sum, or prompt-mean over the
    batch's groups), measured on responses of lengths 1 to T; a declared aggregation must match them.
    """
    batch, s = ex
    pol = _agg_policy(batch.n, s)
    prompts = np.unique(batch.index, return_inverse=True)[1].reshape(-1)  # the batch's groups
    w = -_token_weights(ctx, pol, batch, torch.ones(batch.n, dtype=torch.float64))
    # modes differ by factors of at least 1 + 1/T on responses of different lengths; 1e-6 absorbs
    # float32 losses and the n_i + 1e-8 that verl and OpenRLHF add to each sequence's length
    rtol = 1e-6
    try:
        # with the batch's groups as prompts, so a prompt-mean loss is named too
        found = detect_aggregation(w, pol.mask, rtol=rtol, index=prompts)
    except ValueError:
        found = None
    lengths = pol.mask.sum(-1).int().tolist()
    seen = "unrecognised weights" if found is None else found[0] + (f", C = {found[1]:g}" if found[1] else "")
    declared = ctx.adapter.aggregation
    if declared is None and precision_cause(ctx) is not None:
        raise PropertyFailure(
            Finding(f"aggregation not read: {precision_cause(ctx)}", kind="precision"), verdict="NOTE"
        )
    if declared is None:
        raise PropertyFailure(
            Finding(
                f"aggregation: {seen} [detected from dL/dlogp at ratio 1, lengths {lengths}, T = {POLICY_T}]",
                kind="aggregation",
                facts={
                    "aggregation": None if found is None else found[0],
                    "constant": None if found is None else found[1],
                    "how": "detected",
                    "lengths": lengths,
                },
            ),
            verdict="NOTE",
        )
    mode = resolve_declared_aggregation(declared)
    expected = (
        prompt_mean_weights(pol.mask, prompts)
        if mode == PROMPT_MEAN
        else aggregation_weights(pol.mask, declared, constant=ctx.adapter.aggregation_constant)
    )
    if torch.allclose(w, expected, rtol=rtol, atol=rtol * float(expected.abs().max())):
        measured = {"aggregation": mode, "constant": None, "how": "declared", "lengths": lengths}
        raise PropertyFailure(
            Finding(f"aggregation: {mode} [declared, measured]", kind="aggregation", facts=measured), "NOTE"
        )
    i = int(torch.argmax((w - expected).abs().sum(-1)))
    cause = f"the loss applies {seen} weights"
    rounding = precision_cause(ctx)
    if rounding is not None:  # the weights are rounded, not another mode's
        found, cause = None, rounding
    on = pol.mask > 0
    if found is None and mode == "token-mean":
        # a token-mean whose normaliser differs between parts of the batch: per-micro-batch counts
        per_row = [sorted({round(float(v), 12) for v in w[r][on[r]]}) for r in range(batch.n)]
        if all(len(v) == 1 for v in per_row) and len({v[0] for v in per_row}) == 2:
            cut = next(r for r in range(1, batch.n) if per_row[r] != per_row[r - 1])
            if all(per_row[r] == per_row[0] for r in range(cut)) and all(
                per_row[r] == per_row[cut] for r in range(cut, batch.n)
            ):
                n1, n2 = int(on[:cut].sum()), int(on[cut:].sum())
                w1, w2 = per_row[0][0], per_row[cut][0]
                cause = (
                    f"rows 0-{cut - 1} get weight {w1:.4g} and rows {cut}-{batch.n - 1} {w2:.4g}: each part "
                    f"of the batch is divided by its own token count ({n1} and {n2}) and the parts "
                    f"averaged, a normaliser taken per micro-batch instead of over all {n1 + n2} tokens"
                )
                found = ("per-micro-batch token-mean", None)
    named = None if rounding is not None else _aggregation_cause(mode, found, w, expected, pol.mask, rtol)
    cause = named or cause
    raise PropertyFailure(
        Finding(
            f"per-token loss weights w[{i}] = {[round(float(v), 6) for v in w[i]]} (length {lengths[i]}), "
            f"but should be {[round(float(v), 6) for v in expected[i]]} under the declared aggregation "
            f"{mode}",
            f"loss(logp, old_logp=logp, advantages=1, mask) on lengths {lengths}, T = {POLICY_T}",
            cause=cause,
            # the measured weights show it, or the precision probe does
            confirmed=found is not None or named is not None or rounding is not None,
            kind="value",
            facts={"declared": mode, "measured": None if found is None else found[0], "row": i},
        )
    )


def _aggregation_cause(
    declared: str,
    found: tuple[str, float | None] | None,
    w: torch.Tensor,
    expected: torch.Tensor,
    mask: torch.Tensor,
    rtol: float,
) -> str | None:
    """The known bug behind measured weights ``w`` that miss a declared mode's ``expected``, in words,
    when the measurement shows it (None otherwise): modes confused in open trainers' code and issues."""
    mode, constant = found if found is not None else (None, None)
    n_seq = int((mask.sum(-1) > 0).sum())
    if declared == "seq-mean-token-mean" and mode == "seq-mean-token-sum-norm" and constant == POLICY_T:
        return (
            f"each sequence is averaged over the padded length T = {POLICY_T} instead of its own length "
            "(divide by mask.sum(-1), not by mask.shape[-1])"
        )
    if declared == "seq-mean-token-sum" and mode == "seq-mean-token-mean":
        return (
            "each sequence's token sum is divided by its own length: that is seq-mean-token-mean; "
            "seq-mean-token-sum takes the mean over sequences of the plain token sums (drop / mask.sum(-1))"
        )
    if declared == "token-sum" and mode == "token-mean":
        return (
            f"the token sum is divided by the batch's token count ({int(mask.sum())} tokens): that is "
            "token-mean (a normaliser left in place); token-sum is the plain masked sum"
        )
    if declared == "seq-mean-token-sum-norm":
        if n_seq > 1 and torch.allclose(w, n_seq * expected, rtol=rtol, atol=0.0):
            return (
                f"the token sum is divided by C alone, not by N_seq * C: the loss is N_seq = {n_seq} times "
                "the declared one and grows with the batch size (verl 0.4.1-0.6.0's "
                "seq-mean-token-sum-norm); divide by the number of sequences too"
            )
        if mode == "seq-mean-token-sum-norm" and constant == POLICY_T:
            want = float(expected[mask > 0][0]) * n_seq
            return (
                f"the constant is this batch's padded length T = {POLICY_T} (mask.shape[-1]), not the "
                f"declared C = {1 / want:g}: the normaliser changes with each batch's longest response; "
                "divide by the fixed constant (e.g. max_completion_length)"
            )
    return None


#: Ratios r = exp(logp - old_logp) on a grid over every clip range in use, placed half-way
#: between round bounds (0.505, 0.515, ..., 1.595, then 1.65, 1.75, ..., 3.95), so a bound
#: such as 1.28 or a dual clip of 3 falls strictly between two grid points.
_RATIOS = torch.cat(
    [
        0.505 + 0.01 * torch.arange(110, dtype=torch.float64),
        1.65 + 0.1 * torch.arange(24, dtype=torch.float64),
    ]
)


def _clip_probe(n_tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logp, old_logp, advantages, mask)``: one token per ratio, rows of +1 and -1 advantages."""
    r = _RATIOS
    logp = torch.zeros(2, r.numel(), dtype=torch.float64)
    old = -torch.log(r).repeat(2, 1)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    return logp, old, adv, torch.ones_like(logp)


def _bound(active: torch.Tensor, r: torch.Tensor, upper: bool) -> float | None:
    """The clip bound a 0/1 pattern over the ratio grid shows (``None`` if the clip never acts)."""
    if bool(active.all()):
        return None
    if upper:  # active below the bound
        lo = float(r[active].max()) if bool(active.any()) else float(r.min())
        hi = float(r[~active & (r > lo)].min()) if bool((~active & (r > lo)).any()) else lo
    else:
        hi = float(r[active].min()) if bool(active.any()) else float(r.max())
        lo = float(r[~active & (r < hi)].max()) if bool((~active & (r < hi)).any()) else hi
    return round((lo + hi) / 2, 2)


@conformance_property(
    level="identity",
    examples=lambda ctx, p: [None],
    applies=needs_policy_loss,
)
def test_loss_clipped_surrogate(ctx: Context, ex: Any, p: Any) -> None:
    """At ratios r != 1 the loss gradient is the clipped surrogate's: dL/dlogp_it = -w_it A_i r_it
    inside [1 - eps_low, 1 + eps_high] and 0 where the clip is active for the sign of A_i (dual clip: 0
    for A < 0 beyond c), with the clip range declared or read off the gradient.
    """
    logp, old, adv, mask = _clip_probe(_RATIOS.numel())
    leaf = logp.clone().requires_grad_(True)
    batch = Batch.grouped([[1.0, 0.0]])
    out = call_loss(ctx, leaf, adv, mask, batch, old_logp=old)
    (grad,) = torch.autograd.grad(out, leaf, allow_unused=True)
    g = torch.zeros_like(leaf) if grad is None else grad.detach()
    # the aggregation weight of each token, measured at ratio 1: w_it = -dL/dlogp_it / A_i
    leaf1 = logp.clone().requires_grad_(True)
    (g1,) = torch.autograd.grad(call_loss(ctx, leaf1, adv, mask, batch), leaf1, allow_unused=True)
    w = -(torch.zeros_like(leaf1) if g1 is None else g1.detach()) / adv.unsqueeze(1)
    if not bool((w > 0).all()):
        row = 0 if not bool((w[0] > 0).all()) else 1
        raise PropertyFailure(
            Finding(
                f"at ratio 1 the loss gives {'A > 0' if row == 0 else 'A < 0'} tokens dL/dlogp = "
                f"{float(-w[row].min() * adv[row]):.3g}, but should be -w A with w > 0",
                "loss(logp=0, old_logp=0, advantages=[+1, -1], mask=1)",
                cause="a clip or cap acts at ratio 1 for this sign of the advantage (e.g. a dual clip "
                "applied to A > 0, where it belongs to A < 0 only)",
                confirmed=True,
                kind="value",
            )
        )
    r = _RATIOS
    scale = float(w.abs().max()) * float(r.max())
    zero = g.abs() <= 1e-9 * scale
    declared = ctx.adapter.clip
    high = _bound(~zero[0], r, upper=True)
    low = _bound(~zero[1, r < 1.5], r[r < 1.5], upper=False)
    dual = _bound(~zero[1, r > 1.5], r[r > 1.5], upper=True)
    if declared is None and precision_cause(ctx) is not None:
        raise PropertyFailure(
            Finding(f"clip range not read: {precision_cause(ctx)}", kind="precision"), verdict="NOTE"
        )
    if declared is None and (
        (high is not None and high < 1) or (low is not None and low > 1) or (dual or 2) <= 1
    ):
        raise PropertyFailure(
            Finding(
                f"the loss's gradient at ratios 0.5 to 4 is not a PPO clip (zero above {high} for A > 0, "
                f"below {low} for A < 0): another objective; declare it (Adapter(objective=...)) to check it",
                kind="clip",
                facts={"ppo": False, "upper": high, "lower": low},
            ),
            verdict="NOTE",
        )
    if declared is not None:
        eps_low, eps_high = declared
        obj = Objective(
            "ppo",
            eps_low=eps_low,
            eps_high=eps_high,
            dual_clip=ctx.adapter.dual_clip,
            aggregation="token-sum",
        )
        how = "declared"
    else:
        eps_low = 0.2 if low is None else round(1 - low, 2)
        eps_high = 0.2 if high is None else round(high - 1, 2)
        obj = Objective(
            "ppo",
            eps_low=eps_low if low is not None else 10.0,
            eps_high=eps_high if high is not None else 10.0,
            dual_clip=dual,
            aggregation="token-sum",
        )
        how = "detected"
    pred = loss_gradient(obj, logp, old, adv, mask) * w
    u_loss = max(unit_roundoff(out.dtype), unit_roundoff(loss_precision(ctx).judged))
    tol = SAFETY * (2 + math.log2(mask.numel())) * max(u_loss, PRECISIONS["float64"]) * scale + 1e-12 * scale
    bad = (g - pred).abs() > tol + SAFETY * u_loss * pred.abs()
    summary = (
        f"clip range [{1 - eps_low if low is not None or declared else '-inf'}, "
        f"{1 + eps_high if high is not None or declared else 'inf'}]"
        + (f", dual clip {obj.dual_clip:g}" if obj.dual_clip else "")
    )
    if not bool(bad.any()):
        clip = {
            "ppo": True,
            "lower": 1 - eps_low if low is not None or declared else None,
            "upper": 1 + eps_high if high is not None or declared else None,
            "dual_clip": obj.dual_clip or None,
            "how": how,
        }
        raise PropertyFailure(
            Finding(f"PPO surrogate at ratios 0.5 to 4: {summary} [{how}]", kind="clip", facts=clip),
            verdict="NOTE",
        )
    row, t = (int(v) for v in torch.nonzero(bad)[0])
    sign = "A > 0" if row == 0 else "A < 0"
    if declared is None:  # not PPO's clipped surrogate, and nothing was declared: a fact, not a verdict
        raise PropertyFailure(
            Finding(
                f"at ratio {float(r[t]):.3g} with {sign} dL/dlogp = {float(g[row, t]):.6g}, where a PPO clip "
                f"{summary} would give {float(pred[row, t]):.6g}: the loss is another objective (CISPO, a "
                "soft gate, importance weights); declare it (--clip, or Adapter(objective=...)) to check it",
                kind="clip",
                facts={"ppo": False, "upper": high, "lower": low, "dual_clip": dual},
            ),
            verdict="NOTE",
        )
    cause = rounding = precision_cause(ctx)
    if cause is None and declared is not None and (high, low) != (None, None):
        got = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
        cause = f"the loss clips at {got} (read off its gradient), not at the declared range"
    raise PropertyFailure(
        Finding(
            f"dL/dlogp at ratio {float(r[t]):.3g} with {sign}: actual={float(g[row, t]):.6g}, but should be "
            f"{float(pred[row, t]):.6g} under the {how} {summary} (gradient -w A r inside the trust region, "
            f"0 where the clip is active for that sign of A); measured bounds: upper "
            f"{high if high is not None else 'none'} for A > 0, lower {low if low is not None else 'none'} "
            f"and dual {dual if dual is not None else 'none'} for A < 0",
            "loss(logp=0, old_logp=-log r, advantages=[+1, -1], mask=1) with r on a grid from 0.5 to 4",
            cause=cause,
            confirmed=rounding is not None,  # the precision probe confirmed it
            kind="value",
            facts={"ratio": float(r[t]), "actual": float(g[row, t]), "expected": float(pred[row, t])},
        )
    )


def _objective_probe() -> dict[str, torch.Tensor]:
    """Designed inputs of :func:`test_loss_objective`: six responses of lengths 1 to 6, ratios on both
    sides of every clip range (0.55 to 3.5), rollout-vs-training weights from 0.3 to 3 (a cap of
    2 truncates some), a reference policy off by up to +-1 nat, advantages of both signs."""
    gen = torch.Generator().manual_seed(20261202)
    n, t = 6, 6
    # per row: A > 0 rows see ratios on both sides of 1 + eps_high (1.25 lies between 1.2 and 1.28),
    # A < 0 rows on both sides of 1 - eps_low and of a dual clip of 3
    rows = [
        [0.75, 1.05, 1.25, 1.35, 1.5, 2.2],
        [0.55, 0.75, 0.85, 1.15, 3.5, 1.0],
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        [0.65, 0.85, 0.95, 1.25, 2.2, 3.5],
        [1.15, 1.25, 0.55, 1.0, 1.0, 1.0],
        [0.95, 1.05, 1.5, 0.65, 1.0, 1.0],
    ]
    lengths = torch.tensor([6, 5, 1, 6, 3, 4])
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    logp = -0.1 - 2.5 * torch.rand(n, t, generator=gen, dtype=torch.float64)
    old = logp - torch.log(torch.tensor(rows, dtype=torch.float64))
    rho = torch.exp(torch.linspace(math.log(0.3), math.log(3.0), n * t, dtype=torch.float64)).reshape(n, t)
    rollout = old - torch.log(rho)
    ref = logp + (2 * torch.rand(n, t, generator=gen, dtype=torch.float64) - 1)
    adv = torch.tensor([1.3, -0.7, 0.4, -1.1, 2.0, -0.2], dtype=torch.float64)
    return {
        "logp": logp,
        "old_logp": old,
        "rollout_logp": rollout,
        "ref_logp": ref,
        "advantages": adv,
        "mask": mask,
    }


#: Generated inputs of :func:`test_loss_objective`: up to 6 responses of lengths 1 to 8 (and up to 2
#: padding columns), token (GSPO: sequence) ratios from 0.25 to 5 in every interval that the clip
#: range and a dual clip cut, rollout weights (token or sequence) from 0.3 to 3.5 on both sides of
#: the cap, a reference policy off by up to 1.5 nat.
_ROWS, _LONGEST, _PADDING = 6, 8, 2
_RATIOS_DRAWN = (0.25, 5.0)
_WEIGHTS_DRAWN = (0.3, 3.5)


@dataclasses.dataclass(frozen=True)
class _Drawn:
    """One generated input of :func:`test_loss_objective`: its structure (lengths, padding columns,
    advantages) and the seed of its log-probabilities (:func:`_generated`), which hypothesis shrinks."""

    lengths: tuple[int, ...]
    padding: int
    advantages: tuple[float, ...]
    seed: int


#: One strategy for every run: built once (a flatmap would build and validate a new one per draw).
_DRAWN: st.SearchStrategy[_Drawn] = st.builds(
    lambda lengths, padding, advantages, seed: _Drawn(
        tuple(lengths), padding, tuple(round(a, 3) for a in advantages[: len(lengths)]), seed
    ),
    st.lists(st.integers(1, _LONGEST), min_size=1, max_size=_ROWS),
    st.integers(0, _PADDING),
    st.lists(st.floats(-3, 3, allow_nan=False), min_size=_ROWS, max_size=_ROWS),
    st.integers(0, 2**32 - 1),
)


def _drawn(ctx: Context, p: Any) -> st.SearchStrategy[_Drawn]:
    return _DRAWN


def _margin(ctx: Context) -> float:
    """How far (in log-ratio) a generated ratio, sequence ratio or weight stays from a clip bound or the
    cap: four times the rounding bound at float32 (or the coarser working precision) for the largest
    generated input, so that no rounding moves it across (where the gradient jumps)."""
    u = max(unit_roundoff(ctx.precision), PRECISIONS["float32"])
    kappa = 1.0 + _LONGEST * (5.5 + 4.0 + 7.0 + 5.5)  # |logp|, |old|, |ref|, |rollout| drawn below
    rounding = SAFETY * (2 + math.log2(_ROWS * (_LONGEST + _PADDING))) * u * kappa
    return min(0.05, 4 * (rounding + COUNT_EPS_RTOL))


def _cut_points(obj: Objective) -> list[float]:
    """Where the declared objective's gradient jumps, as log-ratios: the clip bounds and a dual clip."""
    lo, hi = obj.clip_range
    points = [hi, *([lo] if lo > 0 else []), *([obj.dual_clip] if obj.dual_clip else [])]
    return [math.log(b) for b in points if math.isfinite(b)]


def _uniform_in_regions(
    gen: torch.Generator, cuts: list[float], low: float, high: float, margin: float, shape: tuple[int, ...]
) -> torch.Tensor:
    """Values in ``[low, high]``, each in one of the intervals ``cuts`` make (chosen uniformly, so every
    side of every cut is drawn), at least ``margin`` from every cut."""
    edges = sorted({low, high, *(c for c in cuts if low + 2 * margin < c < high - 2 * margin)})
    regions = [(a + margin, b - margin) for a, b in itertools.pairwise(edges) if b - a > 2 * margin]
    starts = torch.tensor([a for a, _ in regions], dtype=torch.float64)
    widths = torch.tensor([b - a for a, b in regions], dtype=torch.float64)
    pick = torch.randint(len(regions), shape, generator=gen)
    return starts[pick] + widths[pick] * torch.rand(shape, generator=gen, dtype=torch.float64)


def _spread(gen: torch.Generator, total: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """Per-token values whose sum over each row's tokens is ``total`` (``[N, 1]``), jittered by +-scale."""
    jitter = (2 * torch.rand(mask.shape, generator=gen, dtype=torch.float64) - 1) * scale * mask
    length = mask.sum(-1, keepdim=True)
    jitter = (jitter - jitter.sum(-1, keepdim=True) / length) * mask
    return total / length + jitter


def _generated(obj: Objective, drawn: _Drawn, margin: float) -> dict[str, torch.Tensor]:
    """The tensors of a generated input (in the ranges of :data:`_ROWS` and below): deterministic in
    ``drawn``; the ratios the clip sees and the weights the cap sees are kept ``margin`` off both."""
    gen = torch.Generator().manual_seed(drawn.seed)
    n, t = len(drawn.lengths), max(drawn.lengths) + drawn.padding
    lengths = torch.tensor(drawn.lengths)
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    low, high = (math.log(v) for v in _RATIOS_DRAWN)
    if obj.kind in ("gspo", "gspo-token"):  # the sequence ratio exp(mean_t log r) is what the clip sees
        seq = _uniform_in_regions(gen, _cut_points(obj), low, high, margin, (n, 1))
        log_ratio = _spread(gen, seq * lengths.unsqueeze(1), mask, 0.4)
    else:
        log_ratio = _uniform_in_regions(gen, _cut_points(obj), low, high, margin, (n, t))
    old = -1.7 - 2.3 * torch.rand(n, t, generator=gen, dtype=torch.float64)
    logp = old + log_ratio
    cap = [] if obj.tis_cap is None else [math.log(obj.tis_cap)]
    w_low, w_high = (math.log(v) for v in _WEIGHTS_DRAWN)
    if obj.tis_level != "token" and obj.tis_cap is not None:  # prod_t rho or its mean is what the cap sees
        seq_rho = _uniform_in_regions(gen, cap, w_low, w_high, margin, (n, 1))
        if obj.tis_level == "geometric":
            seq_rho = seq_rho * lengths.unsqueeze(1)
        log_rho = _spread(gen, seq_rho, mask, 0.3)
    else:
        log_rho = _uniform_in_regions(gen, cap, w_low, w_high, margin, (n, t))
    delta = 3 * torch.rand(n, t, generator=gen, dtype=torch.float64) - 1.5
    return {
        "logp": logp,
        "old_logp": old,
        "rollout_logp": old - log_rho,
        "ref_logp": torch.clamp(logp - delta, max=-0.01),  # a log-probability
        "advantages": torch.tensor(drawn.advantages, dtype=torch.float64),
        "mask": mask,
    }


@dataclasses.dataclass(frozen=True)
class _Alternative:
    """What the code may compute instead of the declared objective: ``objective``, with its KL term's
    sign ``kl_sign`` and, where given, importance weights ``rho`` of the code's own making, or its
    gradient ``terms`` outright (where no weight expresses it)."""

    cause: str
    objective: Objective
    kl_sign: float = 1.0
    rho: torch.Tensor | None = None
    terms: dict[str, torch.Tensor] | None = None


def _declared_rho(obj: Objective, x: dict[str, torch.Tensor]) -> torch.Tensor:
    """The declared importance weights on ``x`` (the mask where none is declared)."""
    if obj.tis_cap is None:
        return x["mask"]
    return importance_weights(
        x["old_logp"], x["rollout_logp"], x["mask"], cap=obj.tis_cap, level=obj.tis_level, mode=obj.tis_mode
    )


def _row_chunks(n: int, parts: int) -> list[list[tuple[int, int]]]:
    """The ways trainers cut ``n`` rows into ``parts`` consecutive micro-batches: ``np.array_split``'s
    (the first ones one row longer) and ``k * n // parts`` boundaries (the last ones longer)."""
    split = [0, *np.cumsum([len(a) for a in np.array_split(np.arange(n), parts)]).tolist()]
    floor = [k * n // parts for k in range(parts + 1)]
    return [list(itertools.pairwise(b)) for b in {tuple(split): None, tuple(floor): None}]


def _structural_alternatives(obj: Objective, x: dict[str, torch.Tensor]) -> list[_Alternative]:
    """Bugs that change the gradient's structure, not a parameter: a dual clip on both signs, CISPO's
    cap taken as eps_high itself, GSPO's summed log-ratio, a token count per micro-batch."""
    alt: list[_Alternative] = []
    m, adv = x["mask"], x["advantages"]
    rho = _declared_rho(obj, x)
    a = adv[:, None].expand(m.shape) if adv.dim() == 1 else adv
    if obj.kind == "ppo" and obj.dual_clip is not None:
        alt.append(
            _Alternative(
                f"the dual clip is applied for A > 0 too: max(min(...), {obj.dual_clip:g} A) on every token "
                "makes the loss the constant -c A wherever A > 0, so those tokens get no gradient; apply it "
                "only where A < 0",
                obj,
                rho=rho * (a < 0),
            )
        )
    if obj.kind == "cispo" and obj.eps_high is not None and obj.eps_high > 0:
        lo, hi = obj.clip_range
        r = torch.exp((x["logp"] - x["old_logp"]) * m)
        alt.append(
            _Alternative(
                f"the CISPO weight is capped at eps_high = {obj.eps_high:g} itself (TRL's absolute "
                f"epsilon_high: clamp(r, max={obj.eps_high:g})), not at 1 + eps_high = {hi:g}",
                obj,
                rho=rho * r.clamp(max=obj.eps_high) / r.clamp(min=lo, max=hi),
            )
        )
    if obj.kind in ("gspo", "gspo-token"):
        # exp(sum_t log r_t) is GSPO's ratio of log-probs scaled by |y_i|; the chain rule gives back |y_i|
        length = m.sum(-1, keepdim=True).clamp(min=1)
        scaled = dict(x, logp=x["logp"] * length, old_logp=x["old_logp"] * length)
        policy = gradient_terms_by_name(obj, scaled, rho)["policy"] * length
        alt.append(
            _Alternative(
                "the sequence ratio is the product exp(sum_t log r_t), not GSPO's geometric mean "
                "exp(mean_t log r_t): the log-ratio is summed over the response, not averaged",
                obj,
                terms={"policy": policy, "kl": gradient_terms_by_name(obj, x)["kl"]},
            )
        )
    if resolve_aggregation(obj.aggregation) == "token-mean":
        tokens = m.sum()
        for parts in (2, 3, 4):
            for chunks in _row_chunks(int(m.shape[0]), parts):
                count = torch.zeros_like(m)
                for start, stop in chunks:
                    count[start:stop] = m[start:stop].sum()
                if bool((count == tokens / parts).all()):
                    continue  # every micro-batch holds the same count: the same gradient
                alt.append(
                    _Alternative(
                        f"the token count is taken per micro-batch: each of M = {parts} micro-batches "
                        "(consecutive rows) is divided by its own token count and by M, not by the batch's "
                        "token count (a per-micro-batch normaliser)",
                        obj,
                        rho=rho * tokens / (parts * count.clamp(min=1)),
                    )
                )
    return alt


def _objective_alternatives(obj: Objective, x: dict[str, torch.Tensor]) -> list[_Alternative]:
    """The bugs trainers ship, each as what the code computes instead (on the input ``x``)."""
    alt: list[_Alternative] = []

    def rep(o: Objective, **changes: Any) -> Objective:
        try:
            return dataclasses.replace(o, **changes)
        except ValueError:  # not a valid objective (e.g. a dual clip on GSPO): never matches
            return o

    if obj.kl == "k3-is" and obj.kl_placement == "loss" and obj.kl_coef != 0:
        # r k3 with the ratio detached: the slope q (1 - exp(-delta)) of k3 scaled, without q's own k3 q
        m = x["mask"]
        log_q = (x["logp"] - x["old_logp"]) * m
        if obj.kind in ("gspo", "gspo-token"):
            log_q = (log_q.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)).expand_as(m)
        w = aggregation_weights(m, obj.aggregation, constant=obj.constant)
        _, k3_slope = kl_estimate(x["logp"], x["ref_logp"], "k3")
        alt.append(
            _Alternative(
                "the ratio weighting k3 is detached (r.detach() * k3): the KL's slope is "
                "r (1 - exp(-delta)), not r delta, so the KL gradient is k3's (the forward KL's) "
                "reweighted; keep the ratio in the graph, as TRL's use_bias_correction_kl does",
                obj,
                terms={
                    "policy": gradient_terms_by_name(obj, x)["policy"],
                    "kl": obj.kl_coef * w * torch.exp(log_q) * k3_slope * m,
                },
            )
        )
    if obj.kl is not None and obj.kl_coef != 0:
        if obj.kl_placement == "loss":
            alt.append(
                _Alternative("the KL term's gradient has the wrong sign (the KL is maximised)", obj, -1.0)
            )
            alt.append(
                _Alternative(
                    "the KL term has no gradient (missing or detached)", rep(obj, kl=None, kl_coef=0.0)
                )
            )
        for est in ("k1", "k2", "k3", "k3-is"):
            if est != obj.kl or obj.kl_placement == "reward":
                where = (
                    "in the loss"
                    if obj.kl_placement == "loss"
                    else "in the loss, though it was declared in the reward"
                )
                alt.append(
                    _Alternative(
                        f"the KL term is the {est} estimator {where}", rep(obj, kl=est, kl_placement="loss")
                    )
                )
    for agg in AGGREGATION_MODES:
        if resolve_aggregation(obj.aggregation) != agg:
            what = f"the loss aggregates with {agg}, not {resolve_aggregation(obj.aggregation)}"
            if obj.kind in ("gspo", "gspo-token") and agg in ("token-mean", "token-sum"):
                what = (
                    f"the sequence ratio is broadcast over tokens and reduced with {agg}: each sequence is "
                    "weighted by its length"
                )
            alt.append(_Alternative(what, rep(obj, aggregation=agg, constant=None)))
    if obj.eps_high is not None and obj.eps_high != obj.eps_low and obj.kind != "cispo":
        alt.append(
            _Alternative(
                "the clip is symmetric at 1 +- eps_low, not [1 - eps_low, 1 + eps_high]",
                rep(obj, eps_high=obj.eps_low),
            )
        )
    if obj.kind == "cispo":
        alt.append(
            _Alternative(
                "CISPO clips from below too (a PPO-style [1 - eps_low, 1 + eps_high])", rep(obj, eps_low=0.2)
            )
        )
        alt.append(
            _Alternative(
                "the ratio is clipped by PPO's surrogate, not CISPO's stop-gradient weight",
                rep(obj, kind="ppo"),
            )
        )
    if obj.kind == "ppo":
        alt.append(_Alternative("the sequence-level (GSPO) ratio is used", rep(obj, kind="gspo")))
        alt.append(_Alternative("the sequence-level (GSPO-token) ratio is used", rep(obj, kind="gspo-token")))
    if obj.kind in ("gspo", "gspo-token"):
        alt.append(_Alternative("token-level ratios are used, not the sequence ratio", rep(obj, kind="ppo")))
    if obj.kind == "gspo":
        alt.append(
            _Alternative(
                "the GSPO-token form (s_it = sg(s_i) pi_it / sg(pi_it), verl's): each token keeps its own "
                "weight and advantage, where the declared sequence form (TRL's, OpenRLHF's) gives every "
                "token of a response the response's mean",
                rep(obj, kind="gspo-token"),
            )
        )
    if obj.kind == "gspo-token":
        alt.append(
            _Alternative(
                "the sequence form (the gradient flows through s_i = exp(mean_t log r_t): TRL's, "
                "OpenRLHF's), not the declared GSPO-token form sg(s_i) pi_it / sg(pi_it) (verl's): "
                "every token of a response gets the response's mean of weight times advantage",
                rep(obj, kind="gspo"),
            )
        )
    if obj.tis_cap is not None:
        cap, level, mode = obj.tis_cap, obj.tis_level, obj.tis_mode
        old, rollout, mask = x["old_logp"], x["rollout_logp"], x["mask"]
        alt.append(_Alternative("no rollout-vs-training importance correction", rep(obj, tis_cap=None)))
        per = {
            "token": "per token",
            "sequence": "per sequence (prod_t rho_t)",
            "geometric": "as the sequence's geometric mean (prod_t rho_t)^(1/|y|)",
        }
        for other in ("token", "sequence", "geometric"):
            # a declared sequence weight taken as its geometric mean has its own words below
            if other != level and (level, other) != ("sequence", "geometric"):
                alt.append(
                    _Alternative(f"the importance weight is taken {per[other]}", rep(obj, tis_level=other))
                )
        flipped = "mask" if mode == "truncate" else "truncate"
        how = {"mask": "masked (0 above the cap, MIS)", "truncate": "truncated at the cap (TIS)"}
        alt.append(
            _Alternative(
                f"the importance weight is {how[flipped]}, not {how[mode]}", rep(obj, tis_mode=flipped)
            )
        )
        alt.append(
            _Alternative(
                "the importance weight is inverted: pi_rollout / pi_old, not pi_old / pi_rollout",
                obj,
                rho=importance_weights(rollout, old, mask, cap=cap, level=level, mode=mode),
            )
        )
        if mode == "truncate":
            raw = importance_weights(old, rollout, mask, cap=math.inf, level=level)
            alt.append(
                _Alternative(
                    f"the cap is applied from below: max(rho, {cap:g}) (clamp(min=C)), not min(rho, {cap:g})",
                    obj,
                    rho=torch.clamp(raw, min=cap) * mask,
                )
            )
        if level == "sequence":  # exp(mean_t log rho) = the sequence weight of log-probs divided by |y|
            length = mask.sum(-1, keepdim=True).clamp(min=1)
            alt.append(
                _Alternative(
                    "the sequence weight is the geometric mean exp(mean_t log rho_t), not the sequence ratio "
                    "prod_t rho_t = exp(sum_t log rho_t)",
                    obj,
                    rho=importance_weights(
                        old / length, rollout / length, mask, cap=cap, level=level, mode=mode
                    ),
                )
            )
    return alt + _structural_alternatives(obj, x)


def _loss_inputs(ctx: Context) -> set[str]:
    """The extra inputs (ref_logp, rollout_logp) the loss takes."""
    assert ctx.adapter.loss is not None
    return keyword_inputs(ctx.adapter.loss) & set(LOSS_EXTRAS)


def _objective_gradient(
    ctx: Context, x: dict[str, torch.Tensor], call: str
) -> tuple[torch.Tensor, torch.dtype]:
    """``dL/dlogp`` of the loss on ``x`` by autograd, and the loss's dtype."""
    assert ctx.adapter.loss is not None
    leaf = x["logp"].clone().requires_grad_(True)
    extra: dict[str, Any] = {k: x[k] for k in sorted(_loss_inputs(ctx))}
    extra.update(loss_keywords(ctx, x["mask"]))
    adv = prescaled_advantages(ctx, x["advantages"], x["mask"])
    out = scalar_loss(guarded(ctx.adapter.loss, leaf, x["old_logp"], adv, x["mask"], what=call, **extra))
    (grad,) = torch.autograd.grad(out, leaf, allow_unused=True)
    return (torch.zeros_like(leaf) if grad is None else grad.detach()), out.dtype


def _objective_unit(dtype: torch.dtype) -> float:
    """The unit roundoff a loss is judged at: float32's, or its output dtype's if coarser. Trainers compute
    log-probs, ratios and KL terms in float32 at best, which a float64 output does not show (OpenRLHF's
    compute_approx_kl casts the log-probs to float32 inside a float64 loss)."""
    return max(unit_roundoff(dtype), PRECISIONS["float32"])


def _agrees(
    g: torch.Tensor,
    obj: Objective,
    x: dict[str, torch.Tensor],
    u: float,
    terms: dict[str, torch.Tensor] | None = None,
    kl_sign: float = 1.0,
) -> bool:
    """``g`` equals ``policy + kl_sign kl`` (``terms``, default: ``obj``'s on ``x``) within the rounding
    bound at unit roundoff ``u``, ``SAFETY (2 + log2 N T) u kappa``, relative to each token's terms and to
    the largest of them, plus a count regulariser's :data:`COUNT_EPS_RTOL`. ``kappa = 1 + max_i sum_t
    mask_it (|logp| + |old_logp| + |ref_logp| + |rollout_logp|)``: a ratio ``exp(a - b)`` errs by a relative
    ``u (|a| + |b|)``, a sequence ratio or weight by the sum over its row; a KL slope by
    ``|beta| w (1 + exp(-delta))`` times the error of ``delta``, ``u (|logp| + |ref_logp|)``."""
    if terms is None:
        terms = gradient_terms_by_name(obj, x)
    tol = objective_tolerance(obj, x, terms, u)
    pred = terms["policy"] + kl_sign * terms["kl"]
    return bool(torch.isfinite(g).all()) and bool(((g - pred).abs() <= tol).all())


def k3_bias(x: dict[str, torch.Tensor]) -> str:
    """The fact about a k3 KL term in the loss, with its size on the input ``x`` (proofs/11_objectives §5)."""
    m = x["mask"].bool()
    delta = (x["logp"] - x["ref_logp"])[m]
    slope = 1 - torch.exp(-delta)  # k3's derivative; the reverse KL's unbiased per-token one (k2's) is delta
    rel = float((slope - delta).norm() / delta.norm().clamp(min=1e-300))
    return (
        "k3 in the loss: its expected gradient is the forward KL's, grad KL(pi_ref || pi), not the reverse "
        "KL's, grad KL(pi || pi_ref), that k3 estimates (proofs/11_objectives.py §5); per token its slope "
        f"1 - exp(-delta) differs from the reverse-KL estimator's (k2: delta) by {100 * rel:.0f}% here "
        f"(relative L2, delta = logp - ref_logp in [{float(delta.min()):.2f}, {float(delta.max()):.2f}]; "
        "about |delta|/2 per token); k2 in the loss, or k1 in the reward, follows the reverse KL"
    )


def _term_probes(
    ctx: Context, obj: Objective, x: dict[str, torch.Tensor], g: torch.Tensor, u: float, call: str
) -> str | None:
    """A confirmed cause from designed variations of ``x``: the importance weight's probes (weight 1;
    ratio 1 with weight 1/2, where a weight carrying a gradient doubles dL/dlogp) and advantages 0 (only
    the KL term is left); None when no probe isolates the difference."""

    def gradient(y: dict[str, torch.Tensor]) -> torch.Tensor | None:
        try:
            return _objective_gradient(ctx, y, call + " (a probe)")[0]
        except PropertyFailure:
            return None

    if obj.tis_cap is not None:
        one = dict(x, rollout_logp=x["old_logp"])
        g1 = gradient(one)
        if g1 is not None and _agrees(g1, obj, one, u):
            return (
                "the importance weights differ: with rollout_logp = old_logp (weight 1) the gradient is the "
                "declared objective's"
            )
        half = min(0.5, obj.tis_cap / 2)
        share = (
            x["mask"] / x["mask"].sum(-1, keepdim=True).clamp(min=1) if obj.tis_level == "sequence" else 1.0
        )
        at_one = dict(x, old_logp=x["logp"], rollout_logp=x["logp"] - math.log(half) * share)
        g_half = gradient(at_one)
        terms = gradient_terms_by_name(obj, at_one)
        if g_half is not None and _agrees(
            g_half, obj, at_one, u, {"policy": 2 * terms["policy"], "kl": terms["kl"]}
        ):
            return (
                f"the importance weight carries a gradient: at ratio 1 with weight {half:g} dL/dlogp is "
                "twice the declared objective's, as for rho = exp(logp - rollout_logp) not detached "
                "(compute it from old_logp, or detach it)"
            )
    zero = dict(x, advantages=torch.zeros_like(x["advantages"]))
    g0 = gradient(zero)
    if g0 is None or not bool(torch.isfinite(g0).all()):
        return None
    terms = gradient_terms_by_name(obj, x)
    kl_ok = _agrees(g0, obj, x, u, {"policy": torch.zeros_like(g0), "kl": terms["kl"]})
    policy_ok = _agrees(g - g0, obj, x, u, {"policy": terms["policy"], "kl": torch.zeros_like(g0)})
    has_kl = bool(terms["kl"].abs().max() > 0)
    if kl_ok and not policy_ok and has_kl:
        return (
            "the policy term differs; the KL term matches (with advantages 0 the gradient is the declared KL "
            "term's)"
        )
    if policy_ok and not kl_ok:
        if has_kl:
            return (
                "the KL term differs; the policy term matches (the gradient's part that scales with the "
                "advantages)"
            )
        return (
            f"the loss has a gradient at advantages 0 (max |dL/dlogp| = {float(g0.abs().max()):.3g}) that "
            "the declared objective, without a KL term in the loss, does not have; the policy term matches"
        )
    return None


def _designed(ctx: Context, p: Any) -> list[Any]:
    return ["designed"]


def _objective_note(ctx: Context, p: Any) -> None:
    obj = ctx.adapter.objective
    text = (
        f"objective: {obj} [declared, matches the loss's gradient on the designed probe and generated inputs]"
    )
    if obj.kl == "k3" and obj.kl_placement == "loss" and obj.kl_coef != 0:
        text += "; " + k3_bias(_objective_probe())
    if obj.kl == "k3-is" and obj.kl_placement == "loss" and obj.kl_coef != 0:
        text += (
            "; k3-is in the loss: r k3 with the ratio in the graph, slope r delta, whose expectation under "
            "pi_old is the reverse KL's gradient at any ratio (proofs/11_objectives.py §5)"
        )
    raise PropertyFailure(Finding(text, kind="objective", facts={"objective": str(obj)}), verdict="NOTE")


@conformance_property(
    level="identity",
    examples=_designed,
    strategy=_drawn,
    applies=lambda ctx, p: (
        needs_loss(ctx, p)
        or (None if ctx.adapter.objective is not None else "no objective declared (Adapter(objective=...))")
    ),
    conclude=_objective_note,
)
def test_loss_objective(ctx: Context, ex: Any, p: Any) -> None:
    """With a declared objective (PPO, dual clip, GSPO, CISPO; truncated or masked importance sampling
    per token or sequence; a k1/k2/k3 KL term in the loss or in the reward), dL/dlogp_it equals the
    oracle's per-token gradient (sigma_ref.objectives.loss_gradient) on a designed probe and on generated
    inputs (ratios inside and outside every clip range, sequences of different lengths, rollout and
    reference log-probs), within the rounding bound of the loss's precision; a mismatch names the term
    that differs.
    """
    obj = ctx.adapter.objective
    assert obj is not None and ctx.adapter.loss is not None
    named = "".join(", " + k for k in sorted(_loss_inputs(ctx)))
    if isinstance(ex, _Drawn):
        x = _generated(obj, ex, _margin(ctx))
        where = (
            f"{len(ex.lengths)} generated responses of lengths {list(ex.lengths)} (T = {x['mask'].shape[1]})"
        )
    else:
        x = _objective_probe()
        where = "6 responses of lengths 1-6 (the designed probe)"
    call = f"loss(logp, old_logp, advantages, mask{named}) on {where}"
    g, dtype = _objective_gradient(ctx, x, call)
    u = max(_objective_unit(dtype), unit_roundoff(loss_precision(ctx).judged))
    if _agrees(g, obj, x, u):
        return
    found = next(
        (
            a
            for a in _objective_alternatives(obj, x)
            if (a.objective != obj or a.kl_sign < 0 or a.rho is not None or a.terms is not None)
            and _agrees(
                g,
                a.objective,
                x,
                u,
                a.terms if a.terms is not None else gradient_terms_by_name(a.objective, x, a.rho),
                a.kl_sign,
            )
        ),
        None,
    )
    cause = (
        found.cause if found is not None else precision_cause(ctx) or _term_probes(ctx, obj, x, g, u, call)
    )
    terms = gradient_terms_by_name(obj, x)
    pred = terms["policy"] + terms["kl"]
    diff = (g - pred).abs().nan_to_num(nan=math.inf)
    i, t = (int(v) for v in torch.nonzero(diff == diff.max())[0])
    fact = ""
    if found is not None and found.objective.kl == "k3" and found.objective.kl_placement == "loss":
        if not (obj.kl == "k3" and obj.kl_placement == "loss"):
            fact = "; " + k3_bias(x)
    ratio = float(torch.exp(x["logp"] - x["old_logp"])[i, t])
    raise PropertyFailure(
        Finding(
            f"dL/dlogp[{i}, {t}] = {float(g[i, t]):.6g}, but should be {float(pred[i, t]):.6g} under the "
            f"declared objective (policy term {float(terms['policy'][i, t]):.6g}, KL term "
            f"{float(terms['kl'][i, t]):.6g}; ratio {ratio:.3g}, A = {float(x['advantages'][i]):.3g})" + fact,
            call,
            cause=cause,
            confirmed=cause is not None,
            kind="value",
            facts={"index": [i, t], "actual": float(g[i, t]), "expected": float(pred[i, t]), "ratio": ratio},
        )
    )
