"""Level 3, silent groups and DAPO.

Silent groups give zero advantages and a zero update, never NaN; DAPO's keep mask is
``0 < k < G``; groups of one follow the convention (docs/spec.md §7, level 3).

Each ``test_<name>`` is one property, written once under ``@conformance_property`` (``spec/__init__.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from sigma_ref._compare import find_mismatch
from sigma_ref.advantages import dapo_keep_mask
from sigma_ref.conformance.adapter import ACCURACY_THRESHOLD, Batch, detect_keep_metric, token_lengths
from sigma_ref.conformance.core import Context, Finding, PropertyFailure, conformance_property, guarded
from sigma_ref.conformance.inputs import (
    BINARY,
    WITH_SILENT,
    Policy,
    at_last,
    batches,
    call_loss,
    call_token,
    groups_of,
    needs_policy_loss,
    token_only,
    token_repr,
)
from sigma_ref.conformance.reference import as_numpy
from sigma_ref.filters import filter_keep_mask


@conformance_property(
    level="silent",
    examples=lambda ctx, p: list(WITH_SILENT),
    strategy=lambda ctx, p: batches(ctx, silent="always").flatmap(
        lambda b: batches(ctx).map(lambda live: _concat(b, live))
    ),
)
def test_silent_group_zero(ctx: Context, batch: Batch, p: Any) -> None:
    """A silent group (all rewards equal, k = 0 or k = G) gets A = 0 exactly, never NaN."""
    a = ctx.flat(batch)
    keep = as_numpy(dapo_keep_mask(batch.rewards, index=batch.index)).astype(bool)
    silent = ~keep & (np.bincount(groups_of(batch))[groups_of(batch)] > 1)
    ctx.fail_nonzero(
        silent & ~(np.abs(a) <= np.maximum(1e-7, ctx.tolerance(batch))),
        a,
        lambda i: f"out[{i}]={a[i]} in a silent group (all rewards {batch.rewards[i]:g}), but should be 0",
        batch,
        a,
    )


#: Largest |A| a silent group of non-dyadic rewards may get and pass: live advantages are at least
#: 1/sqrt(G-1) in size, so 1e-2 leaves a factor > 10 below any update the group could give,
#: while a float32 mean that is one ulp off divided by std + eps (eps >= 1e-6) stays far below it.
_SILENT_NOISE = 1e-2

#: The line between hygiene and a wrong algorithm (docs/spec.md §7, level 3): a silent group whose
#: members all get the same |A| = a moves the policy by a (1/G) sum_i s_i, a same-direction update. A
#: live group's advantages under std normalisation have root mean square 1 (ddof 0; sqrt((G-1)/G) >= 0.7
#: for ddof 1), so |A| > 0.1 is more than a tenth of a live group's update: a real update from a group
#: that should give none, a FAIL. Between 1e-2 and 0.1 the advantage is a residue-level one (a rounding
#: residue ~u |R| over std + eps): a WARN.
_SILENT_UPDATE = 0.1


def _non_dyadic_examples(ctx: Context, p: Any) -> list[Batch]:
    """Several silent groups in one batch, and single silent groups: torch's vectorised mean over
    rows of one batch and its mean of one row round differently, so each shape catches other code."""
    out = [
        Batch.grouped([[0.1] * 6, [0.3] * 6, [0.7] * 6, [1 / 3] * 6, [0.9, 0.2, 0.4, 0.1, 0.6, 0.3]]),
        Batch.grouped([[0.1] * 3, [0.7] * 3, [0.2, 0.9, 0.4]]),
    ]
    out += [Batch.grouped([[v] * g]) for g in (3, 6, 7) for v in (0.1, 0.2, 0.7)]
    return out


@conformance_property(
    level="silent",
    examples=_non_dyadic_examples,
    required=lambda ctx: ctx.precision == "float64",
)
def test_non_dyadic_silent_group(ctx: Context, batch: Batch, p: Any) -> None:
    """A silent group of rewards that are not exact binary fractions (0.1, 0.3, 1/3, 0.7) gets |A| <=
    1e-2. Its mean is not exactly the reward, so R - mean is a rounding residue; divided by a std of the
    same size (no eps, or an eps far below the residue) every member gets the same O(1) advantage, a
    same-direction update from a group that should give none: |A| > 0.1 (a tenth of a live group's
    update, whose advantages have root mean square ~1) is a FAIL, 1e-2 < |A| <= 0.1 a residue-level WARN.
    Code whose statistics are in float32 (detected) gets a WARN at any size: float32's own rounding of
    the mean (~1e-8 of |R|) over an eps below it (the seed post's 1e-8) is that precision's behaviour.
    """
    a = ctx.flat(batch)
    keep = as_numpy(dapo_keep_mask(batch.rewards, index=batch.index)).astype(bool)
    bad = ~keep & (np.abs(a) > _SILENT_NOISE)
    if not bad.any():
        return
    i = int(np.argmax(np.where(bad, np.abs(a), -1.0)))
    big = bool(np.abs(a[i]) > _SILENT_UPDATE)
    # the targeted probe: the same batch with the silent groups' rewards made dyadic (exact means) gives
    # 0 there, and the code is right on live groups (else another defect moves the silent group too)
    dyadic = np.where(keep, batch.rewards, np.round(batch.rewards * 4) / 4)
    b = ctx.flat(batch.with_rewards(dyadic))
    confirmed = bool(np.all(np.abs(b[~keep]) <= _SILENT_NOISE)) and _right_on_live_groups(ctx, batch)
    ctx.fail(
        f"out[{i}]={a[i]:.6g} in a silent group (all rewards {batch.rewards[i]:.17g}), but should be 0 "
        f"(|A| <= {_SILENT_NOISE:g}; every member moves the same way, and |A| > {_SILENT_UPDATE:g} is more "
        f"than a tenth of a live group's update{'' if big else ', so this one is residue level'})",
        batch,
        a if not confirmed else None,
        cause=_residue_cause(ctx) if confirmed else None,
        verdict="FAIL" if big else "WARN",
        kind="value",
        facts={"index": i, "actual": float(a[i]), "expected": 0.0},
    )


def _right_on_live_groups(ctx: Context, batch: Batch) -> bool:
    """Whether the code matches the reference on two live groups of the batch's group size."""
    g = batch.group_size or 3
    live = Batch.grouped([np.resize([1.0, 0.0, 0.5, 0.25], g), np.resize([0.0, 1.0, 0.75], g)])
    try:
        got = ctx.flat(live)
    except PropertyFailure:
        return False
    expected = ctx.expected(live)
    return (
        find_mismatch(got, expected, rtol=0.0, atol=ctx.tolerance(live, expected), noun="advantages") is None
    )


def _residue_cause(ctx: Context) -> str:
    """Why a rounding residue of the mean survives, from what detection measured (precision, eps)."""
    eps = None
    det = ctx.detection
    if det is not None and det.convention is not None and det.convention.scale != "none":
        eps = det.convention.eps
    head = (
        "the group's mean of equal non-dyadic rewards is not exactly the reward, so R - mean is a rounding "
        "residue (the same groups with dyadic rewards give 0)"
    )
    if ctx.precision != "float64":
        where = (
            f"; the statistics are computed in {ctx.precision} (detected), where the residue is ~1e-8 "
            f"of |R|{'' if eps is None else f' and eps {eps:g} does not cover it'}"
        )
    elif eps == 0:
        where = "; the divisor has no eps (detected eps = 0), so the residue is divided by a std of its size"
    elif eps is not None:
        where = f"; the detected eps {eps:g} is far below the std the residue leaves"
    else:
        where = ""
    return head + where + "; test silence with max == min, or add an eps above the residue"


def _concat(a: Batch, b: Batch) -> Batch:
    """Two batches side by side (ids of ``b`` shifted past ``a``'s)."""
    if a.group_size is not None and a.group_size == b.group_size:
        return Batch.grouped(np.concatenate([a.rewards, b.rewards]).reshape(-1, a.group_size))
    if a.group_size is not None and b.group_size is not None:
        return a  # contiguous layouts need one G: keep the silent batch alone
    if a.index.dtype.kind in "iu" and b.index.dtype.kind in "iu":
        shifted = b.index + a.index.max() + 1
    else:  # ids of any kind: make b's distinct from a's
        shifted = np.array([f"b{x}" for x in b.index.tolist()], dtype=object)
        a = Batch(a.rewards, np.array([f"a{x}" for x in a.index.tolist()], dtype=object))
    return Batch(np.concatenate([a.rewards, b.rewards]), np.concatenate([a.index, shifted]))


@conformance_property(
    level="silent",
    examples=lambda ctx, p: [Batch.grouped([[1.0] * 4, [0.0] * 4]), Batch.grouped([[0.5] * 3])],
    strategy=lambda ctx, p: batches(ctx, silent="always"),
)
def test_all_silent_batch(ctx: Context, batch: Batch, p: Any) -> None:
    """A batch of only silent groups gets A = 0 everywhere (the batch std is 0 too)."""
    a = ctx.flat(batch)
    ok = np.abs(a) <= np.maximum(1e-7, ctx.tolerance(batch))
    if not ok.all():
        i = int(np.argmax(~ok))
        ctx.fail(
            f"out[{i}]={a[i]} in an all-silent batch, but should be 0",
            batch,
            a,
            cause="with every group silent the batch std is 0 too: 0/0 needs eps or a guard"
            if not np.isfinite(a[i])
            else None,
            kind="value",
            facts={"index": i, "actual": float(a[i]), "expected": 0.0},
        )


@conformance_property(
    level="silent",
    examples=lambda ctx, p: [(Batch.grouped([[1.0] * 4, [0.0] * 4]), 0)],
    applies=needs_policy_loss,
)
def test_silent_zero_update(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    """Silent groups give a zero update: g = 1{0<k<G} sigma delta_s = 0, finite, through the loss."""
    batch, s = ex
    pol = Policy.make(batch.n, s)
    a = torch.from_numpy(ctx.flat(batch))
    loss = call_loss(ctx, pol.logp(), a, pol.mask, batch)
    (grad,) = torch.autograd.grad(loss, pol.W, allow_unused=True)
    if grad is not None and not (torch.isfinite(grad).all() and (grad.abs() <= 1e-12).all()):
        ctx.fail(
            f"update of an all-silent batch: actual max |grad|={float(grad.abs().max())}, but should be 0",
            batch,
            a.numpy(),
            kind="value",
            facts={"actual": float(grad.abs().max()), "expected": 0.0},
        )


@conformance_property(
    level="silent",
    examples=lambda ctx, p: (
        [*WITH_SILENT, *BINARY]
        + ([Batch.grouped([[0.1, 0.1, 0.1], [0.3, 1.2, 0.3]])] if ctx.adapter.keep_mask is not None else [])
    ),
    strategy=lambda ctx, p: batches(ctx, binary=True),
)
def test_dapo_keep_mask(ctx: Context, batch: Batch, p: Any) -> None:
    """DAPO's dynamic sampling keeps a group iff 0 < k < G (sigma > 0): the implementation's keep mask
    (or its set of groups with non-zero advantages) equals dapo_keep_mask(R), or dapo_keep_mask of
    the accuracy for a filter that counts k on it (keep_mask_rule); a silent group of non-dyadic
    rewards ([0.1, 0.1, 0.1], spread 1e-17 in floating point) is dropped.
    """
    signal = batch.rewards
    if ctx.adapter.keep_mask is not None and _keep_metric(ctx)[0] == "accuracy":
        signal = _accuracy(batch.rewards)
    want = _declared_keep(ctx, signal, batch)
    if ctx.adapter.keep_mask is not None:
        got = guarded(ctx.adapter.keep, batch, what=lambda: f"keep_mask on {batch!r}").numpy().astype(bool)
        what = "keep_mask"
    else:
        a = ctx.flat(batch)
        g = groups_of(batch)
        got = (np.bincount(g, np.abs(a)) > np.bincount(g, np.maximum(1e-7, ctx.tolerance(batch))))[g]
        what = "groups with a non-zero advantage"
    if got.shape != want.shape or not np.array_equal(got, want):
        i = int(np.argmax(got != want)) if got.shape == want.shape else 0
        ctx.fail(
            f"{what}[{i}]={bool(got[i]) if got.shape == want.shape else got.shape}, but should be "
            f"{bool(want[i])} (keep iff 0 < k < G)",
            batch,
            cause=(_keep_rule_cause(ctx) or _extra_rule_cause(ctx, _keep_metric(ctx)[0]))
            if what == "keep_mask"
            else None,
            kind="value" if got.shape == want.shape else "shape",
        )


#: Probes of a keep filter's rule, three groups of 3 each: a silent group of non-dyadic rewards
#: (std 1.4e-17 in floating point), a silent group of a dyadic reward other than 0 and 1, and a live
#: binary group.
_RULE_PROBE = Batch.grouped([[0.1, 0.1, 0.1], [0.5, 0.5, 0.5], [1.0, 0.0, 1.0]])


def _declared_keep(ctx: Context, signal: np.ndarray, batch: Batch) -> np.ndarray:
    """The keep mask the filter should give: ``0 < k < G`` on ``signal``, with the declared band on
    the group's mean and std threshold (:func:`sigma_ref.filters.filter_keep_mask`)."""
    return filter_keep_mask(
        signal, index=batch.index, band=ctx.adapter.keep_band, min_std=ctx.adapter.keep_min_std
    )


def _declared_rules(ctx: Context) -> str:
    rules = []
    if ctx.adapter.keep_band is not None:
        rules.append(f"{ctx.adapter.keep_band[0]:g} < mean < {ctx.adapter.keep_band[1]:g}")
    if ctx.adapter.keep_min_std is not None:
        rules.append(f"std > {ctx.adapter.keep_min_std:g}")
    return "".join(f" and {r}" for r in rules) + (" [declared]" if rules else "")


#: Band probe: binary groups of 8 with k = 1..7 correct (means 1/8..7/8); 0 < k < G keeps all.
_BAND_PROBE = Batch.grouped([[1.0] * k + [0.0] * (8 - k) for k in range(1, 8)])
#: Std probe: wrong-only groups (every reward < 0.5) of spread delta = 1e-3 .. 0.3 in one response;
#: the reward's 0 < k < G keeps all, a std threshold drops the narrow ones.
_SPREADS = (1e-3, 1e-2, 3e-2, 0.1, 0.3)
_STD_PROBE = Batch.grouped([[0.1, 0.1, 0.1, 0.1 + d] for d in _SPREADS])


def _per_group(ctx: Context, batch: Batch, G: int) -> list[bool] | None:
    try:
        kept: list[bool] = ctx.adapter.keep(batch).numpy().astype(bool).reshape(-1, G)[:, 0].tolist()
    except Exception:
        return None
    return kept


def _extra_rule_cause(ctx: Context, metric: str) -> str | None:
    """A rule beyond ``0 < k < G`` the filter applies, measured on the band and std probes."""
    if ctx.adapter.keep_band is None:
        kept = _per_group(ctx, _BAND_PROBE, 8)
        if kept is not None and any(kept) and not all(kept):
            ks = [k for k, keep in zip(range(1, 8), kept, strict=True) if keep]
            if ks == list(range(ks[0], ks[-1] + 1)):
                return (
                    f"the filter also drops groups whose mean {metric} is outside a band: of binary groups "
                    f"of 8 with k = 1..7 correct it keeps k = {ks[0]}..{ks[-1]} only (lo < mean < hi, "
                    f"lo in [{(ks[0] - 1) / 8:g}, {ks[0] / 8:g}), hi in ({ks[-1] / 8:g}, "
                    f"{(ks[-1] + 1) / 8:g}]), beyond 0 < k < G; declare it (Adapter keep_band=(lo, hi)) "
                    "if the trainer's config sets one"
                )
    if ctx.adapter.keep_min_std is None:  # an accuracy filter drops every wrong-only probe group
        kept = _per_group(ctx, _STD_PROBE, 4)
        if kept is not None and any(kept) and not all(kept) and kept == sorted(kept):
            first = kept.index(True)
            stds = [float(np.std([0.1, 0.1, 0.1, 0.1 + d])) for d in _SPREADS]
            lo = f"{stds[first - 1]:.3g}" if first > 0 else "0"
            return (
                f"the filter also drops groups whose reward std is below a threshold between {lo} and "
                f"{stds[first]:.3g} (of groups whose one reward differs by "
                f"{', '.join(map(str, _SPREADS))} it keeps those from {_SPREADS[first]} up): a std threshold "
                "beyond 0 < k < G; declare it "
                "(Adapter keep_min_std=...) if the trainer's config sets one"
            )
    return None


def _keep_rule_cause(ctx: Context) -> str | None:
    """The rule a filter that disagrees with ``0 < k < G`` applies, confirmed on :data:`_RULE_PROBE`
    (and a second probe of other values), or ``None`` when no known rule fits both."""
    try:
        got = ctx.adapter.keep(_RULE_PROBE).numpy().astype(bool).reshape(3, 3)[:, 0]
        other = Batch.grouped([[0.7, 0.7, 0.7], [0.25, 0.25, 0.25], [0.0, 1.0, 1.0]])
        again = ctx.adapter.keep(other).numpy().astype(bool).reshape(3, 3)[:, 0]
    except Exception:
        return None
    if got.tolist() == again.tolist() == [True, False, True]:
        return (
            "the filter tests silence with a floating-point std (std != 0 or std > 0): equal non-dyadic "
            "rewards ([0.1, 0.1, 0.1], [0.7, 0.7, 0.7]) leave a std of ~1e-17 and their group is kept, while "
            "equal dyadic ones are dropped; test max > min"
        )
    if got.tolist() == again.tolist() == [True, True, True]:
        return (
            "the filter drops only all-wrong (mean 0) or only all-right (mean 1) groups: silent groups of "
            "rewards other than 0 and 1 ([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]) are kept"
        )
    return None


def _singleton_examples(ctx: Context, p: Any) -> list[Batch]:
    if ctx.adapter.ragged:
        return [Batch(np.array([0.7, 1.0, 0.0, 0.2]), np.array([5, 1, 1, 9]))]
    return [Batch.grouped([[0.7], [0.2], [1.0]])]


@conformance_property(
    level="silent",
    examples=_singleton_examples,
    required=lambda ctx: ctx.reference.singleton != "error",
)
def test_singleton_groups(ctx: Context, batch: Batch, p: Any) -> None:
    """A group of one response follows the convention: error (raise), zero (A = 0) or unit_std (A = R /
    (1 + eps)); never NaN. Advisory where the convention says error.
    """
    ref = ctx.reference
    if ref.singleton == "error":
        got = guarded(ctx.adapter, batch, what=lambda: ctx.adapter.call_repr(batch), refusal_ok=True)
        if got is None:
            return
        out = got.numpy()
        single = np.bincount(groups_of(batch))[groups_of(batch)] == 1
        ctx.fail(
            f"groups of one response got {out[single].tolist()}, but should raise (no baseline) "
            f"under {ref.name}",
            batch,
            cause="singleton groups are not rejected; declare a convention "
            "with singleton='zero' or 'unit_std', or raise",
            kind="accepted",
        )
    a = ctx.flat(batch)
    ctx.compare(f"advantages of groups of one ({ref.singleton})", batch, a, ctx.expected(batch))


#: Group 0 holds a rejected response (row 2: an all-zero mask); group 1 is silent and holds
#: one too (row 8); group 2 is a plain live group.
_REJECTED = Batch(
    np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 3.0, 1.0, 0.0]),
    np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2]),
)
_REJECTED_ROWS = np.array([2, 8])


