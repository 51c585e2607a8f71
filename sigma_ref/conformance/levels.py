"""The suite's vocabulary (docs/spec.md §7): its levels and its verdict classes.

A module of names only (it imports nothing but ``sigma_ref._vocabulary``), so that the CLI and the
matrix can register their commands without importing the suite's machinery (hypothesis, pytest).

>>> LEVELS[0], VERDICTS, SUITE_LEVELS[-1]
('contract', ('FAIL', 'WARN', 'NOTE'), 'scale-out')
"""

from __future__ import annotations

from .._vocabulary import VERDICTS, Verdict

__all__ = ["LEVELS", "SCALEOUT_LEVEL", "SUITE_LEVELS", "VERDICTS", "Verdict"]

#: Levels 0 to 4, one spec module each (``spec/test_<level>.py``), in order.
LEVELS: tuple[str, ...] = ("contract", "algebra", "identity", "silent", "numerics")
#: Level 5 (real ``torch.distributed`` ranks and micro-batches): ``sigma_ref.conformance.scaleout``.
SCALEOUT_LEVEL = "scale-out"
#: Every level of the suite, 0 to 5, in order (level 5's spec module is ``spec/test_scaleout.py``).
SUITE_LEVELS: tuple[str, ...] = (*LEVELS, SCALEOUT_LEVEL)
#: Verdict classes (FAIL, WARN, NOTE) and a property's outcome (``Verdict``: one of them, ``pass`` or
#: ``skip``) are the vocabulary's (``sigma_ref._vocabulary``), re-exported here.
