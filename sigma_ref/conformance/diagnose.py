"""Likely causes of a mismatch, in words.

Each hypothesis below is a known, realistic deviation; its prediction is computed with the
oracle under a changed convention or grouping (or, for bugs no convention describes, from
the oracle's own centered values and divisors). The first hypothesis that reproduces the
actual advantages names the cause.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ..advantages import dr_grpo_advantage, group_statistics, grpo_advantage, rloo_advantage
from ..conventions import DR_GRPO, PAPER, Convention
from .guard import call_guarded
from .reference import Reference, as_numpy

__all__ = ["likely_cause", "diagnose_mismatch"]


def _groups(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, inverse, counts = np.unique(index, return_inverse=True, return_counts=True)
    return inverse.reshape(-1), counts


def _silent(rewards: np.ndarray, index: np.ndarray) -> npt.NDArray[np.bool_]:
    inv, counts = _groups(index)
    lo = np.full(counts.shape, np.inf)
    hi = np.full(counts.shape, -np.inf)
    np.minimum.at(lo, inv, rewards)
    np.maximum.at(hi, inv, rewards)
    silent: npt.NDArray[np.bool_] = (lo == hi)[inv]
    return silent


_TOL = {"rtol": 1e-4, "atol": 1e-6}


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=_TOL["rtol"], atol=_TOL["atol"]))


def _matches(actual: np.ndarray, predict: Callable[[], np.ndarray]) -> Callable[[], bool]:
    """A hypothesis's test: are ``actual`` the advantages it predicts (computed when called)?"""
    return lambda: _close(actual, predict())


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
    """``(key, cause)`` of every hypothesis that reproduces ``actual``; never raises."""
    saved = dict(_TOL)
    _TOL.update(rtol=rtol, atol=max(1e-6, rtol / 100))
    found = []
    try:
        with np.errstate(all="ignore"):
            for key, cause, test in _hypotheses(actual, rewards, index, ref):
                try:
                    if test():
                        found.append((key, cause))
                except Exception:  # a hypothesis the oracle cannot evaluate on this input
                    continue
    except Exception:
        return []
    finally:
        _TOL.update(saved)
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


_ZERO_SINGLETON = DR_GRPO.replace(singleton="zero")
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
        centered = as_numpy(dr_grpo_advantage(batch.rewards, convention=_ZERO_SINGLETON, index=batch.index))
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
    inv, counts = _groups(np.asarray(index).reshape(-1))
    order = np.argsort(inv, kind="stable")
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.empty(inv.shape[0], dtype=np.int64)
    rank[order] = np.arange(inv.shape[0]) - starts[inv[order]]
    return (1.0 + inv) * (rank + 1.0) / 7.0 + 0.37 * inv