@conformance_property(
    level="silent",
    examples=lambda ctx, p: [_REJECTED],
    applies=token_only,
)
def test_rejected_rows_ignored(ctx: Context, batch: Batch, p: Any) -> None:
    """Layout token: a rejected response (response_mask all 0) gets A = 0 on every token and does not
    move its siblings' baseline: their advantages equal oracle(R) of the group without it. Counting it
    as a response with reward 0 is a WARN with the measured change, not a FAIL: its token rewards do
    sum to 0, so GRPO over the group as the trainer collected it is computed right (verl 0.9.1's
    outcome estimators ship this); leaving rejected responses out is a data policy on top of the
    algorithm. Any other change to the siblings is a FAIL.
    """
    rows = _REJECTED_ROWS
    lengths = token_lengths(batch.n)
    lengths[rows] = 0
    _, _, adv = call_token(ctx, batch, lengths)
    call = token_repr(ctx, batch, lengths)
    if (adv[rows] != 0).any():
        raise PropertyFailure(
            Finding(
                f"advantages of a rejected response (all-zero mask, row {int(rows[0])}) = "
                f"{adv[rows][adv[rows] != 0][:3].tolist()}, but should be 0 on every token",
                call,
                cause="the advantages are not multiplied by response_mask",
                confirmed=True,
                kind="value",
            )
        )
    keep = np.ones(batch.n, dtype=bool)
    keep[rows] = False
    a = at_last(adv, lengths)[keep]
    kept = Batch(batch.rewards[keep], batch.index[keep])
    expected = ctx.expected(kept)
    tol = ctx.tolerance(kept, expected)
    found = find_mismatch(a, expected, rtol=0.0, atol=tol, noun="advantages")
    if found is None:
        return
    as_zero = batch.rewards.copy()
    as_zero[rows] = 0.0  # the rejected rows' token rewards sum to 0
    counted = ctx.expected(batch.with_rewards(as_zero))[keep]
    effect = np.abs(a - expected)
    silent_moved = a[kept.index == 1]
    measured = (
        f"measured: siblings' advantages {np.round(a, 4).tolist()} vs {np.round(expected, 4).tolist()} "
        f"without the rejected rows (max change {effect.max():.4g}); the silent group [1, 1, 1, 1] gets "
        f"{np.round(silent_moved, 4).tolist()}"
    )
    if (
        find_mismatch(
            a,
            counted,
            rtol=0.0,
            atol=tol + ctx.tolerance(batch.with_rewards(as_zero))[keep],
            noun="advantages",
        )
        is None
    ):
        raise PropertyFailure(
            Finding(
                f"a rejected response (all-zero response_mask) moved its siblings' baseline: {measured}",
                call,
                ctx.reference.name,
                "the rejected row is counted as a response with reward 0 (its token rewards sum to 0), so "
                "its group's baseline includes it, as verl 0.9.1's outcome estimators do (GRPO, its "
                "vectorized form, RLOO); "
                "leave rows with response_mask.sum(-1) == 0 out of the group statistics",
                confirmed=True,
                verdict="WARN",
                kind="mismatch",
                mismatch=found,
                facts={"max_change": float(effect.max())},
            )
        )
    raise PropertyFailure(
        Finding(
            "a rejected response (all-zero response_mask) moved its siblings' baseline: "
            f"{found.render()}; {measured}",
            call,
            ctx.reference.name,
            kind="mismatch",
            mismatch=found,
            facts={"max_change": float(effect.max())},
        )
    )


