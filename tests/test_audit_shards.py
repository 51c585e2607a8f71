"""Rollout logs in shards (issue 24, item 11, the pyarrow part): a directory or a glob of Parquet,
CSV or JSON Lines shards, reduced batch by batch, gives the same counts, groups and audit as the
same rows in one file, with groups from a column or from consecutive rows (a run split across
shards and batches included)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from sigma_ref import rollouts, shards  # noqa: E402
from sigma_ref.audit import rollout_audit  # noqa: E402
from sigma_ref.cli import main  # noqa: E402


def _columns(seed: int = 0, prompts: int = 300, G: int = 8, groups: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.5, 1.5, prompts)
    order = np.concatenate([rng.permutation(prompts) for _ in range(groups)])
    prompt = np.repeat(order, G)
    reward = (rng.random(prompt.size) < p[prompt]).astype(np.int64)
    group = np.repeat(np.arange(order.size), G) % 7  # group ids reused across prompts
    return {"prompt": np.array([f"q{i}" for i in prompt]), "reward": reward, "group": group}


def _canonical(log: rollouts.Rollouts) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]:
    names = [str(v) for v in log.prompts]
    per_prompt = sorted(zip(names, log.n.tolist(), log.k.tolist(), strict=True))
    per_group = sorted(
        zip([names[i] for i in log.group_prompt], log.group_n.tolist(), log.group_k.tolist(), strict=True)
    )
    return per_prompt, per_group


def _write(columns: dict[str, np.ndarray], folder: Path, cuts: list[int]) -> None:
    folder.mkdir()
    edges = [0, *cuts, columns["prompt"].size]
    for i, (lo, hi) in enumerate(itertools.pairwise(edges)):
        part = {name: values[lo:hi] for name, values in columns.items()}
        if i % 3 == 0:
            pq.write_table(pa.table(part), folder / f"part-{i:03d}.parquet")
        elif i % 3 == 1:
            lines = [
                json.dumps({c: v.item() for c, v in zip(part, row, strict=True)})
                for row in zip(*part.values(), strict=True)
            ]
            (folder / f"part-{i:03d}.jsonl").write_text("\n".join(lines) + "\n")
        else:
            rows = ["prompt,reward,group", *(f"{a},{b},{c}" for a, b, c in zip(*part.values(), strict=True))]
            (folder / f"part-{i:03d}.csv").write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize("group_col", [None, "group"])
def test_shards_equal_one_file(
    tmp_path: Path, group_col: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    columns = _columns()
    single = tmp_path / "all.parquet"
    pq.write_table(pa.table(columns), single)
    _write(columns, tmp_path / "shards", cuts=[1003, 2400, 2405, 5000])  # cuts inside runs of 8
    monkeypatch.setattr(rollouts, "_BATCH_ROWS", 700)  # several batches a shard, runs across them
    monkeypatch.setattr(shards, "_BATCH_ROWS", 700)
    one = rollouts.read_rollouts(str(single), group_col=group_col)
    for spec in (str(tmp_path / "shards"), str(tmp_path / "shards" / "part-*")):
        many = rollouts.read_rollouts(spec, group_col=group_col)
        assert many.rows == one.rows and many.group_source == one.group_source
        assert _canonical(many) == _canonical(one)
        assert str(rollout_audit(many)).split("\n", 1)[1] == str(rollout_audit(one)).split("\n", 1)[1]


def test_shard_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["audit", "--rollouts", str(tmp_path / "empty")]) == 2
    assert "no rollout shards" in capsys.readouterr().err
    folder = tmp_path / "mixed"
    folder.mkdir()
    pq.write_table(pa.table({"prompt": ["a", "a"], "reward": [1, 0]}), folder / "a.parquet")
    pq.write_table(pa.table({"prompt": [1, 1], "reward": [1, 0]}), folder / "b.parquet")
    assert main(["audit", "--rollouts", str(folder)]) == 2
    assert "every shard needs the same column types" in capsys.readouterr().err
    pq.write_table(pa.table({"id": ["a"], "reward": [1]}), folder / "c.parquet")
    assert main(["audit", "--rollouts", str(tmp_path / "mixed" / "c.*")]) == 2
    assert "no column 'prompt'" in capsys.readouterr().err


def test_a_file_named_like_a_glob_is_that_file(tmp_path: Path) -> None:
    pq.write_table(pa.table({"prompt": ["a", "a", "b"], "reward": [1, 0, 1]}), tmp_path / "log[1].parquet")
    pq.write_table(pa.table({"prompt": ["z"], "reward": [1]}), tmp_path / "log1.parquet")
    log = rollouts.read_rollouts(str(tmp_path / "log[1].parquet"))
    assert log.rows == 3 and not shards.is_shards(str(tmp_path / "log[1].parquet"))
    assert shards.is_shards(str(tmp_path / "log*.parquet"))
