"""Private: right-aligned plain-text tables, as the audits and ``sigma-ref`` print them.

>>> print("\\n".join(table(("G", "rate"), [("8", "0.5%"), ("16", "12.0%")])))
 G   rate
--  -----
 8   0.5%
16  12.0%
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


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
