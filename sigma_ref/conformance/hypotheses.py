"""The known deviations of advantage code, as one table of hypotheses.

Each row of :data:`HYPOTHESES` is a realistic bug or an undeclared convention: a :class:`Hypothesis`
with its ``key`` (the same on every input), its ``cause`` in words, when it ``applies`` to an input,
and either the advantages it ``predict``\\ s (the oracle under a changed convention or grouping, or
the oracle's own centered values and divisors) or, for a deviation no one prediction states (an
unknown constant factor, groups left at zero), a ``test``. :func:`explained` tries the rows in order
on one :class:`Observed` input; :mod:`.diagnose` then confirms what it finds on designed probes.

>>> import numpy as np
>>> from sigma_ref.conformance.reference import reference_for
>>> seen = Observed(np.array([-1.0, 1.0]), np.array([1.0, 0.0]), np.array([0, 0]), reference_for("paper"))
>>> [key for key, _ in explained(seen)]  # diagnose prints a constant factor only when nothing else fits
['sign', 'factor:-1']
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from .. import estimators
from ..advantages import dr_grpo_advantage, group_statistics, grpo_advantage, rloo_advantage
from ..conventions import DR_GRPO, PAPER, Convention
from .reference import Reference, as_numpy

__all__ = [
    "Observed",
    "Hypothesis",
    "HYPOTHESES",
    "NAN_HYPOTHESES",
    "explained",
    "group_ids",
    "centered_rewards",
]

_ZERO_SINGLETON = DR_GRPO.replace(singleton="zero")


def centered_rewards(rewards: np.ndarray, index: np.ndarray) -> npt.NDArray[np.float64]:
    """``R - mean`` of each response's group (0 for a group of one), float64."""
    return as_numpy(dr_grpo_advantage(rewards, convention=_ZERO_SINGLETON, index=index))


def group_ids(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(inverse, counts)``: each element's group number (sorted ids) and each group's size."""
    _, inverse, counts = np.unique(index, return_inverse=True, return_counts=True)
    return inverse.reshape(-1), counts


def _close(a: np.ndarray, b: np.ndarray, *, rtol: float, atol: float) -> bool:
    """Same shape and ``|a - b| <= atol + rtol |b|`` everywhere (``numpy.allclose``)."""
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


class Observed:
    """One input's facts, computed once for every hypothesis.

    ``actual``, ``rewards`` (flat float64) and ``index`` (flat ids); the groups (``inv``, ``counts``,
    ``sizes``, ``silent``, ``single``); ``bad``, the non-finite actual values; and, when every actual
    value is finite, the reference's ``expected`` advantages, the group-``centered`` rewards and each
    group's ``mean`` and ``divisor`` (computed here, before any hypothesis: an input the reference
    cannot evaluate, such as a group of one under ``singleton='error'``, raises, and explains
    nothing). A prediction explains ``actual`` within ``rtol`` and ``atol`` (:meth:`matches`).
    """

    expected: npt.NDArray[np.float64]
    centered: npt.NDArray[np.float64]
    mean: npt.NDArray[np.float64]
    divisor: npt.NDArray[np.float64]

    def __init__(
        self,
        actual: np.ndarray,
        rewards: np.ndarray,
        index: np.ndarray,
        ref: Reference,
        *,
        rtol: float = 1e-4,
        atol: float = 1e-6,
    ) -> None:
        self.actual = np.asarray(actual, dtype=np.float64).reshape(-1)
        self.rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
        self.index = np.asarray(index).reshape(-1)
        self.ref, self.rtol, self.atol = ref, rtol, atol
        self.conv = ref.convention
        self.grpo = self.conv is not None and ref.family == "grpo"
        #: whether ``actual`` has the rewards' shape and is not empty (else nothing explains it)
        self.comparable = self.actual.shape == self.rewards.shape and self.actual.size > 0
        if not self.comparable:
            return
        self.inv, self.counts = group_ids(self.index)
        self.sizes = self.counts[self.inv]
        self.silent = _silent(self.rewards, self.inv, self.counts)
        self.single = self.sizes == 1
        self.bad = ~np.isfinite(self.actual)
        if not self.bad.any():
            self.expected = as_numpy(ref.advantages(self.rewards, self.index))
            self.centered = centered_rewards(self.rewards, self.index)
            self.mean, self.divisor = _mean_and_divisor(self)

    @property
    def convention(self) -> Convention:
        """The declared convention (only where there is one: not for RLOO)."""
        assert self.conv is not None
        return self.conv

    def matches(self, predicted: np.ndarray) -> bool:
        """Whether ``actual`` is ``predicted`` within the tolerance."""
        return _close(self.actual, predicted, rtol=self.rtol, atol=self.atol)

    @functools.cached_property
    def factor(self) -> float:
        """The least-squares factor ``lambda`` of ``actual ~ lambda * expected`` (0 if expected is 0)."""
        den = float(self.expected @ self.expected)
        return float(self.actual @ self.expected) / den if den > 0 else 0.0

    @functools.cached_property
    def top(self) -> float:
        """``max |actual|``: the bound of a clamp."""
        return float(np.abs(self.actual).max())

    @functools.cached_property
    def wrong(self) -> npt.NDArray[np.bool_]:
        """The elements where ``actual`` is not the expected value (rtol 1e-4, atol 1e-6)."""
        return ~np.isclose(self.actual, self.expected, rtol=1e-4, atol=1e-6)

    @functools.cached_property
    def equal_groups(self) -> bool:
        """Whether every group has the size of the first."""
        return bool((self.counts == int(self.counts[0])).all())

    @functools.cached_property
    def sorted_order(self) -> np.ndarray:
        """The stable permutation that sorts the ids (numbers numerically, anything else as text)."""
        keys = (
            self.index if self.index.dtype.kind in "iuf" else np.array([str(v) for v in self.index.tolist()])
        )
        return np.argsort(keys, kind="stable")

    @functools.cached_property
    def first_seen(self) -> np.ndarray:
        """Each group's (sorted ids) first position in the batch."""
        return np.asarray(np.unique(self.index, return_index=True)[1])

    @functools.cached_property
    def appearance_runs(self) -> np.ndarray:
        """Group numbers if groups were contiguous runs in order of appearance of the given sizes."""
        order = np.argsort(self.first_seen, kind="stable")
        return np.repeat(np.arange(len(self.counts)), self.counts[order])

    def through(self, h: np.ndarray) -> np.ndarray:
        """``(R_i - mean_h(i)) / divisor_h(i)``: the right statistics of group ``h(i)``; 0 where it is 0."""
        d = self.divisor[h]
        return np.where(d > 0, (self.rewards - self.mean[h]) / np.where(d > 0, d, 1.0), 0.0)