def _refused(finding: Finding) -> bool:
    """Whether the call refused its input with an exception (an ``ImplementationError`` of kind ``raised``
    or ``interrupt``), a clear answer to a NaN reward; exiting or hanging is not."""
    return finding.kind == "raised" and finding.facts.get("how") in ("raised", "interrupt")


@dataclasses.dataclass(frozen=True)
class _NanCauses:
    """What a NaN property says of each way a NaN reward can move the advantages.

    ``other``: why other groups changed; ``siblings``: why the siblings turned NaN (a WARN);
    ``counted``: why the siblings moved as if the NaN were a reward of 0 (``{siblings}`` and
    ``{without}`` in it: their advantages, and oracle(R) of the group without the NaN).
    ``advisory``: other groups turned all NaN, and a NaN counted as 0, are a WARN, and ``other``
    explains only other groups turned all NaN; otherwise both are a FAIL and ``other`` explains
    any change.
    """

    other: str
    siblings: str
    counted: str
    advisory: bool


def _nan_left_out(
    ctx: Context, batch: Batch, advantages: Callable[[], np.ndarray], call: str, causes: _NanCauses
) -> None:
    """The call ``advantages()`` on ``batch`` (one NaN reward; ``call``, as messages print it) raises,
    or leaves the NaN's row out of its group: its siblings' advantages equal oracle(R) of the group
    without it and other groups are untouched; each other outcome is raised with ``causes``."""
    try:
        a = advantages()
    except PropertyFailure as exc:
        if _refused(exc.finding):
            return  # a clear refusal of a NaN reward
        raise
    row = int(np.argmax(np.isnan(batch.rewards)))
    keep = np.arange(batch.n) != row
    kept = Batch(batch.rewards[keep], batch.index[keep])
    expected = ctx.expected(kept)
    tol = ctx.tolerance(kept, expected)
    got = a[keep]
    same = kept.index == batch.index[row]
    found_other = find_mismatch(got[~same], expected[~same], rtol=0.0, atol=tol[~same], noun="advantages")
    if found_other is not None:
        all_nan = bool(np.isnan(got[~same]).all())
        explained = all_nan or not causes.advisory
        raise PropertyFailure(
            Finding(
                f"a NaN reward in group {batch.index[row]} changed other groups' advantages: "
                f"{found_other.render()}",
                call,
                ctx.reference.name,
                causes.other if explained else None,
                confirmed=explained,
                verdict="WARN" if all_nan and causes.advisory else "FAIL",
                kind="mismatch",
                mismatch=found_other,
            )
        )
    sib = got[same]
    if np.isnan(sib).all():
        raise PropertyFailure(
            Finding(
                f"a NaN reward made its siblings' advantages NaN ({sib.tolist()}), but should raise or leave "
                f"them at {np.round(expected[same], 4).tolist()} (the group without it)",
                call,
                ctx.reference.name,
                causes.siblings,
                confirmed=True,
                verdict="WARN",
                kind="not-finite",
            )
        )
    found = find_mismatch(sib, expected[same], rtol=0.0, atol=tol[same], noun="advantages")
    if found is None:
        return
    replaced = batch.rewards.copy()
    replaced[row] = 0.0
    zero = ctx.expected(batch.with_rewards(replaced))[keep][same]
    counted = find_mismatch(sib, zero, rtol=0.0, atol=tol[same], noun="advantages") is None
    raise PropertyFailure(
        Finding(
            f"a NaN reward silently moved its siblings' baseline: {found.render()}",
            call,
            ctx.reference.name,
            causes.counted.format(
                siblings=np.round(sib, 4).tolist(), without=np.round(expected[same], 4).tolist()
            )
            if counted
            else None,
            confirmed=counted,
            verdict="WARN" if counted and causes.advisory else "FAIL",
            kind="mismatch",
            mismatch=found,
        )
    )


