"""Likely causes of a mismatch, in words, confirmed on designed probes.

The known deviations are the table of :mod:`.hypotheses` (each a realistic bug or an undeclared
convention, whose prediction is computed with the oracle under a changed convention or grouping,
or from the oracle's own centered values and divisors). :func:`likely_cause` names those that
reproduce the actual advantages of one input; :func:`diagnose_mismatch` keeps the ones designed
probes confirm, and names nothing it cannot confirm.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .guard import call_guarded
from .hypotheses import Observed, centered_rewards, explained, group_ids
from .reference import Reference

__all__ = ["likely_cause", "diagnose_mismatch"]


_PROBES_GROUPED = [
    [0.1, 0.9, 0.4, 0.0, 0.75],
    [2.0, -1.0, 0.5, 0.5, 3.0],
    [1.0, 0.0, 0.0, 0.0, 0.0],
    [0.3, 0.3, 0.3, 0.3, 0.3],
    [0.0, 1.0, 1.0, 0.0, 1.0],
]
#: ragged, interleaved, string ids in an order that is neither sorted nor first-seen
_PROBE_RAGGED = (
    np.array([0.1, 2.0, 0.9, 1.0, -1.0, 0.4, 0.0, 0.5, 0.0, 0.75, 3.0, 0.3, 0.3, 0.0]),
    np.array(
        ["q9", "b3", "q9", "zz", "b3", "q9", "zz", "b3", "q9", "q9", "b3", "a1", "a1", "zz"], dtype=object
    ),
)


def likely_cause(
    actual: np.ndarray, rewards: np.ndarray, index: np.ndarray, ref: Reference, *, rtol: float = 1e-4
) -> str | None:
    """The known deviations that explain ``actual`` (flat float64) on this one input, or ``None``.

    A hypothesis explains ``actual`` when it reproduces it within ``rtol``. This looks at
    one input only, so it is a *possible* cause; :func:`diagnose_mismatch` confirms it on a
    second, designed probe before the conformance suite prints it.

    >>> import numpy as np
    >>> from sigma_ref.conformance.reference import reference_for
    >>> r, idx = np.array([1.0, 0.0, 0.0, 1.0]), np.array([0, 0, 1, 1])
    >>> cause = likely_cause(np.array([0.5, -0.5, -0.5, 0.5]), r, idx, reference_for("paper"))
    >>> cause.startswith("advantages are R - mean, not divided by the std")
    True
    """
    keys = _explaining(actual, rewards, index, ref, rtol=rtol)
    return "; or ".join(cause for _, cause in keys) or None


def _explaining(
    actual: np.ndarray, rewards: np.ndarray, index: np.ndarray, ref: Reference, *, rtol: float = 1e-4
) -> list[tuple[str, str]]:
    """``(key, cause)`` of every hypothesis (:data:`.hypotheses.HYPOTHESES`) that reproduces
    ``actual`` within ``rtol`` (and ``atol = max(1e-6, rtol / 100)``); never raises."""
    try:
        with np.errstate(all="ignore"):
            found = explained(Observed(actual, rewards, index, ref, rtol=rtol, atol=max(1e-6, rtol / 100)))
    except Exception:
        return []
    named = [f for f in found if f[0].startswith("estimator:")]
    if named:  # a named estimator says what the code computes; the factors it implies say less
        return named
    specific = [f for f in found if not f[0].startswith(("factor:", "clamp:"))]
    return specific or found  # a constant factor or a clamp only when nothing more specific fits


def diagnose_mismatch(ctx: Any, batch: Any, actual: np.ndarray) -> tuple[str | None, bool]:
    """``(cause, confirmed)`` for a mismatch of the implementation under ``ctx`` on ``batch``.

    The hypotheses that explain ``actual`` are re-checked on designed probes (groups of 5
    with non-dyadic, continuous and silent groups; for ragged layouts, interleaved string ids
    in an order that is neither sorted nor first-seen; groups of one, alone and beside a
    larger group, for the singleton hypotheses; groups whose std is near ``sqrt(eps)`` for
    eps inside the sqrt). A probe confirms a hypothesis only where it discriminates
    (:func:`_confirmed_on`): the implementation's output there differs from the reference's,
    the hypothesis reproduces it, and the hypothesis does not also reproduce the reference's
    own output there; a probe of groups of one confirms only the singleton hypotheses. When
    none is confirmed, the targeted probe for cancellation runs (:func:`_cancels`). Returns
    ``(None, False)`` when nothing is confirmed: the suite then says the mismatch is
    unexplained, and never guesses.
    """
    from .adapter import Batch

    candidates = _explaining(actual, batch.rewards, batch.index, ctx.reference)
    if not candidates:
        return (_CANCELLATION, True) if _cancels(ctx, batch) else (None, False)
    keys = {k for k, _ in candidates}
    ragged = bool(getattr(ctx.adapter, "ragged", False))
    #: ``(probe, prefix)``: a probe confirms only the candidates whose key starts with its prefix
    probes: list[tuple[Any, str]] = [(Batch.grouped(_PROBES_GROUPED), "")]
    if ragged:
        probes.append((Batch(*_PROBE_RAGGED), ""))
    singleton = any(k.startswith("singleton") for k in keys)
    alone = Batch.grouped([[0.7], [0.2], [1.0]])
    if singleton:
        probes.append((alone, "singleton"))  # groups of one say nothing about any other hypothesis
        if ragged:
            probes.append((Batch(*_PROBE_BESIDE), "singleton"))
    if "eps_inside" in keys and ctx.reference.eps > 0:
        probes.append((_eps_probe(ctx.reference.eps), "eps_inside"))
    if any(k.startswith(("clamp:", "shards:")) for k in keys):
        probes.append(
            (Batch.grouped([[1.0] + [0.0] * 127, [0.0, 3.0] + [1.0] * 126, [0.5] * 64 + [2.0] * 64]), "")
        )
        probes.append((Batch.grouped(np.array(_PROBES_GROUPED * 3)[:, :3]), ""))
    confirmed: list[tuple[str, str]] = []
    for probe, prefix in probes:
        found = _confirmed_on(ctx, probe, [(k, c) for k, c in candidates if k.startswith(prefix)])
        confirmed += [kc for kc in found if kc not in confirmed]
    if any(k == "singleton" for k, _ in confirmed) and ragged and _right_on(ctx, alone):
        # confirmed beside a larger group, while groups of one alone are right
        beside = _SINGLETON_BESIDE.format(ref=ctx.reference)
        confirmed = [(k, beside if k == "singleton" else c) for k, c in confirmed]
    if confirmed:
        return "; or ".join(c for _, c in confirmed), True
    if _cancels(ctx, batch):
        return _CANCELLATION, True
    return None, False


#: Ragged probe: two groups of one beside a group of four (verl-style code may treat a group of
#: one differently when the batch has larger groups).
_PROBE_BESIDE = (
    np.array([1.0, 0.7, 0.0, 0.5, 0.2, 0.25]),
    np.array([3, 8, 3, 3, 5, 3]),
)
_SINGLETON_BESIDE = (
    "groups of one response get other values than {ref.singleton!r} ({ref.name}) only when the batch "
    "has larger groups: a batch of groups of one alone gets them right, so the singleton rule depends "
    "on the other groups in the batch"
)
#: Where a probe's output is taken to differ from the reference's. float64 code computing the
#: reference's formula agrees with it to ~1e-15 relative (a few ulps, times a group size), and a
#: silent group's advantage is a rounding residue over eps (~1e-17 / eps: 1e-11 at eps 1e-6; with
#: eps below ~1e-8 it may count as a difference, and then the second test of
#: :func:`_confirmed_on`, a hypothesis must not reproduce the reference's output too, keeps such a
#: probe from confirming what it cannot tell apart). Every named deviation has a probe where it
#: moves values by far more than 1e-9 (eps inside the sqrt, the smallest at std ~ 1, by ~eps / 2
#: relative, has its own probe at std ~ sqrt(eps), where it is O(1)).
_DIFFERS_RTOL = _DIFFERS_ATOL = 1e-9


def _right_on(ctx: Any, probe: Any) -> bool:
    """Whether the implementation's output on ``probe`` is the reference's (within :data:`_DIFFERS_RTOL`)."""
    try:
        got = call_guarded(ctx.adapter, probe).numpy().reshape(-1)
        expected = ctx.expected(probe)
    except Exception:
        return False
    return got.shape == expected.shape and bool(
        np.allclose(got, expected, rtol=_DIFFERS_RTOL, atol=_DIFFERS_ATOL)
    )


def _confirmed_on(ctx: Any, probe: Any, candidates: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ``candidates`` this ``probe`` confirms: the implementation's output differs from the
    reference's (beyond :data:`_DIFFERS_RTOL`: a probe where they agree discriminates nothing), the
    hypothesis reproduces the output, and it does not reproduce the reference's own output too
    (a hypothesis the probe cannot tell from the reference, such as eps inside the sqrt with a
    small eps at std ~ 1, is not confirmed by it). Where the reference has no value (a group of
    one under ``singleton='error'``), only non-finite outputs differ from it."""
    if not candidates:
        return []
    try:
        got = call_guarded(ctx.adapter, probe).numpy().reshape(-1)
    except Exception:  # ImplementationError included: the probe confirms nothing
        return []
    if got.shape != probe.rewards.shape:
        return []
    try:
        expected: np.ndarray | None = ctx.expected(probe)
    except Exception:
        expected = None
    if expected is None:
        if np.isfinite(got).all():
            return []
        trivial: set[str] = set()
    else:
        if expected.shape == got.shape and np.allclose(got, expected, rtol=_DIFFERS_RTOL, atol=_DIFFERS_ATOL):
            return []
        trivial = {k for k, _ in _explaining(expected, probe.rewards, probe.index, ctx.reference)}
    keys = {k for k, _ in _explaining(got, probe.rewards, probe.index, ctx.reference)} - trivial
    return [(k, c) for k, c in candidates if k in keys]