def _hypotheses(
    actual: np.ndarray, rewards: np.ndarray, index: np.ndarray, ref: Reference
) -> list[tuple[str, str, Callable[[], bool]]]:
    """Every known deviation as ``(key, cause, test)``: ``test()`` says whether it explains
    ``actual`` on this input (``key`` identifies the hypothesis across inputs)."""
    actual = np.asarray(actual, dtype=np.float64).reshape(-1)
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    index = np.asarray(index).reshape(-1)
    if actual.shape != rewards.shape:
        return []
    inv, counts = _groups(index)
    silent = _silent(rewards, index)
    single = counts[inv] == 1
    bad = ~np.isfinite(actual)
    if bad.any():
        out = []
        if (bad & single).any() and not (bad & ~single).any():
            out.append(
                (
                    "singleton_nan",
                    "a group of one response gets NaN/inf: the std of one value (ddof=1) is NaN; "
                    f"a singleton group should get {ref.singleton!r} under {ref.name}",
                    lambda: True,
                )
            )
        elif (bad & silent).any() and not (bad & ~silent).any():
            out.append(
                (
                    "silent_nan",
                    "silent groups (all rewards equal) give NaN/inf: std = 0 and no eps make 0/0; "
                    "return 0 where the group std is 0",
                    lambda: True,
                )
            )
        return out
    expected = as_numpy(ref.advantages(rewards, index))
    centered = as_numpy(dr_grpo_advantage(rewards, convention=_ZERO_SINGLETON, index=index))
    hypotheses: list[tuple[str, str, Callable[[], np.ndarray]]] = [
        ("sign", "advantages have the wrong sign: use R - mean, not mean - R", lambda: -expected),
    ]
    conv = ref.convention
    if conv is not None and ref.family == "grpo":
        flip = 1 - conv.ddof
        ddof_cause = (
            "std is Bessel-corrected (divides by G-1); declare ddof=1, or use std(unbiased=False)"
            if flip == 1
            else "std is the population std (divides by G); declare ddof=0, or use Bessel's std"
        )
        hypotheses.append(
            (
                "ddof",
                ddof_cause,
                lambda: as_numpy(grpo_advantage(rewards, convention=conv.replace(ddof=flip), index=index)),
            )
        )
        if conv.scale == "group":
            hypotheses.append(
                (
                    "scale_batch",
                    "advantages are divided by one std over the whole batch, not each group's std "
                    "(scale='batch')",
                    lambda: as_numpy(
                        grpo_advantage(rewards, convention=conv.replace(scale="batch"), index=index)
                    ),
                )
            )
        else:
            hypotheses.append(
                (
                    "scale_group",
                    "advantages are divided by each group's std, not one std over the batch (scale='group')",
                    lambda: as_numpy(
                        grpo_advantage(rewards, convention=conv.replace(scale="group"), index=index)
                    ),
                )
            )
        if conv.scale == "batch":
            hypotheses.append(
                (
                    "batch_std_of_centered",
                    "the batch std is taken of the group-centered rewards R - mean_g, not of the rewards "
                    "themselves (scale='batch' divides by the std of the whole batch's raw rewards)",
                    # the oracle's batch scale applied to R - mean_g: one std of the centered batch
                    lambda: as_numpy(grpo_advantage(centered, convention=conv, index=index)),
                )
            )
        hypotheses.append(
            (
                "no_centering",
                "advantages are divided by the std but not mean-centered: mean centering forgotten, "
                "(R - mean) / std",
                lambda: _divide_like(rewards, rewards, index, ref),
            )
        )
        hypotheses.append(
            (
                "eps_inside",
                "eps is inside the sqrt: sqrt(var + eps) instead of std + eps",
                lambda: np.where(single, expected, _eps_inside(rewards, index, conv)),
            )
        )
        hypotheses.append(
            (
                "no_division",
                "advantages are R - mean, not divided by the std: declare scale='none' (Dr. GRPO) "
                "or divide by the group std",
                lambda: centered,
            )
        )
    if conv is not None:
        hypotheses.append(
            (
                "floor_mean",
                "the group mean is a floor division (sum // G, integer division): use a float mean",
                lambda: _divide_like(
                    rewards - np.floor(_group_means(rewards, inv, counts))[inv], rewards, index, ref
                ),
            )
        )
    hypotheses.append(
        (
            "batch_mean",
            "advantages are centered on the batch mean, not the group mean",
            lambda: _divide_like(rewards - rewards.mean(), rewards, index, ref),
        )
    )
    hypotheses.append(
        (
            "one_group",
            "advantages are centered and scaled over the whole batch as one group, not per group",
            lambda: as_numpy(ref.advantages(rewards, np.zeros_like(inv))),
        )
    )
    G = int(counts[0])
    if (counts == G).all() and len(counts) > 1:
        B = len(counts)
        hypotheses.append(
            (
                "interleaved",
                "groups are read interleaved (response i in group i mod B) instead of contiguous runs of G: "
                "use reshape(-1, G), not reshape(G, -1)",
                lambda: as_numpy(ref.advantages(rewards, np.arange(rewards.size) % B)),
            )
        )
    order_sorted = np.argsort(_sort_keys(index), kind="stable")
    if not np.array_equal(order_sorted, np.arange(index.size)):
        hypotheses.append(
            (
                "sorted_order",
                "advantages come back in sorted-id order, not in the order of the inputs: the values are "
                "right per group but permuted (scatter them back with the inverse of the sort)",
                lambda: expected[order_sorted],
            )
        )
        twice = order_sorted[order_sorted]
        if not np.array_equal(twice, order_sorted) and not np.array_equal(twice, np.arange(index.size)):
            hypotheses.append(
                (
                    "sort_order_as_inverse",
                    "results are scattered back with the sort order instead of its inverse: out = "
                    "sorted_values[order] (the permutation applied twice), not out[order] = sorted_values",
                    lambda: expected[order_sorted][order_sorted],
                )
            )
    _, first = np.unique(index, return_index=True)
    order = np.argsort(first, kind="stable")
    runs = np.repeat(np.arange(len(counts)), counts[order])
    if not np.array_equal(runs, inv):
        hypotheses.append(
            (
                "runs",
                "groups are taken as contiguous runs in order of appearance, ignoring the index: "
                "group by the index ids (unique(return_inverse=True)), not by position",
                lambda: as_numpy(ref.advantages(rewards, runs)),
            )
        )
    hypotheses += _estimator_hypotheses(rewards, index, ref, actual)
    tests: list[tuple[str, str, Callable[[], bool]]] = [
        (key, cause, _matches(actual, predict)) for key, cause, predict in hypotheses
    ]
    sizes = counts[inv]

    def factor() -> float:
        den = float(expected @ expected)
        return float(actual @ expected) / den if den > 0 else 0.0

    def is_factor(target: np.ndarray | None) -> bool:
        lam = factor()
        if lam == 0 or abs(lam - 1) < 1e-3 or not _close(actual, lam * expected):
            return False
        return target is None or bool(np.allclose(lam, target, rtol=1e-6))

    tests += [
        (
            "rloo_factor",
            "advantages are a factor (G-1)/G too small: RLOO's baseline leaves the response out, "
            "A = G/(G-1) (R - mean); R - mean is Dr. GRPO's",
            lambda: is_factor((sizes - 1) / sizes),
        ),
        (
            "inverse_rloo_factor",
            "advantages are a factor G/(G-1) too large",
            lambda: is_factor(sizes / (sizes - 1)),
        ),
        (
            f"factor:{factor():.6g}",
            f"advantages are {factor():.6g} times the expected values (a constant factor)",
            lambda: (
                is_factor(None)
                and not np.allclose(factor(), (sizes - 1) / sizes, rtol=1e-6)
                and not np.allclose(factor(), sizes / (sizes - 1), rtol=1e-6)
            ),
        ),
    ]
    for key, cause, predict in _lookup_hypotheses(rewards, index, ref, inv, counts):
        tests.append((key, cause, _matches(actual, predict)))
    top = float(np.abs(actual).max()) if actual.size else 0.0
    if top > 0 and float(np.abs(expected).max()) > top * 1.001:
        tests.append(
            (
                f"clamp:{top:.6g}",
                f"advantages are clamped to [-{top:.6g}, {top:.6g}]: undeclared (an advantage clip such as "
                "OpenRLHF's default 10 cuts A+ = sqrt((G-k)/k) of large groups)",
                lambda: _close(actual, np.clip(expected, -top, top)),
            )
        )
    if ref.family == "rloo":
        sums = np.bincount(inv, rewards)[inv]
        tests.append(
            (
                "rloo_divides_by_g",
                "the leave-one-out mean divides by G instead of G - 1: A = R - (sum - R) / G",
                lambda: _close(actual, rewards - (sums - rewards) / sizes),
            )
        )
    last = inv == inv[-1]
    tests.append(
        (
            "last_group_zero",
            "the last group's advantages are all zero: the loop over groups stops one group early",
            lambda: bool(
                (actual[last] == 0).all()
                and _close(actual[~last], expected[~last])
                and not (expected[last] == 0).all()
            ),
        )
    )
    wrong = ~np.isclose(actual, expected, rtol=1e-4, atol=1e-6)
    tests.append(
        (
            "silent_nonzero",
            "silent groups (all rewards equal) get non-zero advantages; they should get 0",
            # a group of one is no silent group here: it has its own rule and hypothesis
            lambda: bool((wrong & silent & ~single).any() and not (wrong & ~(silent & ~single)).any()),
        )
    )
    tests.append(
        (
            "singleton",
            f"groups of one response get other values than {ref.singleton!r} ({ref.name})",
            lambda: bool((wrong & single).any() and not (wrong & ~single).any()),
        )
    )
    return tests


