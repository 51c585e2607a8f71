"""The ``sigma-ref`` command line.

``sigma-ref audit 0.5 0.3 0.15 0.08 0.03 --G 8`` prints the corpus audit; further
sub-commands (``check``, ``detect``, ``matrix``) run the conformance suite.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from .audit import corpus_audit
from .conventions import PRESETS

__all__ = ["main"]


def _read_rates(path: str) -> list[float]:
    """Pass rates from a file: numbers separated by white space, commas or new lines."""
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    rates = []
    for token in text.replace(",", " ").split():
        try:
            rates.append(float(token))
        except ValueError:
            raise SystemExit(f"sigma-ref audit: {path}: {token!r} is not a number") from None
    return rates


def _audit(args: argparse.Namespace) -> int:
    rates = list(args.pass_rates)
    if args.file:
        rates += _read_rates(args.file)
    if not rates:
        raise SystemExit("sigma-ref audit: give pass rates as arguments or with --file")
    result = corpus_audit(rates, G=args.G, epsilon=args.epsilon)
    print(result.to_json() if args.json else result)
    return 0


def _add_audit(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "audit",
        help="silent-group waste and group-size law for per-prompt pass rates",
        description="Audit per-prompt pass rates at group size G: the silent-group rate "
        "p^G + (1-p)^G, the closed-form group-size law ceil(1/(8 eps p(1-p))) and the exact "
        "least G with fidelity >= 1 - eps.",
    )
    p.add_argument("pass_rates", nargs="*", type=float, help="per-prompt pass rates in [0, 1]")
    p.add_argument("--file", help="read more pass rates from this file ('-' for stdin)")
    p.add_argument("--G", type=int, default=8, help="group size (default 8)")
    p.add_argument("--epsilon", type=float, default=0.05, help="tolerated fidelity loss (default 0.05)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=_audit)


def conventions_table() -> str:
    """The preset conventions as a markdown table (the README's conventions table)."""
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
    if args.markdown:
        print(conventions_table())
    else:
        for c in PRESETS.values():
            print(c.describe())
    return 0


def _add_conventions(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("conventions", help="list the preset conventions (ddof, eps, scale, ...)")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    p.set_defaults(run=_conventions)


#: Sub-command registrars: each adds its parser and sets ``run``.
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_audit, _add_conventions]


def _add_check(sub: argparse._SubParsersAction) -> None:
    from .conformance.cli import add_check

    add_check(sub)


def _add_detect(sub: argparse._SubParsersAction) -> None:
    from .conformance.cli import add_detect

    add_detect(sub)


COMMANDS += [_add_check, _add_detect]


def _add_matrix(sub: argparse._SubParsersAction) -> None:
    from .conformance.matrix import add_matrix

    add_matrix(sub)


COMMANDS.append(_add_matrix)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="sigma-ref",
        description="Ground-truth oracle and conformance suite for GRPO-family advantages.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sigma-ref`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (ValueError, TypeError) as exc:
        print(f"sigma-ref {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
