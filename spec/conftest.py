"""Fixtures of the conformance suite: the implementation under test and the hypothesis seed.

The options (``--sigma-ref-impl``, ``--sigma-ref-layout``, ``--sigma-ref-loss``, ...) are
registered by the ``sigma_ref.pytest_plugin`` plugin; the context is built once per run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sigma_ref.conformance.core import PROPERTIES, Context, load_properties
from sigma_ref.pytest_plugin import conformance_context, conformance_seed, load_suite_profile, suite_options

_HERE = Path(__file__).resolve().parent
load_properties()  # every property, in the suite's order, before pytest imports the modules


def _property_of(item: Any) -> str | None:
    path = Path(str(getattr(item, "path", ""))).resolve()
    if path.parent != _HERE or not path.name.startswith("test_"):
        return None
    name = getattr(item, "originalname", item.name).removeprefix("test_")
    return name if name in PROPERTIES else None


@pytest.fixture(scope="session")
def sigma_ctx(pytestconfig: pytest.Config) -> Context:
    """The implementation under test and what it should compute."""
    ctx: Context = conformance_context(pytestconfig)
    return ctx


@pytest.fixture(scope="session")
def sigma_seed(pytestconfig: pytest.Config) -> int | None:
    """The hypothesis seed (``None`` for derandomized profiles)."""
    return conformance_seed(pytestconfig)


def pytest_configure(config: pytest.Config) -> None:
    """The suite runs: its hypothesis profile, and its marker."""
    load_suite_profile(config)
    config.addinivalue_line("markers", "sigma_property(name, level): a conformance property of spec/")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize dtype-wise properties over the dtypes the implementation declares."""
    if "param" in metafunc.fixturenames:
        prop = PROPERTIES[metafunc.function.__name__.removeprefix("test_")]
        ctx = conformance_context(metafunc.config)
        metafunc.parametrize("param", list(prop.params(ctx.adapter)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every property test with its name, level and whether it is required."""
    for item in items:
        name = _property_of(item)
        if name is None:
            continue
        prop = PROPERTIES[name]
        ctx = conformance_context(config)
        item.add_marker(pytest.mark.sigma_property(name, prop.level, prop.required(ctx)))


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say what is tested, and (the pytest route, not ``sigma-ref check``'s child) that the
    implementation runs unprotected in this process."""
    options = suite_options(config)
    impl = options.impl or "the sigma_ref oracle (paper, index layout)"
    lines = [f"sigma-ref conformance: impl={impl}, convention={options.convention}"]
    if options.impl and not config.getoption("sigma_ref_progress"):
        lines.append(UNPROTECTED)
    return lines


#: The pytest route's header warning (``spec/README.md``, "When the code under test misbehaves").
UNPROTECTED = (
    "sigma-ref: the implementation runs in this pytest process: os._exit or a crash ends the run "
    "with no summary (a hang that swallows the time limit stops it with one line); `sigma-ref "
    "check` runs it in a child process and reports them"
)
