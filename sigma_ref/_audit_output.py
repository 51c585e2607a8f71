"""Private: the outputs of a large corpus audit (``sigma-ref audit``): a summary, and every row
written in chunks of ``CHUNK_ROWS`` as JSON, CSV or a text table, formatted vectorised (pyarrow).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._text_table import table
from .audit import STATUS_NAMES, AuditColumns, format_rate, format_size, group_sizes

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
