"""The sigma-ref pytest plugin (registered under ``pytest11``).

Loaded by every pytest run in an environment where sigma-ref is installed, it changes
nothing there and imports nothing heavy (not hypothesis, not torch): its options share the prefix
``--sigma-ref-``, and the hypothesis profiles below, under names of its own, are registered only
by a session that runs the suite or names one of them with ``--hypothesis-profile``.
The suite loads one when it runs (``spec/conftest.py``), chosen by ``--hypothesis-profile``, else
the environment variable ``HYPOTHESIS_PROFILE`` (short names accepted), else by ``CI``:

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
* ``--sigma-ref-layout contiguous|index|grouped|token|keep-mask|sizes``: how a plain function is called;
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
* ``--sigma-ref-objective ppo|gspo|gspo-token|cispo`` (with ``--sigma-ref-clip`` and
  ``--sigma-ref-aggregation``), ``--sigma-ref-dual-clip C``, ``--sigma-ref-kl k1|k2|k3|k3-is``
  ``--sigma-ref-kl-coef BETA`` ``--sigma-ref-kl-placement loss|reward``, ``--sigma-ref-tis-cap C``
  ``--sigma-ref-tis-level token|sequence|geometric`` ``--sigma-ref-tis-mode truncate|mask``: the loss's
  objective at ratios != 1 (``sigma_ref.objectives.Objective``), checked by ``loss_objective``.
* ``--sigma-ref-world-size W``, ``--sigma-ref-micro-batches M`` (``1,2,3`` for several), with
  ``--sigma-ref-split``, ``--sigma-ref-loss-scale``, ``--sigma-ref-scaleout-timeout``,
  ``--sigma-ref-backend`` and ``--sigma-ref-rendezvous-host`` (default ``127.0.0.1``): level 5 on real
  ``torch.distributed`` processes (``spec/test_scaleout.py``, launched once per run).

Each property's outcome rides on its test's report (``user_properties``), so the summary and the
``--sigma-ref-report`` JSON are built in the main process, the same with and without pytest-xdist.

``sigma-ref check`` runs this suite in a child process and reads its progress from the
hidden ``--sigma-ref-progress PATH`` (one JSON object a line), so that an implementation
that ends the process is reported with the property that was running. The pytest route
itself does not protect itself: an ``os._exit`` or a crash of the implementation ends this
pytest process with no summary (the header says so; use ``sigma-ref check`` for code you do
not trust).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any, TypedDict

import pytest

if TYPE_CHECKING:
    from sigma_ref._options import SuiteOptions
    from sigma_ref.conformance.core import Context, Outcome
    from sigma_ref.conformance.launch import ScaleoutOptions

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


def profile_label(name: str) -> str:
    """How a report names a profile: the suite's by the short name that selects it (``sigma-ref-ci``
    -> ``ci``: ``HYPOTHESIS_PROFILE=ci`` or ``--hypothesis-profile ci``); others unchanged."""
    return name.removeprefix("sigma-ref-") if name in PROFILES else name


def route_text(config: pytest.Config, text: str) -> str:
    """``text`` with the options named as this session takes them: ``--sigma-ref-loss`` in a pytest
    run, ``--loss`` when ``sigma-ref check`` runs it (its hidden ``--sigma-ref-progress``)."""
    if config.getoption("sigma_ref_progress", None) is not None:
        return text
    from sigma_ref._options import pytest_flags

    return pytest_flags(text)


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
    ``--hypothesis-profile`` (hypothesis loads it; ``ci`` is the suite's ``sigma-ref-ci`` here, not
    hypothesis' own ``ci``), else ``$HYPOTHESIS_PROFILE`` (``ci``,
    ``dev``, ``thorough`` or a full name), else ``sigma-ref-ci`` where ``CI`` is set and
    ``sigma-ref-dev`` otherwise. Called by ``spec/conftest.py`` and the project's own
    ``conftest.py``, never by the plugin itself."""
    given = config.getoption("hypothesis_profile", None)
    if given:
        if given == "ci":  # hypothesis' own ci was loaded; in a session that runs the suite, ci is its
            from hypothesis import settings

            register_profiles()
            settings.load_profile(profile_name(given))
        return
    from hypothesis import settings

    register_profiles()
    name = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    try:
        settings.load_profile(profile_name(name))
    except Exception as exc:  # hypothesis' InvalidArgument: an unknown name
        raise pytest.UsageError(
            f"HYPOTHESIS_PROFILE={name!r} is not a hypothesis profile: use ci, dev or thorough (the "
            "suite's), or the name of a profile you registered"
        ) from exc


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the conformance options (module doc; declared once in ``sigma_ref._options``)."""
    from sigma_ref._options import add_to_pytest

    group = parser.getgroup("sigma-ref", "sigma-ref conformance suite (spec/)")
    add_to_pytest(group)
    # sigma-ref check reads the child's progress from this file; not for users
    group.addoption("--sigma-ref-progress", default=None, help=argparse.SUPPRESS)


class _Progress:
    """The progress file of ``--sigma-ref-progress`` (one JSON object a line, flushed each line), and
    the hooks that write it: registered as a plugin on the run's config, so no hook needs a global."""

    def __init__(self, path: str, config: pytest.Config) -> None:
        self.fh = open(path, "a", encoding="utf-8", buffering=1)
        self.config = config
        self.outcomes: dict[str, str] = {}
        self.exitstatus = 0

    def write(self, event: str, **fields: Any) -> None:
        import json

        self.fh.write(json.dumps({"event": event, **fields}) + "\n")
        self.fh.flush()

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        """A test starts (``sigma-ref check`` names it if the process dies)."""
        self.write("started", nodeid=nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Remember each test's outcome (failed in any phase wins; a property's own class first)."""
        outcome: str = report.outcome
        if report.skipped and hasattr(report, "wasxfail"):
            outcome = "xfailed"
        verdict = {"failed": "FAIL", "passed": "pass", "skipped": "skip", "xfailed": "xfail"}[outcome]
        recorded = _reported_outcome(report)
        if recorded is not None:
            verdict = recorded[1].verdict  # the property's own class, as the summary shows it
        before = self.outcomes.get(report.nodeid)
        if before is None or (before == "pass" and report.when != "teardown") or outcome == "failed":
            self.outcomes[report.nodeid] = verdict

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        """A test finished, with its verdict (FAIL, WARN, NOTE, pass, skip)."""
        self.write("finished", nodeid=nodeid, outcome=self.outcomes.get(nodeid, "pass"))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Keep the run's exit status (for an exit past threads the code left running)."""
        self.exitstatus = int(exitstatus)


