"""The peer matrix: the conformance suite run on every adapter of ``sigma_ref.spec.adapters``.

``sigma-ref matrix [--markdown] [--json out.json]`` imports the adapter modules (the
seed post, TRL, verl, OpenRLHF, AReaL, ms-swift, SkyRL, Unsloth), runs every property of
the suite (``spec/test_<level>.py``) on every mode of every installed peer (the
mode's declared convention is what it is checked against; the detected one is shown
beside it) and prints one row per implementation and mode, one column per level of
docs/spec.md §7:

* ``pass``: every required property of the level passes (advisory ones that fail are
  listed after ``advisory:``);
* ``FAIL prop[param], ...``: the required properties that fail;
* ``n/a``: no property of the level applies (e.g. no loss, so no gradient checks);
* ``-``: not run (a row that differs from another only in its loss runs the loss properties).

Beside the levels: ``loss aggregation`` (what ``loss_aggregation`` measured, ``[declared]``
when the adapter declares it, which then must match), ``objective`` (the objective the loss
computes at ratio != 1: the declared :class:`~sigma_ref.objectives.Objective` checked by
``loss_objective``, else the clip ``loss_clipped_surrogate`` reads off the gradient) and
``scale-out`` (level 5: the mode's loss on W = 2 real ``torch.distributed`` processes with
M = 2 micro-batches each, :func:`~sigma_ref.conformance.scaleout.run_scaleout`, given the
global counts the peer takes; ``pass``, ``FAIL <factor>: <bug class>``, or ``n/a: reason``).
Every row with a loss has a scale-out cell: each peer module's ``SCALEOUT`` names the at-scale
form of every loss row (objective variants, KL terms and rollout corrections included, fed their
micro-batch's ``ref_logp`` and ``rollout_logp``), or the reason it cannot run.
The peers compute advantages on the whole gathered batch (TRL gathers the rewards of every
process, verl and OpenRLHF compute them in the driver), so the scale-out column runs the
oracle's advantages and checks the loss.

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
from .cells import describe_aggregation, describe_clip, describe_objective
from .levels import LEVELS, SCALEOUT_LEVEL

__all__ = [
    "PEERS",
    "SCALEOUT_WORLD_SIZE",
    "SCALEOUT_MICRO_BATCHES",
    "Cell",
    "Row",
    "Matrix",
    "run_matrix",
    "run_adapter",
    "run_scaleout_cell",
    "run_scaleout_cells",
    "describe_objective",
    "describe_aggregation",
    "describe_clip",
    "adapter_module",
    "add_matrix",
]

#: Adapter modules of ``sigma_ref.spec.adapters``, in the matrix's order.
PEERS: tuple[str, ...] = ("post", "trl", "verl", "openrlhf", "areal", "swift", "skyrl", "unsloth", "tunix")
#: Distributions whose versions the matrix reports.
VERSIONED: tuple[str, ...] = (
    "sigma-ref",
    "torch",
    "trl",
    "verl",
    "openrlhf",
    "areal",
    "ms-swift",
    "skyrl",
    "unsloth-zoo",
    "google-tunix",
    "jax",
)
_PROFILE = "sigma-ref-matrix"
#: The scale-out column's data-parallel ranks W and micro-batches per rank M.
SCALEOUT_WORLD_SIZE, SCALEOUT_MICRO_BATCHES = 2, 2


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
    previous, previous_threads = settings.get_current_profile_name(), torch.get_num_threads()
    settings.load_profile(_PROFILE)
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        settings.load_profile(previous)
        torch.set_num_threads(previous_threads)


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
    objective: str = ""
    scaleout: str = ""
    note: str = ""
    cells: dict[str, Cell] = dataclasses.field(default_factory=dict)
    properties: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    scaleout_results: list[dict[str, Any]] = dataclasses.field(default_factory=list)
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
    adapter: Adapter,
    *,
    max_examples: int = 25,
    seed: int = 0,
    threads: int = 1,
    names: Sequence[str] | None = None,
    scaleout: tuple[Any, Any] | None = None,
) -> tuple[list[dict[str, Any]], Any]:
    """Every property on ``adapter`` under its declared convention: outcomes and the context.

    Each outcome is ``{"property", "param", "level", "verdict", "message", "cause", "kind",
    "facts"}`` with ``verdict`` one of ``pass``, ``FAIL``, ``WARN``, ``NOTE``, ``skip`` (the suite's
    one runner, :func:`~sigma_ref.conformance.core.run_suite`). Failing inputs are not shrunk (the
    matrix needs the verdict; ``sigma-ref check`` shrinks): the message (its first line, for
    display) shows the first failing input found, ``cause`` the confirmed cause when the suite found
    one, ``kind`` and ``facts`` the finding's data (what the cells are built from). ``names``:
    only these properties. ``scaleout``: ``(ScaleOut spec, ScaleoutReport)`` of the row's level-5
    run (the matrix launches every row's at once, :func:`run_scaleout_cells`): the level-5
    properties then judge it through the same runner, like every other level.
    """
    from .core import load_properties, run_suite
    from .launch import ScaleoutOptions
    from .session import build_context

    with _matrix_profile(threads):
        ctx = build_context(adapter)
        if scaleout is not None:
            spec, report = scaleout
            opts = ScaleoutOptions(
                world_size=SCALEOUT_WORLD_SIZE,
                micro_batches=(SCALEOUT_MICRO_BATCHES,),
                loss_scale=spec.loss_scale,
            )
            ctx = dataclasses.replace(ctx, scaleout=opts)
            ctx.memo["scaleout"] = report  # launched with every other row's: judged here
            if names is not None:
                level5 = [p.name for p in load_properties().values() if p.level == SCALEOUT_LEVEL]
                names = [*names, *level5]
        results = [
            {
                "property": o.name,
                "param": o.param,
                "level": o.level,
                "verdict": o.verdict,
                "message": o.message.strip().splitlines()[0] if o.message.strip() else "",
                "cause": o.finding.cause if o.finding is not None else None,
                "kind": o.finding.kind if o.finding is not None else None,
                "facts": dict(o.finding.facts) if o.finding is not None else {},
            }
            for o in run_suite(ctx, max_examples=max_examples, seed=seed, shrink=False, names=names)
        ]
    return results, ctx


def _aggregation(results: list[dict[str, Any]], declared: str | None = None) -> str:
    """The loss's aggregation as ``loss_aggregation`` measured it (``mode [declared|detected]``).

    A declared TRL ``loss_type`` is shown with its verl name (``token-mean (dapo) [declared]``);
    a declared mode the weights contradict reads ``FAIL <mode> [declared]: <what they are>``.
    """
    from ..objectives import resolve_declared_aggregation

    alias = ""
    if declared is not None and resolve_declared_aggregation(declared) != declared:
        alias = f" ({declared})"
    for r in results:
        if r["property"] == "loss_aggregation" and r["kind"] == "aggregation":
            how = r["facts"]["how"]
            return f"{describe_aggregation(r['facts'])}{alias if how == 'declared' else ''} [{how}]"
        if r["property"] == "loss_aggregation" and r["verdict"] == "FAIL":
            if declared is None:
                return "FAIL"
            why = f": {r['cause']}" if r.get("cause") else ""
            return f"FAIL {resolve_declared_aggregation(declared)}{alias} [declared]{why}"
    return ""


def _matched(result: dict[str, Any]) -> bool:
    """A declared objective that matched: ``loss_objective`` reports it as a NOTE, a check that passed."""
    return bool(result["property"] == "loss_objective" and result["kind"] == "objective")


def _deviation(result: dict[str, Any]) -> str:
    """What ``loss_objective``'s failure measured (the gradient entry that differs), else its message."""
    facts = result["facts"]
    if result["kind"] != "value" or "index" not in facts:
        return str(result["message"])
    i, t = facts["index"]
    return f"dL/dlogp[{i}, {t}] = {facts['actual']:.6g}, but should be {facts['expected']:.6g}"


def _cells(results: list[dict[str, Any]]) -> dict[str, Cell]:
    cells = {}
    for level in LEVELS:
        sub = [r for r in results if r["level"] == level]
        failed = [_label(r["property"], r["param"]) for r in sub if r["verdict"] == "FAIL"]
        warned = [_label(r["property"], r["param"]) for r in sub if r["verdict"] == "WARN"]
        if not sub:
            outcome = "-"
        elif all(r["verdict"] in ("skip", "NOTE") and not _matched(r) for r in sub):
            outcome = "n/a"
        else:
            outcome = "FAIL" if failed else "pass"
        cells[level] = Cell(outcome, _compact(failed), _compact(warned))
    return cells


def _objective(results: list[dict[str, Any]], adapter: Adapter, note: str | None) -> str:
    """The objective cell: the declared objective checked by ``loss_objective``, else the clip
    ``loss_clipped_surrogate`` read off the gradient, else ``note`` (what the peer computes)."""
    by = {r["property"]: r for r in results}
    checked = by.get("loss_objective")
    if adapter.objective is not None and checked is not None:
        desc = describe_objective(adapter.objective) + " [declared]"
        if checked["verdict"] == "FAIL":
            why = checked["cause"] or _deviation(checked)
            return f"FAIL {desc}: {why}"
        if checked["verdict"] == "NOTE" and checked["kind"] == "objective":
            return desc
        return f"n/a: {checked['message']}" if checked["message"] else ""
    if note:
        return note
    clip = by.get("loss_clipped_surrogate")
    if clip is None or clip["verdict"] != "NOTE":
        return ""
    return describe_clip(clip["facts"] if clip["kind"] == "clip" else {})


def _factor(finding: Any) -> str:
    """A level-5 finding's factor as the cell shows it: ``0.5x``, ``~0.5x`` when no single factor
    explains the gradient (its ``residual``), or nothing."""
    from .scaleout.fitting import _scale

    if finding.factor is None:
        return ""
    return _scale(finding.factor, finding.facts.get("residual", 0.0), detail=False)


#: The scale-out cell's class when the probes name none.
_JOINT = "the normaliser depends on ranks and micro-batches jointly"


def _scaleout_text(results: Sequence[Any]) -> str:
    """The scale-out cell of a level-5 run's results (module doc), read from their findings: the
    class is named by its head (the words before its first comma), the launch's failure in full."""
    failed = [r for r in results if r.verdict == "FAIL"]
    if not failed:
        return "pass; WARN float32 rounding" if any(r.verdict == "WARN" for r in results) else "pass"
    first = {}
    for r in reversed(failed):
        first[r.name] = r.finding
    if "scaleout" in first:  # the launch failed: a rank raised or hung
        return f"FAIL: {first['scaleout'].what}"
    if "scaleout_gradient" in first:
        grad = first["scaleout_gradient"]
        cls = grad.bug_class.partition(", ")[0] if grad.bug_class else _JOINT
        return f"FAIL {_factor(grad)} the full-batch gradient: {cls}"
    if "scaleout_advantages" in first:
        adv = first["scaleout_advantages"]
        return f"FAIL: {adv.bug_class or adv.what}"
    pred = failed[0].finding
    same = "as at W = 1, M = 1" if pred.facts.get("full_batch_differs") else "split only"
    return f"invariant; FAIL {_factor(pred)} the {pred.facts['aggregation']} prediction ({same})"


def run_scaleout_cells(
    cells: Sequence[tuple[types.ModuleType, Any]], *, timeout: float = 120.0
) -> list[tuple[str, list[Any]]]:
    """Several modes' losses at W = 2, M = 2 on one launch of processes: cell text and results per cell.

    ``cells``: ``(module, spec)`` pairs, ``spec`` the module's ``SCALEOUT`` entry: a
    :class:`~sigma_ref.spec.adapters._peers.ScaleOut` (the loss is imported in the child processes
    as ``<module>:AT_SCALE.<loss>``) or a string, the reason it cannot run (``n/a: reason``, no
    process). The distinct runs go to :func:`~sigma_ref.conformance.scaleout.run_scaleout_many`,
    which starts the W processes once for all of them; each cell's results are those of its run
    alone. Cells that ask for the same run share it.
    """
    return [
        (f"n/a: {found}", [])
        if isinstance(found, str)
        else (_scaleout_text(found.results), list(found.results))
        for found in _scaleout_reports(cells, timeout=timeout)
    ]


def _scaleout_reports(cells: Sequence[tuple[types.ModuleType, Any]], *, timeout: float = 120.0) -> list[Any]:
    """:func:`run_scaleout_cells`'s runs: per cell its ``ScaleoutReport``, or the reason (a string)."""
    from .scaleout import ScaleoutJob, run_scaleout_many

    jobs: dict[tuple[str, Any], ScaleoutJob] = {}
    for module, spec in cells:
        if not isinstance(spec, str) and (module.__name__, spec) not in jobs:
            jobs[(module.__name__, spec)] = ScaleoutJob(
                "sigma_ref.conformance.scaleout:oracle_advantages",
                f"{module.__name__}:AT_SCALE.{spec.loss}",
                layout="index",
                micro_batches=SCALEOUT_MICRO_BATCHES,
                aggregation=spec.aggregation,
                aggregation_constant=spec.constant,
                loss_scale=spec.loss_scale,
                sizes=spec.sizes,
                timeout=timeout,
                advantage_scaler=None if spec.scaler is None else f"{module.__name__}:AT_SCALE.{spec.scaler}",
                loss_precision=spec.loss_precision,
            )
    reports = run_scaleout_many(list(jobs.values()), world_size=SCALEOUT_WORLD_SIZE)
    by_run = dict(zip(jobs, reports, strict=True))
    return [spec if isinstance(spec, str) else by_run[(module.__name__, spec)] for module, spec in cells]


def run_scaleout_cell(
    module: types.ModuleType, spec: Any, *, timeout: float = 120.0
) -> tuple[str, list[Any]]:
    """Run a mode's loss at W = 2, M = 2 (``spec``: the module's ``SCALEOUT`` entry): cell text, results.

    The one-cell case of :func:`run_scaleout_cells` (its own launch of processes).
    """
    (cell,) = run_scaleout_cells([(module, spec)], timeout=timeout)
    return cell


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
        scale = f"scale-out W={SCALEOUT_WORLD_SIZE}, M={SCALEOUT_MICRO_BATCHES}"
        head = [
            "implementation",
            "mode",
            "declared",
            "detected",
            "loss aggregation",
            "objective (ratio != 1)",
            *LEVELS,
            scale,
            "notes",
        ]
        body = []
        for r in self.rows:
            if r.status == "checked":
                cells = [r.cells[level].text() for level in LEVELS]
            else:
                cells = [r.status] * len(LEVELS)
            body.append(
                [
                    r.implementation,
                    r.mode,
                    r.declared,
                    r.detected,
                    r.aggregation,
                    r.objective,
                    *cells,
                    r.scaleout,
                    r.note,
                ]
            )
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


def _warm_up(module: types.ModuleType) -> None:
    """Import the peer outside the suite's time limits (OpenRLHF's import takes seconds)."""
    from .adapter import Batch

    first = next(iter(module.ADAPTERS.values()), None)
    if first is not None:
        first(Batch.grouped([[1.0, 0.0, 0.0, 0.0]]))


def _scaleout_column(peers: Sequence[str], modes: Sequence[str] | None) -> dict[tuple[str, Any], Any]:
    """The level-5 run of every selected mode of every installed peer, by ``(module, spec)``: its
    ``ScaleoutReport`` (one launch for all), or the reason it cannot run."""
    cells: dict[tuple[str, Any], tuple[types.ModuleType, Any]] = {}
    for peer in peers:
        module = adapter_module(peer)
        if module.unavailable() is not None:
            continue
        at_scale: dict[str, Any] = getattr(module, "SCALEOUT", {})
        for mode in module.ADAPTERS:
            spec = at_scale.get(mode)
            if (modes is None or f"{peer}:{mode}" in modes) and spec is not None:
                cells.setdefault((module.__name__, spec), (module, spec))
    return dict(zip(cells, _scaleout_reports(list(cells.values())), strict=True))


def run_matrix(
    peers: Sequence[str] = PEERS,
    *,
    max_examples: int = 25,
    modes: Sequence[str] | None = None,
    seed: int = 0,
    threads: int = 1,
    scaleout: bool = True,
) -> Matrix:
    """Run the suite on every mode of every peer in ``peers`` (``modes``: only these ``peer:mode``).

    ``seed`` picks hypothesis's random stream and ``threads`` torch's intra-op threads; the
    verdicts do not depend on either (tests/test_peers.py runs verl twice to show it).
    ``scaleout``: run the level-5 column (W = 2, M = 2 real processes, started once for every
    distinct loss of every peer: :func:`run_scaleout_cells`; rows that share a loss share the
    run); without it the column is empty.
    """
    scaled: dict[tuple[str, Any], Any] = {}
    if scaleout:
        scaled = _scaleout_column(peers, modes)
    rows: list[Row] = []
    for peer in peers:
        module = adapter_module(peer)
        title = module.PEER.title or peer
        reason = module.unavailable()
        if reason is not None:
            rows.append(Row(title, "", "not installed", note=reason))
            continue
        loss_only: dict[str, tuple[str, ...]] = getattr(module, "LOSS_ONLY", {})
        notes: dict[str, str] = getattr(module, "NOTES", {})
        objective_notes: dict[str, str] = getattr(module, "OBJECTIVE_NOTES", {})
        at_scale: dict[str, Any] = getattr(module, "SCALEOUT", {})
        if any(modes is None or f"{peer}:{m}" in modes for m in module.ADAPTERS):
            _warm_up(module)
        for mode, adapter in module.ADAPTERS.items():
            if modes is not None and f"{peer}:{mode}" not in modes:
                continue
            start = time.perf_counter()
            names = loss_only.get(mode)
            scale_text: str = ""
            scale_results: list[Any] = []
            level5: tuple[Any, Any] | None = None  # judged by the level-5 properties in run_adapter
            spec = at_scale.get(mode)
            found = scaled.get((module.__name__, spec)) if scaleout and spec is not None else None
            if isinstance(found, str):
                scale_text = f"n/a: {found}"
            elif found is not None:
                scale_text, scale_results = _scaleout_text(found.results), list(found.results)
                level5 = (spec, found)
            elif scaleout and adapter.loss is not None:
                scale_text = "-"
            results, ctx = run_adapter(
                adapter, max_examples=max_examples, seed=seed, threads=threads, names=names, scaleout=level5
            )
            det = ctx.detection
            note = notes.get(mode, "")
            if names is not None:
                note = (note + " " if note else "") + "Loss properties only: " + ", ".join(names) + "."
            rows.append(
                Row(
                    title,
                    mode,
                    "checked",
                    name=adapter.name,
                    declared=_declared(adapter),
                    detected=(det.preset or det.summary()) if det is not None else "",
                    aggregation=_aggregation(results, adapter.aggregation),
                    objective=_objective(results, adapter, objective_notes.get(mode)),
                    scaleout=scale_text,
                    note=note,
                    cells=_cells(results),
                    properties=results,
                    scaleout_results=[dataclasses.asdict(r) for r in scale_results],
                    seconds=round(time.perf_counter() - start, 2),
                )
            )
        for mode, why in module.NOT_APPLICABLE.items():
            if modes is None or f"{peer}:{mode}" in modes:
                rows.append(Row(title, mode, "n/a", note=why))
    return Matrix(rows, installed_versions(), max_examples)


def _matrix(args: argparse.Namespace) -> int:
    peers = PEERS if not args.peers else tuple(args.peers)
    matrix = run_matrix(peers, max_examples=args.examples, scaleout=not args.no_scaleout)
    print(matrix.to_markdown() if args.markdown else matrix.to_text())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(matrix.to_dict(), fh, indent=2, default=str)
            fh.write("\n")
    return 0


def add_matrix(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``sigma-ref matrix``."""
    p = sub.add_parser(
        "matrix",
        help="run the conformance suite on the installed peer trainers (TRL, verl, OpenRLHF, AReaL, "
        "ms-swift, SkyRL, Unsloth) and the seed post",
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
    p.add_argument(
        "--no-scaleout",
        action="store_true",
        help="leave the scale-out column empty (it starts 2 processes once and runs every distinct loss "
        "in them, seconds)",
    )
    p.set_defaults(run=_matrix)