_NAN = Batch(
    np.array([1.0, 0.0, np.nan, 0.0, 1.0, 0.0, 3.0, 1.0, 0.0]), np.array([0, 0, 0, 0, 0, 1, 1, 1, 1])
)


@conformance_property(
    level="silent",
    examples=lambda ctx, p: [_NAN],
    applies=token_only,
)
def test_nan_rows_confined(ctx: Context, batch: Batch, p: Any) -> None:
    """Layout token: a response with a NaN reward raises, or leaves its siblings' baseline unmoved
    (their advantages equal oracle(R) of the group without it) and other groups untouched; NaN siblings
    are a WARN, silently moved finite values a FAIL.
    """
    lengths = token_lengths(batch.n)
    _nan_left_out(
        ctx,
        batch,
        lambda: at_last(call_token(ctx, batch, lengths)[2], lengths),
        token_repr(ctx, batch, lengths),
        _NanCauses(
            "a NaN in one group contaminates the batch statistics",
            "the NaN enters the group's statistics (as in verl 0.9.1's outcome estimators); loud, "
            "since the loss turns NaN, but the group is lost: "
            "raise on a NaN reward, or leave it out",
            "the NaN is replaced by 0 (e.g. nan_to_num) and counted in the group's mean and std",
            advisory=False,
        ),
    )


