"""The runner survives the code it runs (issue 8, point 5).

Fast: the guard (``sigma_ref.conformance.guard``) in this process, the bounded shrink, the
import errors, the option spellings and the summary of a run that died. Slow: ``sigma-ref
check`` in a subprocess on each hostile implementation of ``tests/gallery/hostile.py``;
each must end with a FAIL verdict in a readable summary and a non-zero exit code, never
an exit 0, an INTERNALERROR or a Python traceback, within 60 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sigma_ref.cli import build_parser
from sigma_ref.conformance import guard
from sigma_ref.conformance.adapter import load_object
from sigma_ref.conformance.cli import _pytest_argv, _run_limit, abnormal_summary
from sigma_ref.conformance.guard import ImplementationError, bounded_shrink, call_guarded, set_timeout

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LIMIT_S = 60.0


# -- the guard, in this process ----------------------------------------------------------
@pytest.fixture(autouse=True)
def _forget_hangs() -> Any:
    """Each test starts with no remembered hangs (``guard.MAX_HANGS``)."""
    guard._hangs.clear()
    yield
    guard._hangs.clear()


def _raise(exc: BaseException) -> Any:
    raise exc


@pytest.mark.parametrize(
    ("exc", "kind", "text"),
    [
        (TypeError("bad operand"), "raised", "raised TypeError: bad operand during f(x)"),
        (SystemExit(), "exit", "called sys.exit() during f(x)"),
        (SystemExit(0), "exit", "called sys.exit(0) during f(x)"),
        (SystemExit(3), "exit", "called sys.exit(3) during f(x)"),
        (KeyboardInterrupt(), "interrupt", "raised KeyboardInterrupt during f(x)"),
        (GeneratorExit(), "raised", "raised GeneratorExit during f(x)"),
    ],
)
def test_guard_converts_every_escape(exc: BaseException, kind: str, text: str) -> None:
    """Whatever the call throws becomes one ImplementationError that says what happened."""
    with pytest.raises(ImplementationError) as info:
        call_guarded(_raise, exc, what="f(x)")
    assert (info.value.kind, str(info.value)) == (kind, text)
    assert info.value.__cause__ is exc
    assert info.value.rejected == (kind == "raised")


def test_guard_time_limit() -> None:
    """A call past its limit is interrupted; one that swallows the interruption still counts as hung."""
    start = time.monotonic()
    with pytest.raises(ImplementationError, match=r"^nap did not return within 0.2 s$") as info:
        call_guarded(time.sleep, 30, timeout=0.2, what="nap")
    assert info.value.kind == "timeout" and time.monotonic() - start < 5

    def swallows() -> str:
        try:
            time.sleep(30)
        except BaseException:
            pass
        return "late"

    with pytest.raises(ImplementationError) as info:
        call_guarded(swallows, timeout=0.2, what="swallows()")
    assert info.value.kind == "timeout"
    assert call_guarded(time.sleep, 0.3, timeout=5) is None  # a shorter limit left no alarm behind


def test_guard_module_timeout_and_lazy_description() -> None:
    """``set_timeout`` sets the default limit; ``what`` may be built only when the call fails."""
    built = []

    def describe() -> str:
        built.append(1)
        return "slow()"

    set_timeout(0.2)
    try:
        assert call_guarded(sum, [1, 2], what=describe) == 3 and not built
        with pytest.raises(ImplementationError, match=r"slow\(\) did not return within 0\.2 s"):
            call_guarded(time.sleep, 30, what=describe)
    finally:
        set_timeout(guard.DEFAULT_TIMEOUT)
    for bad in (-1, "10", float("nan"), True):
        with pytest.raises(ValueError, match="must be a number of seconds"):
            set_timeout(bad)  # type: ignore[arg-type]


def test_guard_silences_warnings_and_keeps_values() -> None:
    """The implementation's warnings do not reach the caller; its value comes back unchanged."""

    def noisy() -> list[int]:
        warnings.warn("deprecated thing", DeprecationWarning, stacklevel=1)
        return [1, 2]

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert call_guarded(noisy) == [1, 2]
        warnings.warn("the caller's own", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["the caller's own"]


def test_guard_off_the_main_thread() -> None:
    """Off the main thread there is no time limit, but failures are still converted."""
    out: dict[str, Any] = {}

    def worker() -> None:
        out["value"] = call_guarded(time.sleep, 0.3, timeout=0.05)
        try:
            call_guarded(_raise, SystemExit(2), what="g()")
        except ImplementationError as exc:
            out["error"] = str(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join(10)
    assert out == {"value": None, "error": "called sys.exit(2) during g()"}


def test_guard_gives_up_on_a_callable_that_keeps_hanging() -> None:
    """After MAX_HANGS timeouts, a callable is not called again: each later call fails at once."""

    def stuck() -> None:
        time.sleep(30)

    for _ in range(guard.MAX_HANGS):
        with pytest.raises(ImplementationError, match=r"did not return within 0\.1 s"):
            call_guarded(stuck, timeout=0.1)
    start = time.monotonic()
    with pytest.raises(
        ImplementationError, match=r"was not called: it did not return within 0\.1 s in 2"
    ) as info:
        call_guarded(stuck, timeout=0.1, what="stuck()")
    assert info.value.kind == "timeout" and time.monotonic() - start < 0.05
    assert call_guarded(sum, [1], timeout=0.1) == 1  # other callables are unaffected


def test_guard_nested_calls_keep_the_inner_verdict() -> None:
    """A guarded call inside a guarded call: the inner error passes through unchanged."""
    with pytest.raises(ImplementationError, match=r"^called sys\.exit\(4\) during inner$"):
        call_guarded(lambda: call_guarded(_raise, SystemExit(4), what="inner"), what="outer")


def test_guard_overhead_is_small() -> None:
    """A guarded call costs a few microseconds more than a plain one (measured, generous bound)."""

    def f() -> None:
        return None

    def best(fn: Any, n: int = 2000) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            times.append((time.perf_counter() - t0) / n)
        return min(times)

    overhead = best(lambda: call_guarded(f, what="f")) - best(f)
    assert overhead < 50e-6, f"{overhead * 1e6:.1f} us per call"


# -- bounded shrinking --------------------------------------------------------------------
def test_bounded_shrink_stops_the_shrinker_and_keeps_the_failure() -> None:
    """After the budget only examples that failed before still fail: the shrinker stops, the replay fails."""
    calls: list[list[int]] = []
    first_failure: list[int] = []

    def check(xs: list[int]) -> None:
        calls.append(xs)
        if sum(xs) > 500:
            first_failure.append(len(calls)) if not first_failure else None
            raise AssertionError(f"sum({xs}) = {sum(xs)} > 500")

    budget = 10  # "seconds" of a clock that ticks once per real check
    body = bounded_shrink(check, budget, clock=lambda: float(len(calls)))

    @settings(max_examples=200, database=None, derandomize=True)
    @given(st.lists(st.integers(0, 1000), min_size=1, max_size=20))
    def prop(xs: list[int]) -> None:
        body(xs)

    with pytest.raises(AssertionError, match="> 500") as info:
        prop()
    assert first_failure, "the property never failed"
    assert len(calls) <= first_failure[0] + budget + 1  # no real check after the budget
    shown = eval(str(info.value).split("sum(", 1)[1].split(")", 1)[0])  # the reported example
    assert sum(shown) > 500  # really fails


def test_bounded_shrink_makes_the_replay_of_a_flaky_failure_reliable() -> None:
    """A check that fails only the first time it sees an example is reported as failing, not as Flaky."""
    seen: set[int] = set()

    def check(x: int) -> None:
        if x > 50 and x not in seen:
            seen.add(x)
            raise AssertionError(f"failed once at {x}")

    body = bounded_shrink(check, 60.0)

    @settings(max_examples=100, database=None, derandomize=True)
    @given(st.integers(0, 100))
    def prop(x: int) -> None:
        body(x)

    with pytest.raises(AssertionError, match="failed once at"):
        prop()


def test_bounded_shrink_passes_hypothesis_control_flow() -> None:
    """``assume`` inside the check is hypothesis' business, not a failure."""
    from hypothesis import assume

    body = bounded_shrink(lambda x: assume(x > 0), 0.0)

    @settings(max_examples=20, database=None)
    @given(st.integers(-5, 5))
    def prop(x: int) -> None:
        body(x)

    prop()


# -- loading the implementation ----------------------------------------------------------
def test_import_errors_name_target_and_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Raising or exiting while imported is the implementation's failure; a missing module a usage error."""
    (tmp_path / "boom_impl.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "exit_impl.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ValueError, match=r"^--impl 'boom_impl:f': importing 'boom_impl' raised RuntimeError: boom$"
    ) as e:
        load_object("boom_impl:f")
    assert isinstance(e.value.__cause__, ImplementationError)
    with pytest.raises(ValueError, match=r"importing 'exit_impl' called sys\.exit\(3\)") as e:
        load_object("exit_impl:f")
    assert isinstance(e.value.__cause__, ImplementationError)
    with pytest.raises(ValueError, match="cannot import 'no_such_module_xyz'") as e:
        load_object("no_such_module_xyz:f")
    assert e.value.__cause__ is None
    with pytest.raises(ValueError, match=r"must look like 'pkg\.module:attr'"):
        load_object("boom_impl")


# -- options --------------------------------------------------------------------------------
def test_check_spells_options_as_hypothesis_does(tmp_path: Path) -> None:
    """``sigma-ref check`` takes --hypothesis-seed/-profile, --strict, --timeout and passes them on."""
    args = build_parser().parse_args(
        [
            *("check", "m:f", "--layout", "contiguous", "--hypothesis-seed", "7"),
            *("--hypothesis-profile", "ci", "--strict", "--timeout", "2.5", "--precision", "float32"),
        ]
    )
    argv = _pytest_argv(args, tmp_path, "ini", "progress.jsonl")
    text = " ".join(argv)
    for part in (
        "--sigma-ref-impl m:f",
        "--sigma-ref-layout contiguous",
        "--hypothesis-seed 7",
        "--hypothesis-profile sigma-ref-ci",  # the suite's own profile (hypothesis has a ci of its own)
        "--sigma-ref-strict",
        "--sigma-ref-timeout 2.5",
        "--sigma-ref-progress progress.jsonl",
        "--sigma-ref-precision float32",
    ):
        assert part in text
    thorough = build_parser().parse_args(
        ["check", "m:f", "--timeout", "2", "--hypothesis-profile", "thorough"]
    )
    assert _run_limit(thorough) == 600.0  # 300 x --timeout for the thorough profile
    for old in (["--seed", "7"], ["--profile", "ci"], ["--timeout", "-1"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["check", "m:f", *old])


def test_plugin_options_share_one_prefix() -> None:
    """Every option the pytest plugin registers starts with --sigma-ref-."""
    from sigma_ref.pytest_plugin import pytest_addoption

    names: list[str] = []

    class Group:
        def addoption(self, *opts: str, **kw: Any) -> None:
            names.extend(opts)

    class Parser:
        def getgroup(self, *a: Any) -> Group:
            return Group()

    pytest_addoption(Parser())  # type: ignore[arg-type]
    assert names and all(n.startswith("--sigma-ref-") for n in names), names
    for want in ("impl", "layout", "loss", "convention", "report", "strict", "timeout"):
        assert f"--sigma-ref-{want}" in names


def test_abnormal_summary_names_what_was_running() -> None:
    """The parent's summary of a child that died: finished properties, the one running, a FAIL line."""
    events = [
        {"event": "configured"},
        {"event": "context"},
        {"event": "started", "nodeid": "spec/test_algebra.py::test_advantage_values"},
        {"event": "finished", "nodeid": "spec/test_algebra.py::test_advantage_values", "outcome": "pass"},
        {"event": "started", "nodeid": "spec/test_algebra.py::test_group_centering"},
        {"event": "finished", "nodeid": "spec/test_algebra.py::test_group_centering", "outcome": "FAIL"},
        {"event": "started", "nodeid": "spec/test_contract.py::test_output_dtype[float32]"},
    ]
    text = abnormal_summary(events, "exit code 0")
    assert text.splitlines()[1:] == [
        "pass test_advantage_values",
        "FAIL test_group_centering",
        "DIED test_output_dtype[float32]",
        "FAIL: the implementation ended the process (exit code 0) while test_output_dtype[float32] "
        "was running",
        "result: NOT CONFORMANT (the run did not finish)",
    ]


# -- sigma-ref check on hostile code, in subprocesses ------------------------------------
def _check(
    command: str, *options: str, after: int = 0, cwd: Path = ROOT, pythonpath: str = ""
) -> tuple[Any, float]:
    env = dict(os.environ, CI="true", SIGMA_REF_HOSTILE_AFTER=str(after))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(ROOT)) if p)
    env.pop("HYPOTHESIS_PROFILE", None)
    argv = [str(BIN / "sigma-ref"), *command.split(" "), *options]
    if argv[1] == "check":
        argv += ["--hypothesis-profile", "ci"]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    return done, time.monotonic() - start


def _assert_fail_verdict(done: Any, seconds: float, *expected: str) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == 1, f"exit {done.returncode}\n{out[-3000:]}"
    assert "INTERNALERROR" not in out and "Traceback (most recent call last)" not in out, out[-3000:]
    assert "Fatal Python error" not in out, out[-3000:]
    assert "FAIL" in done.stdout and "result: NOT CONFORMANT" in done.stdout, out[-3000:]
    for text in expected:
        assert text in done.stdout, f"{text!r} not in\n{done.stdout[-3000:]}"
    assert seconds < LIMIT_S, f"{seconds:.1f} s"


def test_check_os_exit_is_not_a_pass() -> None:
    """``os._exit(0)`` in the implementation: the child ends with code 0, the verdict is FAIL (exit 1)."""
    done, seconds = _check("check tests.gallery.hostile:hard_exit --layout contiguous")
    _assert_fail_verdict(
        done, seconds, "ended the process (exit code 0) while the convention was being detected"
    )


HOSTILE = [
    # (function, SIGMA_REF_HOSTILE_AFTER, options, text the summary must contain)
    ("exits", 0, (), "called sys.exit() during tests.gallery.hostile:exits(rewards="),
    ("exits_zero", 0, (), "called sys.exit(0) during"),
    ("exits_zero", 40, (), "called sys.exit(0) [tests.gallery.hostile:exits_zero(rewards="),
    ("hard_exit", 40, (), "ended the process (exit code 0) while test_"),
    ("segfault", 40, (), "ended the process (signal SIGSEGV) while test_"),
    ("aborts", 40, (), "ended the process (signal SIGABRT) while test_"),
    ("interrupts", 0, (), "raised KeyboardInterrupt during"),
    ("interrupts", 40, (), "raised KeyboardInterrupt [tests.gallery.hostile:interrupts(rewards="),
    ("hangs", 0, ("--timeout", "1"), "did not return within 1 s"),
    ("hangs", 40, ("--timeout", "1"), "did not return within 1 s [tests.gallery.hostile:hangs(rewards="),
    ("hangs_stubbornly", 40, ("--timeout", "1"), "caught the 3 interruptions sent to it while test_"),
    ("wrong_length", 0, (), "Tensor[float64, (2,)], but should be an array of shape (8,)"),
    ("raises_type_error", 0, (), "raised TypeError: unsupported operand type(s)"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fn", "after", "options", "expected"), HOSTILE, ids=[f"{h[0]}-{h[1]}" for h in HOSTILE]
)
def test_check_hostile(fn: str, after: int, options: tuple[str, ...], expected: str) -> None:
    """Each way code can attack the runner ends in a FAIL verdict with a readable summary, exit 1."""
    done, seconds = _check(f"check tests.gallery.hostile:{fn} --layout contiguous", *options, after=after)
    _assert_fail_verdict(done, seconds, expected)


@pytest.mark.slow
def test_check_import_time_exception(tmp_path: Path) -> None:
    """A module that raises while imported: FAIL naming the target and the exception, exit 1 (not 2)."""
    (tmp_path / "hostile_import.py").write_text("raise RuntimeError('boom at import')\n")
    done, seconds = _check("check hostile_import:advantages --layout contiguous", pythonpath=str(tmp_path))
    _assert_fail_verdict(
        done,
        seconds,
        "--impl 'hostile_import:advantages': importing 'hostile_import' raised RuntimeError: boom",
    )


@pytest.mark.slow
def test_detect_exit_codes() -> None:
    """``sigma-ref detect``: 1 when the function fails on the probes or ends the process, 0 for a preset."""
    raising, _ = _check("detect tests.gallery.hostile:raises_type_error --layout contiguous")
    assert raising.returncode == 1, raising.stdout + raising.stderr
    assert "no known convention" in raising.stdout and "Traceback" not in raising.stdout + raising.stderr
    exits, _ = _check("detect tests.gallery.hostile:exits --layout contiguous")
    assert exits.returncode == 1 and "FAIL: called sys.exit() during" in exits.stdout, (
        exits.stdout + exits.stderr
    )
    dead, _ = _check("detect tests.gallery.hostile:hard_exit --layout contiguous")
    assert dead.returncode == 1 and "FAIL: the implementation ended the process (exit code 0)" in dead.stdout
    good, _ = _check("detect tests.gallery.correct:trl_contiguous --layout contiguous")
    assert good.returncode == 0 and good.stdout.startswith("trl ("), good.stdout + good.stderr