_PROGRESS_KEY = pytest.StashKey[_Progress]()


def _progress(config: pytest.Config) -> _Progress | None:
    return config.stash.get(_PROGRESS_KEY, None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Make the suite's profile names known when ``--hypothesis-profile`` names one (before hypothesis
    loads it), apply ``--sigma-ref-timeout``, open the progress file. Loads no profile, changes no
    setting, and imports hypothesis only when one of the suite's profiles is asked for by name (as
    hypothesis' own plugin does: a session that does not run the suite never imports it; the suite's
    ``spec/conftest.py`` registers the profiles when it loads one)."""
    if profile_name(str(config.getoption("hypothesis_profile", None) or "")) in PROFILES:
        register_profiles()
    options = suite_options(config)
    if options.report:  # a bad --report path fails now, not after the run (sigma_ref._files)
        from sigma_ref._files import check_output

        try:
            check_output(options.report, option="--sigma-ref-report", kind="report", force=options.force)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    if options.timeout is not None:
        from sigma_ref.conformance.guard import set_timeout

        set_timeout(options.timeout)
    path = config.getoption("sigma_ref_progress", None)
    if path:
        from sigma_ref.conformance import guard

        progress = _Progress(path, config)
        config.stash[_PROGRESS_KEY] = progress
        config.pluginmanager.register(progress, "sigma-ref-progress")
        progress.write("configured")

        def stop(message: str) -> None:  # a hang the time limit cannot interrupt: end the child
            progress.write("stopped", message=message)
            os._exit(1)

        guard._last_resort = stop
    elif options.impl:  # the pytest route: no parent to report a hang

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
        if threads:  # Python would wait for them at exit, up to the parent's whole-run limit
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(progress.exitstatus)
    elif suite_options(config).impl:  # the pytest route's last resort (configure)
        from sigma_ref.conformance import guard

        guard._last_resort = None
    if suite_options(config).timeout is not None:
        from sigma_ref.conformance.guard import DEFAULT_TIMEOUT, set_timeout

        set_timeout(DEFAULT_TIMEOUT)


class _State(TypedDict):
    """What a run of the suite keeps on its config: outcomes (each with its place in the suite's
    order), start time, context, seed."""

    outcomes: list[tuple[tuple[int, int, str], Outcome]]
    start: float
    context: Context | None
    seed: int | None
    reported_seed: list[int | None]  # the seed the reports carry (pytest-xdist: the workers')


_STATE_KEY = pytest.StashKey[_State]()


def _state(config: pytest.Config) -> _State:
    state = config.stash.get(_STATE_KEY, None)
    if state is None:
        state = {
            "outcomes": [],
            "start": time.perf_counter(),
            "context": None,
            "seed": None,
            "reported_seed": [],
        }
        config.stash[_STATE_KEY] = state
    return state


_OPTIONS_KEY = pytest.StashKey["SuiteOptions"]()


def suite_options(config: pytest.Config) -> SuiteOptions:
    """The run's ``--sigma-ref-*`` options (:class:`~sigma_ref._options.SuiteOptions`), read once."""
    options = config.stash.get(_OPTIONS_KEY, None)
    if options is None:
        from sigma_ref._options import SuiteOptions

        options = config.stash[_OPTIONS_KEY] = SuiteOptions.from_pytest(config)
    return options


