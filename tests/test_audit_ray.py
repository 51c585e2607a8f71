"""``sigma-ref audit --rollouts SHARDS --engine ray`` (issue 24, item 11): one Ray task per shard
on a local Ray cluster, merged by the default engine's own function, gives the identical report
(text and JSON) on a directory of mixed-format shards cut inside groups, with groups from a
column or from consecutive rows; and each of its errors is one line naming the fix: an unknown
engine, one file, Ray absent (exit 3), a bad shard (the default engine's message, exit 2), a
task that fails otherwise or a cluster that cannot be had (exit 4).

The Ray tests start one local cluster for the module (about 8 s on two busy cores) and skip,
with the reason, where Ray is not installed (the ``ray`` extra; ``make peers`` installs it)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from sigma_ref import rollouts, shards  # noqa: E402
from sigma_ref.cli import ENGINE_FAILED, MISSING_EXTRA, main  # noqa: E402
from tests.test_audit_shards import _canonical, _columns, _write  # noqa: E402

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is not installed: pip install 'sigma-ref[ray]'"
)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """One local Ray cluster for the module (map_shards joins it rather than starting its own)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mixed Parquet / JSONL / CSV shards of one log, cut inside groups of 8."""
    root = tmp_path_factory.mktemp("ray")
    _write(_columns(seed=3), root / "shards", cuts=[1003, 2400, 2405, 5000, 6100])
    return root / "shards"


def _run(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    code = main(list(words))
    out, err = capsys.readouterr()
    return code, out, err


@needs_ray
@pytest.mark.parametrize("group_col", [None, "group"])
def test_ray_engine_gives_the_default_engines_report(
    ray_cluster: None, folder: Path, group_col: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--group-col", group_col] if group_col else []
    for form in ([], ["--json"]):
        base = ["audit", "--rollouts", str(folder), *extra, *form]
        code, default, _ = _run(capsys, *base)
        assert code == 0
        code, by_ray, err = _run(capsys, *base, "--engine", "ray")
        assert code == 0, err
        assert by_ray == default
    many = rollouts.read_rollouts(str(folder), group_col=group_col, engine="ray")
    one = rollouts.read_rollouts(str(folder), group_col=group_col)
    assert many.rows == one.rows and _canonical(many) == _canonical(one)
    assert np.array_equal(many.n, one.n) and np.array_equal(many.group_prompt, one.group_prompt)


@needs_ray
def test_ray_engine_a_bad_shard_is_the_default_engines_error(
    ray_cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq.write_table(pa.table({"prompt": ["a", "a"], "reward": [1.0, 0.0]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"prompt": ["b", "b"], "reward": [0.5, 0.0]}), tmp_path / "b.parquet")
    code, _, default = _run(capsys, "audit", "--rollouts", str(tmp_path))
    assert code == 2 and "not binary" in default
    code, out, err = _run(capsys, "audit", "--rollouts", str(tmp_path), "--engine", "ray")
    assert (code, out, err) == (2, "", default)


@needs_ray
def test_ray_task_failing_is_one_line(ray_cluster: None, tmp_path: Path) -> None:
    from sigma_ref.ray_engine import EngineError, map_shards

    gone = str(tmp_path / "gone.parquet")  # listed, then removed before its task reads it
    failed = r"^the Ray task reducing .*gone\.parquet failed \(.*drop --engine ray"
    with pytest.raises(EngineError, match=failed):
        list(map_shards([gone], {"G": 8}))


@needs_ray
def test_ray_cluster_that_cannot_start_is_one_line(
    folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    def refuse(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Could not find any running Ray instance.\nmore detail")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    code, out, err = _run(capsys, "audit", "--rollouts", str(folder), "--engine", "ray")
    assert (code, out) == (ENGINE_FAILED, "")
    assert err.count("\n") == 1 and "RAY_ADDRESS=10.0.0.1:6379" in err and "ray status" in err


def test_without_ray_engine_ray_names_the_extra(
    folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code, out, err = _run(capsys, "audit", "--rollouts", str(folder), "--engine", "ray")
    assert (code, out) == (MISSING_EXTRA, "")
    assert err == "sigma-ref audit: --engine ray needs Ray; install it: pip install 'sigma-ref[ray]'\n"


def test_engine_errors_are_one_line(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "audit", "--rollouts", str(folder), "--engine", "spark")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "--engine 'spark' is not an engine; use --engine pyarrow (the default) or --engine ray" in err
    one = next(folder.glob("*.parquet"))
    code, out, err = _run(capsys, "audit", "--rollouts", str(one), "--engine", "ray")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "reduces a directory or glob of shards" in err and str(one) in err
    with pytest.raises(ValueError, match="engine='spark' is not an engine"):
        shards.read_rollout_shards(str(folder), engine="spark")
    with pytest.raises(ValueError, match="engine=None is not an engine"):
        rollouts.read_rollouts(str(folder), engine=None)  # type: ignore[arg-type]
