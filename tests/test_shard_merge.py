"""The shard reduction is one function and one merge (issue 24): :func:`shard_counts` per shard,
:func:`merge_shard_counts` in shard order, equal to the one-file reduction
(:func:`sigma_ref.rollouts.rollout_counts`) at any cut of the rows into shards and batches: a run
of one prompt continued over several shards (a shard inside it, empty shards between), a run of
``m G`` rows split into ``m`` groups when it spans shards, and a run left open at the log's end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from sigma_ref import rollouts, shards  # noqa: E402
from tests.test_audit_shards import _canonical  # noqa: E402

G = 4


def _log(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Runs of one prompt of G (most), 2G, 3G or 3 rows; prompts recur; 0/1 rewards."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice([G, G, G, G, 2 * G, 3 * G, 3], size=60)
    prompt = np.repeat(rng.permutation(60) % 23, lengths)  # neighbouring runs may share a prompt
    return prompt, (rng.random(prompt.size) < 0.4).astype(np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_any_cut_into_shards_and_batches_equals_one_file(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt, reward = _log(seed)
    names = np.array([f"p{i}" for i in prompt])
    rng = np.random.default_rng(100 + seed)
    cuts = np.sort(rng.integers(0, prompt.size + 1, size=9))  # repeats: empty shards
    edges = [0, *cuts.tolist(), prompt.size]
    for i in range(len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        pq.write_table(
            pa.table({"prompt": names[lo:hi], "reward": reward[lo:hi]}), tmp_path / f"s{i:02d}.parquet"
        )
    monkeypatch.setattr(shards, "_BATCH_ROWS", int(rng.integers(3, 40)))
    merged = shards.read_rollout_shards(str(tmp_path))
    _, codes, inverse = np.unique(names, return_index=True, return_inverse=True)
    n, k, group_n, group_k, group_prompt = rollouts.rollout_counts(inverse, reward)
    assert merged.rows == prompt.size and merged.group_source == "consecutive rows"
    one = rollouts.Rollouts("one", prompt.size, names[codes], n, k, group_n, group_k, group_prompt, "")
    assert _canonical(merged) == _canonical(one)


def test_shard_counts_of_one_run_and_the_merge(tmp_path: Path) -> None:
    """A shard that is all one prompt carries it on (no tail); the merge joins it to its
    neighbours, and a joined run of 2 G rows is 2 groups of G."""
    rows = {"a": ["x"] * 2, "b": ["y"] * 6, "c": ["y"] * 2 + ["z"] * 4 + ["y"] * 1}
    rewards = {"a": [1, 1], "b": [1, 0, 1, 1, 0, 0], "c": [1, 1, 0, 0, 0, 0, 1]}
    for name in rows:
        pq.write_table(
            pa.table({"prompt": rows[name], "reward": rewards[name]}), tmp_path / f"{name}.parquet"
        )
    parts = [shards.shard_counts(str(tmp_path / f"{name}.parquet"), G=G) for name in rows]
    assert parts[1].tail_prompt == -1 and parts[1].head.tolist() == [1, 0, 1, 1, 0, 0]
    assert (
        parts[2].head.tolist() == [1, 1]
        and parts[2].runs[1].tolist() == [4]
        and parts[2].tail.tolist() == [1]
    )
    log = shards.merge_shard_counts(parts, path=str(tmp_path), G=G)
    assert (
        log.prompts.tolist() == ["x", "y", "z"]
        and log.n.tolist() == [2, 9, 4]
        and log.k.tolist() == [2, 6, 0]
    )
    assert list(zip(log.group_prompt.tolist(), log.group_n.tolist(), log.group_k.tolist(), strict=True)) == [
        (0, 2, 2),  # x: its own run
        (1, 4, 3),  # y: 6 + 2 rows across shards b and c, 8 = 2 G: two groups of G
        (1, 4, 2),
        (2, 4, 0),  # z
        (1, 1, 1),  # y again at the end: the run left open
    ]
