"""The sigma-ref pytest plugin (registered under ``pytest11``).

Loaded by every pytest run in an environment where sigma-ref is installed, it changes
nothing there: its options share the prefix ``--sigma-ref-``, and it only registers the
hypothesis profiles below under names of its own. The suite loads one when it runs
(``spec/conftest.py``), chosen by ``--hypothesis-profile``, else the environment variable
``HYPOTHESIS_PROFILE`` (short names accepted), else by ``CI``:

* ``sigma-ref-ci`` (short ``ci``; the default when ``CI`` is set): derandomized, 25
  examples a test, so a CI run is reproducible and fast;
* ``sigma-ref-dev`` (``dev``; the default otherwise): 100 random examples a test;
* ``sigma-ref-thorough`` (``thorough``): 1000 examples a test, for a deep check before a release.

Failing examples are saved in hypothesis' example database, ``.hypothesis/`` in the
directory pytest runs from, and replayed first on the next run. (The conformance
properties run with the database off; a failure is reproduced from the printed seed.)

Conformance options (used by ``spec/``; nothing changes unless one is given; all share
the prefix ``--sigma-ref-``, as hypothesis' options share ``--hypothesis-``):

* ``--sigma-ref-impl pkg.module:attr``: the implementation under test, a plain function
  or a ``sigma_ref.conformance.Adapter`` (default: the oracle itself, so the suite checks
  itself in every run);
* ``--sigma-ref-layout contiguous|index|grouped|token|keep-mask``: how a plain function is called;
* ``--sigma-ref-output KEY|INDEX``: where the advantages are in the result (``sigma-ref
  check --output``);
* ``--sigma-ref-loss pkg.module:loss``: ``loss(logp, old_logp, advantages, mask) -> scalar``,
  enables the gradient checks;
* ``--sigma-ref-convention auto|<preset>|rloo``: what the implementation should compute
  (default ``auto``: detected from probes);
* ``--sigma-ref-report out.json``: write the results as JSON (and print the one-screen summary);
* ``--sigma-ref-precision auto|float64|float32|...``: the working precision the tolerances
  assume (default ``auto``: declared by the adapter, else detected);
* ``--sigma-ref-strict``: a WARN verdict counts as a FAIL;
* ``--sigma-ref-aggregation MODE`` (and ``--sigma-ref-aggregation-constant C``, the ``C`` of
  seq-mean-token-sum-norm), ``--sigma-ref-clip EPS_LOW[,EPS_HIGH]``: the loss's declared
  aggregation and PPO clip range (default: measured and reported);
* ``--sigma-ref-returns advantages``: layout token, the returns must equal the advantages;
* ``--sigma-ref-keep-metric accuracy|reward``: what a keep-mask filter counts k on (default:
  detected);
* ``--sigma-ref-timeout SECONDS``: the limit on each call of the implementation (default
  10; 0: none); a call that does not return in time fails its property.
* ``--sigma-ref-objective ppo|gspo|cispo`` (with ``--sigma-ref-clip`` and
  ``--sigma-ref-aggregation``), ``--sigma-ref-dual-clip C``, ``--sigma-ref-kl k1|k2|k3``
  ``--sigma-ref-kl-coef BETA`` ``--sigma-ref-kl-placement loss|reward``, ``--sigma-ref-tis-cap C``
  ``--sigma-ref-tis-level token|sequence`` ``--sigma-ref-tis-mode truncate|mask``: the loss's
  objective at ratios != 1 (``sigma_ref.objectives.Objective``), checked by ``loss_objective``.

``sigma-ref check`` runs this suite in a child process and reads its progress from the
hidden ``--sigma-ref-progress PATH`` (one JSON object a line), so that an implementation
that ends the process is reported with the property that was running. The pytest route
itself does not protect itself: an ``os._exit`` or a crash of the implementation ends this
pytest process with no summary (the header says so; use ``sigma-ref check`` for code you do
not trust).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import pytest

if TYPE_CHECKING:
    from sigma_ref.conformance.core import Context, Outcome

#: The suite's hypothesis profiles (module doc), in their own namespace: hypothesis itself
#: registers (and under ``CI`` loads) a profile called ``ci``.
PROFILES: dict[str, dict[str, Any]] = {
    "sigma-ref-ci": {"max_examples": 25, "derandomize": True, "deadline": None, "print_blob": True},
    "sigma-ref-dev": {"max_examples": 100, "deadline": None, "print_blob": True},
    "sigma-ref-thorough": {"max_examples": 1000, "deadline": None, "print_blob": True},
}


def profile_name(name: str) -> str:
    """``ci`` -> ``sigma-ref-ci`` (``dev``, ``thorough`` likewise); other names unchanged."""
    return f"sigma-ref-{name}" if f"sigma-ref-{name}" in PROFILES else name


def register_profiles() -> None:
    """Register ``sigma-ref-ci``, ``sigma-ref-dev`` and ``sigma-ref-thorough`` (a no-op without
    hypothesis). Registering loads nothing: a session keeps its settings until it runs the
    suite (:func:`load_suite_profile`) or names a profile (``--hypothesis-profile sigma-ref-ci``)."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:
        return
    slow = [HealthCheck.too_slow, HealthCheck.data_too_large]
    for name, kw in PROFILES.items():
        if name == "sigma-ref-dev":
            settings.register_profile(name, **kw)
        else:
            settings.register_profile(name, **kw, suppress_health_check=slow)


