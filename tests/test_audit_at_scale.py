"""The sharded rollout audit's memory follows prompts, not rows (issue 24): 5,000,000 rows in 10
Parquet shards with known pass rates (``benchmarks/audit_at_scale.py``), audited in a child
process, peak RSS under ``PEAK_MB``, and the subsampled silent rates within 4 standard errors of
the truth at every G. Slow tier; the 100,000,000-row run is the benchmark's (README).

The bound sits between the two ways to read this log (measured, ``VmHWM`` of the child): the
same rows in one Parquet file, read whole, peak at 522 MB; the 10 shards, streamed, at 262 MB
(numpy, pyarrow and the audit imported, one 1,048,576-row batch decoded, 156,250 prompts and
625,000 groups held). The test takes about 10 s on two busy cores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow")

from benchmarks.audit_at_scale import audit, write_shards

pytestmark = pytest.mark.slow

#: The most the audit of 5,000,000 rows in shards may hold at once, in MB.
PEAK_MB = 400


def test_five_million_rows_in_shards_fit_in_memory(tmp_path: Path) -> None:
    p = write_shards(tmp_path / "log", 5_000_000, 10, G=8, groups=4, seed=1)
    _, peak, report = audit(tmp_path / "log", [8, 16, 32], "pyarrow")
    assert peak < PEAK_MB, f"peak RSS {peak:.0f} MB"
    assert report["rows"] == 5_000_000 and report["prompts"] == p.size and report["logged_G"] == 8
    rows: list[dict[str, float]] = report["silent"]  # type: ignore[assignment]
    assert [row["G"] for row in rows] == [8, 16, 32]
    for row in rows:
        truth = float(np.mean(p ** row["G"] + (1 - p) ** row["G"]))
        assert abs(row["subsampled"] - truth) < 4 * row["subsampled_se"], (row, truth)
