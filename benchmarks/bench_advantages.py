"""Benchmark: sigma-ref's advantages against the plain formulas real trainers use.

Run ``python benchmarks/bench_advantages.py [--quick]``. Every row times ours and its
baseline side by side in one run on the same input (alternating calls, medians of
``>= 7``, min and max in the note), and prints a markdown table. ``rows(quick)`` returns
the rows as dicts (keys ``work``, ``ours_s``, ``baseline_s``, ``ratio``, ``note``) for
other tools (e.g. a README table generator). ``ratio = ours / baseline``: below 1 is faster.

Baselines, written here from their definitions (no trainer code is copied):

* the plain view formula: ``(r - r.mean(1, keepdim=True)) / r.std(1, keepdim=True)`` on
  ``r.view(-1, G)``, in the input's dtype;
* verl-style vectorised grouping by integer ids: ``torch.unique(index, return_inverse=True)``,
  then ``bincount``/``scatter_add`` for counts, sums and sums of squares, Bessel std + 1e-6;
* a memory copy (``x.clone()``) of the same input: the floor.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import sigma_ref


def _time_pair(
    ours: Callable[[], Any], baseline: Callable[[], Any], repeats: int
) -> tuple[list[float], list[float]]:
    """Alternate the two calls ``repeats`` times (after one warm-up each); seconds per call."""
    ours()
    baseline()
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ours()
        a.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        baseline()
        b.append(time.perf_counter() - t0)
    return a, b


def _row(
    work: str, ours: Callable[[], Any], baseline: Callable[[], Any], repeats: int, what: str
) -> dict[str, Any]:
    a, b = _time_pair(ours, baseline, repeats)
    ours_s, base_s = statistics.median(a), statistics.median(b)
    note = (
        f"baseline: {what}; n={repeats}; ours min/max {min(a) * 1e3:.2f}/{max(a) * 1e3:.2f} ms, "
        f"baseline min/max {min(b) * 1e3:.2f}/{max(b) * 1e3:.2f} ms"
    )
    return {"work": work, "ours_s": ours_s, "baseline_s": base_s, "ratio": ours_s / base_s, "note": note}


def plain_view_formula(r: torch.Tensor, G: int) -> torch.Tensor:
    """The formula most trainers write: per-row mean and (Bessel) std of ``r.view(-1, G)``."""
    x = r.view(-1, G)
    return (x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)


def plain_numpy_formula(r: np.ndarray) -> np.ndarray:
    out: np.ndarray = (r - r.mean(axis=1, keepdims=True)) / r.std(axis=1, ddof=1, keepdims=True)
    return out


def verl_style(scores: torch.Tensor, index: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Vectorised grouping by integer ids: unique + scatter sums; Bessel std + eps."""
    _, inverse = torch.unique(index, return_inverse=True)
    n = int(inverse.max()) + 1
    counts = torch.bincount(inverse, minlength=n).to(scores.dtype)
    sums = torch.zeros(n, dtype=scores.dtype).scatter_add_(0, inverse, scores)
    mean = sums / counts
    squares = torch.zeros(n, dtype=scores.dtype).scatter_add_(0, inverse, scores * scores)
    var = (squares - counts * mean * mean) / (counts - 1).clamp(min=1)
    return (scores - mean[inverse]) / (var.clamp(min=0).sqrt()[inverse] + eps)


def rows(quick: bool) -> list[dict[str, Any]]:
    """The benchmark's rows (see the module docstring)."""
    repeats = 7 if quick else 11
    G = 8
    n_groups = 2**14 if quick else 2**17
    gen = torch.Generator().manual_seed(0)
    r = torch.rand(n_groups * G, generator=gen)  # float32, as trainers hold rewards
    grid = r.view(-1, G)
    out = [
        _row(
            f"grpo_advantage, torch [{n_groups}, {G}] float32",
            lambda: sigma_ref.grpo_advantage(grid, convention="post"),
            lambda: plain_view_formula(r, G),
            repeats,
            "plain view formula (float32 mean/std)",
        ),
        _row(
            f"grpo_advantage, numpy [{n_groups}, {G}] float32",
            lambda: sigma_ref.grpo_advantage(grid.numpy(), convention="post"),
            lambda: plain_numpy_formula(grid.numpy()),
            repeats,
            "plain numpy formula (float32 mean/std)",
        ),
        _row(
            f"floor: x.clone() vs grpo_advantage, torch [{n_groups}, {G}] float32",
            lambda: grid.clone(),
            lambda: sigma_ref.grpo_advantage(grid, convention="post"),
            repeats,
            "grpo_advantage (ours) on the same input; ratio = copy / ours",
        ),
    ]
    n = n_groups * G
    ids = torch.randperm(n_groups, generator=gen).repeat_interleave(G)[torch.randperm(n, generator=gen)]
    scores = torch.rand(n, generator=gen)
    out.append(
        _row(
            f"grpo_advantage(index=int ids), interleaved, N = {n}",
            lambda: sigma_ref.grpo_advantage(scores, convention="verl", index=ids),
            lambda: verl_style(scores, ids),
            repeats,
            "verl-style unique + scatter_add on the same int ids",
        )
    )
    rng = np.random.default_rng(0)
    names = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(n_groups)]
    str_ids = [names[i] for i in ids.tolist()]
    out.append(
        _row(
            f"grpo_advantage(index=uuid strings), interleaved, N = {n}",
            lambda: sigma_ref.grpo_advantage(scores, convention="verl", index=str_ids),
            lambda: sigma_ref.grpo_advantage(scores, convention="verl", index=ids),
            repeats,
            "ours on the same groups with int ids (goal: within 3x)",
        )
    )
    out.append(
        _row(
            f"grpo_advantage(index=uuid strings) vs verl-style on int ids, N = {n}",
            lambda: sigma_ref.grpo_advantage(scores, convention="verl", index=str_ids),
            lambda: verl_style(scores, ids),
            repeats,
            "verl-style unique + scatter_add on int ids",
        )
    )
    return out


def markdown(table: list[dict[str, Any]]) -> str:
    lines = ["| work | sigma-ref | baseline | ratio | note |", "| --- | --- | --- | --- | --- |"]
    for row in table:
        lines.append(
            f"| {row['work']} | {row['ours_s'] * 1e3:.2f} ms | {row['baseline_s'] * 1e3:.2f} ms | "
            f"{row['ratio']:.2f} | {row['note']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, 7 repeats")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, numpy {np.__version__}")
    print(markdown(rows(args.quick)))


if __name__ == "__main__":
    main()