def conformance_context(config: pytest.Config) -> Any:
    """The run's conformance context, built once from the options (UsageError if they are wrong)."""
    state = _state(config)
    if state["context"] is None:
        from hypothesis import settings

        from sigma_ref.conformance.guard import ImplementationError
        from sigma_ref.conformance.session import build_context, new_seed, scaleout_options

        progress = _progress(config)
        if progress is not None:
            progress.write("context")
        options = suite_options(config)
        try:
            ctx = build_context(options=options)
            scaleout = scaleout_options(options)  # level 5's, when asked for
            if scaleout is not None:
                from sigma_ref.conformance.launch import check_options

                check_options(scaleout, ctx.adapter.loss)
            state["context"] = ctx if scaleout is None else dataclasses.replace(ctx, scaleout=scaleout)
        except (ValueError, TypeError, ImplementationError) as exc:
            # the implementation's own failure (its import raised, a probe ended the process's
            # business) is a FAIL; a wrong option is a usage error
            from sigma_ref.conformance.adapter import CallMismatch

            own = isinstance(exc, ImplementationError | CallMismatch) or isinstance(
                exc.__cause__, ImplementationError
            )
            if progress is not None:
                progress.write("error", kind="implementation" if own else "usage", message=str(exc))
            message = route_text(config, str(exc))
            raise pytest.UsageError(f"sigma-ref: {'FAIL: ' if own else ''}{message}") from None
        forced = config.getoption("hypothesis_seed", None)
        if forced is not None:
            state["seed"] = int(forced)
        elif not settings().derandomize:  # settings() holds the loaded profile's values
            # pytest-xdist's workers share the run's id: one seed for the whole run, as without xdist
            run = getattr(config, "workerinput", {}).get("testrunuid")
            state["seed"] = int(str(run)[:8], 16) if run else new_seed()
    return state["context"]


def conformance_seed(config: pytest.Config) -> int | None:
    """The hypothesis seed of the conformance properties (``None`` when derandomized)."""
    return _state(config)["seed"]


def _scaleout_options(config: Any) -> ScaleoutOptions | None:
    """Level 5's options of a pytest run (:func:`~sigma_ref.conformance.session.scaleout_options`)."""
    from sigma_ref._options import SuiteOptions
    from sigma_ref.conformance.session import scaleout_options

    return scaleout_options(SuiteOptions.from_pytest(config))


#: The keys of a property test's place in the suite's order, and of the run's hypothesis seed, in its
#: report's ``user_properties``.
_ORDER_KEY = "sigma_ref_order"
_SEED_KEY = "sigma_ref_seed"


