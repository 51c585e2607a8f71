"""The suite's vocabulary (docs/spec.md §7): its levels and its verdict classes.

A module of names only (it imports nothing), so that the CLI and the matrix can register their
commands without importing the suite's machinery (hypothesis, pytest).

>>> LEVELS[0], VERDICTS, SUITE_LEVELS[-1]
('contract', ('FAIL', 'WARN', 'NOTE'), 'scale-out')
"""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = ["LEVELS", "SCALEOUT_LEVEL", "SUITE_LEVELS", "VERDICTS", "Verdict"]

#: Levels 0 to 4, one spec module each (``spec/test_<level>.py``), in order.
LEVELS: tuple[str, ...] = ("contract", "algebra", "identity", "silent", "numerics")
#: Level 5 (real ``torch.distributed`` ranks and micro-batches): ``sigma_ref.conformance.scaleout``.
SCALEOUT_LEVEL = "scale-out"
#: Every level of the suite, 0 to 5, in order (level 5's spec module is ``spec/test_scaleout.py``).
SUITE_LEVELS: tuple[str, ...] = (*LEVELS, SCALEOUT_LEVEL)
#: Verdict classes: FAIL, the claimed algorithm is computed wrong; WARN, hygiene that does not
#: change training; NOTE, a fact of the convention.
VERDICTS: tuple[str, ...] = ("FAIL", "WARN", "NOTE")
#: A property's outcome in a run, at every level: one of :data:`VERDICTS`, ``pass``, or ``skip`` (the
#: property does not apply; the matrix renders a level whose properties all skip as ``n/a``).
Verdict: TypeAlias = Literal["pass", "FAIL", "WARN", "NOTE", "skip"]
