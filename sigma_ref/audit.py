"""Corpus audit: how much of a group size's compute a set of prompts wastes.

For each prompt's pass rate ``p`` at group size ``G``: the silent-group rate
``p**G + (1-p)**G`` (the share of its groups that give no update), the closed-form
group-size law ``ceil(1 / (8 epsilon p (1 - p)))`` and the exact least ``G`` with
fidelity ``>= 1 - epsilon``. The totals are the average waste over prompts and the
effective learning budget ``1 - average waste``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from . import _arrays
from .difficulty import exact_group_size, min_group_size, silent_group_rate

__all__ = ["AuditRow", "AuditResult", "corpus_audit"]

#: Waste thresholds of the seed post: below 10% "ok", below 30% "warn", else "critical".
STATUS_THRESHOLDS = ((0.1, "ok"), (0.3, "warn"))


def _status(waste: float) -> str:
    for limit, name in STATUS_THRESHOLDS:
        if waste < limit:
            return name
    return "critical"


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """One prompt of the audit. Group sizes are ``None`` where ``p`` is 0 or 1 (no G helps)."""

    p: float
    silent_rate: float
    closed_form_group_size: int | None
    exact_group_size: int | None
    status: str


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
        def size(g: int | None) -> str:
            return "never" if g is None else str(g)

        header = ("p", "silent", "G (closed form)", "G (exact)", "status")
        body = [
            (
                f"{r.p:.4g}",
                f"{r.silent_rate:.1%}",
                size(r.closed_form_group_size),
                size(r.exact_group_size),
                r.status,
            )
            for r in self.rows
        ]
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
        line = "  ".join
        out = [
            f"Corpus audit at G={self.G}, fidelity target 1 - epsilon = {1 - self.epsilon:g}",
            line(h.rjust(w) for h, w in zip(header, widths, strict=False)),
            line("-" * w for w in widths),
            *(line(c.rjust(w) for c, w in zip(b, widths, strict=False)) for b in body),
            "",
            f"Average wasted compute (silent groups): {self.average_waste:.1%}",
            f"Effective learning budget: {self.effective_budget:.1%}",
        ]
        return "\n".join(out)


def corpus_audit(pass_rates: Any, G: int = 8, epsilon: float = 0.05) -> AuditResult:
    """Audit per-prompt pass rates at group size ``G`` (the seed post's audit, corrected).

    Per prompt: silent rate ``p**G + (1-p)**G``, closed-form ``G* = ceil(1 / (8 epsilon
    p (1 - p)))`` and the exact least ``G`` with fidelity ``>= 1 - epsilon``; totals:
    average waste and effective budget ``= 1 - average waste``.

    >>> result = corpus_audit([0.5, 0.03], G=8)
    >>> [(r.closed_form_group_size, r.exact_group_size) for r in result.rows]
    [(10, 11), (86, 113)]
    >>> round(result.average_waste, 4)
    0.3958
    """
    p, _ = _arrays.numeric(pass_rates, "pass_rates")
    p = p.reshape(-1)
    _arrays.check_probability(p, "pass_rates")
    G_arr, _ = _arrays.numeric(G, "G")
    if G_arr.ndim != 0:
        raise TypeError(f"G={G!r} must be one integer group size")
    _arrays.check_group_size(G_arr)
    eps = _arrays.check_epsilon(epsilon)
    waste = np.asarray(silent_group_rate(p, int(G_arr)))
    inner = (p > 0) & (p < 1)
    closed = np.zeros(p.shape, dtype=np.int64)
    exact = np.zeros(p.shape, dtype=np.int64)
    if inner.any():
        closed[inner] = min_group_size(p[inner], eps)
        exact[inner] = exact_group_size(p[inner], eps)
    rows = tuple(
        AuditRow(
            p=float(pi),
            silent_rate=float(wi),
            closed_form_group_size=int(ci) if ii else None,
            exact_group_size=int(ei) if ii else None,
            status=_status(float(wi)),
        )
        for pi, wi, ci, ei, ii in zip(p, waste, closed, exact, inner, strict=False)
    )
    average = float(waste.mean())
    return AuditResult(int(G_arr), eps, rows, average, 1 - average)