#: A NaN reward (an unscoreable response) in group 0, then in group 1 at another place; the other
#: groups are live, so a NaN that reaches a batch statistic shows in them.
_NAN_GROUPED = (
    Batch.grouped([[1.0, 0.0, np.nan, 0.0, 1.0], [0.0, 3.0, 1.0, 0.0, 2.0], [1.0, 1.0, 0.0, 0.0, 0.5]]),
    Batch.grouped([[0.5, 0.0, 0.25, 1.0], [1.0, np.nan, 0.0, 1.0], [0.0, 0.0, 1.0, 0.75]]),
)


def _not_token(ctx: Context, p: Any) -> str | None:
    """Layout token has its own NaN property (nan_rows_confined)."""
    if ctx.adapter.layout == "token":
        return "layout 'token': nan_rows_confined checks NaN rewards there"
    return None


@conformance_property(
    level="silent",
    examples=lambda ctx, p: list(_NAN_GROUPED),
    applies=_not_token,
    required=lambda ctx: False,  # advisory: what a NaN does is reported (WARN), never a FAIL yet
)
def test_nan_rewards(ctx: Context, batch: Batch, p: Any) -> None:
    """A NaN reward (a response no reward function could score) raises, or is left out of its group:
    its siblings' advantages equal oracle(R) of the group without it (TRL's nanmean / nanstd) and other
    groups are untouched. NaN siblings are a WARN (loud: the loss turns NaN; verl and OpenRLHF's
    torch.mean / torch.std). A NaN replaced by 0 and counted in its group (nan_to_num; TRL's nansum
    over reward functions gives 0 to a response none of them scored) is a WARN with the measured shift
    of the siblings' baseline: GRPO over the rewards as the trainer recorded them is computed right, as
    for a rejected row counted with reward 0 (rejected_rows_ignored). Any other silent change of the
    siblings, or of another group, is reported too; the property is advisory (every finding a WARN)
    until the shift real TRL's normalize_then_sum shows on other groups is explained. The oracle raises
    (check_finite).
    """
    _nan_left_out(
        ctx,
        batch,
        lambda: ctx.flat(batch),
        ctx.adapter.call_repr(batch),
        _NanCauses(
            "the NaN reaches a statistic over the whole batch (a batch mean or std without nan-aware "
            "reductions): every group turns NaN",
            "the NaN enters the group's mean and std (torch.mean / torch.std, as verl and OpenRLHF); "
            "loud, since the loss turns NaN, but the group is lost: raise on a NaN reward, or leave it "
            "out (nanmean / nanstd)",
            "the NaN is replaced by 0 (nan_to_num, or a nansum over reward functions) and counted in its "
            "group's mean and std: a response no one scored pulls its siblings' baseline (measured: "
            "siblings {siblings} vs {without} without it); leave it out (nanmean / nanstd) or raise",
            advisory=True,
        ),
    )


