"""``sigma-ref audit --rollouts``: reading logs, the subsampled estimate, observed groups (issue 13)."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.csv as pacsv  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from benchmarks.make_rollout_log import make_log  # noqa: E402
from sigma_ref import silent_group_rate  # noqa: E402
from sigma_ref.audit import rollout_audit  # noqa: E402
from sigma_ref.cli import main  # noqa: E402
from sigma_ref.rollouts import read_rollouts, rollout_counts, subsampled_silent_rate  # noqa: E402


def _hypergeometric(n: int, k: int, G: int) -> Fraction:
    return Fraction(math.comb(k, G) + math.comb(n - k, G), math.comb(n, G))


def _write(table, path: Path) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    elif path.suffix == ".csv":
        pacsv.write_csv(table, path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in table.to_pylist()))
    return path


@pytest.fixture(scope="module")
def log_table():
    """4,000 prompts with known p, 4 groups of 8 each (128,000 rollouts), seeded."""
    return pa.table(make_log(128_000, G=8, groups=4, seed=3))


@pytest.mark.parametrize("n,G", [(n, G) for n in range(1, 13) for G in range(1, 14)], ids=lambda v: str(v))
def test_subsampled_matches_exact_hypergeometric(n: int, G: int) -> None:
    """``(C(k,G) + C(n-k,G)) / C(n,G)`` for every k, against exact integers; nan where G > n."""
    k = np.arange(n + 1)
    got = subsampled_silent_rate(np.full(k.size, n), k, G)
    if G > n:
        assert np.isnan(got).all()
        return
    want = [float(_hypergeometric(n, int(kk), G)) for kk in k]
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)


def test_subsampled_errors() -> None:
    with pytest.raises(ValueError, match="0 <= k <= n"):
        subsampled_silent_rate([4], [5], 2)
    with pytest.raises(ValueError, match="positive integer"):
        subsampled_silent_rate([4], [1], 0)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_known_p_log(log_table, tmp_path: Path, suffix: str) -> None:
    """A generated log: counts, exact subsampled estimate, observed fraction within 3 se of it."""
    path = _write(log_table, tmp_path / f"log{suffix}")
    log = read_rollouts(path, progress=False)
    assert log.rows == 128_000 and log.logged_G == 8 and log.group_source == "consecutive rows"
    assert int(log.n.sum()) == 128_000 and (log.n == 32).all()
    assert int(log.k.sum()) == int(np.asarray(log_table["reward"]).sum())
    result = rollout_audit(log, G=(16,))
    logged, target = result.silent
    assert (logged.G, target.G) == (8, 16)
    for row in (logged, target):
        exact = np.mean([float(_hypergeometric(32, int(k), row.G)) for k in log.k])
        assert row.subsampled == pytest.approx(exact, rel=1e-12)
        plug = np.mean(silent_group_rate(log.k / log.n, row.G))
        assert row.plug_in == pytest.approx(plug, rel=1e-12)
    assert logged.groups == 16_000
    assert abs(logged.observed - logged.expected) < 3 * logged.observed_se
    # and the truth: the mean of p^G + (1-p)^G over the prompts' true p
    true_p = np.asarray(log_table.group_by("prompt").aggregate([("p", "max")])["p_max"])
    truth = float(np.mean(silent_group_rate(true_p, 8)))
    assert abs(logged.subsampled - truth) < 4 * math.sqrt(truth * (1 - truth) / 4000)


def test_group_column_gives_the_same_groups(log_table, tmp_path: Path) -> None:
    """``group_col`` (a group id per row) and consecutive rows find the same groups here."""
    path = _write(log_table, tmp_path / "log.parquet")
    runs = read_rollouts(path, progress=False)
    by_col = read_rollouts(path, group_col="group", progress=False)
    assert by_col.group_source == "column group" and by_col.logged_G == 8
    assert sorted(by_col.group_k.tolist()) == sorted(runs.group_k.tolist())


def test_consecutive_runs_split_into_groups() -> None:
    """A prompt's two groups logged back to back (a run of 2G) count as two groups."""
    prompt = np.array([0, 0, 0, 0, 1, 1, 2, 2])
    correct = np.array([1, 1, 0, 0, 1, 0, 0, 0])
    n, k, gn, gk, gp = rollout_counts(prompt, correct)
    assert n.tolist() == [4, 2, 2] and k.tolist() == [2, 1, 0]
    groups = sorted(zip(gp.tolist(), gn.tolist(), gk.tolist(), strict=True))
    assert groups == [(0, 2, 0), (0, 2, 2), (1, 2, 1), (2, 2, 0)]


