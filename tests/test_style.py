"""The repository is ``ruff check`` and ``ruff format`` clean (config in ``pyproject.toml``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None,
    reason="ruff is not installed (pip install -e '.[test]' installs it)",
)


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_ruff_check() -> None:
    """``ruff check .`` reports nothing."""
    result = _ruff("check", "--no-cache", ".")
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"


def test_ruff_format() -> None:
    """``ruff format --check .`` would change nothing (run ``ruff format .`` to fix)."""
    result = _ruff("format", "--check", "--no-cache", ".")
    assert result.returncode == 0, f"ruff format would reformat:\n{result.stdout}{result.stderr}"