#: What each named estimator is, for causes (sigma_ref.estimators; proofs/14).
_ESTIMATOR_WORDS = {
    "rloo_std": "RLOO's leave-one-out baseline divided by the group std, (R - mean of the others) / "
    "(std + eps) (AReaL's NormConfig mean_leave1out=True with std_level='group')",
    "loo_std": "a leave-one-out baseline divided by a leave-one-out std, (R - mean of the others) / (std of "
    "the others + eps)",
    "group_then_batch": "two-stage normalisation: GRPO per group, then normalised again over the whole batch "
    "(GDPO with one reward; TRL's multi_objective_aggregation='normalize_then_sum')",
    "maxrl": "MaxRL's (R - mean) / mean: the group mean in place of the std",
}


def _loo_eps(rewards: np.ndarray, index: np.ndarray, ddof: int, actual: np.ndarray) -> float:
    """The eps a leave-one-out std estimator uses, read where a response's siblings are all equal
    (there ``A = (R - mean of the others) / eps``), to two digits; 0 where no such response is."""
    from .. import estimators

    try:
        bare = estimators.loo_std_advantage(rewards, index=index, ddof=ddof)
        num = as_numpy(rloo_advantage(rewards, index=index))
    except ValueError:
        return 0.0
    at = np.isinf(bare) & np.isfinite(actual) & (actual != 0)
    return float(f"{np.median(num[at] / actual[at]):.2g}") if at.any() else 0.0


