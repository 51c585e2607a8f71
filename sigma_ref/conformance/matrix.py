"""The peer matrix: the conformance suite run on every adapter of ``sigma_ref.spec.adapters``.

``sigma-ref matrix [--markdown] [--json out.json]`` imports the adapter modules (the
seed post, TRL, verl, OpenRLHF), runs every property of
the suite (``spec/test_<level>.py``) on every mode of every installed peer (the
mode's declared convention is what it is checked against; the detected one is shown
beside it) and prints one row per implementation and mode, one column per level of
SPEC section 7:

* ``pass``: every required property of the level passes (advisory ones that fail are
  listed after ``advisory:``);
* ``FAIL prop[param], ...``: the required properties that fail;
* ``n/a``: no property of the level applies (e.g. no loss, so no gradient checks).

A peer that is not installed is one row ``not installed`` with the reason; a mode the
framework has but that cannot be driven on its own is a row ``n/a`` with the reason.
Hypothesis runs derandomized (``--examples`` per property), so the output is the same
on every run with the same installed versions; the markdown holds no timings (the JSON
has them).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import time
import types
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from .adapter import Adapter

__all__ = ["PEERS", "Cell", "Row", "Matrix", "run_matrix", "run_adapter", "adapter_module", "add_matrix"]

#: Adapter modules of ``sigma_ref.spec.adapters``, in the matrix's order.
PEERS: tuple[str, ...] = ("post", "trl", "verl", "openrlhf")
#: Distributions whose versions the matrix reports.
VERSIONED: tuple[str, ...] = ("sigma-ref", "torch", "trl", "verl", "openrlhf")
_PROFILE = "sigma-ref-matrix"
#: The suite's levels (SPEC section 7), the matrix's columns; equal to ``core.LEVELS``
#: (a test checks it), kept here so that registering the command needs no hypothesis.
LEVELS: tuple[str, ...] = ("contract", "algebra", "identity", "silent", "numerics")


@contextlib.contextmanager
def _matrix_profile(threads: int = 1) -> Iterator[None]:
    """Hypothesis derandomized, no deadline, no database, and one torch thread; restored after.

    The suite's tensors are tiny: on a loaded two-core machine torch's intra-op thread pool
    made each small op (``index_add_``, ``log_softmax``, a backward) take ~20 ms instead of
    well under 1 ms, a 13x slowdown of the whole matrix.
    """
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        _PROFILE,
        derandomize=True,
        deadline=None,
        database=None,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )
    previous = settings.get_current_profile_name()
    threads = torch.get_num_threads()
    settings.load_profile(_PROFILE)
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        settings.load_profile(previous)
        torch.set_num_threads(threads)


def adapter_module(name: str) -> types.ModuleType:
    """The adapter module ``name`` (``sigma_ref.spec.adapters.<name>``, else a clone's ``spec.adapters``)."""
    if name not in PEERS:
        raise ValueError(f"peer={name!r} is not an adapter module; choose from {', '.join(PEERS)}")
    try:
        return importlib.import_module(f"sigma_ref.spec.adapters.{name}")
    except ModuleNotFoundError:
        return importlib.import_module(f"spec.adapters.{name}")


@dataclasses.dataclass(frozen=True)
class Cell:
    """One level of one row: ``pass``, ``FAIL`` or ``n/a``, the FAILs and the WARNs."""

    outcome: str
    failed: tuple[str, ...] = ()
    warned: tuple[str, ...] = ()

    def text(self) -> str:
        """``pass``, ``FAIL a, b``, ``n/a``, with ``WARN ...`` appended when any.

        >>> Cell("pass", (), ("output_dtype[bfloat16, float16]", "singleton_groups")).text()
        'pass; WARN output_dtype[bfloat16, float16], singleton_groups'
        """
        out = self.outcome if not self.failed else "FAIL " + ", ".join(self.failed)
        if self.warned:
            out += "; WARN " + ", ".join(self.warned)
        return out


@dataclasses.dataclass
class Row:
    """One implementation and mode: what it declares, what was detected, one cell per level."""

    implementation: str
    mode: str
    status: str  # "checked", "not installed", "n/a"
    name: str = ""
    declared: str = ""
    detected: str = ""
    aggregation: str = ""
    note: str = ""
    cells: dict[str, Cell] = dataclasses.field(default_factory=dict)
    properties: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (with the per-property outcomes and the time taken)."""
        d = dataclasses.asdict(self)
        d["cells"] = {
            k: {
                "outcome": c.outcome,
                "failed": list(c.failed),
                "warned": list(c.warned),
                "text": c.text(),
            }
            for k, c in self.cells.items()
        }
        return d


def _label(name: str, param: Any) -> str:
    return name if param is None else f"{name}[{param}]"


def _compact(labels: list[str]) -> tuple[str, ...]:
    """``["p[a]", "p[b]", "q"]`` as ``("p[a, b]", "q")``, first-seen order."""
    grouped: dict[str, list[str]] = {}
    for label in labels:
        base, _, rest = label.partition("[")
        grouped.setdefault(base, [])
        if rest:
            grouped[base].append(rest.rstrip("]"))
    return tuple(f"{b}[{', '.join(p)}]" if p else b for b, p in grouped.items())


def run_adapter(
    adapter: Adapter, *, max_examples: int = 25, seed: int = 0, threads: int = 1
) -> tuple[list[dict[str, Any]], Any]:
    """Every property on ``adapter`` under its declared convention: outcomes and the context.

    Each outcome is ``{"property", "param", "level", "verdict", "message"}`` with ``verdict``
    one of ``pass``, ``FAIL``, ``WARN``, ``NOTE``, ``skip`` (the suite's one runner,
    :func:`~sigma_ref.conformance.core.run_suite`). Failing inputs are not shrunk (the
    matrix needs the verdict; ``sigma-ref check`` shrinks): the message shows the first
    failing input found.
    """
    from .core import run_suite
    from .session import build_context

    with _matrix_profile(threads):
        ctx = build_context(adapter)
        results = [
            {
                "property": o.name,
                "param": o.param,
                "level": o.level,
                "verdict": o.verdict,
                "message": o.message.strip().splitlines()[0] if o.message.strip() else "",
            }
            for o in run_suite(ctx, max_examples=max_examples, seed=seed, shrink=False)
        ]
    return results, ctx


def _aggregation(results: list[dict[str, Any]]) -> str:
    """The loss's aggregation as ``loss_aggregation`` measured it (``mode [declared|detected]``)."""
    for r in results:
        if r["property"] == "loss_aggregation" and r["message"].startswith("aggregation: "):
            text = r["message"].removeprefix("aggregation: ")
            mode, _, rest = text.partition(" [")
            how = "declared" if rest.startswith("declared") else "detected"
            return f"{mode} [{how}]"
        if r["property"] == "loss_aggregation" and r["verdict"] == "FAIL":
            return "FAIL"
    return ""


def _cells(results: list[dict[str, Any]]) -> dict[str, Cell]:
    cells = {}
    for level in LEVELS:
        sub = [r for r in results if r["level"] == level]
        failed = [_label(r["property"], r["param"]) for r in sub if r["verdict"] == "FAIL"]
        warned = [_label(r["property"], r["param"]) for r in sub if r["verdict"] == "WARN"]
        if all(r["verdict"] in ("skip", "NOTE") for r in sub):
            outcome = "n/a"
        else:
            outcome = "FAIL" if failed else "pass"
        cells[level] = Cell(outcome, _compact(failed), _compact(warned))
    return cells


@dataclasses.dataclass
class Matrix:
    """The rows, the versions they were produced with, and the hypothesis settings."""

    rows: list[Row]
    versions: dict[str, str | None]
    max_examples: int

    def header(self) -> str:
        """One line: versions and settings."""
        vs = ", ".join(f"{k} {v or 'not installed'}" for k, v in self.versions.items())
        return f"Installed: {vs}. Hypothesis derandomized, {self.max_examples} examples per property."

    def table(self) -> list[list[str]]:
        """Header row and one row per implementation/mode."""
        head = ["implementation", "mode", "declared", "detected", "loss aggregation", *LEVELS, "notes"]
        body = []
        for r in self.rows:
            if r.status == "checked":
                cells = [r.cells[level].text() for level in LEVELS]
            else:
                cells = [r.status] * len(LEVELS)
            body.append([r.implementation, r.mode, r.declared, r.detected, r.aggregation, *cells, r.note])
        return [head, *body]

    def to_markdown(self) -> str:
        """The matrix as a markdown table under the versions line."""
        rows = self.table()

        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

        out = [self.header(), "", line(rows[0]), line(["---"] * len(rows[0]))]
        out += [line([f"`{c}`" if j == 1 and c else c for j, c in enumerate(r)]) for r in rows[1:]]
        return "\n".join(out)

    def to_text(self) -> str:
        """The matrix as aligned plain text."""
        rows = self.table()
        widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
        lines = [self.header(), ""]
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: versions, settings and every row with its per-property outcomes."""
        return {
            "versions": self.versions,
            "max_examples": self.max_examples,
            "levels": list(LEVELS),
            "rows": [r.to_dict() for r in self.rows],
        }


def installed_versions() -> dict[str, str | None]:
    """Installed versions of sigma-ref, torch and the peers (``None`` when absent)."""
    import importlib.metadata

    out: dict[str, str | None] = {}
    for dist in VERSIONED:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _declared(adapter: Adapter) -> str:
    conv = adapter.convention
    if conv is None:
        return ""
    return conv if isinstance(conv, str) else conv.name


def run_matrix(
    peers: Sequence[str] = PEERS,
    *,
    max_examples: int = 25,
    modes: Sequence[str] | None = None,
    seed: int = 0,
    threads: int = 1,
) -> Matrix:
    """Run the suite on every mode of every peer in ``peers`` (``modes``: only these ``peer:mode``).

    ``seed`` picks hypothesis's random stream and ``threads`` torch's intra-op threads; the
    verdicts do not depend on either (tests/test_peers.py runs verl twice to show it).
    """
    rows: list[Row] = []
    for peer in peers:
        module = adapter_module(peer)
        title = module.PEER.title or peer
        reason = module.unavailable()
        if reason is not None:
            rows.append(Row(title, "", "not installed", note=reason))
            continue
        for mode, adapter in module.ADAPTERS.items():
            if modes is not None and f"{peer}:{mode}" not in modes:
                continue
            start = time.perf_counter()
            results, ctx = run_adapter(adapter, max_examples=max_examples, seed=seed, threads=threads)
            det = ctx.detection
            rows.append(
                Row(
                    title,
                    mode,
                    "checked",
                    name=adapter.name,
                    declared=_declared(adapter),
                    detected=(det.preset or det.summary()) if det is not None else "",
                    aggregation=_aggregation(results),
                    cells=_cells(results),
                    properties=results,
                    seconds=round(time.perf_counter() - start, 2),
                )
            )
        for mode, why in module.NOT_APPLICABLE.items():
            if modes is None or f"{peer}:{mode}" in modes:
                rows.append(Row(title, mode, "n/a", note=why))
    return Matrix(rows, installed_versions(), max_examples)


def _matrix(args: argparse.Namespace) -> int:
    peers = PEERS if not args.peers else tuple(args.peers)
    matrix = run_matrix(peers, max_examples=args.examples)
    print(matrix.to_markdown() if args.markdown else matrix.to_text())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(matrix.to_dict(), fh, indent=2, default=str)
            fh.write("\n")
    return 0


def add_matrix(sub: argparse._SubParsersAction) -> None:
    """Register ``sigma-ref matrix``."""
    p = sub.add_parser(
        "matrix",
        help="run the conformance suite on TRL, verl, OpenRLHF and the seed post (installed peers)",
        description="Run every property of the suite on every adapter in sigma_ref.spec.adapters and print "
        "one row per implementation and mode, one column per level (pass / FAIL / n/a), with the declared "
        "and detected conventions and the installed versions. Peers that are not installed appear as "
        "'not installed' rows (`make peers` installs them).",
    )
    p.add_argument(
        "peers",
        nargs="*",
        metavar="PEER",
        help=f"only these adapter modules (default: all of {', '.join(PEERS)})",
    )
    p.add_argument("--markdown", action="store_true", help="print a markdown table (for the README)")
    p.add_argument("--json", metavar="PATH", help="also write every row and property outcome as JSON")
    p.add_argument("--examples", type=int, default=25, help="hypothesis examples per property (default 25)")
    p.set_defaults(run=_matrix)
