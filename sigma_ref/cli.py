"""The ``sigma-ref`` command line.

``sigma-ref audit 0.5 0.3 0.15 0.08 0.03 --G 8`` prints the corpus audit,
``sigma-ref audit --rollouts log.parquet`` audits a rollout log, ``sigma-ref reproduce``
recomputes the paper's group-size table and its controlled experiment; further
sub-commands (``check``, ``detect``, ``matrix``) run the conformance suite, and ``sigma-ref vectors``
writes its cases as data.

Sub-commands import their modules when they run, so ``sigma-ref audit`` starts without
torch or sympy.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["main"]

#: Exit status for bad input of any kind (argparse uses 2 for bad options too).
BAD_INPUT = 2
#: Exit status when standard output's reader went away (128 + SIGPIPE, as a shell reports it).
BROKEN_PIPE = 141
#: Exit status when an optional dependency of the ``audit`` extra is not installed.
MISSING_EXTRA = 3
#: Exit status when ``--engine ray`` failed: a Ray task did not finish, or no cluster could be had.
ENGINE_FAILED = 4
#: The modules of the ``audit`` extra (pyproject.toml).
AUDIT_EXTRA = ("pyarrow", "matplotlib", "tqdm")

_Number = TypeVar("_Number", int, float)


def _one(values: Sequence[_Number] | None, default: _Number, name: str) -> _Number:
    if values is None:
        return default
    if len(values) != 1:
        raise ValueError(f"{name} takes one value for pass rates (got {values}); several are for --rollouts")
    return values[0]


def _check_plot(args: argparse.Namespace, inputs: Sequence[str | None]) -> None:
    """Refuse a bad ``--plot`` path before the run (``sigma_ref._files.check_output``)."""
    if args.plot is None:
        return
    from ._files import check_output
    from .plots import plot_kind

    named = [path for path in inputs if path]
    check_output(args.plot, option="--plot", kind=plot_kind(args.plot), inputs=named, force=args.force)


def _audit(args: argparse.Namespace) -> int:
    _check_plot(args, [args.file, args.rollouts])
    if args.rollouts:
        return _audit_rollouts(args)
    from . import _audit_files, _audit_output, _text_table, audit

    rates = list(args.pass_rates)
    extra = _audit_files.read_pass_rates(args.file) if args.file else None
    if not rates and (extra is None or extra.size == 0):
        raise ValueError(
            "give pass rates as arguments, with --file PATH, or a rollout log with --rollouts PATH"
        )
    import numpy as np

    p = (
        np.asarray(rates, dtype=np.float64)
        if extra is None
        else np.concatenate([np.asarray(rates, float), extra])
    )
    if args.top < 1:
        raise ValueError(f"--top {args.top}: show at least one row (--top 1); --all shows every row")
    G = int(_one(args.G, 8, "--G"))
    eps = _one(args.epsilon, 0.05, "--epsilon")
    small = p.size <= args.top
    machine = args.json or args.csv
    cols = audit.audit_columns(p, G, eps, exact=small or args.all or bool(machine))
    out = sys.stdout
    if args.plot:
        from .plots import plot_pass_rates

        plot_pass_rates(p, G, args.plot)
    if small and not machine and not args.all:
        average = float(cols.silent_rate.mean())
        out.write(str(audit.AuditResult(G, eps, tuple(cols.rows()), average, 1 - average)) + "\n")
        return 0
    if args.json:
        average = float(cols.silent_rate.mean())
        out.write(f'{{\n  "G": {G},\n  "epsilon": {eps!r},\n  "rows": [\n')
        _audit_output.write_rows(cols, out, "json")
        out.write(f'\n  ],\n  "average_waste": {average!r},\n  "effective_budget": {1 - average!r}\n}}\n')
        return 0
    if args.csv:
        out.write("p,silent_rate,closed_form_group_size,exact_group_size,status\n")
        _audit_output.write_rows(cols, out, "csv")
        return 0
    out.write("\n".join(_audit_output.audit_summary(cols, G, eps)) + "\n\n")
    head = ("p", "silent", "G (closed form)", "G (exact)", "status")
    if args.all:
        widths = (24, 7, len(head[2]), len(head[3]), 8)
        out.write("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)) + "\n")
        out.write("  ".join("-" * w for w in widths) + "\n")
        _audit_output.write_rows(cols, out, "table", widths)
        return 0
    # the never/always-correct prompts are counted in the summary; list the worst of the rest
    live = np.flatnonzero((cols.p > 0) & (cols.p < 1))
    worst = live[np.argsort(-cols.silent_rate[live], kind="stable")[: args.top]]
    closed, exact = audit.group_sizes(cols.p[worst], eps)
    body: list[tuple[str, ...]] = [
        (
            str(i + 1),
            audit.format_rate(cols.p[i]),
            f"{cols.silent_rate[i]:.1%}",
            audit.format_size(c, cols.p[i], "2**62"),
            audit.format_size(e, cols.p[i]),
            audit.STATUS_NAMES[int(cols.status[i])],
        )
        for i, c, e in zip(worst, closed, exact, strict=True)
    ]
    out.write(
        f"The {len(body)} prompts with the highest silent rate (--top N for more, --all for every row):\n"
    )
    out.write("\n".join(_text_table.table(("row", *head), body)) + "\n")
    return 0


def _audit_rollouts(args: argparse.Namespace) -> int:
    from .audit import rollout_audit
    from .rollouts import read_rollouts

    if args.pass_rates or args.file:
        raise ValueError("give either pass rates (arguments, --file) or --rollouts, not both")
    if args.csv or args.all:
        flag = "--csv" if args.csv else "--all"
        raise ValueError(f"{flag} is for pass rates; a rollout audit prints its tables, or JSON with --json")
    if args.engine not in ("pyarrow", "ray"):
        raise ValueError(
            f"--engine {args.engine!r} is not an engine; use --engine pyarrow (the default) or --engine ray"
        )
    log = read_rollouts(
        args.rollouts,
        prompt_col=args.prompt_col,
        reward_col=args.reward_col,
        group_col=args.group_col,
        correct_threshold=args.correct_threshold,
        fmt=args.format,
        engine=args.engine,
    )
    result = rollout_audit(
        log,
        G=args.G or (8, 16, 32),
        epsilons=args.epsilon or (0.1, 0.05, 0.01),
        extreme=args.extreme,
        target=args.target,
    )
    if args.plot:
        from .plots import plot_rollouts

        plot_rollouts(log, result, args.plot)
    print(result.to_json() if args.json else result)
    return 0


def _add_audit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "audit",
        help="silent-group waste and group-size law for pass rates or a rollout log",
        description="Audit per-prompt pass rates at group size G: the silent-group rate "
        "p^G + (1-p)^G, the closed-form group-size law ceil(1/(8 eps p(1-p))) and the exact "
        "least G with fidelity >= 1 - eps. With --rollouts, audit a rollout log (one row per "
        "rollout): plug-in, unbiased subsampled and observed silent rates, gradient-mass "
        "shares and the exact least G per fidelity target. Bad input exits with status 2.",
    )
    p.add_argument("pass_rates", nargs="*", type=float, help="per-prompt pass rates in [0, 1]")
    p.add_argument(
        "--file",
        help="read more pass rates from this file ('-' for stdin): numbers separated by spaces, "
        "commas or lines, '#' comments, UTF-8 (a BOM is skipped)",
    )
    p.add_argument(
        "--G",
        type=int,
        nargs="+",
        help="group size (pass rates: one, default 8; "
        "rollouts: target sizes besides the logged one, default 8 16 32)",
    )
    p.add_argument(
        "--epsilon",
        type=float,
        nargs="+",
        help="tolerated fidelity loss (pass rates: one, default 0.05; rollouts: default 0.1 0.05 0.01)",
    )
    machine = p.add_mutually_exclusive_group()
    machine.add_argument("--json", action="store_true", help="print JSON instead of a table (every row)")
    machine.add_argument("--csv", action="store_true", help="pass rates: print every row as CSV")
    p.add_argument(
        "--top",
        type=int,
        default=20,
        metavar="N",
        help="pass rates: above N rows print a summary and the N rows with the highest silent "
        "rate (default 20)",
    )
    p.add_argument("--all", action="store_true", help="pass rates: print the summary and every row")
    p.add_argument("--plot", metavar="OUT.png|svg", help="draw the audit's figure to this file (matplotlib)")
    p.add_argument(
        "--force",
        action="store_true",
        help="let --plot replace an existing file that is not a previous figure (never an input)",
    )
    g = p.add_argument_group("rollout logs")
    g.add_argument(
        "--rollouts",
        metavar="PATH",
        help="a rollout log (.parquet, .csv, .tsv or .jsonl), or a directory or quoted glob of such shards",
    )
    g.add_argument(
        "--format",
        choices=("parquet", "csv", "tsv", "json"),
        help="the log's format if its name does not say",
    )
    g.add_argument(
        "--engine",
        default="pyarrow",
        metavar="pyarrow|ray",
        help="how shards are reduced: pyarrow (default: one after the other in this process) or ray "
        "(one Ray task per shard, on the cluster RAY_ADDRESS names or a local one; "
        "pip install 'sigma-ref[ray]'); the report is the same",
    )
    g.add_argument("--prompt-col", default="prompt", help="column identifying the prompt (default prompt)")
    g.add_argument("--reward-col", default="reward", help="column with the reward (default reward)")
    g.add_argument(
        "--group-col",
        help="column identifying a rollout's group; without it, consecutive "
        "rows with the same prompt form a group",
    )
    g.add_argument(
        "--correct-threshold",
        type=float,
        metavar="T",
        help="a rollout is correct when its reward is > T (needed unless rewards are 0/1 or booleans)",
    )
    g.add_argument(
        "--extreme",
        type=float,
        default=0.1,
        help="prompts with p <= X or p >= 1 - X count as extreme in the mass shares (default 0.1)",
    )
    g.add_argument(
        "--target",
        type=float,
        default=0.95,
        help="the recommended G is the least whose expected update keeps this share of the "
        "large-G gradient signal (default 0.95)",
    )
    p.set_defaults(run=_audit)


def _reproduce(args: argparse.Namespace) -> int:
    from .reproduce import run

    _check_plot(args, [])

    return run(args)


def _add_reproduce(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from_text = (
        "the paper's exact group-size table and its controlled experiment (6,000 Bernoulli-logit prompts)"
    )
    p = sub.add_parser("reproduce", help="recompute " + from_text, description="Recompute " + from_text + ".")
    p.add_argument("--prompts", type=int, default=6000, help="prompts in the experiment (default 6000)")
    p.add_argument("--steps", type=int, default=150, help="GRPO steps (default 150)")
    p.add_argument("--G", type=int, default=8, help="group size (default 8)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--plot", metavar="OUT.png|svg", help="draw the forecast against the measured fraction")
    p.add_argument(
        "--force",
        action="store_true",
        help="let --plot replace an existing file that is not a previous figure",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=_reproduce)


def conventions_table() -> str:
    """The preset conventions as a markdown table (the README's conventions table)."""
    from .conventions import PRESETS

    rows = [
        "| preset | ddof | eps | eps placement | scale | singleton group | source |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in PRESETS.values():
        eps = "0" if c.eps == 0 else f"{c.eps:g}"
        rows.append(
            f"| `{c.name}` | {c.ddof} | {eps} | {c.eps_placement} | {c.scale} | {c.singleton} | {c.source} |"
        )
    return "\n".join(rows)


def _conventions(args: argparse.Namespace) -> int:
    from .conventions import PRESETS

    if args.markdown:
        print(conventions_table())
    else:
        for c in PRESETS.values():
            print(c.describe())
    return 0


def _add_conventions(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("conventions", help="list the preset conventions (ddof, eps, scale, ...)")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    p.set_defaults(run=_conventions)


def _add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from .conformance.cli import add_check

    add_check(sub)


def _add_detect(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from .conformance.cli import add_detect

    add_detect(sub)


def _add_matrix(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from .conformance.matrix import add_matrix

    add_matrix(sub)


def _vectors(args: argparse.Namespace) -> int:
    from . import vectors

    if args.check is not None:
        stale = vectors.check(args.check)
        if stale:
            print(
                f"{args.check}: {', '.join(stale)} differ from the oracle's vectors; "
                f"regenerate with: sigma-ref vectors --out {args.check}",
                file=sys.stderr,
            )
            return 1
        print(f"{args.check}: up to date (schema version {vectors.SCHEMA_VERSION})")
        return 0
    counts = vectors.generate(args.out)
    print(
        f"wrote {sum(counts.values())} cases to {args.out} ("
        + ", ".join(f"{family} {n}" for family, n in counts.items())
        + "); run them with sigma_ref/vectors_reader.py"
    )
    return 0


def _add_vectors(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "vectors",
        help="write the conformance vectors (JSON Lines) any trainer's CI can run",
        description="Write the suite's cases as data (docs/vectors.md): inputs, float64 expected values, "
        "tolerances. Run them with sigma_ref/vectors_reader.py, a single numpy-only file.",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", metavar="DIR", help="directory to write (created if missing)")
    where.add_argument("--check", metavar="DIR", help="exit 1 if DIR differs from freshly generated vectors")
    p.set_defaults(run=_vectors)


#: Sub-command name -> its registrar (adds the parser and sets ``run``).
COMMANDS: dict[str, Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = {
    "audit": _add_audit,
    "reproduce": _add_reproduce,
    "conventions": _add_conventions,
    "check": _add_check,
    "detect": _add_detect,
    "matrix": _add_matrix,
    "vectors": _add_vectors,
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: every sub-command, or only ``command`` (a run of one sub-command
    then imports only what that sub-command needs: ``audit`` loads no torch)."""
    parser = argparse.ArgumentParser(
        prog="sigma-ref",
        description="Ground-truth oracle and conformance suite for GRPO-family advantages.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, add in COMMANDS.items():
        if command is None or name == command:
            add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sigma-ref`` console script."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = words[0] if words and words[0] in COMMANDS else None
    args = build_parser(command).parse_args(words)
    try:
        from ._files import check_stdout

        check_stdout(f"sigma-ref {args.command}")
        code = int(args.run(args))
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not after exit
        return code
    except (ValueError, TypeError) as exc:
        print(f"sigma-ref {args.command}: {exc}", file=sys.stderr)
        return BAD_INPUT
    except BrokenPipeError:  # `sigma-ref audit --all | head`: the reader had enough; end quietly
        _silence_stdout()
        return BROKEN_PIPE
    except OSError as exc:
        if exc.filename is not None:
            raise
        _silence_stdout()
        print(f"sigma-ref {args.command}: cannot write the output ({exc.strerror})", file=sys.stderr)
        return BAD_INPUT

    except RuntimeError as exc:
        from .ray_engine import EngineError

        if not isinstance(exc, EngineError):
            raise
        print(f"sigma-ref {args.command}: {exc}", file=sys.stderr)
        return ENGINE_FAILED
    except ImportError as exc:
        if "sigma-ref[ray]" in str(exc):  # --engine ray without the ray extra
            print(f"sigma-ref {args.command}: {exc}", file=sys.stderr)
            return MISSING_EXTRA
        missing = (exc.name or "").partition(".")[0]
        if missing not in AUDIT_EXTRA and "sigma-ref[audit]" not in str(exc):
            raise
        why = str(exc) if "sigma-ref[audit]" in str(exc) else f"no module {missing!r}"
        print(
            f"sigma-ref {args.command}: {why}; install the audit extra: pip install 'sigma-ref[audit]'",
            file=sys.stderr,
        )
        return MISSING_EXTRA


def _silence_stdout() -> None:
    """Point standard output at /dev/null: the interpreter's final flush must not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
