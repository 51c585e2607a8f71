"""Write a seeded synthetic rollout log with known per-prompt pass rates (for timing the audit).

``python benchmarks/make_rollout_log.py OUT.parquet|OUT.csv|OUT.jsonl --rows 10000000 --G 8``

Each prompt gets ``p ~ Beta(0.5, 1.5)`` (mostly hard, as math corpora are), and appears in
``groups`` groups of ``G`` consecutive rows (one group per training step); rewards are
Bernoulli(p) as 0.0/1.0. Columns: ``prompt`` (string id), ``step``, ``group`` (int),
``reward`` (float64), ``p`` (the true pass rate, for tests).
"""

from __future__ import annotations

import argparse

import numpy as np


def make_log(rows: int, G: int = 8, groups: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    """The log's columns: ``rows`` rollouts in groups of ``G``, ``groups`` groups per prompt."""
    rng = np.random.default_rng(seed)
    n_groups = rows // G
    prompts = max(1, n_groups // groups)
    p = rng.beta(0.5, 1.5, size=prompts)
    # step s holds one group of every prompt, in a shuffled order
    order = np.concatenate([rng.permutation(prompts) for _ in range(groups)])[:n_groups]
    prompt_of_row = np.repeat(order, G)
    reward = (rng.random(prompt_of_row.size) < p[prompt_of_row]).astype(np.float64)
    return {
        "prompt": np.char.add("prompt-", prompt_of_row.astype(str)),
        "step": np.repeat(np.arange(n_groups) // prompts, G),
        "group": np.repeat(np.arange(n_groups), G),
        "reward": reward,
        "p": p[prompt_of_row],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--G", type=int, default=8)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import pyarrow as pa

    table = pa.table(make_log(args.rows, args.G, args.groups, args.seed))
    if args.out.endswith(".parquet"):
        import pyarrow.parquet as pq

        pq.write_table(table, args.out)
    elif args.out.endswith(".csv"):
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, args.out)
    else:
        import json

        with open(args.out, "w", encoding="utf-8") as out:
            for row in table.to_pylist():
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
