"""What a level-5 check returns: one :class:`ScaleoutResult` per property and configuration, in a
:class:`ScaleoutReport`."""

from __future__ import annotations

import dataclasses

from ..levels import Verdict

# ---------------------------------------------------------------------------
# results


@dataclasses.dataclass(frozen=True)
class ScaleoutResult:
    """One level-5 property's outcome.

    ``property``: e.g. ``scaleout_gradient[W=2,M=2]``; ``verdict``: ``pass``, ``FAIL``, ``WARN`` or
    ``NOTE`` (the suite's :data:`~.levels.Verdict`); ``factor``: the measured ``c`` (split
    gradient = ``c`` x reference), or None;
    ``message``: what was measured, and for a FAIL the bug class.
    """

    property: str
    verdict: Verdict
    factor: float | None
    message: str

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
