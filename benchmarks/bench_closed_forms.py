"""Closed forms in ``p`` against the paper's dense sum, side by side on the same input.

Run ``python benchmarks/bench_closed_forms.py [--quick] [--json]``. The input is 215,608 success
rates (Big-Math's size) drawn from a seeded ``Beta(0.7, 1.2)`` plus points within ``1e-12`` of 0
and 1. The baseline is the sum as the paper's script writes it: ``sum_{k=1}^{G-1} math.comb(G, k)
* p**k * (1 - p)**(G - k) * sqrt(k (G - k)) / G``, a Python loop over ``k``, vectorised over ``p``.
Every row is the median of ``repeats`` runs (ours and the baseline interleaved), with min and max.
``rows(quick)`` returns the rows as dicts (work, ours_s, baseline_s, ratio, note, and the spreads).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sigma_ref import exact_group_size, expected_gradient, fidelity

N_PROMPTS = 215_608


def corpus(n: int = N_PROMPTS, seed: int = 0) -> np.ndarray:
    """``n`` success rates: a seeded ``Beta(0.7, 1.2)`` draw, its last 8 replaced by edge points."""
    p = np.random.default_rng(seed).beta(0.7, 1.2, n)
    p[-8:] = [1e-12, 3e-12, 1e-9, 1e-6, 1 - 1e-6, 1 - 1e-9, 1 - 3e-12, 1 - 1e-12]
    return p


def dense_expected_gradient(p: np.ndarray, G: int) -> np.ndarray:
    """The paper's dense sum: every ``k``, ``math.comb`` coefficients, powers of ``p`` and ``1 - p``."""
    q = 1 - p
    total = np.zeros_like(p)
    for k in range(1, G):
        total += math.comb(G, k) * p**k * q ** (G - k) * math.sqrt(k * (G - k)) / G
    return total


def dense_fidelity(p: np.ndarray, G: int) -> np.ndarray:
    """The dense sum divided by ``sqrt(p (1 - p))``."""
    out: np.ndarray = dense_expected_gradient(p, G) / np.sqrt(p * (1 - p))
    return out


def _time(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _spread(times: list[float]) -> dict[str, float]:
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def _row(
    work: str,
    ours: Callable[[], Any],
    baseline: Callable[[], Any] | None,
    repeats: int,
    note: str = "",
) -> dict[str, Any]:
    ours_t: list[float] = []
    base_t: list[float] = []
    for _ in range(repeats):  # interleaved: both see the same machine load
        ours_t.append(_time(ours))
        if baseline is not None:
            base_t.append(_time(baseline))
    o = _spread(ours_t)
    b = _spread(base_t) if base_t else None
    return {
        "work": work,
        "ours_s": o["median"],
        "ours_min_s": o["min"],
        "ours_max_s": o["max"],
        "baseline_s": b["median"] if b else None,
        "baseline_min_s": b["min"] if b else None,
        "baseline_max_s": b["max"] if b else None,
        "ratio": b["median"] / o["median"] if b else None,
        "repeats": repeats,
        "note": note,
    }


def _dense_overflows(G: int) -> str:
    """What the dense sum does at ``G``: ``math.comb(G, G // 2)`` times a float."""
    try:
        float(math.comb(G, G // 2)) * 0.5
    except OverflowError as err:
        return f"dense sum: OverflowError ({err}) at k = G/2"
    return "dense sum finite"


def rows(quick: bool) -> list[dict[str, Any]]:
    """The benchmark rows; ``quick`` uses 1/10 of the prompts and the minimum 5 repeats."""
    p = corpus(N_PROMPTS // 10 if quick else N_PROMPTS)
    repeats = 5
    n = f"{p.size:,} p"
    out = []
    for G in (8, 64, 512):
        out.append(
            _row(
                f"expected_gradient, {n}, G = {G}",
                functools.partial(expected_gradient, p, G),
                functools.partial(dense_expected_gradient, p, G),
                repeats,
                "baseline: dense sum over k",
            )
        )
    out.append(
        _row(f"fidelity, {n}, G = 512", lambda: fidelity(p, 512), lambda: dense_fidelity(p, 512), repeats)
    )
    out.append(
        _row(
            f"expected_gradient, {n}, G = 10^6",
            lambda: expected_gradient(p, 10**6),
            None,
            repeats,
            _dense_overflows(10**6),
        )
    )
    reachable = p[(p > 1e-11) & (p < 1 - 1e-11)]  # within 3e-12 of 0 or 1 needs G > 2**40 at 5%
    out.append(
        _row(
            f"exact_group_size, {reachable.size:,} p, epsilon = 0.05",
            lambda: exact_group_size(reachable),
            None,
            repeats,
            "4 points within 3e-12 of 0 or 1 left out (they need G > 2**40)",
        )
    )
    out.append(
        _row("exact_group_size(0.5, epsilon=1e-12)", lambda: exact_group_size(0.5, 1e-12), None, repeats)
    )
    return out


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"


def markdown(table: list[dict[str, Any]]) -> str:
    """``| work | sigma-ref | baseline | ratio |``, medians with [min, max]."""
    lines = ["| work | sigma-ref | baseline | ratio |", "| --- | --- | --- | --- |"]
    for r in table:
        ours = f"{_seconds(r['ours_s'])} [{_seconds(r['ours_min_s'])}, {_seconds(r['ours_max_s'])}]"
        if r["baseline_s"] is None:
            base, ratio = r["note"] or "–", "–"
        else:
            spread = f"[{_seconds(r['baseline_min_s'])}, {_seconds(r['baseline_max_s'])}]"
            base = f"{_seconds(r['baseline_s'])} {spread}"
            ratio = f"{r['ratio']:.1f}x faster" if r["ratio"] >= 1 else f"{1 / r['ratio']:.1f}x slower"
        lines.append(f"| {r['work']} | {ours} | {base} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/10 of the prompts")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    args = parser.parse_args(argv)
    table = rows(args.quick)
    print(json.dumps(table, indent=2) if args.json else markdown(table))


if __name__ == "__main__":
    main()
