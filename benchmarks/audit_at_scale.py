"""The rollout audit at scale (issue 24): a log of ``--rows`` rollouts in ``--shards`` Parquet
shards with known pass rates, audited by ``sigma-ref audit --rollouts DIR --json`` in a child
process; prints the wall time, the child's peak resident memory and the audit's silent rates
against the truth.

``python benchmarks/audit_at_scale.py --rows 100000000 --shards 100 [--engine ray] [--dir DIR]``

The log is :func:`benchmarks.make_rollout_log.make_log`'s, written a shard at a time: prompts
with ``p ~ Beta(0.5, 1.5)``, ``--groups`` groups of ``--G`` consecutive rows per prompt (one
group of every prompt per step, in shuffled order), rewards Bernoulli(p) as 0.0/1.0, the prompt
ids strings (``prompt-123``). Shard boundaries fall inside groups (``rows / shards`` need not be a
multiple of ``G``), so runs are joined across shards. ``--dir`` keeps the shards (and reuses
them when a previous run wrote the same log there; ``DIR.json`` beside it says which).

Peak memory: the child's ``VmHWM`` (its largest RSS; Linux), or the largest RSS of a process it
waited for if larger (with ``--engine ray``: of the driver, or of one Ray process, not their
sum). The truth at each ``G``: the mean over prompts of ``p**G + (1-p)**G`` with the generating
``p``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def write_shards(
    folder: Path, rows: int, shards: int, *, G: int = 8, groups: int = 4, seed: int = 0
) -> np.ndarray:
    """Write the log's ``shards`` Parquet files to ``folder``; return the prompts' true ``p``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    n_groups = rows // G
    prompts = max(1, n_groups // groups)
    p = rng.beta(0.5, 1.5, size=prompts)
    steps = -(-n_groups // prompts)
    order = np.concatenate([rng.permutation(prompts).astype(np.int32) for _ in range(steps)])[:n_groups]
    edges = np.linspace(0, n_groups * G, shards + 1).astype(np.int64)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(shards):
        lo, hi = int(edges[i]), int(edges[i + 1])
        first = lo // G
        prompt = np.repeat(order[first : -(-hi // G)], G)[lo - first * G : hi - first * G]
        draw = np.random.default_rng([seed, i]).random(prompt.size)
        ids = pc.binary_join_element_wise("prompt-", pc.cast(pa.array(prompt), pa.string()), "")
        table = pa.table({"prompt": ids, "reward": (draw < p[prompt]).astype(np.float64)})
        pq.write_table(table, folder / f"part-{i:05d}.parquet")
    return p


#: The child: the audit, then its peak RSS on stderr: ``VmHWM`` of its own memory (Linux; its
#: ``ru_maxrss`` would include the parent's RSS at the fork) and the largest ``ru_maxrss`` of
#: the processes it waited for (Ray's, with ``--engine ray``).
CHILD = """import resource, sys
from sigma_ref.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
with open("/proc/self/status") as status:
    own = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
peak = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(f"peak_kb={peak}", file=sys.stderr)
sys.exit(code)
"""


#: The CPU seconds of the last :func:`audit` child.
CPU = [0.0]


def audit(folder: Path, G: list[int], engine: str) -> tuple[float, float, dict[str, object]]:
    """Run the audit in a child process: ``(wall seconds, peak RSS in MB, the JSON report)``;
    the child's CPU seconds (user + system, its own children's included) are in ``CPU[0]``."""
    sizes = [str(g) for g in G]
    command = [sys.executable, "-c", CHILD, "audit", "--rollouts", str(folder), "--json"]
    command += ["--G", *sizes, "--engine", engine]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[0] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode:
        raise SystemExit(f"the audit exited {done.returncode}: {done.stderr.strip()}")
    peak_kb = int(done.stderr.strip().splitlines()[-1].removeprefix("peak_kb="))  # kilobytes on Linux
    return wall, peak_kb / 1024, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--G", type=int, default=8, help="the logged group size")
    parser.add_argument("--groups", type=int, default=4, help="groups per prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine", default="pyarrow", help="pyarrow (default) or ray")
    parser.add_argument("--dir", type=Path, help="write (or reuse) the shards here and keep them")
    parser.add_argument("--report", type=Path, help="also write the audit's JSON report here")
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="sigma-ref-shards-"))
    stamp = folder.parent / f"{folder.name}.json"  # beside the shards: a .json in it would be one
    spec = {"rows": args.rows, "shards": args.shards, "G": args.G, "groups": args.groups, "seed": args.seed}
    try:
        start = time.perf_counter()
        if stamp.exists() and json.loads(stamp.read_text())["spec"] == spec:
            p = np.asarray(json.loads(stamp.read_text())["p"])
            print(f"reusing the shards in {folder}")
        else:
            p = write_shards(folder, args.rows, args.shards, G=args.G, groups=args.groups, seed=args.seed)
            if args.dir:
                stamp.write_text(json.dumps({"spec": spec, "p": p.tolist()}))
            size = sum(f.stat().st_size for f in folder.glob("*.parquet"))
            took = time.perf_counter() - start
            print(f"wrote {args.shards} shards, {size / 2**20:,.0f} MiB, in {took:.1f} s")
        sizes = sorted({args.G, 2 * args.G, 4 * args.G})
        wall, peak, report = audit(folder, sizes, args.engine)
        if args.report:
            args.report.write_text(json.dumps(report, indent=2) + "\n")
        print(
            f"{args.rows:,} rows, {len(p):,} prompts, {args.shards} shards, engine {args.engine}: "
            f"{wall:.1f} s ({CPU[0]:.1f} s CPU), peak RSS {peak:,.0f} MB ({os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.1f})"
        )
        rows: list[dict[str, float]] = report["silent"]  # type: ignore[assignment]
        for row in rows:
            truth = float(np.mean(p ** row["G"] + (1 - p) ** row["G"]))
            print(
                f"  G = {row['G']:>3}: silent rate subsampled {row['subsampled']:.4%} "
                f"(se {row['subsampled_se']:.4%}), truth {truth:.4%}"
            )
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
