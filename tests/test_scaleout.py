"""Level 5, the scale-out check: real torch.distributed ranks, micro-batches, accumulation.

The fast tier starts processes twice (a W = 2, M = 2 pass and the CLI at W = 1); the grid
W in {1, 2, 4} x M in {1, 2, 3}, every gallery entry, the crashing and the hung rank are
``@pytest.mark.slow``. The grid and the gallery get their reports from one launch of processes
per world size (``run_scaleout_many``, the module-scoped ``batched`` fixture, on first use);
the tests of crashing, hung and batched-with-failures ranks and of clean-up start their own.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import torch

from sigma_ref.conformance import scaleout
from sigma_ref.conformance.scaleout import (
    ScaleoutJob,
    ScaleoutReport,
    main,
    run_scaleout,
    run_scaleout_many,
)
from sigma_ref.conventions import AGGREGATION_MODES
from sigma_ref.objectives import aggregation_weights
from tests.gallery import scaleout_losses
from tests.gallery.scaleout_losses import CORRECT, WRONG

ORACLE_ADV = "sigma_ref.conformance.scaleout:oracle_advantages"
ORACLE_LOSS = "sigma_ref.conformance.scaleout:oracle_loss"
GALLERY = "tests.gallery.scaleout_losses"


def loss_with_unknown_parameter(logp, old_logp, advantages, mask, *, tokens_per_gpu):  # type: ignore[no-untyped-def]
    """A loss asking for a global the harness does not know."""
    return (logp * mask).sum() / tokens_per_gpu


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen]:
    """Every process the check starts, to verify none is left behind."""
    procs: list[subprocess.Popen] = []
    original = subprocess.Popen

    class Recording(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            procs.append(self)

    monkeypatch.setattr(scaleout.launcher.subprocess, "Popen", Recording)
    return procs


def assert_all_gone(procs: list[subprocess.Popen], n: int) -> None:
    """``n`` processes were started and every one (and its process group) is gone and reaped."""
    __tracebackhide__ = True
    assert len(procs) == n, f"{len(procs)} processes started, but should be {n}"
    for p in procs:
        assert p.returncode is not None, f"rank process {p.pid} was not waited for"
        assert not os.path.exists(f"/proc/{p.pid}"), f"rank process {p.pid} is still there"
        with pytest.raises(ProcessLookupError):
            os.killpg(p.pid, 0)


# ---------------------------------------------------------------------------
# no processes


def test_aggregation_weights_with_global_counts_by_hand() -> None:
    """Each mode's w_it on a piece of lengths 2 and 1, T = 3, of a batch of 6 tokens, 4 responses.

    The harness's prediction and oracle_loss use the oracle's weights with the whole batch's
    counts: a piece's weights are the full batch's rows.
    """
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    expected = {
        "token-mean": [[1 / 6, 1 / 6, 0], [1 / 6, 0, 0]],
        "seq-mean-token-mean": [[1 / 8, 1 / 8, 0], [1 / 4, 0, 0]],
        "seq-mean-token-sum": [[1 / 4, 1 / 4, 0], [1 / 4, 0, 0]],
        "seq-mean-token-sum-norm": [[1 / 12, 1 / 12, 0], [1 / 12, 0, 0]],
        "token-sum": [[1, 1, 0], [1, 0, 0]],
    }
    assert set(expected) == set(AGGREGATION_MODES)
    for mode, w in expected.items():
        got = aggregation_weights(mask, mode, num_tokens=6, num_seqs=4)
        torch.testing.assert_close(got, torch.tensor(w, dtype=torch.float64), msg=mode)
    full = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0, 0]])
    for mode in AGGREGATION_MODES:  # the first two rows of the full batch's weights
        got = aggregation_weights(full[:2], mode, num_tokens=7, num_seqs=4)
        torch.testing.assert_close(got, aggregation_weights(full, mode)[:2], msg=mode)
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match=r"num_tokens=.* must be a positive number"):
            aggregation_weights(mask, "token-mean", num_tokens=bad)
    with pytest.raises(ValueError, match=r"num_seqs=0 must be a positive number"):
        aggregation_weights(mask, "seq-mean-token-sum", num_seqs=0)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"world_size": 0}, ValueError, "world_size=0 must be a positive int"),
        ({"micro_batches": 0}, ValueError, "micro_batches=0"),
        ({"micro_batches": 7}, ValueError, "micro_batches=7 exceeds the 6 responses a rank holds"),
        ({"sizes": "ragged"}, ValueError, "sizes='ragged' must be one of"),
        ({"steps_per_generation": 0}, ValueError, "steps_per_generation=0 must be a positive int"),
        ({"split": "halves"}, ValueError, "split='halves' must be one of"),
        ({"loss_scale": "sum"}, ValueError, "loss_scale='sum' must be one of"),
        ({"aggregation": "mean"}, ValueError, "aggregation='mean' must be one of"),
        ({"layout": "contiguous", "split": "split-groups"}, ValueError, "split-groups' needs layout 'index'"),
        ({"layout": "rows"}, ValueError, "layout='rows' must be one of"),
        ({"loss_target": f"{GALLERY}:nothing"}, ValueError, "has no attribute 'nothing'"),
        ({"layout": "keep-mask"}, ValueError, "layout 'keep-mask' is a dynamic-sampling filter"),
        ({"loss_target": scaleout.oracle_loss}, TypeError, "must be a 'pkg.module:attr' string"),
        (
            {"loss_target": "tests.test_scaleout:loss_with_unknown_parameter"},
            TypeError,
            "required parameter 'tokens_per_gpu' the harness cannot fill",
        ),
    ],
)
def test_bad_arguments_fail_before_any_process_starts(
    kwargs: dict, error: type, words: str, started: list[subprocess.Popen]
) -> None:
    call = {"loss_target": ORACLE_LOSS, "layout": "index", "world_size": 2, "micro_batches": 2, **kwargs}
    loss = call.pop("loss_target")
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        run_scaleout(ORACLE_ADV, loss, **call)
    assert started == []


def test_a_bad_job_fails_the_batch_before_any_process_starts(started: list[subprocess.Popen]) -> None:
    good = ScaleoutJob(ORACLE_ADV, ORACLE_LOSS, layout="index")
    with pytest.raises(ValueError, match="split='halves' must be one of"):
        run_scaleout_many([good, ScaleoutJob(ORACLE_ADV, ORACLE_LOSS, layout="index", split="halves")])
    with pytest.raises(ValueError, match="world_size=0 must be a positive int"):
        run_scaleout_many([good], world_size=0)
    assert run_scaleout_many([]) == []
    assert started == []


def _synthetic(factors: dict[tuple[int, int], float], *, mode: str = "token-mean") -> dict:
    """Runs whose gradient at (w, m) is ``factors[(w, m)]`` (default 1) times the full batch's.

    Only the analysis is under test here; the processes are tested below.
    """
    batch = scaleout._design_batch(0, 4)
    adv = scaleout.oracle_advantages(torch.tensor(batch.rewards), batch.index).numpy()
    g = scaleout._prediction(batch, adv, mode)
    keys = [(1, 1), (2, 2), (1, 2), (1, 3), (2, 1)]
    runs = {
        (w, m, "whole-groups"): {"grad": g * factors.get((w, m), 1.0), "advantages": adv} for w, m in keys
    }
    return {"runs": runs, "batch": batch}


@pytest.mark.parametrize(
    ("factors", "words"),
    [
        (
            {(2, 2): 0.5, (2, 1): 0.5},
            "world size not applied: the accumulated, rank-averaged gradient is 0.5x",
        ),
        (
            {(2, 2): 1.7, (2, 1): 1.7},
            "token count not gathered across ranks: the rank-averaged gradient is 1.7x",
        ),
        ({(2, 2): 0.8}, "the normaliser depends on ranks and micro-batches jointly"),
    ],
)
def test_diagnosis_names_the_class_the_probes_show(factors: dict, words: str) -> None:
    s = _synthetic(factors)
    results = scaleout._analyse(
        s["runs"],
        s["batch"],
        W=2,
        Ms=(2,),
        split="whole-groups",
        aggregation="token-mean",
        loss_scale="none",
    )
    by_name = {r.property: r for r in results}
    grad = by_name["scaleout_gradient[W=2,M=2]"]
    assert grad.verdict == "FAIL" and words in grad.message, grad.message
    assert grad.factor == pytest.approx(factors[(2, 2)], rel=1e-12)
    assert by_name["scaleout_prediction[token-mean,W=2,M=2]"].verdict == "FAIL"


@pytest.mark.parametrize(
    ("factors", "declared", "right", "words"),
    [
        (
            {(2, 2): 0.5, (1, 2): 0.5, (1, 3): 1 / 3},
            "mean-over-micro-batches",
            "none",
            "Declared loss_scale='mean-over-micro-batches', under which it is 0.5x",
        ),
        ({(2, 2): 2.0, (1, 2): 2.0, (1, 3): 3.0}, "none", "mean-over-micro-batches", "under which it is 2x"),
        ({}, "none", "none", ""),
    ],
)
def test_the_accumulation_reading_is_measured_not_declared(
    factors: dict, declared: str, right: str, words: str
) -> None:
    """A gradient 1/M (M) times the full batch's under the declared reading is exactly right under the
    other: the verdict is PASS under the reading it is right under, and the summary says which."""
    s = _synthetic(factors)
    results = scaleout._analyse(
        s["runs"],
        s["batch"],
        W=2,
        Ms=(2,),
        split="whole-groups",
        aggregation="token-mean",
        loss_scale=declared,
    )
    assert [r.verdict for r in results] == ["pass", "pass", "pass"], [r.message for r in results]
    grad = results[1].message
    assert f"right under loss_scale={right!r}" in grad and words in grad, grad
    assert ("Declared" in grad) == (right != declared)


def test_undeclared_aggregation_is_detected_and_noted() -> None:
    s = _synthetic({}, mode="seq-mean-token-mean")
    results = scaleout._analyse(
        s["runs"], s["batch"], W=2, Ms=(2,), split="whole-groups", aggregation=None, loss_scale="none"
    )
    assert [r.verdict for r in results] == ["pass", "NOTE", "pass"]
    assert "detected on the full batch: seq-mean-token-mean" in results[1].message
    declared = scaleout._analyse(
        s["runs"], s["batch"], W=2, Ms=(2,), split="whole-groups", aggregation="token-mean", loss_scale="none"
    )
    assert "the loss does not aggregate as declared" in declared[-1].message
    assert "detected on the full batch: seq-mean-token-mean" in declared[-1].message


def test_an_adapter_brings_its_layout_and_loss() -> None:
    from tests.gallery.correct import dapo_adapter, token_mean_loss

    adapter, loss = scaleout._resolve("tests.gallery.correct:dapo_adapter", None, None)
    assert (adapter.advantages, adapter.layout, loss) == (
        dapo_adapter.advantages,
        "contiguous",
        token_mean_loss,
    )
    assert adapter == dapo_adapter  # the Adapter itself, hooks and all: the ranks call it as the suite does


# ---------------------------------------------------------------------------
# real processes, fast tier


def test_oracle_passes_at_w2_m2_within_budget(started: list[subprocess.Popen]) -> None:
    """The oracle's advantages and loss: every property passes; the check takes under 60 s."""
    t0 = time.monotonic()
    report = run_scaleout(
        ORACLE_ADV, ORACLE_LOSS, layout="index", aggregation="token-mean", world_size=2, micro_batches=2
    )
    elapsed = time.monotonic() - t0
    assert report.passed, report.summary()
    assert [r.property for r in report.results] == [
        "scaleout_advantages[whole-groups,W=2]",
        "scaleout_gradient[W=2,M=2]",
        "scaleout_prediction[token-mean,W=2,M=2]",
    ]
    assert all(abs(r.factor - 1) < 1e-9 for r in report.results if r.factor is not None)
    assert report.backend == "gloo" or torch.cuda.is_available()
    assert elapsed < 60, f"W=2, M=2 took {elapsed:.1f} s, but the budget is 60 s"
    assert_all_gone(started, 2)


