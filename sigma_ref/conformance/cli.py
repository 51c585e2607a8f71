"""The ``sigma-ref check`` and ``sigma-ref detect`` sub-commands (registered in ``sigma_ref.cli``)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from .._options import SuiteOptions, add_to_argparse

__all__ = ["spec_dir", "add_check", "add_detect", "run_check", "abnormal_summary", "hypothesis_cache"]


def spec_dir() -> Path:
    """Where the suite's modules are: the installed ``sigma_ref.spec``, else a clone's ``spec/``."""
    found = importlib.util.find_spec("sigma_ref.spec")
    if found is not None and found.submodule_search_locations:
        return Path(next(iter(found.submodule_search_locations)))
    clone = Path(__file__).resolve().parents[2] / "spec"
    if (clone / "conftest.py").is_file():
        return clone
    raise ValueError(
        "the conformance suite is not installed (no sigma_ref.spec) and no spec/ checkout was found"
    )


def _importable_cwd() -> None:
    """Let ``pkg.module`` resolve from the current directory, as ``python -m`` does."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


#: Seconds the whole child run may take, per second of the per-call limit (a hang that escapes
#: the per-call limit, in C code or in an implementation that swallows the alarm, ends here).
RUN_LIMIT_FACTOR = {"ci": 30, "dev": 30, "thorough": 300}
MIN_RUN_LIMIT = 120.0


def _pytest_argv(args: argparse.Namespace, where: Path, ini: str, progress: str) -> list[str]:
    """The child's pytest arguments: the suite's options as ``--sigma-ref-*`` (``sigma_ref._options``)."""
    from .._options import pytest_argv

    argv = [
        str(where),
        "--rootdir",
        str(where),
        "-c",
        ini,
        "-p",
        "no:cacheprovider",
        "--sigma-ref-progress",
        progress,
        "-q",
        "--tb=" + ("short" if args.full else "no"),
        "-p",
        "no:warnings",
        "-r" + ("fE" if args.full else "N"),
        *pytest_argv(args),
    ]
    if args.hypothesis_profile:
        from ..pytest_plugin import profile_name

        argv += ["--hypothesis-profile", profile_name(args.hypothesis_profile)]
    if args.hypothesis_seed is not None:
        argv += ["--hypothesis-seed", str(args.hypothesis_seed)]
    return argv


def _read_progress(path: str) -> list[dict[str, Any]]:
    events = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    break  # a line cut off by the process' end
    except OSError:
        pass
    return events