def _estimator_hypotheses(
    rewards: np.ndarray, index: np.ndarray, ref: Reference, actual: np.ndarray
) -> list[tuple[str, str, Callable[[], np.ndarray]]]:
    """The named estimators of :mod:`sigma_ref.estimators` as hypotheses (ddof 0 and 1; the
    reference's eps, far below any group std these inputs have, except for the leave-one-out std,
    whose eps is read where a response's siblings are all equal)."""
    from .. import estimators

    eps = ref.eps
    conv = ref.convention if ref.convention is not None and ref.family == "grpo" else PAPER
    out: list[tuple[str, str, Callable[[], np.ndarray]]] = []
    for name in ("rloo_std", "loo_std", "group_then_batch"):
        for ddof in (0, 1):
            cause = (
                f"the code computes the named estimator {name!r} ({_ESTIMATOR_WORDS[name]}; "
                f"sigma_ref.estimators, ddof={ddof}), not {ref.name}: a different algorithm, not a "
                "convention of it"
            )

            def predict(name: str = name, d: int = ddof) -> np.ndarray:
                if name == "group_then_batch":
                    return estimators.group_then_batch_advantage(
                        rewards, index=index, convention=conv, batch_ddof=d
                    )
                e = _loo_eps(rewards, index, d, actual) if name == "loo_std" else eps
                return estimators.ESTIMATORS[name](rewards, index=index, ddof=d, eps=e)

            out.append((f"estimator:{name}:{ddof}", cause, predict))
    out.append(
        (
            "estimator:maxrl",
            f"the code computes the named estimator 'maxrl' ({_ESTIMATOR_WORDS['maxrl']}; "
            f"sigma_ref.estimators), not {ref.name}",
            lambda: estimators.maxrl_advantage(rewards, index=index),
        )
    )
    return out


