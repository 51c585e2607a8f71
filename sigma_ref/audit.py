"""Corpus audit: how much of a group size's compute a set of prompts wastes.

For each prompt's pass rate ``p`` at group size ``G``: the silent-group rate
``p**G + (1-p)**G`` (the share of its groups that give no update), the closed-form
group-size law ``ceil(1 / (8 epsilon p (1 - p)))`` and the exact least ``G`` with
fidelity ``>= 1 - epsilon``. The totals are the average waste over prompts and the
effective learning budget ``1 - average waste``.

The work is columnar (:func:`audit_columns`): every closed form runs once per batch of
distinct pass rates, so an audit of 10,000,000 rates is a few vectorised passes.
:func:`rollout_audit` audits a rollout log (:mod:`sigma_ref.rollouts`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from . import _roundtrip, _validate
from .difficulty import exact_group_size, min_group_size, silent_group_rate

__all__ = [
    "AuditRow",
    "AuditResult",
    "AuditColumns",
    "audit_columns",
    "corpus_audit",
    "RolloutAudit",
    "rollout_audit",
]

#: Waste thresholds of the seed post: below 10% "ok", below 30% "warn", else "critical".
STATUS_THRESHOLDS = ((0.1, "ok"), (0.3, "warn"))
STATUS_NAMES = ("ok", "warn", "critical")
#: Above this the exact least G is not searched (``exact_group_size`` stops at 2**40).
EXACT_LIMIT = 2.0**40
#: Above this the closed form is not converted to an integer (it would leave int64).
CLOSED_LIMIT = 2.0**62


def _status(waste: float) -> str:
    for limit, name in STATUS_THRESHOLDS:
        if waste < limit:
            return name
    return "critical"


def _status_codes(waste: np.ndarray) -> np.ndarray:
    """0, 1, 2 for ``STATUS_NAMES``, vectorised ``_status``."""
    return np.searchsorted(np.array([t for t, _ in STATUS_THRESHOLDS]), waste, side="right")


def format_rate(p: float) -> str:
    """A pass rate with the fewest digits that read back as the same float (``0.999999``, not ``1``).

    >>> format_rate(0.999999), format_rate(0.5), format_rate(1e-20)
    ('0.999999', '0.5', '1e-20')
    """
    return repr(float(p))


def format_size(size: float, p: float, bound: str = "2**40") -> str:
    """A group size for the table: the integer, ``never`` (``p`` is 0 or 1), or a bound.

    >>> format_size(11.0, 0.5), format_size(math.nan, 0.0), format_size(math.inf, 1e-30)
    ('11', 'never', '> 2**40')
    """
    if p in (0.0, 1.0):
        return "never"
    if math.isinf(size):
        return f"> {bound}"
    if math.isnan(size):
        return "–"
    return str(int(size))


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """One prompt of the audit.

    Group sizes are ``None`` where ``p`` is 0 or 1 (no G helps) or where the least ``G``
    is beyond what is searched (``exact_group_size`` above ``2**40``, the closed form above
    ``2**62``; then ``status`` still says how much of ``G`` is wasted).
    """

    p: float
    silent_rate: float
    closed_form_group_size: int | None
    exact_group_size: int | None
    status: str


@dataclasses.dataclass(frozen=True)
class AuditColumns:
    """The audit as columns: ``closed`` and ``exact`` are float64 with ``nan`` for "never"
    (``p`` in {0, 1}) or "not computed", and ``inf`` for beyond the searched range."""

    p: np.ndarray
    silent_rate: np.ndarray
    closed: np.ndarray
    exact: np.ndarray
    status: np.ndarray  # codes into STATUS_NAMES

    def rows(self, index: Any = None) -> Iterator[AuditRow]:
        """The rows (all, or those at ``index``) as :class:`AuditRow`."""
        idx = range(self.p.size) if index is None else np.asarray(index).reshape(-1).tolist()

        def size(x: float) -> int | None:
            return None if not math.isfinite(x) else int(x)

        for i in idx:
            yield AuditRow(
                float(self.p[i]),
                float(self.silent_rate[i]),
                size(float(self.closed[i])),
                size(float(self.exact[i])),
                STATUS_NAMES[int(self.status[i])],
            )


def _exact_sizes(values: np.ndarray, eps: float) -> np.ndarray:
    """``exact_group_size`` on distinct ``values``; ``inf`` where it is beyond ``2**40``."""
    out = np.full(values.shape, np.inf)
    if values.size == 0:
        return out
    try:
        out[:] = np.asarray(exact_group_size(values, epsilon=eps), dtype=np.float64).reshape(-1)
    except ValueError:  # some value needs G > 2**40: halve until it is isolated
        if values.size == 1:
            return out
        half = values.size // 2
        out[:half] = _exact_sizes(values[:half], eps)
        out[half:] = _exact_sizes(values[half:], eps)
    return out


def group_sizes(p: np.ndarray, epsilon: float, *, exact: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form and exact least ``G`` for each ``p`` (float64; ``nan`` at ``p`` in {0, 1},
    ``inf`` beyond ``2**62`` / ``2**40``), each closed form evaluated once per distinct ``p``.

    >>> group_sizes(np.array([0.5, 0.0, 1e-30]), 0.05)
    (array([10., nan, inf]), array([11., nan, inf]))
    """
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    closed = np.full(p.shape, np.nan)
    exact_out = np.full(p.shape, np.nan)
    inner = (p > 0) & (p < 1)
    if not inner.any():
        return closed, exact_out
    values, inverse = np.unique(p[inner], return_inverse=True)
    # the group-size law overflows int64 where 8 eps p (1-p) < 2**-62: no finite budget reaches it
    with np.errstate(divide="ignore"):
        fits = 1 / (8 * epsilon * values * (1 - values)) < CLOSED_LIMIT
    closed_values = np.full(values.shape, np.inf)
    if fits.any():
        closed_values[fits] = np.asarray(
            min_group_size(values[fits], epsilon=epsilon), dtype=np.float64
        ).reshape(-1)
    closed[inner] = closed_values[inverse]
    if exact:
        exact_values = np.full(values.shape, np.inf)
        searched = closed_values <= EXACT_LIMIT  # beyond it the exact search raises (inf)
        exact_values[searched] = _exact_sizes(values[searched], epsilon)
        exact_out[inner] = exact_values[inverse]
    return closed, exact_out


