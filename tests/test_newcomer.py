"""What a newcomer trips over first: the profile a run uses, and the routes the README shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest_route(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "sigma_ref.spec.test_contract",
            "--sigma-ref-impl",
            "tests.gallery.correct:trl_contiguous",
            "--sigma-ref-layout",
            "contiguous",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_an_unknown_profile_is_one_clear_error(tmp_path: Path) -> None:
    done = _pytest_route(tmp_path, HYPOTHESIS_PROFILE="bogus")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "HYPOTHESIS_PROFILE='bogus' is not a hypothesis profile: use ci, dev or thorough" in out
    assert "INTERNALERROR" not in out


def test_the_pytest_route_from_an_install_runs_the_suite(tmp_path: Path) -> None:
    """README: `pytest --pyargs sigma_ref.spec ...` works outside a clone's directory."""
    done = _pytest_route(tmp_path, CI="true")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "result: CONFORMANT" in done.stdout
