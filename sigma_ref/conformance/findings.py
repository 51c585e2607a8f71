"""A finding: what a property found, as data, and the one place that words it.

:class:`Finding` is what a failed (or a NOTE-raising) property reports: the sentence a user reads
(:meth:`Finding.render`) and the same facts as fields a program reads (``kind``, ``facts``,
``mismatch``, ``bug_class``, ``factor``). Consumers (the matrix, the gallery tables, properties
that catch another property's failure) branch on the fields, never on the words
(``tests/test_no_message_parsing.py``). Re-exported by :mod:`sigma_ref.conformance.core`.

>>> f = Finding("out.shape=(3,), but should be (4,)", "adv(rewards=[1., 0., 0., 0.], G=4)", kind="shape")
>>> f.render()
'out.shape=(3,), but should be (4,) [adv(rewards=[1., 0., 0., 0.], G=4)]'
>>> Finding.from_dict(f.to_dict()) == f
True
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._compare import Mismatch
from .levels import Verdict

__all__ = ["FINDING_KINDS", "Finding", "Mismatch"]


#: What sort of fact a :class:`Finding` states (its ``kind``), for consumers that branch on it:
#: ``mismatch`` (values out of tolerance, with a :class:`Mismatch`), ``value`` (one value wrong: a
#: group's sum, a gradient entry, a loss weight, a keep decision; ``facts`` has it where it is one
#: number), ``shape`` (the output's type or shape), ``dtype``, ``device``, ``requires-grad``,
#: ``not-finite``, ``raised`` (the call raised, exited, was interrupted or hung: ``facts["how"]``, and
#: ``facts["exception"]`` the exception's type), ``mutated`` (an input changed in place:
#: ``facts["input"]``), ``nondeterministic``, ``accepted`` (an input that should be refused was not),
#: and the NOTEs' measured facts: ``convention`` (what detection found), ``aggregation`` (the loss's
#: weights: ``facts["aggregation"]``, ``["constant"]``, ``["how"]`` declared or detected), ``clip``
#: (PPO clip bounds read off the gradient: ``facts["ppo"]``, ``["lower"]``, ``["upper"]``,
#: ``["dual_clip"]``, ``["how"]``), ``objective`` (a declared objective matched: ``facts["objective"]``),
#: ``precision`` (the loss's rounding hides what was to be read); ``scaleout`` (level 5).
FINDING_KINDS: tuple[str, ...] = (
    "mismatch",
    "value",
    "shape",
    "dtype",
    "device",
    "requires-grad",
    "not-finite",
    "raised",
    "mutated",
    "nondeterministic",
    "accepted",
    "convention",
    "aggregation",
    "clip",
    "objective",
    "precision",
    "scaleout",
)


@dataclasses.dataclass(frozen=True)
class Finding:
    """A structured failure record: what differs, where, and why (when a probe confirmed it).

    ``verdict``: FAIL, WARN or NOTE. ``what``: ``actual=..., but should be ...``.
    ``call``: the call that produced it. ``reference``: the convention it was judged
    against. ``cause``: the likely cause in words, ``confirmed`` when a second, designed
    probe reproduced it; an unconfirmed mismatch says so instead of guessing.
    The data fields (``kind``, ``facts``, ``mismatch``, ``bug_class``, ``factor``) carry the same
    facts for programs: a consumer reads them, never the words (:meth:`render` is the only
    place that writes the sentence).
    """

    what: str
    call: str = ""
    reference: str | None = None
    cause: str | None = None
    confirmed: bool = False
    verdict: Verdict = "FAIL"
    #: What sort of fact this is (one of :data:`FINDING_KINDS`), for consumers that branch on it.
    kind: str | None = None
    #: Measured facts as plain JSON-able data (e.g. ``{"aggregation": "token-mean"}``).
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The bug class a designed probe confirmed (level 5: the normaliser class), else None.
    bug_class: str | None = None
    #: The measured factor (e.g. the gradient over the full-batch gradient), else None.
    factor: float | None = None
    #: The elementwise comparison that failed (count, worst index, values, tolerance), else None.
    mismatch: Mismatch | None = None

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in FINDING_KINDS:
            raise ValueError(f"Finding kind={self.kind!r} must be one of {', '.join(FINDING_KINDS)}")

    def render(self) -> str:
        """One paragraph: ``what [call] (expected under ref). Likely cause: ...``."""
        msg = self.what
        if self.call:
            msg += f" [{self.call}]"
        if self.reference:
            msg += f" (expected under {self.reference})"
        if self.cause and self.confirmed:
            msg += f". Likely cause (confirmed by a probe): {self.cause}"
        elif self.cause:
            msg += f". Possible cause (not confirmed by a probe): {self.cause}"
        elif self.mismatch is not None:
            msg += ". Cause not identified: no known deviation reproduces these values"
        return msg

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-able data (what pytest-xdist carries); :meth:`from_dict` inverts it."""
        data = dataclasses.asdict(self)
        data["mismatch"] = None if self.mismatch is None else self.mismatch.to_dict()
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Finding:
        """The :class:`Finding` of :meth:`to_dict`'s data."""
        found = data.get("mismatch")
        return Finding(**{**data, "mismatch": None if found is None else Mismatch.from_dict(found)})
