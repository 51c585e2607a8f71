"""The public surface of ``sigma_ref`` (issue 2, item 8; STYLE.md, "What this means").

* every name in ``sigma_ref.__all__`` exists and is documented;
* every public function's docstring has a formula and a ``>>>`` example;
* main inputs positional, options keyword-only where the API says so; any positional
  option is named in the docstring.
"""

from __future__ import annotations

import inspect

import pytest

import sigma_ref
from sigma_ref import Convention

PUBLIC = sorted(sigma_ref.__all__)
FUNCTIONS = [n for n in PUBLIC if inspect.isfunction(getattr(sigma_ref, n))]
CLASSES = [n for n in PUBLIC if inspect.isclass(getattr(sigma_ref, n))]
VALUES = [n for n in PUBLIC if n not in FUNCTIONS and n not in CLASSES]
FORMULA_MARKS = ("=", "sqrt", "**")

#: The API's main (positional) inputs; everything after them is keyword-only.
KEYWORD_ONLY_AFTER = {
    "grpo_advantage": ["rewards"],
    "dr_grpo_advantage": ["rewards"],
    "rloo_advantage": ["rewards"],
    "dapo_keep_mask": ["rewards"],
    "policy_gradient": ["advantages", "scores"],
    "decompose": ["rewards", "scores"],
    "decompose_continuous": ["rewards", "scores"],
}


def test_all_is_complete_and_importable() -> None:
    """``__all__`` has no duplicates and every name resolves; the lists below cover it."""
    assert len(PUBLIC) == len(set(sigma_ref.__all__))
    for name in PUBLIC:
        assert hasattr(sigma_ref, name), name
    assert set(FUNCTIONS) | set(CLASSES) | set(VALUES) == set(PUBLIC)
    assert set(KEYWORD_ONLY_AFTER) <= set(FUNCTIONS)


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


@pytest.mark.parametrize("name", sorted(KEYWORD_ONLY_AFTER))
def test_options_are_keyword_only(name: str) -> None:
    """Main inputs positional, every option keyword-only (the hypothesis convention)."""
    params = list(inspect.signature(getattr(sigma_ref, name)).parameters.values())
    main = KEYWORD_ONLY_AFTER[name]
    assert [p.name for p in params[: len(main)]] == main
    for p in params[: len(main)]:
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is inspect.Parameter.empty
    for p in params[len(main) :]:
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}({p.name}=...) should be keyword-only"


@pytest.mark.parametrize("name", [n for n in FUNCTIONS if n not in KEYWORD_ONLY_AFTER])
def test_positional_options_are_documented(name: str) -> None:
    """Where an option may be positional (``group_sigma(k, G, ddof)``, ``expected_gradient(p, G,
    method)``), the docstring names it."""
    fn = getattr(sigma_ref, name)
    doc = inspect.getdoc(fn) or ""
    for p in inspect.signature(fn).parameters.values():
        if p.default is not inspect.Parameter.empty and p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
            assert p.name in doc, f"{name}: positional option {p.name!r} is not documented"