def _how_it_ended(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _test_name(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[-1]


def abnormal_summary(events: list[dict[str, Any]], ended: str) -> str:
    """The summary of a child run that did not end normally: what finished, and what was running.

    ``ended``: how it ended, e.g. ``"exit code 0"``, ``"signal SIGSEGV"`` or ``"no end
    within 300 s (killed)"``.

    >>> print(abnormal_summary([{"event": "context"}], "signal SIGSEGV"))
    sigma-ref conformance: the run did not finish
    FAIL: the implementation ended the process (signal SIGSEGV) while the convention was being detected
    result: NOT CONFORMANT (the run did not finish)
    """
    finished: dict[str, str] = {}
    running: str | None = None
    phase = "before the suite started (loading the implementation)"
    stopped = None
    for e in events:
        kind = e.get("event")
        if kind == "stopped":
            stopped = e.get("message")
        elif kind == "context":
            phase = "while the convention was being detected"
        elif kind == "started":
            running = e["nodeid"]
        elif kind == "finished":
            finished[e["nodeid"]] = e["outcome"]
            running = None
            phase = "between two properties"
        elif kind == "end":  # every property had its verdict: the process did not exit after
            phase = "after every property had finished (while the process was exiting)"
    lines = ["sigma-ref conformance: the run did not finish"]
    for nodeid, verdict in finished.items():
        lines.append(f"{verdict:<4} {_test_name(nodeid)}")
    if running is not None:
        lines.append(f"DIED {_test_name(running)}")
        phase = f"while {_test_name(running)} was running"
    if stopped is not None:
        lines.append(f"FAIL: the implementation {stopped} {phase}; the run was stopped")
    else:
        verb = "did not finish" if "killed" in ended else "ended the process"
        lines.append(f"FAIL: the implementation {verb} ({ended}) {phase}")
    lines.append("result: NOT CONFORMANT (the run did not finish)")
    return "\n".join(lines)


def _module_files(target: str) -> list[str]:
    """The source files ``pkg.module:attr`` may be loaded from (found on the path, not imported):
    the run's inputs, which ``--report`` never overwrites.

    >>> _module_files("sigma_ref.conformance.cli:run_check")[0].endswith("cli.py")
    True
    """
    parts = target.split(":", 1)[0].split(".")
    found = []
    for entry in [os.getcwd(), *sys.path]:
        base = os.path.join(entry or os.curdir, *parts)
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                found.append(candidate)
    return found


def _run_limit(args: argparse.Namespace) -> float | None:
    from .guard import DEFAULT_TIMEOUT

    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    if timeout == 0:
        return None
    profile = args.hypothesis_profile or os.environ.get("HYPOTHESIS_PROFILE") or "dev"  # ci: as dev
    profile = profile.removeprefix("sigma-ref-")
    return max(MIN_RUN_LIMIT, RUN_LIMIT_FACTOR.get(profile, 30) * timeout)


def hypothesis_cache(named: str | None = None) -> str:
    """Where ``check``'s child keeps hypothesis' data (its example database and the constants it
    collects from the code under test): ``named`` (``--hypothesis-cache``), else
    ``$HYPOTHESIS_STORAGE_DIRECTORY``, else ``$XDG_CACHE_HOME/sigma-ref/hypothesis`` (default
    ``~/.cache``); never the working directory.

    >>> hypothesis_cache("/tmp/h")
    '/tmp/h'
    """
    if named:
        return os.path.abspath(named)
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        return os.path.abspath(os.environ["HYPOTHESIS_STORAGE_DIRECTORY"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sigma-ref", "hypothesis")


def _run_child(
    argv: list[str], limit: float | None, env: dict[str, str] | None = None
) -> tuple[int | str, str]:
    """Run ``argv`` in its own process group: its exit code (or how it was stopped) and its stderr.

    The child has its own session (the implementation cannot signal this process's group); a
    Ctrl-C or SIGTERM of this process ends the child too.
    """
    proc = subprocess.Popen(argv, start_new_session=True, stderr=subprocess.PIPE, text=True, env=env)
    previous = signal.getsignal(signal.SIGTERM)
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        signal.signal(signal.SIGTERM, _terminated)
    try:
        _, err = proc.communicate(timeout=limit)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        _kill(proc)
        return f"no end within {limit:g} s (killed)", proc.communicate()[1]
    finally:
        if proc.poll() is None:  # KeyboardInterrupt or SIGTERM
            _kill(proc)
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # run_check ends the child and returns 130


def _kill(proc: subprocess.Popen[Any]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def run_check(args: argparse.Namespace) -> int:
    """Run the suite on ``args.impl`` in a child process; 0 iff no property fails.

    The child is ``python -m pytest spec/ ...``: whatever the implementation does (``os._exit``,
    a segfault, an abort, a hang past every limit) ends at most the child, and the parent prints
    what finished and what was running. Exit codes: 0 conformant, 1 not conformant (including an
    implementation that raises while it is imported or ends the process), 2 a usage error
    (a malformed ``--impl``, a missing module or attribute, a bad option).
    """
    for name in ("pytest", "hypothesis"):
        if importlib.util.find_spec(name) is None:
            raise ValueError(
                f"{name} is missing: install the suite's runner with pip install 'sigma-ref[check]'"
            )
    if ":" not in args.impl:
        raise ValueError(
            f"IMPL={args.impl!r} must look like 'pkg.module:attr', e.g. 'my_trainer.grpo:compute_advantages'"
        )
    if args.report:  # a bad --report path fails now, not after the run
        from .._files import check_output

        inputs = _module_files(args.impl) + (_module_files(args.loss) if args.loss else [])
        check_output(args.report, option="--report", kind="report", inputs=inputs, force=args.force)
    where = spec_dir()
    with tempfile.TemporaryDirectory() as tmp:
        progress = os.path.join(tmp, "progress.jsonl")
        ini = os.path.join(tmp, "pytest.ini")  # isolate the run from the caller's pytest configuration
        with open(ini, "w", encoding="utf-8") as fh:
            fh.write("[pytest]\n")
        argv = [sys.executable, "-m", "pytest", *_pytest_argv(args, where, ini, progress)]
        sys.stdout.flush()
        env = {
            **os.environ,
            "HYPOTHESIS_STORAGE_DIRECTORY": hypothesis_cache(args.hypothesis_cache),
            "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ beside the user's code
        }
        try:
            ended, err = _run_child(argv, _run_limit(args), env)
        except KeyboardInterrupt:
            print("sigma-ref check: interrupted", file=sys.stderr)
            return 130
        events = _read_progress(progress)
    errors = [e for e in events if e.get("event") == "error"]
    crashed = "Fatal Python error: " in err
    if crashed:  # faulthandler's dump: keep where it happened in the implementation
        site, err = _crash_site(err)
    if errors and errors[0].get("kind") == "implementation":
        err = "\n".join(line for line in err.splitlines() if not line.startswith("ERROR: sigma-ref: FAIL: "))
    if err.strip():
        print(err.rstrip("\n"), file=sys.stderr)
    if isinstance(ended, int) and events and events[-1].get("event") == "end":
        threads = events[-1].get("threads") or []
        if threads:  # hygiene, not the algorithm: a WARN, and the run's verdict stands
            print(
                f"WARN: the implementation left {len(threads)} thread(s) running after the run "
                f"({', '.join(map(str, threads[:3]))}); the process exited without waiting for them"
            )
        if errors and errors[0].get("kind") == "usage":
            return 2  # pytest printed the message
        if errors:
            print(f"FAIL: the implementation failed before the properties ran: {errors[0].get('message')}")
            print("result: NOT CONFORMANT (1 FAIL)")
            return 1
        if ended in (0, 1):
            return ended
        print(
            f"sigma-ref check: pytest ended with exit code {ended} (see above); no verdict", file=sys.stderr
        )
        return 2  # pytest's own usage error or internal error
    print()  # pytest's progress line may be unfinished
    print(abnormal_summary(events, ended if isinstance(ended, str) else _how_it_ended(ended)))
    if crashed and site:
        print(f"where (innermost last): {site}")
    return 1


_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')


def _crash_site(err: str) -> tuple[str, str]:
    """From faulthandler's dump in ``err``: the innermost frames outside the suite; ``err`` without it.

    >>> dump = ["Fatal Python error: Segmentation fault", "Current thread 0x1 (most recent call first):",
    ...         '  File "/c/ctypes.py", line 5 in string_at', '  File "/m/impl.py", line 61 in adv',
    ...         '  File "/s/sigma_ref/conformance/guard.py", line 9 in call_guarded', "", "Extension modules"]
    >>> _crash_site("\\n".join(["before", *dump]))
    ('adv (/m/impl.py:61) -> string_at (/c/ctypes.py:5)', 'before')
    """
    head, _, dump = err.partition("Fatal Python error: ")
    frames: list[str] = []
    for line in dump.splitlines():
        m = _FRAME.match(line)
        if m is None:
            if frames:
                break
            continue
        if f"sigma_ref{os.sep}" in m["file"] or "_pytest" in m["file"] or "hypothesis" in m["file"]:
            break
        frames.append(f"{m['fn']} ({m['file']}:{m['line']})")
    return " -> ".join(reversed(frames[:3])), head.rstrip("\n")


#: Each sub-command's one-line help and its description (``sigma-ref <command> --help``).
_HELP: dict[str, tuple[str, str]] = {
    "check": (
        "run the conformance suite (spec/) on an implementation",
        "Run the conformance suite on IMPL (pkg.module:attr, a function or an Adapter) in a child process. "
        "Exit code 0 when no property FAILs, 1 when one does or the implementation ends the process, fails "
        "to import or hangs, 2 on a usage error; prints a one-screen summary. The whole run may take "
        f"{RUN_LIMIT_FACTOR['dev']} times the per-call --timeout (at least {MIN_RUN_LIMIT:g} s).",
    ),
    "detect": (
        "print the convention an implementation follows (probes)",
        "Probe IMPL with designed reward vectors (in a child process) and print the detected convention. "
        "Exit code 0 when it matches a preset (or RLOO), 1 when the function fails on the probes or no "
        "known convention matches, 2 on a usage error.",
    ),
}


def _add_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, run: Any
) -> argparse.ArgumentParser:
    """Register the sub-command ``name`` of IMPL (its one positional argument), run by ``run``."""
    summary, description = _HELP[name]
    p = sub.add_parser(name, help=summary, description=description)
    p.add_argument("impl", help="pkg.module:attr of the advantage function or Adapter")
    p.set_defaults(run=run)
    return p


def add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``sigma-ref check``."""
    p = _add_command(sub, "check", run_check)
    add_to_argparse(p, group="suite", skip=("impl",))
    p.add_argument(
        "--hypothesis-profile",
        choices=("ci", "dev", "thorough"),
        help="hypothesis profile (default: $HYPOTHESIS_PROFILE, else ci where CI is set, else dev)",
    )
    p.add_argument("--hypothesis-seed", type=int, help="hypothesis seed (reproduces a random run)")
    p.add_argument(
        "--hypothesis-cache",
        metavar="DIR",
        help="where hypothesis keeps its data for the run (default: $HYPOTHESIS_STORAGE_DIRECTORY, else "
        "~/.cache/sigma-ref/hypothesis; never the current directory)",
    )
    p.add_argument("--full", action="store_true", help="show each failure's full message")
    add_to_argparse(
        p.add_argument_group("scale-out (level 5, real torch.distributed processes)"), group="scale-out"
    )


def _detect_here(args: argparse.Namespace) -> int:
    """``detect`` in this process (the child of :func:`_detect`): print the detection; 0 iff a preset."""
    from .adapter import load_adapter
    from .detect import detect_convention
    from .frameworks import on_framework
    from .guard import ImplementationError, set_timeout

    options = SuiteOptions.from_argparse(args)
    if options.timeout is not None:
        set_timeout(options.timeout)
    _importable_cwd()
    try:
        adapter = on_framework(load_adapter(args.impl, layout=options.layout), options.framework)
    except ValueError as exc:
        if isinstance(exc.__cause__, ImplementationError):
            print(f"FAIL: {exc}")
            return 1
        raise
    try:
        detection = detect_convention(adapter)
    except ImplementationError as exc:  # exited, interrupted or hung on a probe
        print(f"FAIL: {exc}")
        return 1
    print(detection.summary())
    if detection.preset is not None:
        return 0
    for note in detection.notes:
        print(f"  probe: {note}")
    return 1


def _detect(args: argparse.Namespace) -> int:
    """Run :func:`_detect_here` in a child process, so that the implementation cannot end this one."""
    if args.in_process:
        try:
            code = _detect_here(args)
        except (ValueError, TypeError) as exc:  # a usage error
            print(f"sigma-ref detect: {exc}", file=sys.stderr)
            code = 2
        sys.stdout.flush()
        print(_DETECT_DONE, file=sys.stderr, flush=True)
        from .guard import lingering_threads

        threads = lingering_threads()
        if threads:  # Python would wait for them at exit, up to the parent's limit
            print(
                f"WARN: the implementation left {len(threads)} thread(s) running after the probes "
                f"({', '.join(threads[:3])}); the process exited without waiting for them",
                flush=True,
            )
            os._exit(code)
        return code
    argv = [sys.executable, "-m", "sigma_ref.cli", "detect", args.impl, "--in-process"]
    argv += SuiteOptions.from_argparse(args).argv(names=_DETECT_OPTIONS, prefix="--")
    sys.stdout.flush()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # no __pycache__ beside the user's code
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    limit = _run_limit(argparse.Namespace(timeout=args.timeout, hypothesis_profile="ci"))
    try:
        _, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill(proc)
        print(f"FAIL: the implementation did not finish the probes within {limit:g} s (killed)")
        return 1
    except KeyboardInterrupt:
        _kill(proc)
        print("sigma-ref detect: interrupted", file=sys.stderr)
        return 130
    lines = err.splitlines()
    done = _DETECT_DONE in lines
    rest = "\n".join(line for line in lines if line != _DETECT_DONE)
    if rest:
        print(rest, file=sys.stderr)
    if done:
        return proc.returncode
    print(f"FAIL: the implementation ended the process ({_how_it_ended(proc.returncode)}) during the probes")
    return 1


_DETECT_DONE = "sigma-ref detect: done"
#: ``detect``'s options (the table's, ``sigma_ref._options``): the few that probing reads.
_DETECT_OPTIONS = ("layout", "framework", "timeout")


def add_detect(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``sigma-ref detect``."""
    p = _add_command(sub, "detect", _detect)
    add_to_argparse(p, names=_DETECT_OPTIONS)
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