def audit_columns(p: Any, G: int = 8, epsilon: float = 0.05, *, exact: bool = True) -> AuditColumns:
    """The audit of pass rates ``p`` at group size ``G`` as columns (see :func:`corpus_audit`).

    ``exact=False`` leaves the exact least ``G`` as ``nan`` (it is the costly column; the
    CLI computes it for the rows it shows).

    >>> cols = audit_columns([0.5, 0.03], G=8)
    >>> cols.closed.tolist(), cols.exact.tolist(), cols.status.tolist()
    ([10.0, 86.0], [11.0, 113.0], [0, 2])
    """
    p_arr, _ = _roundtrip.numeric(p, "pass_rates")
    p_arr = p_arr.reshape(-1)
    _validate.check_probability(p_arr, "pass_rates")
    G_arr, _ = _roundtrip.numeric(G, "G")
    if G_arr.ndim != 0:
        raise TypeError(f"G={G!r} must be one integer group size")
    _validate.check_group_size(G_arr)
    eps = _validate.check_epsilon(epsilon)
    waste = np.asarray(silent_group_rate(p_arr, int(G_arr)), dtype=np.float64).reshape(-1)
    closed, exact_sizes = group_sizes(p_arr, eps, exact=exact)
    return AuditColumns(p_arr, waste, closed, exact_sizes, _status_codes(waste))


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """The audit of a corpus at group size ``G``; ``str()`` is a table."""

    G: int
    epsilon: float
    rows: tuple[AuditRow, ...]
    average_waste: float
    effective_budget: float

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for JSON): ``json.loads(result.to_json()) == result.to_dict()``."""
        data = dataclasses.asdict(self)
        data["rows"] = list(data["rows"])  # JSON has lists, not tuples
        return data

    def to_json(self) -> str:
        """The audit as a JSON document."""
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        body = [
            (
                format_rate(r.p),
                f"{r.silent_rate:.1%}",
                format_size(
                    math.inf if r.closed_form_group_size is None else r.closed_form_group_size, r.p, "2**62"
                ),
                format_size(math.inf if r.exact_group_size is None else r.exact_group_size, r.p),
                r.status,
            )
            for r in self.rows
        ]
        return "\n".join(
            [
                f"Corpus audit at G={self.G}, fidelity target 1 - epsilon = {1 - self.epsilon:.15g}",
                *table(("p", "silent", "G (closed form)", "G (exact)", "status"), body),
                "",
                f"Average wasted compute (silent groups): {self.average_waste:.1%}",
                f"Effective learning budget: {self.effective_budget:.1%}",
            ]
        )


def corpus_audit(pass_rates: Any, *, G: int = 8, epsilon: float = 0.05) -> AuditResult:
    """Audit per-prompt pass rates at group size ``G`` (the seed post's audit, corrected).

    Per prompt: silent rate ``p**G + (1-p)**G``, closed-form ``G* = ceil(1 / (8 epsilon
    p (1 - p)))`` and the exact least ``G`` with fidelity ``>= 1 - epsilon``; totals:
    average waste and effective budget ``= 1 - average waste``. The closed form reads low
    at most ``p`` (``p = 0.5``: 10 against 11), not only near the edges, equals the exact
    value where its ceiling absorbs the gap, and reads high at large ``epsilon`` (``p = 0.01,
    epsilon = 0.9``: 15 against 3): the exact column is the answer.

    >>> result = corpus_audit([0.5, 0.03], G=8)
    >>> [(r.closed_form_group_size, r.exact_group_size) for r in result.rows]
    [(10, 11), (86, 113)]
    >>> round(result.average_waste, 4)
    0.3958
    """
    cols = audit_columns(pass_rates, G, epsilon)
    average = float(cols.silent_rate.mean())
    return AuditResult(int(G), _validate.check_epsilon(epsilon), tuple(cols.rows()), average, 1 - average)


# ---------------------------------------------------------------------------
# rollout logs


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
        def pct(x: float | None, digits: int = 1) -> str:
            return "–" if x is None else f"{x:.{digits}%}"

        groups = (
            f"logged G = {self.logged_G} (groups from {self.group_source})"
            if self.logged_G
            else "no groups in the log (pass --group-col, or log a group's rows together)"
        )
        a, b = self.prior
        out = [
            f"Rollout audit of {self.path}: {self.rows:,} rollouts, {self.prompts:,} prompts "
            f"({self.never:,} always or never correct); {groups}",
            "",
            "Silent-group rate",
        ]
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
            body.append((f"{r.G}{mark}", f"{r.covered:,}", pct(r.plug_in, 2), sub, model, observed))
        out += table(head, body)
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
        e = self.extreme
        out += [
            "",
            f"Gradient-mass share of extreme prompts (p <= {e:g} or p >= {1 - e:g}):",
            "  " + ", ".join(f"{name} {pct(value)}" for name, value in self.mass_share.items()),
        ]
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
        out += [
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
                pct(s.reached) if self.logged_G and s.reached is not None else "–",
                *("–" if v is None else str(v) for v in (s.plug_in_median, s.plug_in_p90)),
            )
            for s in self.sizes
        ]
        out += table(head2, body2)
        return "\n".join(out)


def table(head: tuple[str, ...], body: Sequence[tuple[str, ...]]) -> list[str]:
    """Lines of a right-aligned text table."""
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]

    def line(cells: Any) -> str:
        return "  ".join(cells).rstrip()

    return [
        line(h.rjust(w) for h, w in zip(head, widths, strict=True)),
        line("-" * w for w in widths),
        *(line(c.rjust(w) for c, w in zip(b, widths, strict=True)) for b in body),
    ]


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
    from ._vocabulary import Method
    from .difficulty import exact_group_size as _exact
    from .difficulty import fidelity, mass_weight
    from .rollouts import subsampled_silent_rate

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
    from . import corpus_prior as cp

    prior = cp.fit_prior(rollouts.n, rollouts.k)
    n_all, k_all = rollouts.n, rollouts.k
    rows = []
    for g in sizes:
        plug = float((np.asarray(silent_group_rate(values, g)) * counts).sum() / counts.sum())
        covered = rollouts.n >= g
        sub = subsampled_silent_rate(rollouts.n[covered], rollouts.k[covered], g) if covered.any() else None
        model, model_sd = cp.posterior(n_all, k_all, g, cp.silent, prior)
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
        if g == logged:
            full = rollouts.group_n == g
            silent = (rollouts.group_k[full] == 0) | (rollouts.group_k[full] == g)
            m = int(full.sum())
            f = float(silent.mean())
            per_prompt = subsampled_silent_rate(rollouts.n, rollouts.k, g)
            forecast = float(per_prompt[rollouts.group_prompt[full]].mean())
            row = dataclasses.replace(
                row, observed=f, observed_se=math.sqrt(f * (1 - f) / m), expected=forecast, groups=m
            )
        rows.append(row)
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
    live = (values > 0) & (values < 1)
    eps_list = [float(e) for e in np.atleast_1d(np.asarray(epsilons, dtype=np.float64))]
    m_q, m_grid, m_mass = cp.mixture_quantile(n_all, k_all, prior, [0.5, 0.1])
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


# ---------------------------------------------------------------------------
# pass-rate files

#: Bad lines listed in one error message before "... and N more".
MAX_BAD_LINES = 20


def parse_pass_rates(data: bytes, source: str = "<input>") -> np.ndarray:
    """Pass rates from the bytes of a pass-rate file (the format ``sigma-ref audit --file`` reads).

    Format: UTF-8 text (a leading byte-order mark is skipped); numbers separated by white
    space, commas or new lines (so ``0,1`` is two rates, 0 and 1: decimal commas are not
    read); ``#`` starts a comment to the end of the line; blank lines are ignored. Every
    number must be a pass rate in ``[0, 1]``. Otherwise ``ValueError`` lists each bad token
    as ``source:line: 'token' (why)``, up to ``MAX_BAD_LINES`` of them, then a count.

    >>> parse_pass_rates(b"\\xef\\xbb\\xbf# rates\\n0.5, 0.25  # two\\n1e-3\\n").tolist()
    [0.5, 0.25, 0.001]
    """
    import re

    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    clean = re.sub(rb"#[^\n]*", b"", data) if b"#" in data else data
    values = None
    try:
        parts = [_parse_chunk(chunk) for chunk in _chunks(clean)]
        values = np.concatenate(parts) if parts else np.zeros(0)
    except ValueError:  # a token that is not a number
        values = None
    if values is not None and values.size == 0:
        raise ValueError(
            f"{source} holds no pass rates (numbers in [0, 1], separated by spaces, commas or lines)"
        )
    if values is not None and np.all((values >= 0) & (values <= 1)):
        return values
    raise ValueError(_bad_tokens(data, source))


_CHUNK_BYTES = 1 << 25


def _chunks(data: bytes) -> Iterator[bytes]:
    """``data`` in pieces of about ``_CHUNK_BYTES``, each cut at a separator (a bounded token list)."""
    import re

    separator = re.compile(rb"[\s,]")
    start = 0
    while start < len(data):
        end = start + _CHUNK_BYTES
        found = separator.search(data, end) if end < len(data) else None
        end = found.start() if found else len(data)
        yield data[start:end]
        start = end + 1


def _parse_chunk(chunk: bytes) -> np.ndarray:
    """The numbers of one chunk; ``ValueError`` on a token that is not one."""
    tokens = chunk.replace(b",", b" ").split()
    if not tokens:
        return np.zeros(0)
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:  # pragma: no cover - the audit extra is installed in tests
        return np.array(tokens, dtype=np.float64)
    try:
        text = pa.array(tokens, type=pa.binary()).cast(pa.string())
        values: np.ndarray = pc.cast(text, pa.float64()).to_numpy()
        return values
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(str(exc)) from None


def _bad_tokens(data: bytes, source: str) -> str:
    """The error message listing every bad token with its line (the slow path, errors only);
    a token is quoted to at most ``sigma_ref._files.QUOTE_CHARS`` characters."""
    from ._files import quote

    bad: list[str] = []
    count = 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        for token in line.split(b"#", 1)[0].replace(b",", b" ").split():
            text = token.decode("utf-8", errors="replace")
            try:
                value = float(text)
            except ValueError:
                why = "not a number"
            else:
                if 0 <= value <= 1:
                    continue
                why = "outside [0, 1]; a pass rate is a share of correct rollouts"
            count += 1
            if len(bad) < MAX_BAD_LINES:
                bad.append(f"  {source}:{number}: {quote(text)} ({why})")
    more = [f"  ... and {count - MAX_BAD_LINES} more"] if count > MAX_BAD_LINES else []
    return "\n".join([f"{source}: {count} bad pass rate{'s' * (count != 1)}:", *bad, *more])


def read_pass_rates(path: str) -> np.ndarray:
    """Read a pass-rate file (``-``: standard input); the format is :func:`parse_pass_rates`'s.

    A missing file, a directory, a device (``/dev/zero``), a FIFO nobody writes to, more
    than ``sigma_ref._files.MAX_INPUT_BYTES``, an unreadable file or a closed standard input
    raise ``ValueError`` with a message saying which (``sigma_ref._files.read_input``).
    """
    from ._files import read_input

    data = read_input(path, option="--file")
    return parse_pass_rates(data, "<stdin>" if path == "-" else path)


# ---------------------------------------------------------------------------
# large audits: a summary, the worst rows, and every row written in chunks

CHUNK_ROWS = 1 << 20


def audit_summary(cols: AuditColumns, G: int, epsilon: float) -> list[str]:
    """Summary lines of a large audit: counts by status, waste, and the G the quantiles need.

    The quantile rows name the pass rate at that quantile of the distance ``min(p, 1-p)``
    from the edge (the hardest 10%, the median prompt) and the least ``G`` that rate needs.
    """
    total = cols.p.size
    never = int(((cols.p == 0) | (cols.p == 1)).sum())
    counts = np.bincount(cols.status, minlength=3)
    waste = float(cols.silent_rate.mean())
    lines = [
        f"Corpus audit at G={G}, fidelity target 1 - epsilon = {1 - epsilon:.15g}: {total:,} prompts "
        f"({never:,} always or never correct)",
        "Status: "
        + ", ".join(f"{name} {c:,} ({c / total:.1%})" for name, c in zip(STATUS_NAMES, counts, strict=True)),
        f"Average wasted compute (silent groups): {waste:.1%}",
        f"Effective learning budget: {1 - waste:.1%}",
    ]
    live = cols.p[(cols.p > 0) & (cols.p < 1)]
    if live.size:
        edge = np.minimum(live, 1 - live)
        quantiles = [("hardest 1%", 0.01), ("hardest 10%", 0.1), ("median", 0.5)]
        picks = np.array([np.quantile(edge, q, method="inverted_cdf") for _, q in quantiles])
        closed, exact = group_sizes(picks, epsilon)
        body = [
            (name, format_rate(v), format_size(c, v, "2**62"), format_size(e, v))
            for (name, _), v, c, e in zip(quantiles, picks, closed, exact, strict=True)
        ]
        lines += ["", "Prompts with 0 < p < 1, by distance min(p, 1-p) from the edge:"]
        lines += table(("quantile", "min(p, 1-p)", "G (closed form)", "G (exact)"), body)
    return lines


def _strings(cols: AuditColumns, lo: int, hi: int, *, table_text: bool) -> dict[str, Any]:
    """The row cells of rows ``lo:hi`` as pyarrow string arrays (JSON/CSV cells or table cells)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    p = cols.p[lo:hi]
    edge = (p == 0) | (p == 1)

    def text(x: np.ndarray) -> Any:
        return pc.cast(pa.array(x), pa.string())  # shortest digits that read back exactly

    def sizes(x: np.ndarray, bound: str) -> Any:
        x = x[lo:hi]
        ints = pa.array(np.where(np.isfinite(x), x, 0).astype(np.int64), mask=~np.isfinite(x))
        s = pc.cast(ints, pa.string())
        if table_text:
            label = pc.if_else(pa.array(edge), "never", pc.if_else(pa.array(np.isinf(x)), f"> {bound}", "–"))
            s = pc.coalesce(s, label)
        return s

    if table_text:
        tenths = np.rint(cols.silent_rate[lo:hi] * 1000).astype(np.int64)
        whole = pc.cast(pa.array(tenths // 10), pa.string())
        frac = pc.cast(pa.array(tenths % 10), pa.string())
        silent = pc.binary_join_element_wise(whole, ".", frac, "%", "")
    else:
        silent = text(cols.silent_rate[lo:hi])
    codes = pa.array(cols.status[lo:hi].astype(np.int8))
    status = pa.DictionaryArray.from_arrays(codes, pa.array(STATUS_NAMES)).cast(pa.string())
    return {
        "p": text(p),
        "silent": silent,
        "closed": sizes(cols.closed, "2**62"),
        "exact": sizes(cols.exact, "2**40"),
        "status": status,
    }


def _joined(lines: Any, end: bytes) -> memoryview:
    """The UTF-8 bytes of every string of the pyarrow array ``lines``, each followed by ``end``: the
    array's own data buffer after one vectorised join (no Python string per row)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ended = pc.binary_join_element_wise(lines, pa.scalar(""), end.decode())
    if isinstance(ended, pa.ChunkedArray):
        ended = ended.combine_chunks()
    offsets_type = np.int64 if pa.types.is_large_string(ended.type) else np.int32
    _, offsets_buffer, data = ended.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=offsets_type)[ended.offset : ended.offset + len(ended) + 1]
    if data is None:  # every string empty
        return memoryview(b"")
    return memoryview(data)[int(offsets[0]) : int(offsets[-1])]


def _write_text(out: Any, data: bytes | memoryview) -> None:
    """Write UTF-8 ``data`` to the text stream ``out``: to its byte buffer when it has one."""
    raw = getattr(out, "buffer", None)
    if raw is None:
        out.write(bytes(data).decode())
        return
    out.flush()
    raw.write(data)


def write_rows(cols: AuditColumns, out: Any, kind: str, widths: tuple[int, ...] = ()) -> None:
    """Write every row to ``out`` in chunks of ``CHUNK_ROWS``, formatted vectorised (pyarrow).

    ``kind``: ``"json"`` (one object per line, comma-separated, for the ``rows`` list),
    ``"csv"`` or ``"table"`` (right-aligned to ``widths``).
    """
    import pyarrow.compute as pc

    total = cols.p.size
    for lo in range(0, total, CHUNK_ROWS):
        hi = min(total, lo + CHUNK_ROWS)
        s = _strings(cols, lo, hi, table_text=kind == "table")
        if kind == "json":
            closed = pc.fill_null(s["closed"], "null")
            exact = pc.fill_null(s["exact"], "null")
            lines = pc.binary_join_element_wise(
                '    {"p": ',
                s["p"],
                ', "silent_rate": ',
                s["silent"],
                ', "closed_form_group_size": ',
                closed,
                ', "exact_group_size": ',
                exact,
                ', "status": "',
                s["status"],
                '"}',
                "",
            )
            if lo:
                _write_text(out, b",\n")
            _write_text(out, _joined(lines, b",\n")[:-2])
        elif kind == "csv":
            cells = [pc.fill_null(s[c], "") for c in ("p", "silent", "closed", "exact", "status")]
            _write_text(out, _joined(pc.binary_join_element_wise(*cells, ","), b"\n"))
        else:
            cells = [
                pc.utf8_lpad(s[c], w)
                for c, w in zip(("p", "silent", "closed", "exact", "status"), widths, strict=True)
            ]
            out.write("\n".join(pc.binary_join_element_wise(*cells, "  ").to_pylist()) + "\n")