def _lookup_hypotheses(
    rewards: np.ndarray, index: np.ndarray, ref: Reference, inv: np.ndarray, counts: np.ndarray
) -> list[tuple[str, str, Callable[[], np.ndarray]]]:
    """Right statistics, wrong lookup: element ``i`` gets the mean and divisor of group ``h(i)``.

    ``A_i = (R_i - mu_h(i)) / d_h(i)`` with the reference's per-group mean and divisor, for the
    lookups trainers get wrong: statistics listed in first-seen order but indexed by the sorted
    rank (``np.unique``'s inverse), statistics broadcast with ``repeat_interleave(counts)`` as if
    groups were contiguous runs, and groups cut at data-parallel shard boundaries.
    """
    n_groups = len(counts)
    if ref.convention is None:  # RLOO: d = (G - 1) / G
        group, d, _ = ref.statistics(rewards, index)
        mean = _group_means(rewards, inv, counts)
        dg = np.zeros(n_groups)
        dg[group] = d
    else:  # each group's own mean and d (a silent group's d is its eps: others may divide by it)
        conv = ref.convention
        st = group_statistics(
            rewards,
            convention=conv.replace(singleton="zero") if conv.singleton == "error" else conv,
            index=index,
        )
        mean = np.array(st.mean, dtype=np.float64)
        if conv.singleton == "unit_std":  # a group of one: mean 0 and std 1
            mean[counts == 1] = 0.0
        dg = np.asarray(st.divisor, dtype=np.float64)

    def through(h: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(dg[h] > 0, (rewards - mean[h]) / np.where(dg[h] > 0, dg[h], 1.0), 0.0)

    out: list[tuple[str, str, Callable[[], np.ndarray]]] = []
    _, first = np.unique(index, return_index=True)
    seen_rank = np.argsort(np.argsort(first, kind="stable"), kind="stable")  # sorted rank -> first-seen rank
    by_seen = np.argsort(first, kind="stable")  # first-seen rank -> sorted rank
    if not np.array_equal(seen_rank, np.arange(n_groups)):
        out.append(
            (
                "first_seen_lookup",
                "statistics are listed in first-seen id order but looked up with the sorted-id rank "
                "(np.unique's inverse): each response gets another group's mean and std",
                lambda: through(by_seen[inv]),
            )
        )
        runs = np.searchsorted(np.cumsum(counts), np.arange(rewards.size), side="right")
        out.append(
            (
                "runs_broadcast",
                "per-id statistics are broadcast with repeat_interleave(counts), as if each group were a "
                "contiguous run in sorted-id order: interleaved responses get other groups' statistics "
                "(index them with np.unique(..., return_inverse=True)'s inverse)",
                lambda: through(runs),
            )
        )
    G = int(counts[0])
    if (counts == G).all() and np.array_equal(inv, np.repeat(np.arange(n_groups), G)):
        for k in (2, 4, 8):
            size = -(-rewards.size // k)  # torch.chunk's shard size
            if size % G == 0 or size >= rewards.size:
                continue
            pos = np.arange(rewards.size)
            local = (pos // size) * (size // G + 1) + (pos % size) // G
            shards = np.unique(local, return_inverse=True)[1].reshape(-1)

            def split(shards: np.ndarray = shards) -> np.ndarray:
                return as_numpy(ref.advantages(rewards, shards))

            out.append(
                (
                    f"shards:{k}",
                    f"groups are cut at the boundaries of {k} equal shards of the batch (statistics computed "
                    "per data-parallel rank): a group split across shards is normalised in pieces",
                    split,
                )
            )
    return out


def _group_means(rewards: np.ndarray, inv: np.ndarray, counts: np.ndarray) -> npt.NDArray[np.float64]:
    means: npt.NDArray[np.float64] = np.bincount(inv, rewards, minlength=len(counts)) / counts
    return means


def _sort_keys(index: np.ndarray) -> np.ndarray:
    """Keys that sort like the ids (numbers numerically, anything else by its string)."""
    if index.dtype.kind in "iuf":
        return index
    return np.array([str(x) for x in index.tolist()])


def _divide_like(numerator: np.ndarray, rewards: np.ndarray, index: np.ndarray, ref: Reference) -> np.ndarray:
    """``numerator / d`` with the reference's divisor ``d`` of each element's group, eps included
    (silent groups too: ``std + eps = eps``); 0 where ``d`` is 0."""
    if ref.convention is None:
        _, d, _ = ref.statistics(rewards, index)
    else:
        st = group_statistics(rewards, convention=ref.convention.replace(singleton="zero"), index=index)
        d = st.expand(np.asarray(st.divisor, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > 0, numerator / np.where(d > 0, d, 1.0), 0.0)  # silent groups: 0


def _eps_inside(rewards: np.ndarray, index: np.ndarray, conv: Convention) -> npt.NDArray[np.float64]:
    """``(R - mean) / sqrt(std**2 + eps)``: the eps-inside-the-sqrt bug, from the oracle's statistics.

    Groups of one come out 0 here; the hypothesis takes the reference's values for them (the
    declared convention's singleton rule), since eps placement says nothing about a group of one."""
    st = group_statistics(rewards, convention=conv.replace(eps=0.0, singleton="zero"), index=index)
    std: npt.NDArray[np.float64] = st.expand(np.asarray(st.divisor))
    centered: npt.NDArray[np.float64] = rewards - st.expand(np.asarray(st.mean))
    return centered / np.sqrt(std**2 + conv.eps)
