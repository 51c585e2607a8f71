"""Private: the audit of a rollout log (:func:`rollout_audit`, re-exported by ``sigma_ref.audit``).

Per group size ``G``: silent-group rates (plug-in, subsampled, empirical Bayes, observed), the
gradient-mass share of extreme prompts, the least ``G`` per fidelity target, a budget per 1,000
rollouts and a recommended ``G``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._text_table import table
from .difficulty import silent_group_rate


@dataclasses.dataclass(frozen=True)
class SilentRow:
    """Silent-group rate of a rollout log at group size ``G``, four ways.

    ``plug_in``: mean over prompts of ``p**G + (1-p)**G`` with ``p = k/n`` (biased: ``k/n`` is
    noisier than ``p``, and the rate is convex); ``subsampled``: mean over the ``covered`` prompts
    with ``n >= G`` of the unbiased ``(C(k,G) + C(n-k,G)) / C(n,G)``, ``subsampled_se`` its
    standard error (the sample sd over prompts / sqrt(prompts): conservative, it includes the
    spread of the prompts' own rates); ``model``: the empirical-Bayes estimate
    (:mod:`sigma_ref.corpus_prior`), ``model_sd`` its posterior sd; ``supported``: every prompt
    has ``n >= G`` (else the log cannot support an unbiased estimate and ``model`` is the best
    it offers). At the logged ``G`` also ``observed``, the silent share of the log's groups of
    that size, its binomial standard error ``observed_se`` and ``expected``, the subsampled
    estimate averaged over those same groups.
    """

    G: int
    covered: int
    plug_in: float
    subsampled: float | None
    observed: float | None = None
    observed_se: float | None = None
    expected: float | None = None
    groups: int = 0
    subsampled_se: float | None = None
    model: float | None = None
    model_sd: float | None = None
    supported: bool = True


@dataclasses.dataclass(frozen=True)
class SizeRow:
    """The exact least ``G`` with fidelity ``>= 1 - epsilon`` over all prompts.

    ``median``, ``p90``, ``reached`` (share whose least ``G`` is ``<=`` the logged ``G``): under the
    mixture of the prompts' posteriors ``Beta(a + k, b + n - k)`` (:mod:`sigma_ref.corpus_prior`),
    which includes the prompts with ``k in {0, n}``; ``None`` for a size beyond ``2**40``.
    ``plug_in_median``, ``plug_in_p90``, ``maximum``: with ``p = k/n`` over the prompts with
    ``0 < k < n`` only (the earlier table: it reads low).
    """

    epsilon: float
    median: int | None
    p90: int | None
    maximum: int | None
    reached: float | None
    plug_in_median: int | None = None
    plug_in_p90: int | None = None


@dataclasses.dataclass(frozen=True)
class BudgetRow:
    """Per 1,000 rollouts spent at group size ``G``: ``1000 / G`` groups, the expected non-silent
    ones, the expected gradient signal ``(1000 / G) mean_i E[sigma_i]`` (GRPO's update size in units
    of ``delta_s``), and the corpus fidelity ``mean_i E[sigma_i] / mean_i E[sqrt(p_i (1-p_i))]``;
    ``source`` names the estimator (``"subsampled"`` where every prompt has ``n >= G``, else
    ``"empirical Bayes"``)."""

    G: int
    groups: float
    non_silent: float
    signal: float
    fidelity: float
    source: str


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """The least ``G`` whose expected update keeps ``target`` of the large-G gradient signal
    (corpus fidelity ``>= target``), or ``None`` beyond ``limit``; ``reason`` says it in words."""

    G: int | None
    target: float
    limit: int
    reason: str


@dataclasses.dataclass(frozen=True)
class RolloutAudit:
    """The audit of a rollout log; ``str()`` is a report, ``to_dict()`` plain data."""

    path: str
    rows: int
    prompts: int
    never: int  # prompts with p = 0 or 1
    logged_G: int | None  # noqa: N815 (G is the paper's name)
    group_source: str
    silent: tuple[SilentRow, ...]
    extreme: float
    mass_share: dict[str, float | None]
    sizes: tuple[SizeRow, ...]
    prior: tuple[float, float] = (math.nan, math.nan)  # Beta(a, b) fitted to the log
    edge_share: float = 0.0  # share of prompts with k in {0, n}
    budget: tuple[BudgetRow, ...] = ()
    recommended: Recommendation | None = None
    prior_at_bound: bool = False  # the fit stopped at a bound: the model's numbers reflect it

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for JSON)."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The audit as a JSON document."""
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        groups = (
            f"logged G = {self.logged_G} (groups from {self.group_source})"
            if self.logged_G
            else "no groups in the log (pass --group-col, or log a group's rows together)"
        )
        out = [
            f"Rollout audit of {self.path}: {self.rows:,} rollouts, {self.prompts:,} prompts "
            f"({self.never:,} always or never correct); {groups}",
            "",
            "Silent-group rate",
        ]
        e = self.extreme
        out += self._silent_lines()
        out += [
            "",
            f"Gradient-mass share of extreme prompts (p <= {e:g} or p >= {1 - e:g}):",
            "  " + ", ".join(f"{name} {_pct(value)}" for name, value in self.mass_share.items()),
        ]
        out += self._budget_lines()
        out += self._size_lines()
        return "\n".join(out)

    def _silent_lines(self) -> list[str]:
        """The report's silent-group table and its notes."""
        head = (
            "G",
            "prompts n>=G",
            "plug-in (biased)",
            "subsampled ± se",
            "empirical Bayes ± sd",
            "observed ± se",
        )
        body = []
        beyond = False
        for r in self.silent:
            observed = "" if r.observed is None else f"{r.observed:.2%} ± {r.observed_se:.2%}"
            if r.observed is not None:
                observed += f" ({r.groups:,} groups; forecast {r.expected:.2%})"
            mark = " (logged)" if r.G == self.logged_G else "" if r.supported else " *"
            beyond = beyond or not r.supported
            sub = (
                "–"
                if r.subsampled is None or not r.supported
                else f"{r.subsampled:.2%} ± {r.subsampled_se:.2%}"
            )
            model = "–" if r.model is None else f"{r.model:.2%} ± {r.model_sd:.2%}"
            body.append((f"{r.G}{mark}", f"{r.covered:,}", _pct(r.plug_in, 2), sub, model, observed))
        a, b = self.prior
        out = table(head, body)
        out += [
            f"Empirical Bayes: Beta({a:.3g}, {b:.3g}) fitted to the log's counts, each prompt's posterior "
            "mean; unbiased if the pass rates follow that Beta, biased by its misfit otherwise."
        ]
        if self.prior_at_bound:
            out += [
                "Warning: the fit stopped at a bound (a, b in [1e-3, 1e4]): the log does not pin the "
                "prior (too few prompts, or all k in {0, n}), so the model's numbers reflect the bounds."
            ]
        if beyond:
            out += [
                "* beyond the log: some prompts have fewer than G rollouts (no subsets of G to "
                "average), so the empirical-Bayes column is the best the log offers."
            ]
        return out

    def _budget_lines(self) -> list[str]:
        """The report's budget table and recommendation (none without budget rows)."""
        out: list[str] = []
        if self.budget:
            out += ["", "Budget: per 1,000 rollouts at group size G (estimates as above)"]
            head3 = ("G", "groups", "non-silent groups", "gradient signal", "corpus fidelity", "estimator")
            body3 = [
                (
                    f"{r.G}",
                    f"{r.groups:.1f}",
                    f"{r.non_silent:.1f}",
                    f"{r.signal:.2f}",
                    f"{r.fidelity:.3f}",
                    r.source,
                )
                for r in self.budget
            ]
            out += table(head3, body3)
        if self.recommended is not None:
            out += ["", f"Recommended: {self.recommended.reason}"]
        return out

    def _size_lines(self) -> list[str]:
        """The report's table of the least G per fidelity target."""
        a, b = self.prior
        out = [
            "",
            f"Least G with fidelity >= 1 - epsilon (exact), over all {self.prompts:,} prompts: the mixture "
            f"of their posteriors Beta({a:.3g} + k, {b:.3g} + n - k); {self.edge_share:.1%} of prompts "
            "have k in {0, n} and enter only through it",
        ]
        head2 = (
            "1 - epsilon",
            "median",
            "90th pct",
            f"reached at G={self.logged_G}",
            "plug-in 0<k<n: median",
            "90th",
        )
        body2 = [
            (
                f"{1 - s.epsilon:g}",
                *("> 2**40" if v is None else str(v) for v in (s.median, s.p90)),
                _pct(s.reached) if self.logged_G and s.reached is not None else "–",
                *("–" if v is None else str(v) for v in (s.plug_in_median, s.plug_in_p90)),
            )
            for s in self.sizes
        ]
        return out + table(head2, body2)


def _pct(x: float | None, digits: int = 1) -> str:
    """A share as a percentage for the report, ``–`` for none."""
    return "–" if x is None else f"{x:.{digits}%}"


def _weighted_share(weights: np.ndarray, counts: np.ndarray, mask: np.ndarray) -> float | None:
    total = float((weights * counts).sum())
    return None if total == 0 else float((weights * counts)[mask].sum() / total)


def rollout_audit(
    rollouts: Any,
    G: Any = (8, 16, 32),
    epsilons: Any = (0.1, 0.05, 0.01),
    extreme: float = 0.1,
    *,
    target: float = 0.95,
) -> RolloutAudit:
    """Audit a rollout log (:func:`sigma_ref.rollouts.read_rollouts`) at its logged ``G`` and target ``G``.

    Per ``G``: the plug-in silent rate ``mean p**G + (1-p)**G`` (``p = k/n``), the unbiased
    subsampled ``mean (C(k,G) + C(n-k,G)) / C(n,G)`` over prompts with ``n >= G``, and at the
    logged ``G`` the silent share of the logged groups with its standard error
    ``sqrt(f (1-f) / groups)``. The share of the update mass on extreme prompts
    (``p <= extreme`` or ``p >= 1 - extreme``) under GRPO (``sqrt(p(1-p))``) and Dr. GRPO
    (``p(1-p)``) in the large-G limit and at the logged ``G`` (exact expectations), and
    per ``epsilon`` the distribution of the exact least ``G`` with fidelity ``>= 1 - epsilon``.
    Closed forms run once on the distinct pass rates (a log of ``n``-rollout prompts has
    at most ``n + 1``).

    >>> from sigma_ref.rollouts import Rollouts
    >>> log = Rollouts("log", 8, np.array(["a", "b"]), np.array([4, 4]), np.array([0, 2]),
    ...                np.array([4, 4]), np.array([0, 2]), np.array([0, 1]), "consecutive rows")
    >>> audit = rollout_audit(log, G=(2,))
    >>> [(r.G, r.plug_in, round(r.subsampled, 4), r.observed) for r in audit.silent]
    [(4, 0.5625, 0.5, 0.5), (2, 0.75, 0.6667, None)]
    """
    from . import corpus_prior as cp

    if not 0 < extreme < 0.5:
        raise ValueError(f"extreme={extreme!r} must be in (0, 0.5), e.g. 0.1 for p <= 0.1 or p >= 0.9")
    if not 0 < target < 1:
        raise ValueError(f"target={target!r} must be in (0, 1), e.g. 0.95 to keep 95% of the large-G signal")
    p_all = rollouts.k / rollouts.n
    values, counts = np.unique(p_all, return_counts=True)
    logged = rollouts.logged_G
    targets = [int(g) for g in np.atleast_1d(np.asarray(G))]
    sizes = sorted(
        set(([logged] if logged and logged >= 2 else []) + targets), key=lambda g: (g != logged, g)
    )
    prior = cp.fit_prior(rollouts.n, rollouts.k)
    rows = [_silent_row(rollouts, values, counts, g, prior) for g in sizes]
    shares = _mass_shares(values, counts, extreme, logged)
    live = (values > 0) & (values < 1)
    eps_list = [float(e) for e in np.atleast_1d(np.asarray(epsilons, dtype=np.float64))]
    size_rows = _size_rows(rollouts, prior, values, counts, eps_list)
    never = int(counts[~live].sum())
    budget, recommended = _budget(rollouts, prior, sizes, target)
    return RolloutAudit(
        rollouts.path,
        int(rollouts.rows),
        int(rollouts.n.size),
        never,
        logged,
        rollouts.group_source,
        tuple(rows),
        float(extreme),
        shares,
        tuple(size_rows),
        (prior.a, prior.b),
        never / int(rollouts.n.size),
        budget,
        recommended,
        prior.at_bound,
    )


def _silent_row(rollouts: Any, values: np.ndarray, counts: np.ndarray, g: int, prior: Any) -> SilentRow:
    """:class:`SilentRow` at group size ``g`` (with the observed share at the logged ``G``);
    ``values``/``counts``: the distinct pass rates ``k/n`` and how many prompts have each."""
    from . import corpus_prior as cp
    from .rollouts import subsampled_silent_rate

    plug = float((np.asarray(silent_group_rate(values, g)) * counts).sum() / counts.sum())
    covered = rollouts.n >= g
    sub = subsampled_silent_rate(rollouts.n[covered], rollouts.k[covered], g) if covered.any() else None
    model, model_sd = cp.posterior(rollouts.n, rollouts.k, g, cp.silent, prior)
    row = SilentRow(
        g,
        int(covered.sum()),
        plug,
        None if sub is None else float(sub.mean()),
        subsampled_se=None if sub is None else float(sub.std() / math.sqrt(sub.size)),
        model=float(model.mean()),
        model_sd=model_sd,
        supported=bool(covered.all()),
    )
    if g != rollouts.logged_G:
        return row
    full = rollouts.group_n == g
    silent = (rollouts.group_k[full] == 0) | (rollouts.group_k[full] == g)
    m = int(full.sum())
    f = float(silent.mean())
    per_prompt = subsampled_silent_rate(rollouts.n, rollouts.k, g)
    forecast = float(per_prompt[rollouts.group_prompt[full]].mean())
    return dataclasses.replace(
        row, observed=f, observed_se=math.sqrt(f * (1 - f) / m), expected=forecast, groups=m
    )


def _mass_shares(
    values: np.ndarray, counts: np.ndarray, extreme: float, logged: int | None
) -> dict[str, float | None]:
    """The share of the update mass on prompts with ``min(p, 1-p) <= extreme``, per method, in the
    large-G limit and at the logged ``G``."""
    from ._vocabulary import Method
    from .difficulty import mass_weight

    edge = np.minimum(values, 1 - values) <= extreme
    shares: dict[str, float | None] = {}
    methods: tuple[tuple[Method, str], ...] = (("dr_grpo", "Dr. GRPO"), ("grpo", "GRPO"))
    for method, label in methods:
        shares[f"{label} (large G)"] = _weighted_share(
            np.asarray(mass_weight(values, method=method)), counts, edge
        )
        if logged and logged >= 2:
            weights = np.asarray(mass_weight(values, method=method, G=logged))
            shares[f"{label} (G={logged})"] = _weighted_share(weights, counts, edge)
    return shares


def _size_rows(
    rollouts: Any, prior: Any, values: np.ndarray, counts: np.ndarray, eps_list: list[float]
) -> list[SizeRow]:
    """:class:`SizeRow` per ``epsilon``: the least ``G`` under the posteriors' mixture, and with the
    plug-in ``p = k/n`` over the prompts with ``0 < k < n``."""
    from . import corpus_prior as cp
    from .audit import _exact_sizes  # here, not at the top: sigma_ref.audit imports this module
    from .difficulty import exact_group_size as _exact
    from .difficulty import fidelity

    logged = rollouts.logged_G
    live = (values > 0) & (values < 1)
    m_q, m_grid, m_mass = cp.mixture_quantile(rollouts.n, rollouts.k, prior, [0.5, 0.1])
    size_rows = []
    for eps in eps_list:
        median, p90 = (int(x) if math.isfinite(x) else None for x in _exact_sizes(m_q, eps))
        reached = None
        if logged:
            fid = np.asarray(fidelity(np.maximum(m_grid, 1e-300), logged))
            reached = float(m_mass[fid >= 1 - eps].sum())
        plug_median = plug_p90 = maximum = None
        if live.any():
            least = np.asarray(_exact(values[live], epsilon=eps)).reshape(-1)
            weights = counts[live]
            order = np.argsort(least, kind="stable")
            cumulative = np.cumsum(weights[order]) / weights.sum()
            plug_median, plug_p90 = (int(least[order][np.searchsorted(cumulative, q)]) for q in (0.5, 0.9))
            maximum = int(least.max())
        size_rows.append(SizeRow(eps, median, p90, maximum, reached, plug_median, plug_p90))
    return size_rows


#: The recommended G is searched up to this size.
RECOMMEND_LIMIT = 4096


def _budget(
    rollouts: Any, prior: Any, sizes: Sequence[int], target: float
) -> tuple[tuple[BudgetRow, ...], Recommendation]:
    """The budget rows at ``sizes`` and the recommended G (least ``G`` with corpus fidelity ``>= target``).

    Estimates of ``E[sigma_i](G)`` and the silent rate: unbiased (subsampled) where every prompt has
    ``n >= G``, else empirical Bayes; the large-G signal ``mean E[sqrt(p (1-p))]`` by empirical Bayes
    (no unbiased estimate exists). The corpus fidelity is increasing in ``G`` (each prompt's is),
    so the least ``G`` is found by doubling, then bisection.
    """
    from . import corpus_prior as cp

    n, k = rollouts.n, rollouts.k
    limit_signal = float(cp.posterior_root(n, k, prior).mean())
    smallest = int(n.min())

    def estimate(g: int, h: Any) -> tuple[float, str]:
        if g <= smallest:
            return float(cp.unbiased(n, k, g, h).mean()), "subsampled"
        return float(cp.posterior(n, k, g, h, prior, sd=False)[0].mean()), "empirical Bayes"

    def corpus_fidelity(g: int) -> float:
        return estimate(g, cp.signal)[0] / limit_signal

    rows = []
    for g in sorted(set(sizes)):
        if g < 2:
            continue
        sigma, source = estimate(g, cp.signal)
        quiet, _ = estimate(g, cp.silent)
        groups = 1000 / g
        rows.append(BudgetRow(g, groups, groups * (1 - quiet), groups * sigma, sigma / limit_signal, source))
    lo, hi = 1, 2
    while hi <= RECOMMEND_LIMIT and corpus_fidelity(hi) < target:
        lo, hi = hi, 2 * hi
    logged = rollouts.logged_G
    at_logged = (
        f"; at the logged G = {logged} it is {corpus_fidelity(logged):.3f}" if logged and logged >= 2 else ""
    )
    if hi > RECOMMEND_LIMIT:
        reason = (
            f"no G up to {RECOMMEND_LIMIT} keeps {target:.0%} of the large-G gradient signal "
            f"(corpus fidelity {corpus_fidelity(RECOMMEND_LIMIT):.3f} at {RECOMMEND_LIMIT}){at_logged}"
        )
        return tuple(rows), Recommendation(None, target, RECOMMEND_LIMIT, reason)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if corpus_fidelity(mid) < target else (lo, mid)
    sigma, source = estimate(hi, cp.signal)
    quiet, _ = estimate(hi, cp.silent)
    reason = (
        f"G = {hi}, the least G whose expected update keeps {target:.0%} of the large-G gradient signal "
        f"(corpus fidelity {sigma / limit_signal:.3f}, {source}){at_logged}. Per 1,000 rollouts at "
        f"G = {hi}: {1000 / hi * (1 - quiet):.1f} non-silent groups, "
        f"gradient signal {1000 / hi * sigma:.2f}. "
        "A smaller G spends fewer rollouts a group, but its expected update keeps less of the "
        "large-G signal, least on the hardest and easiest prompts."
    )
    return tuple(rows), Recommendation(hi, target, RECOMMEND_LIMIT, reason)
