"""Issue 23, item 2: no module in ``sigma_ref/`` over 700 lines and no function over 100 lines.

No exceptions: every module and every function (decorators included) is measured.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sigma_ref"
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 100


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _function_lengths(path: Path) -> list[tuple[str, int]]:
    """``(name, lines)`` of every function and method of ``path``, decorators included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out.append((node.name, node.end_lineno - first + 1))
    return out


def test_no_module_over_700_lines() -> None:
    over = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            over.append(f"{rel}: {lines} lines (split it into modules of one job each, <= 700 lines)")
    assert over == []


def test_no_function_over_100_lines() -> None:
    over = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        for name, lines in _function_lengths(path):
            if lines > MAX_FUNCTION_LINES:
                over.append(f"{rel}::{name}: {lines} lines (split it into named steps, <= 100 lines)")
    assert over == []


def test_the_measure_counts_a_long_function(tmp_path: Path) -> None:
    """The function measure sees a 101-line function (with its decorator) as over the limit."""
    body = "\n".join(f"    x{i} = {i}" for i in range(99))
    path = tmp_path / "long.py"
    path.write_text(f"@staticmethod\ndef long():\n{body}\n", encoding="utf-8")
    assert _function_lengths(path) == [("long", 101)]
