"""The suite's own structure: one module per level, one test per property, docstrings = statements."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from sigma_ref import strategies
from sigma_ref.conformance.properties import LEVELS, PROPERTIES

SPEC = Path(__file__).resolve().parents[1] / "spec"


def _tests(level: str) -> dict[str, str]:
    tree = ast.parse((SPEC / f"test_{level}.py").read_text())
    return {
        node.name: ast.get_docstring(node) or ""
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


@pytest.mark.parametrize("level", LEVELS)
def test_one_test_per_property(level: str) -> None:
    """spec/test_<level>.py holds exactly the level's properties, each docstring its statement."""
    tests = _tests(level)
    expected = {p.test_name: p for p in PROPERTIES.values() if p.level == level}
    assert set(tests) == set(expected)
    for name, doc in tests.items():
        assert " ".join(doc.split()) == " ".join(expected[name].statement.split()), name


def test_every_level_has_properties() -> None:
    """SPEC section 7 levels 0-4 are all covered."""
    assert {p.level for p in PROPERTIES.values()} == set(LEVELS)


def test_strategy_factories_are_keyword_only() -> None:
    """Every strategy factory takes keyword-only arguments (hypothesis' convention)."""
    for name in strategies.__all__:
        params = inspect.signature(getattr(strategies, name)).parameters.values()
        assert all(p.kind is p.KEYWORD_ONLY for p in params), name


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: strategies.reward_groups(min_size=3, max_size=1), "min_size=3 is larger than max_size=1"),
        (lambda: strategies.reward_groups(min_groups=0), "min_groups=0 is smaller than 1"),
        (lambda: strategies.reward_groups(silent="maybe"), "silent='maybe'"),
        (lambda: strategies.score_vectors(n=0), "n=0"),
    ],
)
def test_strategy_argument_errors(call, words: str) -> None:  # type: ignore[no-untyped-def]
    """Argument errors say exactly what is wrong."""
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("[", r"\[")):
        call()