def test_shuffled_log_has_no_groups(tmp_path: Path) -> None:
    """Rows in random order (runs of one row) are not taken for groups; the rest still works."""
    path = tmp_path / "shuffled.csv"
    path.write_text("prompt,reward\n" + "".join(f"{i % 3},{(i // 3) % 2}\n" for i in range(30)))
    log = read_rollouts(path, progress=False)
    assert log.logged_G is None and log.group_source == ""
    result = rollout_audit(log, G=(4,))
    assert [r.G for r in result.silent] == [4] and result.silent[0].observed is None
    assert "no groups in the log" in str(result)


def test_threshold_and_booleans(tmp_path: Path) -> None:
    """Non-binary rewards need ``correct_threshold`` (correct when ``reward > T``); booleans need none."""
    path = tmp_path / "scores.csv"
    path.write_text("q,score\na,0.9\na,0.2\nb,0.5\nb,0.7\n")
    with pytest.raises(ValueError, match=r"not binary \(e\.g\. 0\.9\); pass --correct-threshold"):
        read_rollouts(path, prompt_col="q", reward_col="score")
    log = read_rollouts(path, prompt_col="q", reward_col="score", correct_threshold=0.5)
    assert log.n.tolist() == [2, 2] and log.k.tolist() == [1, 1]  # 0.5 is not > 0.5
    flags = tmp_path / "flags.jsonl"
    flags.write_text('{"prompt": 1, "reward": true}\n{"prompt": 1, "reward": false}\n')
    assert read_rollouts(flags).k.tolist() == [1]


@pytest.mark.parametrize(
    "name,text,match",
    [
        ("empty.csv", "", "is empty"),
        ("header.csv", "prompt,reward\n", "holds no rollouts"),
        ("nocol.csv", "prompt,score\na,1\n", r"no column 'reward'; the file has \['prompt', 'score'\]"),
        ("text.csv", "prompt,reward\na,1\na,yes\n", "holds string"),
        ("mixed.jsonl", '{"prompt": "a", "reward": 1}\n{"prompt": "a", "reward": "x"}\n', "mixed types"),
        ("nulls.csv", "prompt,reward\na,1\na,\n", "1 rows have no 'reward'"),
        ("log.txt", "prompt,reward\n", "cannot tell the format"),
    ],
)
def test_read_errors(tmp_path: Path, name: str, text: str, match: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_rollouts(path)


def test_missing_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        read_rollouts(tmp_path / "nope.parquet")
    folder = tmp_path / "d.parquet"
    folder.mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        read_rollouts(folder)


def test_cli_rollouts(log_table, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI prints the report (and JSON), and exits 2 with the message on a bad column."""
    path = _write(log_table, tmp_path / "log.parquet")
    assert main(["audit", "--rollouts", str(path), "--G", "16"]) == 0
    out = capsys.readouterr().out
    assert "logged G = 8" in out and "8 (logged)" in out and "Dr. GRPO (large G)" in out
    assert main(["audit", "--rollouts", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["logged_G"] == 8 and [r["G"] for r in data["silent"]] == [8, 16, 32]
    assert main(["audit", "--rollouts", str(path), "--reward-col", "score"]) == 2
    assert "no column 'score'" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_progress_bar_only_when_asked_or_on_a_terminal(
    log_table, tmp_path: Path, capsys, suffix: str
) -> None:
    """``progress=True`` draws a tqdm bar on stderr; the default draws none when stderr is not a TTY."""
    pytest.importorskip("tqdm")
    path = _write(log_table, tmp_path / f"log{suffix}")
    read_rollouts(path)
    assert capsys.readouterr().err == ""
    read_rollouts(path, progress=True)
    assert "reading rollouts" in capsys.readouterr().err
