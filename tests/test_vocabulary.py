"""One vocabulary (issue 23 item 3): each tuple of names in ``sigma_ref._vocabulary`` is written there
once, tied to its ``Literal`` by ``typing.get_args``, and no other module of the package or of
``spec/`` spells it again (as a tuple, list or set of strings, or a ``Literal[...]``). A copy that
must stay is a named :data:`KNOWN_COPIES` entry with its reason. (A dict literal keyed by a
vocabulary, e.g. ``PRECISIONS``, is a table over it, not a copy; the tables that must cover a
vocabulary are tied in :func:`test_tables_over_a_vocabulary_cover_it`.)"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from sigma_ref import _vocabulary as vocab

ROOT = Path(__file__).resolve().parents[1]

#: Each vocabulary tuple, by name, with the ``Literal`` it must equal.
TIED = {
    "LAYOUTS": vocab.Layout,
    "SPLITS": vocab.Split,
    "LOSS_SCALES": vocab.LossScale,
    "AGGREGATION_MODES": vocab.Aggregation,
    "TRL_LOSS_TYPES": vocab.TrlLossType,
    "DTYPES": vocab.Dtype,
    "SCALES": vocab.Scale,
    "PLACEMENTS": vocab.Placement,
    "SINGLETONS": vocab.Singleton,
    "METHODS": vocab.Method,
    "VERDICTS": vocab.VerdictClass,
    "OUTCOMES": vocab.Verdict,
}

#: ``(path, vocabulary) -> reason`` for a spelling that stays outside the vocabulary module.
KNOWN_COPIES: dict[tuple[str, str], str] = {
    ("spec/adapters/verl.py", "AGGREGATION_MODES"): (
        "LOSS_AGG_MODES: verl's agg_loss branches in verl's order, which the adapter table, the matrix "
        "and the kill tables follow; the set is tied to AGGREGATION_MODES below"
    ),
    ("spec/adapters/unsloth.py", "TRL_LOSS_TYPES"): (
        "LOSS_TYPES: grpo_compute_loss's loss_type branches in unsloth's order, which its adapter table "
        "and the matrix follow; the set is tied to TRL_LOSS_TYPES below"
    ),
}


def _strings(nodes: list[ast.expr | None]) -> frozenset[str] | None:
    """The strings of ``nodes`` when every one is a string constant (else None)."""
    if len(nodes) < 2 or not all(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in nodes):
        return None
    return frozenset(typing.cast(ast.Constant, n).value for n in nodes)


def spellings(tree: ast.AST) -> list[tuple[int, frozenset[str]]]:
    """Every tuple, list or set literal of two or more strings in ``tree``, with its line
    (``Literal["a", "b"]`` included: its subscript is a tuple)."""
    found: list[tuple[int, frozenset[str]]] = []
    for node in ast.walk(tree):
        values: frozenset[str] | None = None
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            values = _strings(list(node.elts))
        if values is not None:
            found.append((getattr(node, "lineno", 0), values))
    return found


def _sources() -> list[Path]:
    paths = [*sorted((ROOT / "sigma_ref").rglob("*.py")), *sorted((ROOT / "spec").rglob("*.py"))]
    return [p for p in paths if "__pycache__" not in p.parts and p.name != "_vocabulary.py"]


@pytest.mark.parametrize("name", sorted(TIED))
def test_each_tuple_is_its_literal(name: str) -> None:
    """``LAYOUTS == get_args(Layout)`` and so on: the tuple and the type cannot drift."""
    values = getattr(vocab, name)
    assert values == typing.get_args(TIED[name]) and len(set(values)) == len(values) >= 2


def test_tables_over_a_vocabulary_cover_it() -> None:
    """The tables keyed by a vocabulary have exactly its keys (TRL's aggregation, the dtypes' unit
    roundoff), and the modules that used to spell a vocabulary re-export the one tuple."""
    from sigma_ref import _options, conventions, difficulty, symbolic
    from sigma_ref.conformance import adapter, levels, precision

    assert set(vocab.TRL_AGGREGATION) == set(vocab.TRL_LOSS_TYPES)
    assert set(vocab.TRL_AGGREGATION.values()) <= set(vocab.AGGREGATION_MODES)
    assert set(precision.PRECISIONS) == set(vocab.DTYPES)
    from sigma_ref.spec.adapters import unsloth, verl

    assert set(verl.LOSS_AGG_MODES) == set(vocab.AGGREGATION_MODES)
    assert set(unsloth.LOSS_TYPES) == set(vocab.TRL_LOSS_TYPES)
    assert conventions.AGGREGATION_MODES is vocab.AGGREGATION_MODES
    assert conventions.AGGREGATION_ALIASES is vocab.TRL_AGGREGATION
    assert _options.LAYOUTS is vocab.LAYOUTS and adapter.ALL_DTYPES is vocab.DTYPES
    assert levels.VERDICTS is vocab.VERDICTS and levels.Verdict is vocab.Verdict
    assert difficulty.Method is symbolic.Method is vocab.Method
    assert conventions.Scale is symbolic.Scale is vocab.Scale


def test_no_module_spells_a_vocabulary_again() -> None:
    """No module of the package or ``spec/`` but ``sigma_ref/_vocabulary.py`` writes one of its tuples
    (the same set of strings) again, except a named :data:`KNOWN_COPIES` entry."""
    vocabularies = {name: frozenset(getattr(vocab, name)) for name in TIED}
    copies: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in _sources():
        rel = str(path.relative_to(ROOT))
        for line, values in spellings(ast.parse(path.read_text(encoding="utf-8"))):
            for name, words in vocabularies.items():
                if values == words:
                    if (rel, name) in KNOWN_COPIES:
                        used.add((rel, name))
                    else:
                        copies.append(f"{rel}:{line} spells {name}; import it from sigma_ref._vocabulary")
    assert copies == []
    assert used == set(KNOWN_COPIES), f"stale KNOWN_COPIES entries: {set(KNOWN_COPIES) - used}"


def test_the_search_sees_a_copy() -> None:
    """The search finds a tuple, a ``Literal`` and a set (it is not vacuous)."""
    tree = ast.parse(
        'A = ("add", "floor")\nB = typing.Literal["grpo", "dr_grpo"]\nC = {"none", "mean-over-micro-batches"}'
    )
    found = {values for _, values in spellings(tree)}
    assert frozenset(vocab.PLACEMENTS) in found and frozenset(vocab.METHODS) in found
    assert frozenset(vocab.LOSS_SCALES) in found
