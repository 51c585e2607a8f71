"""The suite's vocabulary (docs/spec.md §7): its levels and its verdict classes.

A module of names only (it imports nothing), so that the CLI and the matrix can register their
commands without importing the suite's machinery (hypothesis, pytest).

>>> LEVELS[0], VERDICTS
('contract', ('FAIL', 'WARN', 'NOTE'))
"""

from __future__ import annotations

__all__ = ["LEVELS", "SCALEOUT_LEVEL", "VERDICTS"]

#: Levels 0 to 4, one spec module each (``spec/test_<level>.py``), in order.
LEVELS: tuple[str, ...] = ("contract", "algebra", "identity", "silent", "numerics")
#: Level 5 (real ``torch.distributed`` ranks and micro-batches): ``sigma_ref.conformance.scaleout``.
SCALEOUT_LEVEL = "scale-out"
#: Verdict classes: FAIL, the claimed algorithm is computed wrong; WARN, hygiene that does not
#: change training; NOTE, a fact of the convention.
VERDICTS: tuple[str, ...] = ("FAIL", "WARN", "NOTE")