@pytest.mark.slow
@pytest.mark.cuda
def test_oracle_passes_on_nccl_ranks(started: list[subprocess.Popen]) -> None:
    """With a CUDA device per rank the ranks talk over nccl (as trainers' do) and the oracle passes;
    skipped without CUDA (one GPU: W = 1, the micro-batches on the device)."""
    world_size = min(2, torch.cuda.device_count())
    report = run_scaleout(
        ORACLE_ADV,
        ORACLE_LOSS,
        layout="index",
        aggregation="token-mean",
        world_size=world_size,
        micro_batches=2,
        backend="nccl",
    )
    assert report.backend == "nccl"
    assert report.passed, report.summary()
    assert_all_gone(started, world_size)


def test_crashing_rank_fails_at_once_and_leaves_no_process(started: list[subprocess.Popen]) -> None:
    """Rank 1 raises while rank 0 waits in all_reduce: a FAIL naming rank 1, long before the timeout."""
    t0 = time.monotonic()
    report = run_scaleout(
        ORACLE_ADV, f"{GALLERY}:raises_on_rank_1", layout="index", world_size=2, micro_batches=2, timeout=60
    )
    assert time.monotonic() - t0 < 45
    assert not report.passed
    (result,) = report.results
    assert result.verdict == "FAIL"
    assert "rank 1 failed: RuntimeError: CUDA out of memory (planted on rank 1)" in result.message
    assert_all_gone(started, 2)