def _reported_outcome(report: pytest.TestReport) -> tuple[tuple[int, int, str], Outcome] | None:
    """The property outcome a report carries (its call, or a setup that did not pass), with its place."""
    if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
        return None
    from sigma_ref.conformance.core import OUTCOME_KEY, Outcome

    found: dict[str, Any] = {k: v for k, v in report.user_properties if k in (OUTCOME_KEY, _ORDER_KEY)}
    if OUTCOME_KEY not in found:
        return None
    i, j = found.get(_ORDER_KEY, (0, 0))
    return (int(i), int(j), report.nodeid), Outcome.from_dict(found[OUTCOME_KEY])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Put each conformance property's outcome on its report (``user_properties``, as hypothesis puts
    its statistics on the report), where the main process reads it, with or without pytest-xdist.

    The spec test attaches its own outcome; a property that did not run to a verdict (a setup error,
    a crash) gets one here from the report. Its place in the suite's order rides along.
    """
    report = yield
    marker = item.get_closest_marker("sigma_property")
    if marker is None or (
        report.when != "call" and not (report.when == "setup" and report.outcome != "passed")
    ):
        return report
    from sigma_ref.conformance.core import OUTCOME_KEY, PROPERTIES, Outcome

    name, level, _ = marker.args
    callspec = getattr(item, "callspec", None)
    own = [value for key, value in item.user_properties if key == OUTCOME_KEY]
    if own:
        data = own[-1]
    else:  # the property did not run to a verdict: a setup error or a crash
        param = str(callspec.params["param"]) if callspec is not None and "param" in callspec.params else None
        if report.skipped:
            verdict, message = "skip", str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            verdict, message = "FAIL", str(crash.message if crash is not None else report.longrepr)
        else:
            verdict, message = "pass", ""
        data = Outcome(name, level, param, verdict, message).to_dict()  # type: ignore[arg-type]
    order = list(PROPERTIES).index(name) if name in PROPERTIES else len(PROPERTIES)
    index = callspec.indices.get("param", 0) if callspec is not None else 0
    others = [(k, v) for k, v in report.user_properties if k not in (OUTCOME_KEY, _ORDER_KEY, _SEED_KEY)]
    seed = conformance_seed(item.config)
    report.user_properties = [*others, (OUTCOME_KEY, data), (_ORDER_KEY, (order, index)), (_SEED_KEY, seed)]
    return report


class _Outcomes:
    """Collects the property outcomes from the reports, in the process that reports (the main one
    under pytest-xdist, which receives every worker's reports with their ``user_properties``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = _reported_outcome(report)
        if found is not None:
            state = _state(self.config)
            state["outcomes"].append(found)
            seeds: list[Any] = [v for k, v in report.user_properties if k == _SEED_KEY]
            if seeds and not state["reported_seed"]:
                state["reported_seed"].append(seeds[0])


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Start collecting the property outcomes of this run (:class:`_Outcomes`)."""
    session.config.pluginmanager.register(_Outcomes(session.config), "sigma-ref-outcomes")
    _state(session.config)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print the one-screen conformance summary and write ``--report`` (when asked for), in the main
    process, from the outcomes the reports carried, in the suite's order."""
    state = _state(config)
    if not state["outcomes"] or hasattr(config, "workerinput"):
        return
    options = suite_options(config)
    if options.impl is None and options.report is None:
        return
    from hypothesis import settings

    from sigma_ref.conformance.session import report_dict, summary, to_json

    seconds = time.perf_counter() - state["start"]
    profile = profile_label(settings.get_current_profile_name())
    context = conformance_context(config)  # under pytest-xdist, built here from the same options
    outcomes = [outcome for _, outcome in sorted(state["outcomes"], key=lambda entry: entry[0])]
    seed = state["reported_seed"][0] if state["reported_seed"] else state["seed"]
    terminalreporter.write_sep("=", "sigma-ref conformance")
    shown = summary(context, outcomes, seed=seed, profile=profile, seconds=seconds)
    terminalreporter.write_line(route_text(config, shown))
    path = options.report
    if path:
        from sigma_ref._files import write_atomic

        report = report_dict(context, outcomes, seed=seed, profile=profile, seconds=seconds)
        try:
            write_atomic(path, lambda fh: fh.write((to_json(report) + "\n").encode("utf-8")))
        except OSError as exc:  # checked before the run; the disk filled up or the directory went
            terminalreporter.write_line(f"sigma-ref: the report was not written to {path} ({exc.strerror})")
        else:
            terminalreporter.write_line(f"report written to {path}")
