"""No consumer reads a fact back out of a finding's or an outcome's words (issue 23, item 1).

A :class:`~sigma_ref.conformance.core.Finding` carries its facts as data (``kind``, ``facts``,
``mismatch``, ``bug_class``, ``factor``) and :meth:`~sigma_ref.conformance.core.Finding.render` is
the one place that words them. This test scans the source of ``sigma_ref/``, ``spec/`` and
``tests/gallery/`` for code that parses such words: a string method that looks for text
(``startswith``, ``partition``, ``removeprefix``, ``split(" [")``, ...) called on a ``message``,
a ``what`` or a ``["message"]``, a ``"..." in <x>.message`` test, or a regular expression run on
one. Showing a message (its first line, its words joined) is not parsing and passes.

The allow-list for ``sigma_ref/`` and ``spec/`` is empty. :data:`PENDING_LEVEL5` names the
level-5 code that reads level-5 results' messages until those results carry their bug class and
factor as data (helper h1 converts it; the lead empties the set at merge).
:data:`TEXT_ASSERTIONS` names gallery code that checks the words a user reads (a case's record
lists the words the suite must say), which is a test of the text, not a fact read back.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("sigma_ref", "spec", "tests/gallery")

#: Level-5 code still reading level-5 results' messages: (path, function). Emptied at merge.
PENDING_LEVEL5: frozenset[tuple[str, str]] = frozenset(
    {
        ("tests/gallery/__main__.py", "normaliser_table"),
    }
)
#: Gallery code that asserts the words a user reads (not a fact read back): (path, function).
TEXT_ASSERTIONS: frozenset[tuple[str, str]] = frozenset({("tests/gallery/__init__.py", "caught_by")})

#: String methods that look for text in a string.
_SEARCHING = {
    "startswith",
    "endswith",
    "partition",
    "rpartition",
    "removeprefix",
    "removesuffix",
    "find",
    "rfind",
    "index",
    "rindex",
}
_SPLITTING = {"split", "rsplit"}
_REGEX = {"search", "match", "fullmatch", "findall", "finditer", "sub", "split"}
#: An expression that is a finding's or an outcome's words.
_WORDS = re.compile(r"(\.message\b|\.what\b|\[['\"]message['\"]\])")


def _is_words(node: ast.AST) -> bool:
    return bool(_WORDS.search(ast.unparse(node)))


def _parses(node: ast.AST) -> bool:
    """Whether ``node`` looks for text in a finding's or an outcome's words."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method, receiver = node.func.attr, node.func.value
        if method in _SEARCHING and _is_words(receiver):
            return True
        if method in _SPLITTING and _is_words(receiver) and node.args:
            first = node.args[0]
            return not (isinstance(first, ast.Constant) and first.value == "\n")
        if isinstance(receiver, ast.Name) and receiver.id == "re" and method in _REGEX:
            return any(_is_words(arg) for arg in node.args[1:])
    if isinstance(node, ast.Compare):
        return any(
            isinstance(op, ast.In | ast.NotIn) and _is_words(right)
            for op, right in zip(node.ops, node.comparators, strict=True)
        )
    return False


def _functions(tree: ast.AST) -> dict[int, str]:
    """Line -> name of the innermost function around it."""
    where: dict[int, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else name
            if inner != name:
                for line in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                    where[line] = inner
            visit(child, inner)

    visit(tree, "<module>")
    return where


def parsing_sites() -> list[tuple[str, str, int, str]]:
    """``(path, function, line, code)`` of every place that parses a finding's or an outcome's words."""
    sites = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"))
            where = _functions(tree)
            for node in ast.walk(tree):
                if _parses(node):
                    line = getattr(node, "lineno", 0)
                    sites.append((rel, where.get(line, "<module>"), line, ast.unparse(node)))
    return sites


def test_no_consumer_parses_a_message() -> None:
    """Every consumer reads a finding's fields; only the allow-listed code reads its words."""
    allowed = PENDING_LEVEL5 | TEXT_ASSERTIONS
    offending = [s for s in parsing_sites() if (s[0], s[1]) not in allowed]
    listed = "\n".join(f"{p}:{line} in {fn}: {code}" for p, fn, line, code in offending)
    assert not offending, f"code that parses a finding's or an outcome's words (read its fields):\n{listed}"


def test_allow_list_is_not_stale() -> None:
    """Every allow-listed function still parses words (remove it from the list once converted)."""
    found = {(p, fn) for p, fn, _, _ in parsing_sites()}
    stale = (PENDING_LEVEL5 | TEXT_ASSERTIONS) - found
    assert not stale, f"allow-listed functions that no longer parse a message; remove them: {sorted(stale)}"


def test_no_allow_list_for_the_package_but_level_5() -> None:
    """Outside the pending level-5 entries, sigma_ref/ and spec/ have no exception."""
    assert all(p.startswith("tests/gallery/") for p, _ in TEXT_ASSERTIONS)


@pytest.mark.parametrize(
    "code",
    [
        'r["message"].startswith("aggregation: ")',
        'checked["message"].partition(" under the declared")',
        'exc.finding.what.startswith("raised")',
        'text = o.message.split(" [detected", 1)[0]',
        '"full-batch gradient already differs" in pred.message',
        'o.message.removeprefix("aggregation: ")',
        're.search("class", outcome.message)',
    ],
)
def test_the_scan_catches(code: str) -> None:
    """The scan flags the forms issue 23 lists (each was in the code once)."""
    assert any(_parses(node) for node in ast.walk(ast.parse(code)))


@pytest.mark.parametrize(
    "code",
    [
        'text = outcome.message.split("\\n", 1)[0]',
        'words = " ".join(shown.message.split())',
        'o.message.strip().splitlines()[0] if o.message.strip() else ""',
        'found.kind == "raised"',
    ],
)
def test_the_scan_lets_display_pass(code: str) -> None:
    """Showing a message (its first line, its words joined) is not parsing."""
    assert not any(_parses(node) for node in ast.walk(ast.parse(code)))
