"""The sigma-ref pytest plugin (registered under ``pytest11``).

Loaded by every pytest run in an environment where sigma-ref is installed; it only
registers names and changes nothing unless its options are given.

Hypothesis profiles, chosen by the environment variable ``HYPOTHESIS_PROFILE`` (or
hypothesis' own ``--hypothesis-profile``):

* ``ci`` (the default when ``CI`` is set): derandomized, 25 examples a test, so a CI
  run is reproducible and fast;
* ``dev`` (the default otherwise): 100 random examples a test;
* ``thorough``: 1000 examples a test, for a deep check before a release.

Failing examples are saved in hypothesis' example database, ``.hypothesis/`` in the
directory pytest runs from, and replayed first on the next run. (The conformance
properties run with the database off; a failure is reproduced from the printed seed.)

Conformance options (used by ``spec/``; nothing changes unless one is given):

* ``--impl pkg.module:attr``: the implementation under test, a plain function or a
  ``sigma_ref.conformance.Adapter`` (default: the oracle itself, so the suite checks
  itself in every run);
* ``--layout contiguous|index|grouped|token|keep-mask``: how a plain function is called;
* ``--sigma-ref-output KEY|INDEX``: where the advantages are in the result (``sigma-ref
  check --output``);
* ``--loss pkg.module:loss``: ``loss(logp, old_logp, advantages, mask) -> scalar``, enables
  the gradient checks;
* ``--convention auto|<preset>|rloo``: what the implementation should compute (default
  ``auto``: detected from probes);
* ``--report out.json``: write the results as JSON (and print the one-screen summary).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import pytest


def _register_profiles() -> None:
    """Register and load the hypothesis profiles (a no-op where hypothesis is absent).

    sigma-ref's runtime does not need hypothesis; only the suite does. Without this
    guard, installing sigma-ref would break every pytest run in an environment that
    has pytest but not hypothesis.
    """
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:
        return
    slow_data = [HealthCheck.too_slow, HealthCheck.data_too_large]
    settings.register_profile(
        "ci",
        max_examples=25,
        derandomize=True,
        deadline=None,
        print_blob=True,
        suppress_health_check=slow_data,
    )
    settings.register_profile("dev", max_examples=100, deadline=None, print_blob=True)
    settings.register_profile(
        "thorough",
        max_examples=1000,
        deadline=None,
        print_blob=True,
        suppress_health_check=slow_data,
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


_register_profiles()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the conformance options (module doc)."""
    group = parser.getgroup("sigma-ref", "sigma-ref conformance suite (spec/)")
    group.addoption(
        "--impl",
        default=None,
        metavar="PKG.MODULE:ATTR",
        help="implementation under test: a function or an Adapter (default: the oracle)",
    )
    group.addoption(
        "--layout",
        default=None,
        choices=("contiguous", "index", "grouped", "token", "keep-mask"),
        help="how a plain function is called: fn(rewards, G), fn(rewards, index), fn(rewards[B, G]), "
        "fn(token_level_rewards, response_mask, index) or a keep-mask filter fn(rewards, index)",
    )
    group.addoption(
        "--sigma-ref-output",
        default=None,
        metavar="KEY|INDEX",
        help="where the advantages are in what the function returns: o[KEY] or o[INDEX]",
    )
    group.addoption(
        "--loss",
        default=None,
        metavar="PKG.MODULE:ATTR",
        help="loss(logp, old_logp, advantages, mask) -> scalar; enables the gradient checks",
    )
    group.addoption(
        "--convention", default="auto", help="auto (detect from probes, default), a preset name, or rloo"
    )
    group.addoption("--report", default=None, metavar="PATH", help="write the conformance results as JSON")
    # sigma-ref check reads its own temporary report; it must not tell the user about it
    group.addoption("--report-is-internal", action="store_true", help=argparse.SUPPRESS)


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers the conformance suite uses."""
    config.addinivalue_line("markers", "sigma_property(name, level): a conformance property of spec/")


def _state(config: pytest.Config) -> dict[str, Any]:
    state = getattr(config, "_sigma_ref_state", None)
    if state is None:
        state = {"outcomes": [], "start": time.perf_counter(), "context": None, "seed": None}
        config._sigma_ref_state = state  # type: ignore[attr-defined]
    return state


def conformance_context(config: pytest.Config) -> Any:
    """The run's conformance context, built once from the options (UsageError if they are wrong)."""
    state = _state(config)
    if state["context"] is None:
        from hypothesis import settings

        from sigma_ref.conformance.session import build_context, new_seed

        try:
            state["context"] = build_context(
                config.getoption("impl"),
                layout=config.getoption("layout"),
                loss=config.getoption("loss"),
                convention=config.getoption("convention"),
                precision=config.getoption("sigma_ref_precision", "auto") or "auto",
                strict=bool(config.getoption("sigma_ref_strict", False)),
                output=config.getoption("sigma_ref_output", None),
            )
        except (ValueError, TypeError) as exc:
            raise pytest.UsageError(f"sigma-ref: {exc}") from None
        forced = config.getoption("hypothesis_seed", None)
        if forced is not None:
            state["seed"] = int(forced)
        elif not settings.default.derandomize:
            state["seed"] = new_seed()
    return state["context"]


def conformance_seed(config: pytest.Config) -> int | None:
    """The hypothesis seed of the conformance properties (``None`` when derandomized)."""
    return _state(config)["seed"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Record each conformance property's outcome for the summary and the report."""
    report = yield
    marker = item.get_closest_marker("sigma_property")
    if marker is None or (
        report.when != "call" and not (report.when == "setup" and report.outcome != "passed")
    ):
        return report
    from sigma_ref.conformance.session import Outcome, recorded_outcome

    name, level, _ = marker.args
    outcome = recorded_outcome(item.nodeid)
    if outcome is None:  # the property did not run to a verdict: a setup error or a crash
        param = getattr(item, "callspec", None)
        param_value = (
            str(param.params.get("param")) if param is not None and "param" in param.params else None
        )
        if report.skipped:
            verdict = "skip"
            message = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            verdict, message = "FAIL", str(crash.message if crash is not None else report.longrepr)
        else:
            verdict, message = "pass", ""
        outcome = Outcome(name, level, param_value, verdict, message)
    _state(item.config)["outcomes"].append(outcome)
    return report


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print the one-screen conformance summary and write ``--report`` (when asked for)."""
    state = _state(config)
    if not state["outcomes"] or state["context"] is None:
        return
    if config.getoption("impl") is None and config.getoption("report") is None:
        return
    from hypothesis import settings

    from sigma_ref.conformance.session import report_dict, summary, to_json

    seconds = time.perf_counter() - state["start"]
    profile = settings.get_current_profile_name()
    kw = {"seed": state["seed"], "profile": profile, "seconds": seconds}
    terminalreporter.write_sep("=", "sigma-ref conformance")
    terminalreporter.write_line(summary(state["context"], state["outcomes"], **kw))
    path = config.getoption("report")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(to_json(report_dict(state["context"], state["outcomes"], **kw)) + "\n")
        if not config.getoption("report_is_internal"):
            terminalreporter.write_line(f"report written to {path}")