#: Shaped rewards (accuracy + a bonus in [0, 0.5)): group 7 is all correct but its rewards
#: differ, group 3 all wrong but differing, group 5 mixed; ids whose sorted and first-seen
#: orders differ.
_SHAPED = Batch(
    np.array([1.1, 0.1, 1.0, 0.0, 1.05, 1.1, 0.3, 0.4, 1.2, 0.2, 0.0, 1.25]),
    np.array([7, 3, 7, 3, 7, 5, 3, 5, 7, 3, 5, 5]),
)


#: The same shaped rewards as contiguous groups of one size, for layouts without ids.
_SHAPED_GROUPED = Batch.grouped([[1.1, 1.0, 1.05, 1.2], [0.1, 0.0, 0.3, 0.2], [1.1, 0.4, 0.0, 1.25]])


def _accuracy(rewards: np.ndarray) -> np.ndarray:
    return (rewards > ACCURACY_THRESHOLD).astype(np.float64)


def _keep_metric(ctx: Context) -> tuple[str, str]:
    """The filter's metric and whether it was ``declared`` or ``detected`` (adapter.detect_keep_metric)."""
    if ctx.adapter.keep_metric is not None:
        return ctx.adapter.keep_metric, "declared"
    metric = guarded(detect_keep_metric, ctx.adapter, what=f"{ctx.adapter.name} on the keep-metric probe")
    return metric, "detected"