def _silent(rewards: np.ndarray, inv: np.ndarray, counts: np.ndarray) -> npt.NDArray[np.bool_]:
    """Elements of groups whose rewards are all equal."""
    lo = np.full(counts.shape, np.inf)
    hi = np.full(counts.shape, -np.inf)
    np.minimum.at(lo, inv, rewards)
    np.maximum.at(hi, inv, rewards)
    silent: npt.NDArray[np.bool_] = (lo == hi)[inv]
    return silent


def _mean_and_divisor(x: Observed) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Each group's mean and the reference's divisor ``d`` (a silent group's ``d`` is its eps: others
    may divide by it; RLOO's is ``(G - 1) / G``; under ``unit_std`` a group of one has mean 0)."""
    if x.conv is None:
        group, d, _ = x.ref.statistics(x.rewards, x.index)
        divisor = np.zeros(len(x.counts))
        divisor[group] = d
        return _group_means(x), divisor
    conv = x.conv
    st = group_statistics(
        x.rewards,
        convention=conv.replace(singleton="zero") if conv.singleton == "error" else conv,
        index=x.index,
    )
    mean = np.array(st.mean, dtype=np.float64)
    if conv.singleton == "unit_std":
        mean[x.counts == 1] = 0.0
    return mean, np.asarray(st.divisor, dtype=np.float64)


def _group_means(x: Observed) -> npt.NDArray[np.float64]:
    means: npt.NDArray[np.float64] = np.bincount(x.inv, x.rewards, minlength=len(x.counts)) / x.counts
    return means


def _divide_like(x: Observed, numerator: np.ndarray) -> np.ndarray:
    """``numerator / d`` with the reference's divisor ``d`` of each element's group, eps included
    (silent groups too: ``std + eps = eps``); 0 where ``d`` is 0."""
    if x.conv is None:
        _, d, _ = x.ref.statistics(x.rewards, x.index)
    else:
        st = group_statistics(x.rewards, convention=x.conv.replace(singleton="zero"), index=x.index)
        d = st.expand(np.asarray(st.divisor, dtype=np.float64))
    return np.where(d > 0, numerator / np.where(d > 0, d, 1.0), 0.0)  # silent groups: 0


def _eps_inside(rewards: np.ndarray, index: np.ndarray, conv: Convention) -> npt.NDArray[np.float64]:
    """``(R - mean) / sqrt(std**2 + eps)``: the eps-inside-the-sqrt bug, from the oracle's statistics.

    Groups of one come out 0 here; the hypothesis takes the reference's values for them (the
    declared convention's singleton rule), since eps placement says nothing about a group of one."""
    st = group_statistics(rewards, convention=conv.replace(eps=0.0, singleton="zero"), index=index)
    std: npt.NDArray[np.float64] = st.expand(np.asarray(st.divisor))
    centered: npt.NDArray[np.float64] = rewards - st.expand(np.asarray(st.mean))
    return centered / np.sqrt(std**2 + conv.eps)


def _grpo_with(x: Observed, rewards: np.ndarray | None = None, **change: object) -> np.ndarray:
    """The oracle's GRPO advantages of ``rewards`` (default the input's) under the declared
    convention with ``change`` applied."""
    conv = x.convention.replace(**change) if change else x.convention
    return as_numpy(grpo_advantage(x.rewards if rewards is None else rewards, convention=conv, index=x.index))


def _grouped_by(x: Observed, groups: np.ndarray) -> np.ndarray:
    """The reference's advantages with ``groups`` in place of the index."""
    return as_numpy(x.ref.advantages(x.rewards, groups))


def _is_factor(x: Observed, target: np.ndarray | None) -> bool:
    """``actual`` is ``lambda * expected`` for a ``lambda`` other than 0 and 1 (and ``target``, if given)."""
    lam = x.factor
    if lam == 0 or abs(lam - 1) < 1e-3 or not x.matches(lam * x.expected):
        return False
    return target is None or bool(np.allclose(lam, target, rtol=1e-6))


def _another_factor(x: Observed) -> bool:
    """A constant factor that is neither RLOO's ``(G - 1) / G`` nor its inverse."""
    s = x.sizes
    return (
        _is_factor(x, None)
        and not np.allclose(x.factor, (s - 1) / s, rtol=1e-6)
        and not np.allclose(x.factor, s / (s - 1), rtol=1e-6)
    )


def _twice_sorted_differs(x: Observed) -> bool:
    """The sort permutation applied twice is neither itself nor the identity."""
    twice = x.sorted_order[x.sorted_order]
    return not np.array_equal(twice, x.sorted_order) and not np.array_equal(twice, np.arange(x.index.size))


def _last_group_zero(x: Observed) -> bool:
    """The last group's values are all 0 (the expected ones are not) and every other value is right."""
    last = x.inv == x.inv[-1]
    return bool(
        (x.actual[last] == 0).all()
        and _close(x.actual[~last], x.expected[~last], rtol=x.rtol, atol=x.atol)
        and not (x.expected[last] == 0).all()
    )


def _seen_rank_differs(x: Observed) -> bool:
    """The groups' first-seen order is not their sorted-id order."""
    seen_rank = np.argsort(np.argsort(x.first_seen, kind="stable"), kind="stable")
    return not np.array_equal(seen_rank, np.arange(len(x.counts)))


def _runs_in_sorted_order(x: Observed) -> np.ndarray:
    """Group numbers as ``repeat_interleave(counts)`` broadcasts them: contiguous runs in sorted-id order."""
    return np.searchsorted(np.cumsum(x.counts), np.arange(x.rewards.size), side="right")


def _shards(x: Observed, k: int) -> np.ndarray | None:
    """Group numbers when contiguous groups of ``G`` are cut at the boundaries of ``k`` equal shards
    (``torch.chunk``), or ``None`` where no group is cut or the groups are not contiguous runs."""
    G, n = int(x.counts[0]), x.rewards.size
    if not (x.equal_groups and np.array_equal(x.inv, np.repeat(np.arange(len(x.counts)), G))):
        return None
    size = -(-n // k)  # torch.chunk's shard size
    if size % G == 0 or size >= n:
        return None
    pos = np.arange(n)
    local = (pos // size) * (size // G + 1) + (pos % size) // G
    shards: np.ndarray = np.unique(local, return_inverse=True)[1]
    return shards.reshape(-1)


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


def _loo_eps(x: Observed, ddof: int) -> float:
    """The eps a leave-one-out std estimator uses, read where a response's siblings are all equal
    (there ``A = (R - mean of the others) / eps``), to two digits; 0 where no such response is."""
    try:
        bare = estimators.loo_std_advantage(x.rewards, index=x.index, ddof=ddof)
        num = as_numpy(rloo_advantage(x.rewards, index=x.index))
    except ValueError:
        return 0.0
    at = np.isinf(bare) & np.isfinite(x.actual) & (x.actual != 0)
    return float(f"{np.median(num[at] / x.actual[at]):.2g}") if at.any() else 0.0


def _estimator(name: str, ddof: int) -> Callable[[Observed], np.ndarray]:
    """The named estimator's advantages with ``ddof`` (the reference's eps, far below any group std
    these inputs have, except for the leave-one-out std, whose eps is read off the input)."""

    def predict(x: Observed) -> np.ndarray:
        if name == "group_then_batch":
            conv = x.conv if x.conv is not None and x.grpo else PAPER
            return estimators.group_then_batch_advantage(
                x.rewards, index=x.index, convention=conv, batch_ddof=ddof
            )
        eps = _loo_eps(x, ddof) if name == "loo_std" else x.ref.eps
        return estimators.ESTIMATORS[name](x.rewards, index=x.index, ddof=ddof, eps=eps)

    return predict


def _cut_at_shards(k: int) -> Hypothesis:
    """Groups cut at the boundaries of ``k`` equal shards (:func:`_shards`)."""

    def predict(x: Observed) -> np.ndarray:
        shards = _shards(x, k)
        assert shards is not None
        return _grouped_by(x, shards)

    return Hypothesis(
        f"shards:{k}",
        f"groups are cut at the boundaries of {k} equal shards of the batch (statistics computed "
        "per data-parallel rank): a group split across shards is normalised in pieces",
        predict,
        applies=lambda x: _shards(x, k) is not None,
    )


def _always(x: Observed) -> bool:
    return True


def _grpo(x: Observed) -> bool:
    return x.grpo


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    """A known deviation: ``key`` and ``cause`` (templates, formatted with ``x``, the :class:`Observed`
    input), when it ``applies`` (else it is not tried), and what it says: the advantages it ``predict``\\ s
    (it explains ``actual`` when they match within the tolerance), or a ``test`` of ``actual``."""

    key: str
    cause: str
    predict: Callable[[Observed], np.ndarray] | None = None
    test: Callable[[Observed], bool] | None = None
    applies: Callable[[Observed], bool] = _always

    def explains(self, x: Observed) -> bool:
        """Whether this deviation reproduces ``x.actual``."""
        if self.test is not None:
            return self.test(x)
        assert self.predict is not None
        return x.matches(self.predict(x))


#: The deviations when some actual values are NaN or infinite (the first that applies is the cause).
NAN_HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis(
        "singleton_nan",
        "a group of one response gets NaN/inf: the std of one value (ddof=1) is NaN; "
        "a singleton group should get {x.ref.singleton!r} under {x.ref.name}",
        test=lambda x: bool((x.bad & x.single).any() and not (x.bad & ~x.single).any()),
    ),
    Hypothesis(
        "silent_nan",
        "silent groups (all rewards equal) give NaN/inf: std = 0 and no eps make 0/0; "
        "return 0 where the group std is 0",
        test=lambda x: bool(
            not ((x.bad & x.single).any() and not (x.bad & ~x.single).any())
            and (x.bad & x.silent).any()
            and not (x.bad & ~x.silent).any()
        ),
    ),
)

_ESTIMATORS = tuple(
    Hypothesis(
        f"estimator:{name}:{ddof}",
        f"the code computes the named estimator {name!r} ({_ESTIMATOR_WORDS[name]}; sigma_ref.estimators, "
        f"ddof={ddof}), not {{x.ref.name}}: a different algorithm, not a convention of it",
        predict=_estimator(name, ddof),
    )
    for name in ("rloo_std", "loo_std", "group_then_batch")
    for ddof in (0, 1)
)

#: The deviations when every actual value is finite, in the order their causes are printed.
HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis("sign", "advantages have the wrong sign: use R - mean, not mean - R", lambda x: -x.expected),
    Hypothesis(
        "ddof",
        "std is Bessel-corrected (divides by G-1); declare ddof=1, or use std(unbiased=False)",
        lambda x: _grpo_with(x, ddof=1 - x.convention.ddof),
        applies=lambda x: x.grpo and 1 - x.convention.ddof == 1,
    ),
    Hypothesis(
        "ddof",
        "std is the population std (divides by G); declare ddof=0, or use Bessel's std",
        lambda x: _grpo_with(x, ddof=1 - x.convention.ddof),
        applies=lambda x: x.grpo and 1 - x.convention.ddof != 1,
    ),
    Hypothesis(
        "scale_batch",
        "advantages are divided by one std over the whole batch, not each group's std (scale='batch')",
        lambda x: _grpo_with(x, scale="batch"),
        applies=lambda x: x.grpo and x.convention.scale == "group",
    ),
    Hypothesis(
        "scale_group",
        "advantages are divided by each group's std, not one std over the batch (scale='group')",
        lambda x: _grpo_with(x, scale="group"),
        applies=lambda x: x.grpo and x.convention.scale != "group",
    ),
    Hypothesis(
        "batch_std_of_centered",
        "the batch std is taken of the group-centered rewards R - mean_g, not of the rewards themselves "
        "(scale='batch' divides by the std of the whole batch's raw rewards)",
        # the oracle's batch scale applied to R - mean_g: one std of the centered batch
        lambda x: _grpo_with(x, x.centered),
        applies=lambda x: x.grpo and x.convention.scale == "batch",
    ),
    Hypothesis(
        "no_centering",
        "advantages are divided by the std but not mean-centered: mean centering forgotten, (R - mean) / std",
        lambda x: _divide_like(x, x.rewards),
        applies=_grpo,
    ),
    Hypothesis(
        "eps_inside",
        "eps is inside the sqrt: sqrt(var + eps) instead of std + eps",
        lambda x: np.where(x.single, x.expected, _eps_inside(x.rewards, x.index, x.convention)),
        applies=_grpo,
    ),
    Hypothesis(
        "no_division",
        "advantages are R - mean, not divided by the std: declare scale='none' (Dr. GRPO) "
        "or divide by the group std",
        lambda x: x.centered,
        applies=_grpo,
    ),
    Hypothesis(
        "floor_mean",
        "the group mean is a floor division (sum // G, integer division): use a float mean",
        lambda x: _divide_like(x, x.rewards - np.floor(_group_means(x))[x.inv]),
        applies=lambda x: x.conv is not None,
    ),
    Hypothesis(
        "batch_mean",
        "advantages are centered on the batch mean, not the group mean",
        lambda x: _divide_like(x, x.rewards - x.rewards.mean()),
    ),
    Hypothesis(
        "one_group",
        "advantages are centered and scaled over the whole batch as one group, not per group",
        lambda x: _grouped_by(x, np.zeros_like(x.inv)),
    ),
    Hypothesis(
        "interleaved",
        "groups are read interleaved (response i in group i mod B) instead of contiguous runs of G: "
        "use reshape(-1, G), not reshape(G, -1)",
        lambda x: _grouped_by(x, np.arange(x.rewards.size) % len(x.counts)),
        applies=lambda x: x.equal_groups and len(x.counts) > 1,
    ),
    Hypothesis(
        "sorted_order",
        "advantages come back in sorted-id order, not in the order of the inputs: the values are "
        "right per group but permuted (scatter them back with the inverse of the sort)",
        lambda x: x.expected[x.sorted_order],
        applies=lambda x: not np.array_equal(x.sorted_order, np.arange(x.index.size)),
    ),
    Hypothesis(
        "sort_order_as_inverse",
        "results are scattered back with the sort order instead of its inverse: out = "
        "sorted_values[order] (the permutation applied twice), not out[order] = sorted_values",
        lambda x: x.expected[x.sorted_order][x.sorted_order],
        applies=lambda x: (
            not np.array_equal(x.sorted_order, np.arange(x.index.size)) and _twice_sorted_differs(x)
        ),
    ),
    Hypothesis(
        "runs",
        "groups are taken as contiguous runs in order of appearance, ignoring the index: "
        "group by the index ids (unique(return_inverse=True)), not by position",
        lambda x: _grouped_by(x, x.appearance_runs),
        applies=lambda x: not np.array_equal(x.appearance_runs, x.inv),
    ),
    *_ESTIMATORS,
    Hypothesis(
        "estimator:maxrl",
        f"the code computes the named estimator 'maxrl' ({_ESTIMATOR_WORDS['maxrl']}; "
        "sigma_ref.estimators), not {x.ref.name}",
        lambda x: estimators.maxrl_advantage(x.rewards, index=x.index),
    ),
    Hypothesis(
        "rloo_factor",
        "advantages are a factor (G-1)/G too small: RLOO's baseline leaves the response out, "
        "A = G/(G-1) (R - mean); R - mean is Dr. GRPO's",
        test=lambda x: _is_factor(x, (x.sizes - 1) / x.sizes),
    ),
    Hypothesis(
        "inverse_rloo_factor",
        "advantages are a factor G/(G-1) too large",
        test=lambda x: _is_factor(x, x.sizes / (x.sizes - 1)),
    ),
    Hypothesis(
        "factor:{x.factor:.6g}",
        "advantages are {x.factor:.6g} times the expected values (a constant factor)",
        test=_another_factor,
    ),
    # right statistics, wrong lookup: element i gets the mean and divisor of group h(i)
    Hypothesis(
        "first_seen_lookup",
        "statistics are listed in first-seen id order but looked up with the sorted-id rank "
        "(np.unique's inverse): each response gets another group's mean and std",
        lambda x: x.through(np.argsort(x.first_seen, kind="stable")[x.inv]),
        applies=_seen_rank_differs,
    ),
    Hypothesis(
        "runs_broadcast",
        "per-id statistics are broadcast with repeat_interleave(counts), as if each group were a "
        "contiguous run in sorted-id order: interleaved responses get other groups' statistics "
        "(index them with np.unique(..., return_inverse=True)'s inverse)",
        lambda x: x.through(_runs_in_sorted_order(x)),
        applies=_seen_rank_differs,
    ),
    *(_cut_at_shards(k) for k in (2, 4, 8)),
    Hypothesis(
        "clamp:{x.top:.6g}",
        "advantages are clamped to [-{x.top:.6g}, {x.top:.6g}]: undeclared (an advantage clip such as "
        "OpenRLHF's default 10 cuts A+ = sqrt((G-k)/k) of large groups)",
        lambda x: np.clip(x.expected, -x.top, x.top),
        applies=lambda x: x.top > 0 and float(np.abs(x.expected).max()) > x.top * 1.001,
    ),
    Hypothesis(
        "rloo_divides_by_g",
        "the leave-one-out mean divides by G instead of G - 1: A = R - (sum - R) / G",
        lambda x: x.rewards - (np.bincount(x.inv, x.rewards)[x.inv] - x.rewards) / x.sizes,
        applies=lambda x: x.ref.family == "rloo",
    ),
    Hypothesis(
        "last_group_zero",
        "the last group's advantages are all zero: the loop over groups stops one group early",
        test=_last_group_zero,
    ),
    Hypothesis(
        "silent_nonzero",
        "silent groups (all rewards equal) get non-zero advantages; they should get 0",
        # a group of one is no silent group here: it has its own rule and hypothesis
        test=lambda x: bool(
            (x.wrong & x.silent & ~x.single).any() and not (x.wrong & ~(x.silent & ~x.single)).any()
        ),
    ),
    Hypothesis(
        "singleton",
        "groups of one response get other values than {x.ref.singleton!r} ({x.ref.name})",
        test=lambda x: bool((x.wrong & x.single).any() and not (x.wrong & ~x.single).any()),
    ),
)


def explained(x: Observed) -> list[tuple[str, str]]:
    """``(key, cause)`` of every hypothesis that applies to ``x`` and reproduces ``x.actual``, in
    table order. A hypothesis whose prediction raises explains nothing; any other error raises."""
    if not x.comparable:
        return []
    found = []
    with np.errstate(all="ignore"):
        for h in NAN_HYPOTHESES if x.bad.any() else HYPOTHESES:
            if not h.applies(x):
                continue
            key, cause = h.key.format(x=x), h.cause.format(x=x)
            try:
                if h.explains(x):
                    found.append((key, cause))
            except Exception:  # a hypothesis the oracle cannot evaluate on this input
                continue
    return found
