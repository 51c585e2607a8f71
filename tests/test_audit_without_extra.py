"""Without the ``audit`` extra (issue 24, item 12): ``audit --rollouts`` and ``--plot`` print one line
naming ``pip install 'sigma-ref[audit]'`` and exit 3, not a traceback. The extra's modules are
hidden from a fresh interpreter by ``sys.modules[name] = None`` (``import`` then raises)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HIDE = "import sys; [sys.modules.__setitem__(m, None) for m in {mods}]; from sigma_ref.cli import main; "


def _run(hidden: tuple[str, ...], args: list[str]) -> subprocess.CompletedProcess[str]:
    code = HIDE.format(mods=list(hidden)) + f"sys.exit(main({args!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("hidden", "args"),
    [
        (("pyarrow",), ["audit", "--rollouts", "LOG"]),
        (("matplotlib",), ["audit", "0.5", "0.3", "--plot", "PLOT"]),
        (("pyarrow",), ["audit", "0.5", "--json"]),
    ],
)
def test_one_line_without_the_extra(tmp_path: Path, hidden: tuple[str, ...], args: list[str]) -> None:
    log = tmp_path / "log.csv"
    log.write_text("prompt,reward\na,1\na,0\n")
    args = [str(log) if a == "LOG" else str(tmp_path / "plot.png") if a == "PLOT" else a for a in args]
    out = _run(hidden, args)
    assert out.returncode == 3, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'sigma-ref[audit]'" in lines[0], out.stderr
    assert hidden[0] in lines[0]


def test_other_import_errors_still_raise() -> None:
    """An ImportError of a module outside the extra is a bug, not a missing extra: it is not hidden."""
    out = _run(("numpy",), ["audit", "0.5"])
    assert out.returncode != 3 and "Traceback" in out.stderr