def _keep_strategy(ctx: Context, p: Any) -> Any:

    def shaped(b: Batch, s: int) -> Batch:
        rng = np.random.default_rng(s)
        return b.with_rewards(b.rewards + rng.integers(0, 8, b.n) / 16)  # a bonus in [0, 0.5)

    return st.tuples(batches(ctx, binary=True), st.integers(0, 2**32 - 1)).map(lambda bs: shaped(*bs))


@conformance_property(
    level="silent",
    examples=lambda ctx, p: [_SHAPED if ctx.adapter.ragged else _SHAPED_GROUPED, *WITH_SILENT, *BINARY],
    strategy=_keep_strategy,
    applies=lambda ctx, p: (
        None if ctx.adapter.keep_mask is not None else "no keep mask given (layout keep-mask checks one)"
    ),
)
def test_keep_mask_rule(ctx: Context, batch: Batch, p: Any) -> None:
    """A dynamic-sampling filter keeps a response iff 0 < k < G in its group, k counted on its metric,
    declared (keep_metric) or detected: accuracy (R > 0.5; rewards are accuracy plus a bonus in [0, 0.5)),
    so shaped rewards that differ while every response is right (or wrong) are dropped, or the reward
    (keep iff not all equal); per response or per group. Undeclared, either rule is correct (verl's DAPO
    filter takes either as its metric).
    """
    metric, how = _keep_metric(ctx)
    signal = _accuracy(batch.rewards) if metric == "accuracy" else batch.rewards
    want = _declared_keep(ctx, signal, batch)
    got = guarded(ctx.adapter.keep, batch, what=f"keep_mask on {batch!r}").numpy().astype(bool)
    call = f"{ctx.adapter.name}(rewards={batch.rewards.round(4).tolist()}, index={batch.index.tolist()})"
    if got.shape != want.shape:
        raise PropertyFailure(
            Finding(
                f"keep mask of shape {got.shape}, but should be {want.shape} (or one per group)",
                call,
                kind="shape",
            )
        )
    if np.array_equal(got, want):
        return
    i = int(np.argmax(got != want))
    other = _accuracy(batch.rewards) if metric == "reward" else batch.rewards
    swapped = _declared_keep(ctx, other, batch)
    cause = None
    if how == "declared" and np.array_equal(got, swapped):
        cause = (
            "the filter applies its rules to the shaped reward, not the accuracy: shaped rewards that differ "
            "while every response is right (or every one wrong) are kept"
            + (" and the band sees the reward's mean" if ctx.adapter.keep_band is not None else "")
            + "; count k on the accuracy"
            if metric == "accuracy"
            else "the filter counts k on an accuracy (R > 0.5), but declares keep_metric='reward'"
        )
    if cause is None:
        cause = _extra_rule_cause(ctx, metric)
    raise PropertyFailure(
        Finding(
            f"keep[{i}]={bool(got[i])} (group {batch.index[i]}), but should be {bool(want[i])}: keep iff "
            f"0 < k < G on the {metric} [{how}]{_declared_rules(ctx)}",
            call,
            cause=cause,
            confirmed=cause is not None,
            kind="value",
            facts={
                "index": i,
                "actual": bool(got[i]),
                "expected": bool(want[i]),
                "metric": metric,
                "how": how,
            },
        )
    )
