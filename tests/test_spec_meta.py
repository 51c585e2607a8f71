"""The suite's own structure: one module per level, each property a test of its level's module."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest

from sigma_ref import strategies
from sigma_ref.conformance.core import (
    LEVELS,
    PROPERTIES,
    SPEC_MODULES,
    Property,
    evaluate,
    load_properties,
    run_property,
)
from sigma_ref.conformance.levels import SCALEOUT_LEVEL, SUITE_LEVELS


@pytest.mark.parametrize(("level", "module_name"), list(zip(SUITE_LEVELS, SPEC_MODULES, strict=True)))
def test_one_test_per_property(level: str, module_name: str) -> None:
    """spec/test_<level>.py (level 5: spec/test_scaleout.py) holds exactly the level's properties: every
    ``test_*`` in it is a registered property of that level, defined there, and every property of the
    level has its test."""
    load_properties()
    module = importlib.import_module(f"sigma_ref.spec.{module_name}")
    tests = {name: obj for name, obj in vars(module).items() if name.startswith("test_") and callable(obj)}
    expected = {p.test_name: p for p in PROPERTIES.values() if p.level == level}
    assert set(tests) == set(expected)
    for name, test in tests.items():
        prop = test.sigma_property
        assert (prop.name, prop.level) == (expected[name].name, level)
        assert prop.check.__module__ == module.__name__, name
        assert inspect.getdoc(test) == inspect.getdoc(prop.check) and prop.statement, name


def test_every_level_has_properties() -> None:
    """docs/spec.md §7 levels 0-5 are all covered, one module each, loaded in the levels' order: one
    property system (level 5's properties are registered like the others, and come last)."""
    assert SPEC_MODULES == (*(f"test_{level}" for level in LEVELS), "test_scaleout")
    props = list(load_properties().values())
    assert {p.level for p in props} == set(SUITE_LEVELS)
    assert [p.name for p in props if p.level == SCALEOUT_LEVEL] == [
        "scaleout_advantages",
        "scaleout_gradient",
        "scaleout_prediction",
    ]
    assert all(p.level == SCALEOUT_LEVEL for p in props[-3:])


def test_registering_twice_is_harmless_but_two_definitions_are_not() -> None:
    """Executing a spec module a second time (a reload) replaces its properties in place, keeping the
    order; another function under a taken name is refused."""
    from sigma_ref.conformance.core import Property, register

    order = list(load_properties())
    prop = PROPERTIES["silent_group_zero"]
    assert register(prop) is prop
    assert list(PROPERTIES) == order

    def test_silent_group_zero(ctx: object, example: object, param: object) -> None:
        """Another body."""

    other = Property("silent_group_zero", "silent", "Another body.", test_silent_group_zero)
    with pytest.raises(ValueError, match="'silent_group_zero' is defined twice"):
        register(other)
    assert PROPERTIES["silent_group_zero"] is prop


def test_a_property_needs_a_level_a_name_and_a_statement() -> None:
    """The decorator refuses an unknown level, a name without ``test_`` and a missing docstring."""
    from sigma_ref.conformance.core import conformance_property

    with pytest.raises(ValueError, match="level='silence' is not a level"):
        conformance_property(level="silence")

    def check_x(ctx: object, example: object, param: object) -> None:
        """Documented."""

    def test_y(ctx: object, example: object, param: object) -> None:
        pass

    for fn in (check_x, test_y):
        with pytest.raises(ValueError, match="a documented function named test_<name>"):
            conformance_property(level="silent")(fn)
    assert "y" not in PROPERTIES and "x" not in PROPERTIES


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
        (lambda: strategies.ragged_batches(silent="maybe"), "silent='maybe'"),
        (lambda: strategies.ragged_batches(values="integer"), "values='integer'"),
        (lambda: strategies.score_vectors(n=0), "n=0"),
    ],
)
def test_strategy_argument_errors(call, words: str) -> None:  # type: ignore[no-untyped-def]
    """Argument errors say exactly what is wrong."""
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("[", r"\[")):
        call()