def _eps_probe(eps: float) -> Any:
    """Groups of four whose population std is ``sqrt(eps)`` times 0.5, 1 and 2 (rewards 0 and
    ``2 s``): there ``sqrt(var + eps)`` and ``std + eps`` differ by O(1), where std ~ 1 hides it."""
    from .adapter import Batch

    s = np.sqrt(max(eps, 0.0)) * np.array([0.5, 1.0, 2.0])
    return Batch.grouped([[0.0, 2 * v, 0.0, 2 * v] for v in s])


_CANCELLATION = (
    "precision lost to cancellation: the same groups shifted to mean 0 give the right advantages, so "
    "the statistics cancel on rewards with a large offset relative to their spread (a one-pass "
    "variance E[x^2] - E[x]^2, or sums in low precision); use a two-pass or compensated variance, "
    "or compute the statistics in float64"
)


def _cancels(ctx: Any, batch: Any) -> bool:
    """The targeted probes for cancellation: (1) every group shifted to mean 0 (exact in float64,
    and ``A(R + c) = A(R)`` in exact arithmetic) is computed within the working-precision
    tolerance while the original batch is not, and (2) a well-conditioned designed batch (groups
    of five non-dyadic rewards of spread comparable to their size) is right too, and (3) so is the
    batch's own index with well-conditioned rewards whose groups differ in mean and spread
    (:func:`_well_conditioned`). A bug that is not about precision (a batch mean, an integer
    mean) fails (2), however the shift hides it; one about grouping (ids matched to groups in the
    wrong order) fails (3)."""
    from .adapter import Batch

    def right(probe: Any) -> bool:
        got = call_guarded(ctx.adapter, probe).numpy()
        expected = ctx.expected(probe)
        tol = ctx.tolerance(probe, expected)
        return got.shape == expected.shape and bool(np.all(np.abs(got - expected) <= tol))

    try:
        centered = centered_rewards(batch.rewards, batch.index)
        if np.array_equal(centered, batch.rewards):
            return False
        live = [g for g in _PROBES_GROUPED if len(set(g)) > 1]  # no silent group: rounding only
        return (
            right(batch.with_rewards(centered))
            and right(batch.with_rewards(_well_conditioned(batch.index)))
            and right(Batch.grouped(live))
        )
    except Exception:
        return False


def _well_conditioned(index: np.ndarray) -> np.ndarray:
    """Rewards for ``index`` with no offset to cancel and every group different: the response
    of rank ``t`` in group ``j`` (sorted ids) gets ``(1 + j)(t + 1) / 7 + 0.37 j``."""
    inv, counts = group_ids(np.asarray(index).reshape(-1))
    order = np.argsort(inv, kind="stable")
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.empty(inv.shape[0], dtype=np.int64)
    rank[order] = np.arange(inv.shape[0]) - starts[inv[order]]
    return (1.0 + inv) * (rank + 1.0) / 7.0 + 0.37 * inv
