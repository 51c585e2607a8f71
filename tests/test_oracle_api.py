"""The public surface of ``sigma_ref`` (issue 2, item 8; STYLE.md, "What this means").

* every name in ``sigma_ref.__all__`` exists and is documented;
* every public function's docstring has a formula and a ``>>>`` example;
* data arguments positional, every option keyword-only: one rule for every public function of
  ``sigma_ref`` and ``sigma_ref.conformance``, with no list of exceptions.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

import sigma_ref
import sigma_ref.conformance
from sigma_ref import Convention

PUBLIC = sorted(sigma_ref.__all__)
FUNCTIONS = [n for n in PUBLIC if inspect.isfunction(getattr(sigma_ref, n))]
CLASSES = [n for n in PUBLIC if inspect.isclass(getattr(sigma_ref, n))]
VALUES = [n for n in PUBLIC if n not in FUNCTIONS and n not in CLASSES]
FORMULA_MARKS = ("=", "sqrt", "**")

#: Every public function: the top level's and ``sigma_ref.conformance``'s.
PUBLIC_FUNCTIONS = [
    (module.__name__, name)
    for module in (sigma_ref, sigma_ref.conformance)
    for name in sorted(module.__all__)
    if inspect.isfunction(getattr(module, name))
]


def test_all_is_complete_and_importable() -> None:
    """``__all__`` has no duplicates and every name resolves; the lists below cover it."""
    assert len(PUBLIC) == len(set(sigma_ref.__all__))
    for name in PUBLIC:
        assert hasattr(sigma_ref, name), name
    assert set(FUNCTIONS) | set(CLASSES) | set(VALUES) == set(PUBLIC)


@pytest.mark.parametrize("name", FUNCTIONS + CLASSES)
def test_has_docstring(name: str) -> None:
    """Functions and classes carry their own docstring (not an inherited one)."""
    obj = getattr(sigma_ref, name)
    doc = obj.__doc__
    assert doc and doc.strip(), f"sigma_ref.{name} has no docstring"
    if inspect.isclass(obj):
        assert "__doc__" in vars(obj), f"sigma_ref.{name} inherits its docstring"


@pytest.mark.parametrize("name", VALUES)
def test_values_are_documented(name: str) -> None:
    """Presets document themselves (``source`` and ``describe()``); ``PRESETS`` is described in
    its module's docstring; every value's module docstring names it or its type."""
    value = getattr(sigma_ref, name)
    if isinstance(value, Convention):
        assert value.source.strip(), f"preset {name} has no source"
        assert value.describe().startswith(value.name + ":")
        assert sigma_ref.PRESETS[value.name] is value
    else:
        assert name == "PRESETS", name
        assert all(isinstance(c, Convention) for c in value.values())
        doc = inspect.getmodule(Convention).__doc__
        assert "PRESETS" in doc, "sigma_ref.conventions' docstring does not describe PRESETS"


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_docstring_has_formula_and_example(name: str) -> None:
    """Every public function's docstring states a formula and shows a ``>>>`` example."""
    doc = inspect.getdoc(getattr(sigma_ref, name)) or ""
    assert any(mark in doc for mark in FORMULA_MARKS), f"sigma_ref.{name}: no formula in the docstring"
    assert ">>>" in doc, f"sigma_ref.{name}: no >>> example in the docstring"


@pytest.mark.parametrize(("module", "name"), PUBLIC_FUNCTIONS)
def test_options_are_keyword_only(module: str, name: str) -> None:
    """Data arguments positional (no default), every option keyword-only (hypothesis' convention), in
    every public function: a parameter with a default, and every parameter after the first keyword-only
    one, is keyword-only. ``f(p, G, *, method)``, never ``f(p, G, method="grpo")``."""
    params = list(inspect.signature(getattr(importlib.import_module(module), name)).parameters.values())
    kinds = [p.kind for p in params]
    assert inspect.Parameter.VAR_POSITIONAL not in kinds, f"{module}.{name} takes *args"
    data = [p for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    for p in data:
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, f"{module}.{name}({p.name}): {p.kind}"
        assert p.default is inspect.Parameter.empty, (
            f"{module}.{name}({p.name}={p.default!r}) is an option taken positionally: make it keyword-only"
        )
    assert params[: len(data)] == data, f"{module}.{name}: a data argument after a keyword-only option"


def test_the_rule_covers_the_closed_forms_and_the_suite() -> None:
    """The rule above sees the functions that once took options positionally (the search is not empty)."""
    covered = {name for _, name in PUBLIC_FUNCTIONS}
    assert {"expected_gradient", "mass_weight", "corpus_audit", "load_object", "oracle_adapter"} <= covered
    assert len(PUBLIC_FUNCTIONS) > 25