def test_every_spec_citation_resolves() -> None:
    """Each ``docs/spec.md §N`` (or ``§N.k``) the code, the docs and the proofs cite names a section
    of ``docs/spec.md`` (a ``## §N`` heading, or item ``§N.k`` of its list), and no bare ``SPEC
    section`` citation (of a document the repository does not hold) is left."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = (root / "docs" / "spec.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^## §(\d+)\b", spec, flags=re.MULTILINE))
    items = set(re.findall(r"^\d+\. §(\d+\.\d+):", spec, flags=re.MULTILINE))
    cited: dict[str, list[str]] = {}
    bare: list[str] = []
    for folder in ("sigma_ref", "spec", "tests", "proofs", "benchmarks"):
        for path in (root / folder).rglob("*"):
            if path.suffix not in (".py", ".md") or "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8")
            for ref in re.findall(r"docs/spec\.md §(\d+(?:\.\d+)?)", text):
                cited.setdefault(ref, []).append(path.name)
            if re.search(r"\bSPEC (?:section|§)", text) and path.name != "test_spec_meta.py":
                bare.append(str(path.relative_to(root)))
    assert cited, "no citation found: the search is broken"
    missing = {ref: where for ref, where in cited.items() if ref not in (items if "." in ref else sections)}
    assert missing == {}, f"cited but not in docs/spec.md: {missing}"
    assert bare == [], f"cite docs/spec.md §N instead of SPEC in {bare}"


def test_conclude_runs_only_after_every_input_passed() -> None:
    """A property's ``conclude`` (its NOTE) runs once the designed and generated inputs all passed."""
    from hypothesis import strategies as st

    from sigma_ref.conformance.core import PropertyFailure

    seen: list[Any] = []
    from sigma_ref.conformance.session import build_context

    ctx = build_context(None)

    def check(ctx: Any, ex: Any, p: Any) -> None:
        seen.append(ex)
        if ex == "bad":
            raise PropertyFailure("bad input")

    def conclude(ctx: Any, p: Any) -> None:
        seen.append("concluded")

    prop = Property(
        "x", "identity", "x", check, lambda c, p: ["designed"], lambda c, p: st.just(1), conclude=conclude
    )
    run_property(prop, ctx, max_examples=2)
    assert seen[0] == "designed" and seen[-1] == "concluded" and 1 in seen
    seen.clear()
    failing = Property("y", "identity", "y", check, lambda c, p: ["bad"], conclude=conclude)
    with pytest.raises(PropertyFailure):
        run_property(failing, ctx)
    assert seen == ["bad"]


@pytest.mark.parametrize("runner", [run_property, evaluate])
def test_a_misspelt_run_option_is_an_error_naming_it(runner: Any) -> None:
    """The options are ``**RunOptions``: a misspelt one raises (it is never a NOTE or ignored)."""
    with pytest.raises(
        TypeError, match=r"unknown options \['max_exampels'\]; its options are \['max_examples'"
    ):
        runner("group_centering", None, max_exampels=3)


_DUPLICATES_PLUGIN = """
import sys
from pathlib import Path


def pytest_collection_finish(session):
    by_file = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and "spec" in Path(path).parts:
            by_file.setdefault(str(Path(path).resolve()), set()).add(id(module))
    seen = sorted(str(Path(p).relative_to(Path.cwd())) for p in by_file)
    print("SPEC_MODULES", seen)
    print("TWICE", sorted(p for p, ids in by_file.items() if len(ids) > 1))
"""


def test_a_clone_imports_each_spec_module_once(tmp_path: Path) -> None:
    """``pytest spec`` in a clone imports ``spec/test_x.py`` as ``spec.test_x`` and the registry imports
    ``sigma_ref.spec.test_x``: both names are one module object (one file, executed once), so its
    classes and properties exist once."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "spec_duplicates.py").write_text(_DUPLICATES_PLUGIN)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    files = ("spec/test_contract.py", "spec/test_silent.py", "spec/adapters/post.py")
    plugins = ("-p", "spec_duplicates", "-p", "no:cacheprovider")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, "-n", "0", "--co", "-q", "-s", *files],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "'spec/test_contract.py'" in done.stdout and "'spec/conftest.py'" in done.stdout, done.stdout
    assert "TWICE []" in done.stdout, done.stdout
    from sigma_ref.spec import test_contract

    if Path(test_contract.__file__ or "").resolve().parent == root / "spec":  # an editable install
        assert sys.modules.get("spec.test_contract", test_contract) is test_contract