def load_suite_profile(config: pytest.Config) -> None:
    """Load the suite's profile for a session that runs it: the one given with
    ``--hypothesis-profile`` (hypothesis loads it), else ``$HYPOTHESIS_PROFILE`` (``ci``,
    ``dev``, ``thorough`` or a full name), else ``sigma-ref-ci`` where ``CI`` is set and
    ``sigma-ref-dev`` otherwise. Called by ``spec/conftest.py`` and the project's own
    ``conftest.py``, never by the plugin itself."""
    if config.getoption("hypothesis_profile", None):
        return
    from hypothesis import settings

    register_profiles()
    name = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    settings.load_profile(profile_name(name))


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the conformance options (module doc; declared once in ``sigma_ref._options``)."""
    from sigma_ref._options import add_to_pytest

    group = parser.getgroup("sigma-ref", "sigma-ref conformance suite (spec/)")
    add_to_pytest(group)
    # sigma-ref check reads the child's progress from this file; not for users
    group.addoption("--sigma-ref-progress", default=None, help=argparse.SUPPRESS)


class _Progress:
    """The progress file of ``--sigma-ref-progress``: one JSON object a line, flushed each line."""

    def __init__(self, path: str, config: pytest.Config) -> None:
        self.fh = open(path, "a", encoding="utf-8", buffering=1)
        self.config = config
        self.outcomes: dict[str, str] = {}
        self.exitstatus = 0

    def write(self, event: str, **fields: Any) -> None:
        import json

        self.fh.write(json.dumps({"event": event, **fields}) + "\n")
        self.fh.flush()


_PROGRESS_KEY = pytest.StashKey[_Progress]()


def _progress(config: pytest.Config) -> _Progress | None:
    return config.stash.get(_PROGRESS_KEY, None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Make the profile names known (before hypothesis loads ``--hypothesis-profile``), apply
    ``--sigma-ref-timeout``, open the progress file. Loads no profile and changes no setting."""
    register_profiles()
    report = config.getoption("sigma_ref_report", None)
    if report:  # a bad --report path fails now, not after the run (sigma_ref._files)
        from sigma_ref._files import check_output

        try:
            check_output(
                report,
                option="--sigma-ref-report",
                kind="report",
                force=bool(config.getoption("sigma_ref_force")),
            )
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    timeout = config.getoption("sigma_ref_timeout", None)
    if timeout is not None:
        from sigma_ref.conformance.guard import set_timeout

        set_timeout(timeout)
    path = config.getoption("sigma_ref_progress", None)
    if path:
        from sigma_ref.conformance import guard

        progress = _Progress(path, config)
        config.stash[_PROGRESS_KEY] = progress
        progress.write("configured")

        def stop(message: str) -> None:  # a hang the time limit cannot interrupt: end the child
            progress.write("stopped", message=message)
            os._exit(1)

        guard._last_resort = stop
    elif config.getoption("sigma_ref_impl", None):  # the pytest route: no parent to report a hang

        def stop_here(message: str) -> None:  # one line instead of a silent wait past every limit
            import sys

            capture = config.pluginmanager.getplugin("capturemanager")
            if capture is not None:  # the line must reach the terminal, not pytest's capture file
                capture.suspend_global_capture(in_=False)
            sys.__stderr__.write(  # type: ignore[union-attr]
                f"\nsigma-ref: FAIL: the implementation {message}; the run was stopped with no "
                "summary (pytest route; `sigma-ref check` reports what finished)\n"
            )
            sys.__stderr__.flush()  # type: ignore[union-attr]
            os._exit(1)

        from sigma_ref.conformance import guard

        guard._last_resort = stop_here


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    """Progress: a test starts (``sigma-ref check`` names it if the process dies)."""
    progress = _PROGRESS[0]
    if progress is not None:
        progress.write("started", nodeid=nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Progress: remember each test's outcome (failed in any phase wins)."""
    progress = _PROGRESS[0]
    if progress is None:
        return
    outcome: str = report.outcome
    if report.skipped and hasattr(report, "wasxfail"):
        outcome = "xfailed"
    before = progress.outcomes.get(report.nodeid)
    if before is None or before == "passed" or (outcome == "failed"):
        progress.outcomes[report.nodeid] = outcome


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    """Progress: a test finished, with its verdict (FAIL, WARN, NOTE, pass, skip)."""
    progress = _PROGRESS[0]
    if progress is None:
        return
    outcome = progress.outcomes.get(nodeid, "passed")
    verdict = {"failed": "FAIL", "passed": "pass", "skipped": "skip", "xfailed": "xfail"}.get(
        outcome, outcome
    )
    recorded = _state(progress.config)["outcomes"]
    if recorded and recorded[-1].label == nodeid.rsplit("::", 1)[-1]:
        verdict = recorded[-1].verdict  # the property's own class, as the summary shows it
    progress.write("finished", nodeid=nodeid, outcome=verdict)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Progress: the hooks without ``config`` find the progress file here."""
    _PROGRESS[0] = _progress(session.config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Progress: keep the run's exit status (for an exit past threads the code left running)."""
    progress = _progress(session.config)
    if progress is not None:
        progress.exitstatus = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Progress: the run ended normally (``sigma-ref check`` then trusts the exit code). In the
    child of ``sigma-ref check``, threads the implementation left running are named in the
    ``end`` event and the process exits at once with the run's status instead of waiting for them."""
    progress = _progress(config)
    if progress is not None:
        import sys

        from sigma_ref.conformance import guard

        guard._last_resort = None
        threads = guard.lingering_threads()
        progress.write("end", threads=threads)
        progress.fh.close()
        _PROGRESS[0] = None
        if threads:  # Python would wait for them at exit, up to the parent's whole-run limit
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(progress.exitstatus)
    elif config.getoption("sigma_ref_impl", None):  # the pytest route's last resort (configure)
        from sigma_ref.conformance import guard

        guard._last_resort = None
    if config.getoption("sigma_ref_timeout", None) is not None:
        from sigma_ref.conformance.guard import DEFAULT_TIMEOUT, set_timeout

        set_timeout(DEFAULT_TIMEOUT)


_PROGRESS: list[_Progress | None] = [None]


class _State(TypedDict):
    """What a run of the suite keeps on its config: outcomes, start time, context, seed."""

    outcomes: list[Outcome]
    start: float
    context: Context | None
    seed: int | None


_STATE_KEY = pytest.StashKey[_State]()


def _state(config: pytest.Config) -> _State:
    state = config.stash.get(_STATE_KEY, None)
    if state is None:
        state = {"outcomes": [], "start": time.perf_counter(), "context": None, "seed": None}
        config.stash[_STATE_KEY] = state
    return state


def _objective_options(config: pytest.Config) -> dict[str, Any]:
    """``--sigma-ref-objective`` and its terms as ``build_context``'s keyword arguments."""
    from sigma_ref._options import OBJECTIVE_OPTIONS

    return {
        name.replace("-", "_"): config.getoption("sigma_ref_" + name.replace("-", "_"), None)
        for name in OBJECTIVE_OPTIONS
    }


def conformance_context(config: pytest.Config) -> Any:
    """The run's conformance context, built once from the options (UsageError if they are wrong)."""
    state = _state(config)
    if state["context"] is None:
        from hypothesis import settings

        from sigma_ref.conformance.guard import ImplementationError
        from sigma_ref.conformance.session import build_context, new_seed

        progress = _progress(config)
        if progress is not None:
            progress.write("context")
        try:
            state["context"] = build_context(
                config.getoption("sigma_ref_impl"),
                layout=config.getoption("sigma_ref_layout"),
                loss=config.getoption("sigma_ref_loss"),
                convention=config.getoption("sigma_ref_convention"),
                precision=config.getoption("sigma_ref_precision", "auto") or "auto",
                strict=bool(config.getoption("sigma_ref_strict", False)),
                output=config.getoption("sigma_ref_output", None),
                aggregation=config.getoption("sigma_ref_aggregation", None),
                clip=config.getoption("sigma_ref_clip", None),
                aggregation_constant=config.getoption("sigma_ref_aggregation_constant", None),
                returns=config.getoption("sigma_ref_returns", None),
                keep_metric=config.getoption("sigma_ref_keep_metric", None),
                **_objective_options(config),
            )
        except (ValueError, TypeError, ImplementationError) as exc:
            # the implementation's own failure (its import raised, a probe ended the process's
            # business) is a FAIL; a wrong option is a usage error
            from sigma_ref.conformance.adapter import CallMismatch

            own = isinstance(exc, ImplementationError | CallMismatch) or isinstance(
                exc.__cause__, ImplementationError
            )
            if progress is not None:
                progress.write("error", kind="implementation" if own else "usage", message=str(exc))
            raise pytest.UsageError(f"sigma-ref: {'FAIL: ' if own else ''}{exc}") from None
        forced = config.getoption("hypothesis_seed", None)
        if forced is not None:
            state["seed"] = int(forced)
        elif not settings().derandomize:  # settings() holds the loaded profile's values
            state["seed"] = new_seed()
    return state["context"]


_SCALEOUT_KEY = pytest.StashKey[Any]()


def scaleout_report(config: pytest.Config) -> Any:
    """Level 5's report (``spec/test_scaleout.py``): every configuration the options ask for, run
    once per session in one launch of W processes; the ``ValueError`` or ``TypeError`` of options
    that do not fit; ``None`` when neither ``--sigma-ref-world-size`` nor
    ``--sigma-ref-micro-batches`` is given."""
    W = config.getoption("sigma_ref_world_size", None)
    M = config.getoption("sigma_ref_micro_batches", None)
    if W is None and M is None:
        return None
    if _SCALEOUT_KEY not in config.stash:
        from sigma_ref.conformance.scaleout import run_scaleout
        from sigma_ref.objectives import resolve_aggregation

        impl = config.getoption("sigma_ref_impl")
        loss = config.getoption("sigma_ref_loss")
        aggregation = config.getoption("sigma_ref_aggregation", None)
        if impl is None:  # the oracle, with its token-mean reference loss (as at levels 0-4)
            impl = "sigma_ref.conformance.scaleout:oracle_advantages"
            if loss is None:
                loss = "sigma_ref.conformance.scaleout:oracle_loss"
                aggregation = aggregation or "token-mean"
        try:
            config.stash[_SCALEOUT_KEY] = run_scaleout(
                impl,
                loss,
                layout=config.getoption("sigma_ref_layout") or conformance_context(config).adapter.layout,
                world_size=W or 1,
                micro_batches=M or 1,
                split=config.getoption("sigma_ref_split"),
                aggregation=None if aggregation is None else resolve_aggregation(aggregation),
                aggregation_constant=config.getoption("sigma_ref_aggregation_constant", None),
                loss_scale=config.getoption("sigma_ref_loss_scale"),
                timeout=config.getoption("sigma_ref_scaleout_timeout"),
                seed=conformance_seed(config) or 0,
                backend=config.getoption("sigma_ref_backend"),
            )
        except (ValueError, TypeError) as exc:  # options that do not fit: said by each level-5 test
            config.stash[_SCALEOUT_KEY] = exc
    return config.stash[_SCALEOUT_KEY]


def record_scaleout(config: pytest.Config, name: str, results: Sequence[Any]) -> str:
    """Record one level-5 property's results (``ScaleoutResult``) as its outcome for the summary:
    FAIL if one fails, else NOTE if one is a NOTE, else pass; the verdict is returned."""
    from sigma_ref.conformance.core import Outcome, record_outcome
    from sigma_ref.conformance.levels import SCALEOUT_LEVEL

    verdicts = {r.verdict for r in results}
    verdict = "FAIL" if "FAIL" in verdicts else "NOTE" if "NOTE" in verdicts else "pass"
    shown = [r for r in results if r.verdict == verdict] if verdict != "pass" else list(results)
    message = "; ".join(f"{r.property}: {r.message}" for r in shown)
    record_outcome(Outcome(name, SCALEOUT_LEVEL, None, verdict, message))
    return verdict


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
    if config.getoption("sigma_ref_impl") is None and config.getoption("sigma_ref_report") is None:
        return
    from hypothesis import settings

    from sigma_ref.conformance.session import report_dict, summary, to_json

    seconds = time.perf_counter() - state["start"]
    profile = settings.get_current_profile_name()
    context, outcomes, seed = state["context"], state["outcomes"], state["seed"]
    terminalreporter.write_sep("=", "sigma-ref conformance")
    terminalreporter.write_line(summary(context, outcomes, seed=seed, profile=profile, seconds=seconds))
    path = config.getoption("sigma_ref_report")
    if path:
        from sigma_ref._files import write_atomic

        report = report_dict(context, outcomes, seed=seed, profile=profile, seconds=seconds)
        try:
            write_atomic(path, lambda fh: fh.write((to_json(report) + "\n").encode("utf-8")))
        except OSError as exc:  # checked before the run; the disk filled up or the directory went
            terminalreporter.write_line(f"sigma-ref: the report was not written to {path} ({exc.strerror})")
        else:
            terminalreporter.write_line(f"report written to {path}")