def test_cli_names_the_bug_class_with_its_factor(capsys: pytest.CaptureFixture[str]) -> None:
    """One rank, M = 2: verl's old seq-mean-token-sum-norm (no 1/N_seq) FAILs its declared aggregation,
    under either reading of the trainer's 1/M; exit code 1."""
    code = main(
        [
            "--impl",
            ORACLE_ADV,
            "--layout",
            "index",
            "--loss",
            f"{GALLERY}:sum_norm_per_micro_batch",
            "--aggregation",
            "seq-mean-token-sum-norm",
            "--loss-scale",
            "mean-over-micro-batches",
            "--world-size",
            "1",
            "--micro-batches",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    # its micro-batch sums add up to its own full-batch sum: right under the reading 'none', 0.5x under
    # the declared 1/M; the verdict comes from the aggregation, not from the declaration
    assert "pass scaleout_gradient[W=1,M=2]" in out and "right under loss_scale='none'" in out
    assert "Declared loss_scale='mean-over-micro-batches', under which it is 0.5x" in out
    assert "FAIL scaleout_prediction[seq-mean-token-sum-norm,W=1,M=2]" in out
    assert "the loss does not aggregate as declared" in out
    bad = ["--impl", ORACLE_ADV, "--layout", "grouped", "--loss", ORACLE_LOSS, "--split", "split-groups"]
    assert main(bad) == 2
    assert "split='split-groups' needs layout 'index'" in capsys.readouterr().err


def test_scaleout_arguments_come_from_the_option_table() -> None:
    import argparse

    p = argparse.ArgumentParser()
    scaleout.add_scaleout_arguments(p)
    args = p.parse_args(["--micro-batches", "1,2,3"])
    assert args.micro_batches == (1, 2, 3) and args.world_size is None
    assert (args.split, args.loss_scale, args.backend) == ("whole-groups", "none", "auto")
    with pytest.raises(SystemExit):
        p.parse_args(["--micro-batches", "0"])


# ---------------------------------------------------------------------------
# real processes, slow tier

#: Every correct entry runs on the whole grid: W in {1, 2, 4} x M in {1, 2, 3}.
GRID_CASES = CORRECT
GRID_MS = (1, 2, 3)
#: What each world size's launch runs: (case, M), in this order.
BATCHES: dict[int, list[tuple[scaleout_losses.Case, int | tuple[int, ...]]]] = {
    1: [(c, GRID_MS) for c in GRID_CASES],
    2: [(c, GRID_MS) for c in GRID_CASES] + [(c, 2) for c in WRONG],
    4: [(c, GRID_MS) for c in GRID_CASES],
}


class Batched:
    """The slow tier's reports: one launch per world size (``run_scaleout_many``), on first use."""

    def __init__(self) -> None:
        self.reports: dict[tuple[str, int, int | tuple[int, ...]], ScaleoutReport] = {}
        self.launched: set[int] = set()

    def report(
        self, case: scaleout_losses.Case, world_size: int, micro_batches: int | tuple[int, ...]
    ) -> ScaleoutReport:
        """``case``'s report at ``world_size`` and ``micro_batches``, as ``run_scaleout`` gives it."""
        if world_size not in self.launched:
            self.launched.add(world_size)
            batch = BATCHES[world_size]
            jobs = [ScaleoutJob(c.advantages, c.loss, micro_batches=m, **c.kwargs()) for c, m in batch]
            for (c, m), report in zip(batch, run_scaleout_many(jobs, world_size=world_size), strict=True):
                self.reports[(c.name, world_size, m)] = report
        return self.reports[(case.name, world_size, micro_batches)]


@pytest.fixture(scope="module")
def batched() -> Batched:
    return Batched()


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("case", GRID_CASES, ids=lambda c: c.name)
def test_correct_pass_on_the_grid(case, world_size: int, batched: Batched) -> None:  # type: ignore[no-untyped-def]
    """The oracle and the correct gallery losses pass at W in {1, 2, 4} and M in {1, 2, 3}."""
    report = batched.report(case, world_size, GRID_MS)
    assert report.passed, report.summary()
    assert sum(r.property.startswith("scaleout_gradient") for r in report.results) == 3


@pytest.mark.slow
@pytest.mark.parametrize("case", WRONG, ids=lambda c: c.name)
def test_wrong_fail_naming_the_bug_class(case, batched: Batched) -> None:  # type: ignore[no-untyped-def]
    report = batched.report(case, 2, 2)
    assert not report.passed, report.summary()
    failed = " | ".join(r.message for r in report.results if r.verdict == "FAIL")
    for words in case.expect:
        assert words in failed, f"{words!r} not in: {failed}"


@pytest.mark.slow
def test_a_batch_isolates_a_raising_and_a_hung_job(started: list[subprocess.Popen]) -> None:
    """In one batch, a job whose rank raises and one whose rank hangs get the FAILs they get alone; the
    jobs after each run in fresh processes and get their own verdicts, equal to a run alone; every
    process of the three launches is gone."""
    wrong = {c.name: c for c in WRONG}
    micro, rank, no_dp = (wrong[n] for n in ("token_mean_micro", "token_mean_rank", "token_mean_no_dp_size"))
    jobs = [
        ScaleoutJob(micro.advantages, micro.loss, **micro.kwargs()),
        ScaleoutJob(ORACLE_ADV, f"{GALLERY}:raises_on_rank_1", layout="index", timeout=60),
        ScaleoutJob(rank.advantages, rank.loss, **rank.kwargs()),
        ScaleoutJob(ORACLE_ADV, f"{GALLERY}:sleeps_on_rank_1", layout="index", timeout=5),
        ScaleoutJob(no_dp.advantages, no_dp.loss, **no_dp.kwargs()),
    ]
    reports = run_scaleout_many(jobs, world_size=2)
    assert_all_gone(started, 6)  # the first launch ends at the raising job, the second at the hung one
    (crash,) = reports[1].results
    assert crash.property == "scaleout[W=2,M=2]" and crash.verdict == "FAIL"
    assert "rank 1 failed: RuntimeError: CUDA out of memory (planted on rank 1)" in crash.message
    (hang,) = reports[3].results
    assert hang.verdict == "FAIL"
    assert "a rank hung: no result within the timeout of 5 s" in hang.message
    assert "rank 1 in the loss at W=2, M=2" in hang.message
    for case, report in zip((micro, rank, no_dp), reports[::2], strict=True):
        failed = " | ".join(r.message for r in report.results if r.verdict == "FAIL")
        for words in case.expect:
            assert words in failed, f"{case.name}: {words!r} not in: {failed}"
    alone = run_scaleout(micro.advantages, micro.loss, world_size=2, micro_batches=2, **micro.kwargs())
    assert reports[0].results == alone.results  # the same properties, verdicts, factors and messages
    assert_all_gone(started, 8)


@pytest.mark.slow
def test_hung_rank_fails_within_the_timeout(started: list[subprocess.Popen]) -> None:
    """Rank 1 sleeps forever in its loss: a FAIL within the timeout; no process is left."""
    timeout = 25.0
    t0 = time.monotonic()
    report = run_scaleout(
        ORACLE_ADV,
        f"{GALLERY}:sleeps_on_rank_1",
        layout="index",
        world_size=2,
        micro_batches=2,
        timeout=timeout,
    )
    elapsed = time.monotonic() - t0
    assert elapsed < timeout + 10, f"took {elapsed:.1f} s"
    (result,) = report.results
    assert result.verdict == "FAIL"
    assert "a rank hung" in result.message and "rank 1 in the loss at W=2, M=2" in result.message
    assert_all_gone(started, 2)


@pytest.mark.parametrize(
    ("factor", "precision", "verdicts"),
    [
        (1 + 2e-8, "float64", ["pass", "WARN", "WARN"]),  # AReaL's float32 weight: rounding, not a class
        (1 + 2e-8, "float32", ["pass", "pass", "pass"]),
        (1 + 1e-4, "float64", ["pass", "FAIL", "FAIL"]),  # beyond float32's roundings: a real factor
        (1 + 1e-4, "float32", ["pass", "FAIL", "FAIL"]),
    ],
)
def test_a_rounding_level_gap_is_a_warning_and_the_working_precision_is_the_tolerance(
    factor: float, precision: str, verdicts: list[str]
) -> None:
    """A split gradient off by float32 roundings (a float32 count or weight in a float64 loss) is a
    WARN naming no normaliser under float64, a pass at a declared float32 working precision; a
    1e-4 factor FAILs under both."""
    s = _synthetic({(2, 2): factor})
    results = scaleout._analyse(
        s["runs"],
        s["batch"],
        W=2,
        Ms=(2,),
        split="whole-groups",
        aggregation="token-mean",
        loss_scale="none",
        loss_precision=precision,
    )
    assert [r.verdict for r in results] == verdicts, [r.line() for r in results]
    for r in results:
        if r.verdict == "WARN":
            assert "float32's rounding level" in r.message and "normaliser computed" not in r.message
