"""The ``sigma-ref check`` and ``sigma-ref detect`` sub-commands (registered in ``sigma_ref.cli``)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

from .adapter import LAYOUTS, load_adapter
from .detect import detect_convention

__all__ = ["spec_dir", "add_check", "add_detect", "run_check"]


def spec_dir() -> Path:
    """Where the suite's modules are: the installed ``sigma_ref._spec``, else a clone's ``spec/``."""
    found = importlib.util.find_spec("sigma_ref._spec")
    if found is not None and found.submodule_search_locations:
        return Path(next(iter(found.submodule_search_locations)))
    clone = Path(__file__).resolve().parents[2] / "spec"
    if (clone / "conftest.py").is_file():
        return clone
    raise ValueError(
        "the conformance suite is not installed (no sigma_ref._spec) and no spec/ checkout was found"
    )


def _importable_cwd() -> None:
    """Let ``pkg.module`` resolve from the current directory, as ``python -m`` does."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def run_check(args: argparse.Namespace) -> int:
    """Run the suite on ``args.impl``; 0 iff every required property passes."""
    try:
        import hypothesis  # noqa: F401
        import pytest
    except ImportError as exc:
        raise ValueError(
            f"{exc.name} is missing: install the suite's runner with pip install 'sigma-ref[check]'"
        ) from None

    _importable_cwd()
    mismatch = _call_mismatch(args)
    if mismatch is not None:  # fail fast: the call does not fit, no property can run
        print(f"FAIL call shape: {mismatch}\nresult: NOT CONFORMANT (the call does not fit the layout)")
        return 1
    where = spec_dir()
    with tempfile.TemporaryDirectory() as tmp:
        report = args.report or os.path.join(tmp, "report.json")
        ini = os.path.join(tmp, "pytest.ini")  # isolate the run from the caller's pytest configuration
        with open(ini, "w", encoding="utf-8") as fh:
            fh.write("[pytest]\n")
        argv = [
            str(where),
            "--rootdir",
            str(where),
            "-c",
            ini,
            "-p",
            "no:cacheprovider",
            "--impl",
            args.impl,
            "--convention",
            args.convention,
            "--report",
            report,
            "-q",
            "--tb=" + ("short" if args.full else "no"),
            "-p",
            "no:warnings",
            "-r" + ("fE" if args.full else "N"),
        ]
        if not args.report:
            argv.append("--report-is-internal")
        if args.layout:
            argv += ["--layout", args.layout]
        if args.loss:
            argv += ["--loss", args.loss]
        if getattr(args, "output", None) is not None:
            argv += ["--sigma-ref-output", args.output]
        if args.profile:
            argv += ["--hypothesis-profile", args.profile]
        if args.seed is not None:
            argv += ["--hypothesis-seed", str(args.seed)]
        code = int(pytest.main(argv))
        if code not in (0, 1):
            return 2
        try:
            with open(report, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return 2
    return 0 if code == 0 and data.get("conformant") else 1


def _call_mismatch(args: argparse.Namespace) -> str | None:
    """The fail-fast message when the first probe does not fit ``--layout``/``--output``, else ``None``."""
    from .adapter import CallMismatch, check_call

    try:
        adapter = load_adapter(args.impl, layout=args.layout, output=getattr(args, "output", None))
    except (ValueError, TypeError):
        return None  # option errors are reported by the run itself
    try:
        check_call(adapter)
    except CallMismatch as exc:
        return str(exc)
    return None


def add_check(sub: argparse._SubParsersAction) -> None:
    """Register ``sigma-ref check``."""
    p = sub.add_parser(
        "check",
        help="run the conformance suite (spec/) on an implementation",
        description="Run the conformance suite on IMPL (pkg.module:attr, a function or an Adapter). Exit "
        "code 0 only when every required property passes; prints a one-screen summary.",
    )
    p.add_argument("impl", help="pkg.module:attr of the advantage function or Adapter")
    p.add_argument("--layout", choices=LAYOUTS, help="how a plain function is called")
    p.add_argument("--loss", help="pkg.module:attr of loss(logp, old_logp, advantages, mask)")
    p.add_argument(
        "--output", help="where the advantages are in the result: a KEY (o[KEY]) or an INDEX (o[0])"
    )
    p.add_argument("--convention", default="auto", help="auto (default), a preset name, or rloo")
    p.add_argument("--report", help="write the results as JSON to this path")
    p.add_argument("--profile", choices=("ci", "dev", "thorough"), help="hypothesis profile")
    p.add_argument("--seed", type=int, help="hypothesis seed (reproduces a random run)")
    p.add_argument("--full", action="store_true", help="show each failure's full message")
    p.set_defaults(run=run_check)


def _detect(args: argparse.Namespace) -> int:
    _importable_cwd()
    adapter = load_adapter(args.impl, layout=args.layout)
    print(detect_convention(adapter).summary())
    return 0


def add_detect(sub: argparse._SubParsersAction) -> None:
    """Register ``sigma-ref detect``."""
    p = sub.add_parser(
        "detect",
        help="print the convention an implementation follows (probes)",
        description="Probe IMPL with designed reward vectors and print only the detected convention.",
    )
    p.add_argument("impl", help="pkg.module:attr of the advantage function or Adapter")
    p.add_argument("--layout", choices=LAYOUTS, help="how a plain function is called")
    p.set_defaults(run=_detect)
