"""Comparison of arrays with a tolerance: a :class:`Mismatch` record, and the one place that words it.

Private: :mod:`sigma_ref.testing` (the public assertions) and :mod:`sigma_ref.conformance`
(the suite) both use it, so neither imports the other for it. In the manner of
``torch.testing``'s mismatch report: :func:`find_mismatch` measures (how many elements are out of
tolerance, the greatest difference, where, the values and the tolerance there), and
:meth:`Mismatch.render` is the only code that turns those facts into a sentence; consumers read
the fields, never the sentence.

>>> import numpy as np
>>> m = find_mismatch(np.array([1.0, 2.5]), np.array([1.0, 2.0]), rtol=0.0, atol=0.1, noun="advantages")
>>> m.count, m.total, m.index, m.difference
(1, 2, (1,), 0.5)
>>> print(m.render())  # doctest: +NORMALIZE_WHITESPACE
1 / 2 advantages mismatched (50.0%); greatest difference 0.5 (relative 0.25) at index 1:
actual=2.5, but should be 2 (rtol=0, atol=0.1)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["Mismatch", "find_mismatch"]


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """Where ``actual`` and ``expected`` differ beyond ``atol + rtol * |expected|``: plain, JSON-able data.

    ``noun``: what the elements are, in the caller's words (``"advantages"``, ``"gradient
    entries"``). ``count`` of ``total`` elements are out of tolerance (a non-finite ``actual``
    counts). ``index``: the n-d index of the greatest absolute
    ``difference`` (``inf`` for a non-finite ``actual``); ``relative``: the difference over
    ``|expected|`` there (``inf`` where ``expected`` is 0); ``actual``, ``expected`` and
    ``tolerance`` (``atol + rtol * |expected|``): the values there. ``atol``: the one absolute
    tolerance, ``None`` when it was given per element (the message then states the tolerance at
    the index).
    """

    noun: str
    count: int
    total: int
    index: tuple[int, ...]
    actual: float
    expected: float
    difference: float
    relative: float
    tolerance: float
    rtol: float
    atol: float | None

    @property
    def fraction(self) -> float:
        """The share of elements out of tolerance, ``count / total``."""
        return self.count / self.total

    def render(self) -> str:
        """The mismatch in one sentence: ``n / N <noun> mismatched (x%); greatest difference d
        (relative r) at index i: actual=..., but should be ... (the tolerance)``."""
        where = self.index[0] if len(self.index) == 1 else self.index
        bound = (
            f"tolerance {self.tolerance:.2g} there"
            if self.atol is None
            else f"rtol={self.rtol:g}, atol={self.atol:g}"
        )
        return (
            f"{self.count} / {self.total} {self.noun} mismatched ({100 * self.fraction:.1f}%); "
            f"greatest difference {self.difference:.3g} (relative {self.relative:.3g}) at index {where}: "
            f"actual={self.actual:.8g}, but should be {self.expected:.8g} ({bound})"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``index`` a list), for JSON and pytest-xdist; :meth:`from_dict` inverts it."""
        return {**dataclasses.asdict(self), "index": list(self.index)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Mismatch:
        """The :class:`Mismatch` of :meth:`to_dict`'s data (or of ``dataclasses.asdict``)."""
        return Mismatch(**{**data, "index": tuple(int(i) for i in data["index"])})


def find_mismatch(
    actual: np.ndarray,
    expected: np.ndarray,
    *,
    rtol: float,
    atol: float | np.ndarray,
    noun: str,
) -> Mismatch | None:
    """``None`` if ``|actual - expected| <= atol + rtol * |expected|`` everywhere, else the :class:`Mismatch`.

    ``actual`` and ``expected`` have one shape; ``atol`` is one number or one tolerance per
    element (the conformance suite's working-precision bound). A non-finite ``actual`` is out of
    tolerance (its difference counts as infinite).
    """
    actual, expected = np.asarray(actual), np.asarray(expected)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.abs(actual - expected) <= atol + rtol * np.abs(expected)
        ok &= np.isfinite(actual) | (actual == expected)
        if ok.all():
            return None
        bad = ~ok
        diff = np.where(np.isfinite(actual), np.abs(actual - expected), np.inf)
    worst = int(np.argmax(np.where(bad, diff, -1.0)))
    at = float(expected.flat[worst])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        relative = float(diff.flat[worst] / abs(at)) if at != 0 else float(np.inf)
    per_element = np.ndim(atol) > 0
    atol_there = float(np.asarray(atol).flat[worst]) if per_element else float(atol)
    return Mismatch(
        noun=noun,
        count=int(bad.sum()),
        total=int(actual.size),
        index=tuple(int(i) for i in np.unravel_index(worst, actual.shape)),
        actual=float(actual.flat[worst]),
        expected=at,
        difference=float(diff.flat[worst]),
        relative=relative,
        tolerance=atol_there + rtol * abs(at),
        rtol=float(rtol),
        atol=None if per_element else atol_there,
    )
