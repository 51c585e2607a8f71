"""What a level-5 check returns: one :class:`ScaleoutResult` per property and configuration, in a
:class:`ScaleoutReport`."""

from __future__ import annotations

import builtins
import dataclasses
from typing import Any

from ..core import Finding
from ..levels import Verdict

# ---------------------------------------------------------------------------
# results


@dataclasses.dataclass(frozen=True)
class ScaleoutResult:
    """One level-5 property's outcome.

    ``property``: e.g. ``scaleout_gradient[W=2,M=2]``; ``verdict``: ``pass``, ``FAIL``, ``WARN`` or
    ``NOTE`` (the suite's :data:`~.levels.Verdict`); ``factor``: the measured ``c`` (split
    gradient = ``c`` x reference), or None;
    ``message``: what was measured, and for a FAIL the bug class; ``bug_class``: the class the
    probes confirmed (e.g. ``normaliser computed per micro-batch``), or None; ``facts``: measured
    facts as data (``residual``: the share of the gradient ``c`` leaves; ``aggregation``,
    ``full_batch_differs`` of a prediction). Consumers read these and :attr:`finding`, never the message.
    """

    property: str
    verdict: Verdict
    factor: float | None
    message: str
    bug_class: str | None = None
    facts: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    @builtins.property  # the field ``property`` shadows the builtin in the class body
    def name(self) -> str:
        """The property without its configuration (``scaleout_gradient[W=2,M=2]``: ``scaleout_gradient``)."""
        return self.property.partition("[")[0]

    @builtins.property
    def finding(self) -> Finding:
        """The result as a :class:`~.core.Finding`: ``kind="scaleout"``, the bug class, the factor."""
        return Finding(
            self.message,
            verdict=self.verdict,
            kind="scaleout",
            facts={"property": self.property, **self.facts},
            bug_class=self.bug_class,
            factor=self.factor,
        )

    def line(self) -> str:
        """One line for a report."""
        return f"{self.verdict:4} {self.property}: {self.message}"


@dataclasses.dataclass(frozen=True)
class ScaleoutReport:
    """The results of one :func:`run_scaleout` call, its backend and its wall time."""

    results: tuple[ScaleoutResult, ...]
    world_size: int
    micro_batches: tuple[int, ...]
    backend: str
    seconds: float

    @property
    def passed(self) -> bool:
        """True when no property failed."""
        return all(r.verdict != "FAIL" for r in self.results)

    def summary(self) -> str:
        """The report as printed by the CLI."""
        head = (
            f"scale-out W={self.world_size} M={','.join(map(str, self.micro_batches))} "
            f"({self.backend}, {self.seconds:.1f} s): " + ("pass" if self.passed else "FAIL")
        )
        return "\n".join([head, *(r.line() for r in self.results)])
