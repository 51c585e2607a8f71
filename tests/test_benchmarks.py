"""``benchmarks/run.py --quick`` runs and prints every row of issue 12's table (a smoke test: the
ratios themselves are measured, not asserted; ``python benchmarks/run.py`` gives them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ROWS = [
    "expected_gradient, 2,156 p, G = 8 ",
    "expected_gradient, 2,156 p, G = 64 ",
    "expected_gradient, 2,156 p, G = 512 ",
    "fidelity, 2,156 p, G = 512 ",
    "G = 10^6 ",
    "exact_group_size, 2,152 p, epsilon = 0.05 ",
    "exact_group_size(0.5, epsilon=1e-12) ",
    "grpo_advantage, torch [16384, 8] float32 | ",
    "memory copy x.clone() (the floor)",
    "grpo_advantage(index=int ids), interleaved, N = 131,072 ",
    "grpo_advantage(index=int ids) vs verl itself, N = 131,072 ",
    "grpo_advantage(index=int ids) vs verl itself, G = 6, N = 131,070 ",
    "grpo_advantage(index=uuid strings), interleaved, N = 131,072 ",
    "sigma-ref audit --file, 20,000 pass rates (process, table) ",
]


def test_quick_run_prints_every_row() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=120,
    ).stdout
    lines = out.splitlines()
    assert "cores, load average" in lines[0]
    assert lines[1] == "| work | sigma-ref | baseline | baseline / sigma-ref | goal | met |"
    body = lines[3:]
    assert len(body) == len(ROWS), out
    for row, want in zip(body, ROWS, strict=True):
        assert want in row, (want, row)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 6, row
        assert cells[1] != "-" or "verl" in cells[2], row  # every row is timed, except verl when absent
        if "x [" in cells[3]:
            ratio = float(cells[3].split("x")[0])
            assert ratio > 0, row
