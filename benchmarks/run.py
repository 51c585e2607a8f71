"""Issue 12's performance table, measured side by side in one run: ``python benchmarks/run.py [--quick]``.

Every row times sigma-ref and its baseline on the same input, alternating the two calls
(one warm-up each, then ``repeats`` pairs), and reports the medians with ``[min, max]`` and the
ratio ``baseline / sigma-ref`` (above 1: sigma-ref is faster) as the median of the per-pair
ratios with their ``[min, max]``. Rows without a baseline report a time against a goal.

Baselines, written from their definitions (no trainer code is copied):

* the paper's dense sum: ``sum_{k=1}^{G-1} math.comb(G, k) p^k (1-p)^(G-k) sqrt(k (G-k)) / G``,
  a Python loop over ``k`` vectorised over ``p`` (``benchmarks/bench_closed_forms.py``);
* the plain view formula ``(r - r.mean(1)) / r.std(1)`` on ``r.view(-1, G)``, float32;
* verl-style vectorised grouping (``torch.unique`` + ``scatter_add``) on integer ids
  (``benchmarks/bench_advantages.py``), and verl's own
  ``compute_grpo_vectorized_outcome_advantage`` when verl is importable (else the row says so);
* a memory copy (``x.clone()``) of the same input: the floor.

``rows(quick)`` returns the rows as dicts; ``--json`` prints them instead of the table.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_advantages import plain_view_formula, verl_style
from benchmarks.bench_closed_forms import N_PROMPTS, corpus, dense_expected_gradient, dense_fidelity

Row = dict[str, Any]


def _seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def paired(
    work: str,
    ours: Callable[[], Any],
    baseline: Callable[[], Any] | None,
    repeats: int,
    *,
    baseline_name: str,
    goal: float | None = None,
    goal_text: str = "",
    seconds_goal: float | None = None,
) -> Row:
    """Time ``ours`` and ``baseline`` alternately; ``goal`` is a least ratio, ``seconds_goal`` a most
    time for ours (rows without a baseline)."""
    ours()
    if baseline is not None:
        baseline()
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(repeats):
        mine.append(_seconds(ours))
        if baseline is not None:
            theirs.append(_seconds(baseline))
    row: Row = {"work": work, "baseline_name": baseline_name, "repeats": repeats, "goal": goal_text}
    row["ours_s"], row["ours_min_s"], row["ours_max_s"] = _spread(mine)
    if theirs:
        row["baseline_s"], row["baseline_min_s"], row["baseline_max_s"] = _spread(theirs)
        ratios = [b / a for a, b in zip(mine, theirs, strict=True)]
        row["ratio"], row["ratio_min"], row["ratio_max"] = _spread(ratios)
    else:
        row["baseline_s"] = row["ratio"] = None
    if goal is not None and row["ratio"] is not None:
        row["met"] = row["ratio"] >= goal
    elif seconds_goal is not None:
        row["met"] = row["ours_s"] < seconds_goal
    else:
        row["met"] = None
    return row


def skipped(work: str, why: str) -> Row:
    """A row that could not be measured here, and why."""
    return {"work": work, "baseline_name": why, "ours_s": None, "baseline_s": None, "ratio": None,
            "goal": "", "met": None, "repeats": 0}  # fmt: skip


def _verl_vectorised() -> Callable[..., Any] | None:
    if importlib.util.find_spec("verl") is None:
        return None
    from verl.trainer.ppo import core_algos

    fn: Callable[..., Any] | None = getattr(core_algos, "compute_grpo_vectorized_outcome_advantage", None)
    return fn


def _audit_seconds(path: str) -> Callable[[], Any]:
    command = [sys.executable, "-m", "sigma_ref.cli", "audit", "--file", path, "--G", "8"]
    return lambda: subprocess.run(command, check=True, capture_output=True)


def rows(quick: bool) -> list[Row]:
    """The table's rows. ``quick``: 1% of the prompts, 2**17 rewards, 3 repeats, no verdicts (a smoke
    run: the goals are stated for the full sizes)."""
    import torch

    import sigma_ref

    repeats = 3 if quick else 7
    p = corpus(N_PROMPTS // 100 if quick else N_PROMPTS)
    n = f"{p.size:,} p"
    out: list[Row] = []
    for G in (8, 64, 512):
        out.append(
            paired(
                f"expected_gradient, {n}, G = {G}",
                functools.partial(sigma_ref.expected_gradient, p, G),
                functools.partial(dense_expected_gradient, p, G),
                repeats,
                baseline_name="dense sum, math.comb",
                goal=10.0 if G == 512 else 1.0,
                goal_text=">= 10x" if G == 512 else ">= 1x",
            )
        )
    out.append(
        paired(
            f"fidelity, {n}, G = 512",
            lambda: sigma_ref.fidelity(p, 512),
            lambda: dense_fidelity(p, 512),
            repeats,
            baseline_name="dense sum / sqrt(p (1-p))",
            goal=10.0,
            goal_text=">= 10x",
        )
    )
    few = p[:: max(1, p.size // (200 if quick else 2000))]
    out.append(
        paired(
            f"expected_gradient, {few.size:,} p, G = 10^6",
            lambda: sigma_ref.expected_gradient(few, 10**6),
            None,
            repeats,
            baseline_name="dense sum: OverflowError (math.comb(10**6, k) to float)",
        )
    )
    reachable = p[(p > 1e-11) & (p < 1 - 1e-11)]  # within 3e-12 of 0 or 1 needs G > 2**40 at 5%
    out.append(
        paired(
            f"exact_group_size, {reachable.size:,} p, epsilon = 0.05",
            lambda: sigma_ref.exact_group_size(reachable),
            None,
            repeats,
            baseline_name="-",
            goal_text="< 2 s" if not quick else "",
            seconds_goal=None if quick else 2.0,
        )
    )
    out.append(
        paired(
            "exact_group_size(0.5, epsilon=1e-12)",
            lambda: sigma_ref.exact_group_size(0.5, epsilon=1e-12),
            None,
            repeats,
            baseline_name="-",
            goal_text="< 1 s",
            seconds_goal=1.0,
        )
    )
    G = 8
    groups = 2**14 if quick else 2**17
    gen = torch.Generator().manual_seed(0)
    r = torch.rand(groups * G, generator=gen)
    grid = r.view(-1, G)
    out.append(
        paired(
            f"grpo_advantage, torch [{groups}, {G}] float32",
            lambda: sigma_ref.grpo_advantage(grid, convention="post"),
            lambda: plain_view_formula(r, G),
            repeats,
            baseline_name="plain view formula",
            goal=1.0,
            goal_text=">= 1x",
        )
    )
    out.append(
        paired(
            f"grpo_advantage, torch [{groups}, {G}] float32",
            lambda: sigma_ref.grpo_advantage(grid, convention="post"),
            lambda: grid.clone(),
            repeats,
            baseline_name="memory copy x.clone() (the floor)",
        )
    )
    size = groups * G
    ids = torch.randperm(groups, generator=gen).repeat_interleave(G)[torch.randperm(size, generator=gen)]
    scores = torch.rand(size, generator=gen)
    out.append(
        paired(
            f"grpo_advantage(index=int ids), interleaved, N = {size:,}",
            lambda: sigma_ref.grpo_advantage(scores, convention="verl", index=ids),
            lambda: verl_style(scores, ids),
            repeats,
            baseline_name="verl-style unique + scatter_add (written here)",
            goal=1.0,
            goal_text=">= 1x",
        )
    )
    # the same rows against verl's own function, and at a group size that is not a power of two
    # (the exact centering then scales by G and back)
    six = (size // 6) * 6
    ids6 = torch.randperm(six // 6, generator=gen).repeat_interleave(6)[torch.randperm(six, generator=gen)]
    against_verl = [
        (f"grpo_advantage(index=int ids) vs verl itself, N = {size:,}", scores, ids, 1.0),
        (
            f"grpo_advantage(index=int ids) vs verl itself, G = 6, N = {six:,}",
            torch.rand(six, generator=gen),
            ids6,
            None,
        ),
    ]
    verl_fn = _verl_vectorised()
    for work, values, group_ids, goal in against_verl:
        if verl_fn is None:
            out.append(skipped(work, "verl not installed"))
            continue
        out.append(
            paired(
                work,
                functools.partial(sigma_ref.grpo_advantage, values, convention="verl", index=group_ids),
                functools.partial(
                    verl_fn,
                    token_level_rewards=values[:, None],
                    response_mask=torch.ones(len(values), 1),
                    index=group_ids.numpy(),
                ),
                repeats,
                baseline_name="verl compute_grpo_vectorized_outcome_advantage",
                goal=goal,
                goal_text=">= 1x" if goal else "",
            )
        )
    rng = np.random.default_rng(0)
    names = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(groups)]
    str_ids = [names[i] for i in ids.tolist()]
    out.append(
        paired(
            f"grpo_advantage(index=uuid strings), interleaved, N = {size:,}",
            lambda: sigma_ref.grpo_advantage(scores, convention="verl", index=str_ids),
            lambda: sigma_ref.grpo_advantage(scores, convention="verl", index=ids),
            repeats,
            baseline_name="sigma-ref on the same groups with int ids",
            goal=1 / 3,
            goal_text=">= 1/3x (within 3x)",
        )
    )
    count = 20_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pass_rates.txt")
        np.savetxt(path, corpus(count, seed=1), fmt="%.6g")
        out.append(
            paired(
                f"sigma-ref audit --file, {count:,} pass rates (process, table)",
                _audit_seconds(path),
                None,
                1 if quick else 3,
                baseline_name="-",
                goal_text="" if quick else "10^7 in < 30 s: this x 10 < 30 s",
                seconds_goal=None if quick else 3.0,
            )
        )
    if quick:
        for row in out:
            row["met"] = None
    return out


def _time(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"


def markdown(table: list[Row]) -> str:
    """``| work | sigma-ref | baseline | baseline / sigma-ref | goal | met |``: medians [min, max]."""
    lines = [
        "| work | sigma-ref | baseline | baseline / sigma-ref | goal | met |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in table:
        ours = (
            "-"
            if r["ours_s"] is None
            else f"{_time(r['ours_s'])} [{_time(r['ours_min_s'])}, {_time(r['ours_max_s'])}]"
        )
        if r["baseline_s"] is None:
            base, ratio = r["baseline_name"], "-"
        else:
            spread = f"[{_time(r['baseline_min_s'])}, {_time(r['baseline_max_s'])}]"
            base = f"{r['baseline_name']}: {_time(r['baseline_s'])} {spread}"
            ratio = f"{r['ratio']:.2f}x [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]"
        met = {True: "yes", False: "no", None: "-"}[r["met"]]
        lines.append(f"| {r['work']} | {ours} | {base} | {ratio} | {r['goal'] or '-'} | {met} |")
    return "\n".join(lines)


def machine() -> str:
    """Date, CPU count, load and library versions: the context the ratios were measured in."""
    import torch

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{when}; {platform.machine()} {os.cpu_count()} cores, load average {load}; "
        f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs and 3 repeats (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch.set_num_threads (default 1: a shared machine)"
    )
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    table = rows(args.quick)
    if args.json:
        print(json.dumps({"machine": machine(), "rows": table}, indent=2))
    else:
        print(machine())
        print(markdown(table))


if __name__ == "__main__":
    main()
