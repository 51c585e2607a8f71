"""Level 5's sequence packing and pre-scaled advantages (issue 19, item 3).

The unit tests start no process. One fast test starts one launch of two ranks (W = 2, M = 2) for
a correct and a wrong entry of each pattern; the grid W in {1, 2, 4} x M in {1, 2, 3} of every
entry of both patterns (one launch per W) is ``@pytest.mark.slow``.
"""

from __future__ import annotations

import argparse
import re
import time
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from sigma_ref.conformance import normalisers as nz
from sigma_ref.conformance import packing as pk
from sigma_ref.conformance import scaleout as so
from sigma_ref.conformance.launch import ScaleoutOptions, check_options
from sigma_ref.conformance.scaleout import ScaleoutJob, run_scaleout_many
from sigma_ref.objectives import aggregation_weights
from tests.gallery import normalisers as gallery
from tests.gallery import scaleout_losses

ADV = "sigma_ref.conformance.scaleout:oracle_advantages"
PATTERNS = ("sequence packing", "aggregation folded into the advantages")
ENTRIES = [e for p in PATTERNS for side in gallery.PATTERNS[p] for e in side]


def _job(entry: gallery.Entry, micro_batches: Any = (1, 2, 3)) -> ScaleoutJob:
    return ScaleoutJob(ADV, entry.loss, micro_batches=micro_batches, **entry.kwargs())


def _entry(name: str) -> gallery.Entry:
    return next(e for e in ENTRIES if e.name == name)


# ---------------------------------------------------------------------------
# the packing itself


def _segments(packing: pk.Packing) -> tuple[np.ndarray, np.ndarray]:
    """Each slot's response, from the position_ids restarts and from cu_seqlens, independently."""
    from_ids = np.cumsum(packing.position_ids.reshape(-1) == 0) - 1
    slots = np.arange(packing.position_ids.size)
    from_cu = np.searchsorted(packing.cu_seqlens[1:], slots, side="right")
    return from_ids, from_cu


@pytest.mark.parametrize("capacity", [8, 11, 16, 40])
def test_both_boundaries_cut_one_segment_per_response_holding_its_tokens(capacity: int) -> None:
    rng = np.random.default_rng(capacity)
    lengths = rng.integers(1, 9, size=13)
    p = pk.pack(lengths, capacity, horizon=8)
    from_ids, from_cu = _segments(p)
    assert (from_ids == from_cu).all()
    assert from_ids.max() == len(lengths) - 1 and p.order == list(range(len(lengths)))
    x = torch.arange(13 * 8, dtype=torch.float64).reshape(13, 8)
    packed = pk.pack_tensor(x, p, fill=-1.0).reshape(-1)
    for i, length in enumerate(lengths):
        slots = packed[torch.as_tensor(from_ids == i)]
        assert slots[:length].tolist() == x[i, :length].tolist(), i  # its tokens, in order
        assert (slots[length:] == -1.0).all()  # then only the row's padding
    assert all(sum(lengths[row]) <= capacity for row in p.rows)
    assert p.cu_seqlens[-1] == len(p.rows) * capacity


def test_pack_tensor_carries_the_gradient() -> None:
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    p = pk.pack([2, 4, 1], capacity=6, horizon=4)
    pk.pack_tensor(x, p).sum().backward()
    assert x.grad is not None
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float64)
    assert torch.equal(x.grad, expected)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: pk.pack([3, 9], capacity=8), "does not fit a row of capacity=8"),
        (lambda: pk.pack([3, 0], capacity=8), "must be >= 1"),
        (lambda: pk.pack([3], capacity=0), "capacity=0 must be a positive int"),
        (lambda: pk.pack_tensor(torch.zeros(2, 3), pk.pack([1], 4, 3)), "holds 1 responses of width 3"),
        (lambda: pk.row_weights([[1.0]], "token-mean", [0], num_seqs=1), "token-mean and token-sum"),
    ],
)
def test_errors_name_the_argument_and_the_fix(call: Any, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        call()


def test_levels_0_to_4_give_a_packed_loss_one_response_per_row() -> None:
    """The suite's one loss call path (inputs._loss_inputs) passes the unpacked boundaries: a packed
    loss then computes what its unpacked twin computes."""
    from sigma_ref.conformance.inputs import Policy, _loss_inputs

    pol = Policy.make(8, 0)
    logp = pol.logp()
    adv = torch.linspace(-1.5, 2.0, 8, dtype=torch.float64)
    for loss in (gallery.packed_seq_mean, gallery.packed_seq_mean_varlen):
        ctx = SimpleNamespace(adapter=SimpleNamespace(loss=loss, aggregation=None))
        old, extra = _loss_inputs(ctx, logp, pol.mask, None)  # type: ignore[arg-type]
        assert set(extra) == {"global_num_seqs", "world_size", loss.__code__.co_varnames[4]}
        got = loss(logp, old, adv, pol.mask, **extra)
        want = scaleout_losses.seq_mean_token_mean(logp, old, adv, pol.mask, global_num_seqs=8, world_size=1)
        assert torch.allclose(got, want, rtol=1e-14, atol=0)


def test_levels_0_to_4_hand_the_loss_the_trainers_pre_scaled_advantages() -> None:
    """Under --advantage-scale the one call path scales the advantages with the batch's own counts, so a
    token-sum loss is judged under the aggregation the scaling reproduces at every level."""
    from sigma_ref.conformance.inputs import Policy, prescaled_advantages

    pol = Policy.make(8, 0)
    adv = torch.linspace(-1.5, 2.0, 8, dtype=torch.float64)
    plain = SimpleNamespace(scaleout=None, adapter=SimpleNamespace(aggregation_constant=None))
    assert prescaled_advantages(plain, adv, pol.mask) is adv  # type: ignore[arg-type]
    for scale, want in (
        ("batch-tokens", adv / pol.mask.sum()),
        ("sequence-tokens", adv / (8 * pol.mask.sum(-1))),
        ("batch-sequences", adv / 8),
    ):
        ctx = SimpleNamespace(
            scaleout=ScaleoutOptions(world_size=2, advantage_scale=scale), adapter=plain.adapter
        )
        got = prescaled_advantages(ctx, adv, pol.mask)  # type: ignore[arg-type]
        assert torch.allclose(got, want, rtol=1e-15, atol=0), scale


# ---------------------------------------------------------------------------
# the row-as-sequence classes, tied to proofs/12_scale_out.py ("Sequence packing")


def _designed() -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    batch = so._design_batch(0, 4)
    scores = nz.token_scores(batch.theta, batch.feats, batch.tokens)
    adv = so.oracle_advantages(torch.tensor(batch.rewards), batch.index).numpy()
    rows = pk.row_ids(so._lengths(0, 4), np.zeros(batch.n), np.zeros(batch.n), so.PACKED_CAPACITY)
    return batch, scores, adv, rows


def test_row_weights_are_the_proofs_l_over_l_row_and_n_seq_over_n_rows() -> None:
    batch, _, _, rows = _designed()
    L = batch.mask.sum(-1).astype(int)
    per_row = {r: int(L[rows == r].sum()) for r in set(rows.tolist())}
    w_row = pk.row_weights(batch.mask, "seq-mean-token-mean", rows, num_seqs=batch.n)
    w_ok = aggregation_weights(torch.tensor(batch.mask), "seq-mean-token-mean").numpy()
    for i in range(batch.n):
        ratio = Fraction(int(L[i]), per_row[int(rows[i])])
        assert np.allclose(w_row[i, : L[i]] / w_ok[i, : L[i]], float(ratio), rtol=1e-14, atol=0), i
    assert len(per_row) < batch.n  # rows hold several responses: the designed batch exposes it
    w_cnt = pk.row_weights(batch.mask, "seq-mean-token-sum", rows, num_seqs=len(per_row))
    w_sum = aggregation_weights(torch.tensor(batch.mask), "seq-mean-token-sum").numpy()
    assert np.allclose(w_cnt, float(Fraction(batch.n, len(per_row))) * w_sum, rtol=1e-15, atol=0)


@pytest.mark.parametrize(
    ("mode", "num_seqs", "name"),
    [
        ("seq-mean-token-mean", "responses", "packed_row_seq_mean"),
        ("seq-mean-token-mean", "rows", "packed_row_seq_mean"),
        ("seq-mean-token-sum", "rows", "packed_row_count"),
        ("seq-mean-token-sum-norm", "rows", "packed_row_count"),
    ],
)
def test_each_row_hypothesis_is_identified_alone_and_the_correct_gradient_is_not(
    mode: str, num_seqs: str, name: str
) -> None:
    batch, scores, adv, _ = _designed()
    keys = [(1, 1, "whole-groups"), (2, 2, "whole-groups"), (1, 3, "whole-groups")]

    def assign(w: int, m: int, split: str) -> tuple[np.ndarray, np.ndarray]:
        return so._assignment(batch, w, m, split, "uneven")

    lengths = so._lengths(0, 4)
    grads, correct = {}, {}
    for key in keys:
        rows = pk.row_ids(lengths, *assign(*key), so.PACKED_CAPACITY)
        n = batch.n if num_seqs == "responses" else len(set(rows.tolist()))
        w = pk.row_weights(batch.mask, mode, rows, num_seqs=n)
        grads[key] = -np.einsum("nt,n,ntd->d", w, adv, scores)
        w_ok = aggregation_weights(torch.tensor(batch.mask), mode).numpy()
        correct[key] = -np.einsum("nt,n,ntd->d", w_ok, adv, scores)
    kw = {"assign": assign, "capacity": so.PACKED_CAPACITY}
    probe = nz.Probe(scores, adv, batch.mask)
    found = pk.identify_packed(grads, probe, lengths, mode, **kw)
    assert [(h.name, h.count) for h in found] == [(name, num_seqs)]
    assert pk.identify_packed(correct, probe, lengths, mode, **kw) == []


# ---------------------------------------------------------------------------
# pre-scaled advantages


@pytest.mark.parametrize("scale", list(nz.ADVANTAGE_SCALE_MODES))
def test_each_scaling_reproduces_its_mode_exactly(scale: str) -> None:
    batch = so._job_batch(0, 4, mask_truncated=True)  # a response without any token too
    m = batch.mask
    tok, seq = int(m.sum()), int((m.sum(-1) > 0).sum())
    s = nz.advantage_scales(m, scale, num_tokens=tok, num_seqs=seq, constant=5.0)
    mode = nz.ADVANTAGE_SCALE_MODES[scale]
    want = aggregation_weights(
        torch.tensor(m), mode, constant=5.0 if mode == "seq-mean-token-sum-norm" else None
    ).numpy()
    assert np.allclose(s[:, None] * m, want, rtol=1e-15, atol=0)


def test_the_scaling_classes_are_named_only_when_their_prediction_holds() -> None:
    batch, scores, adv, _ = _designed()
    m = batch.mask
    probe = nz.Probe(scores, adv, m)
    tok, seq = int(m.sum()), int((m.sum(-1) > 0).sum())

    def grad(weights: np.ndarray) -> np.ndarray:
        return -np.einsum("nt,n,ntd->d", weights, adv, scores)

    own = nz.advantage_scales(m, "sequence-tokens", num_tokens=tok, num_seqs=seq)
    named = nz.name_advantage_scale(
        grad(own[:, None] * m), probe, scale="sequence-tokens", aggregation="token-mean"
    )
    assert named is not None and named.startswith("scale_by_own_tokens")
    batch_tokens = nz.advantage_scales(m, "batch-tokens", num_tokens=tok, num_seqs=seq)
    twice = grad(batch_tokens[:, None] * m / tok)
    named = nz.name_advantage_scale(twice, probe, scale="batch-tokens", aggregation="token-mean")
    assert named is not None and named.startswith("sum normalised twice: the loss applies token-mean's")
    c = float(twice @ grad(m / tok)) / float(grad(m / tok) @ grad(m / tok))
    assert abs(c * tok - 1) < 1e-12  # the proof's exact 1/N
    right = grad(batch_tokens[:, None] * m)
    assert nz.name_advantage_scale(right, probe, scale="batch-tokens", aggregation="token-mean") is None
    assert nz.name_advantage_scale(grad(m), probe, scale="batch-tokens", aggregation="token-mean") is None
    assert nz.advantage_scope_labels("batch-tokens", "step") == {}
    assert set(nz.advantage_scope_labels("batch-tokens", "rank")) == {"rank-count"}


# ---------------------------------------------------------------------------
# usage errors and options


def _packed_loss_takes(name: str) -> Any:
    return {"position_ids": gallery.packed_seq_mean, "cu_seqlens": gallery.packed_seq_mean_varlen}[name]


def test_a_loss_without_boundaries_is_a_usage_error_naming_both_and_the_fix() -> None:
    opts = ScaleoutOptions(world_size=2, micro_batches=(2,), packing="position_ids")
    with pytest.raises(ValueError, match=r"takes neither position_ids= nor cu_seqlens=.*or drop --packing"):
        check_options(opts, scaleout_losses.seq_mean_token_mean)
    with pytest.raises(ValueError, match="takes cu_seqlens= only: use --packing cu_seqlens"):
        check_options(opts, _packed_loss_takes("cu_seqlens"))
    check_options(opts, _packed_loss_takes("position_ids"))
    with pytest.raises(
        ValueError, match=re.escape("packs the rows a loss is called on: give the loss (--loss")
    ):
        check_options(opts, None)
    with pytest.raises(ValueError, match=re.escape("packing='rows' must be one of")):
        ScaleoutOptions(world_size=2, packing="rows")
    with pytest.raises(ValueError, match="scales the advantages a loss gets"):
        check_options(ScaleoutOptions(world_size=2, advantage_scale="batch-tokens"), None)
    job = ScaleoutJob(ADV, f"{scaleout_losses.M}:seq_mean_token_mean", layout="index", packing="cu_seqlens")
    with pytest.raises(ValueError, match="takes neither position_ids= nor cu_seqlens="):
        run_scaleout_many([job], world_size=2)  # before any process starts
    for bad, words in (
        ({"packing": "rows"}, "packing='rows' must be one of"),
        ({"advantage_scale": "tokens"}, "advantage_scale='tokens' must be one of"),
        ({"advantage_scale_on": "epoch"}, "advantage_scale_on='epoch' must be one of"),
    ):
        loss = f"{gallery.M}:packed_seq_mean"
        with pytest.raises(ValueError, match=re.escape(words)):
            run_scaleout_many([ScaleoutJob(ADV, loss, layout="index", **bad)], world_size=1)


@pytest.mark.parametrize("option", [("packing", "cu_seqlens"), ("advantage_scale", "batch-tokens")])
def test_a_level5_option_without_world_size_is_a_usage_error(option: tuple[str, str]) -> None:
    from sigma_ref.pytest_plugin import _scaleout_options

    values = {
        "sigma_ref_world_size": None,
        "sigma_ref_micro_batches": None,
        f"sigma_ref_{option[0]}": option[1],
    }
    config = SimpleNamespace(getoption=lambda name, default=None: values.get(name, default))
    flag = "--" + option[0].replace("_", "-")
    with pytest.raises(
        ValueError, match=re.escape(f"{flag} {option[1]} is an option of level 5") + ".*--world-size"
    ):
        _scaleout_options(config)  # type: ignore[arg-type]


def test_the_options_come_from_the_one_table_with_their_help() -> None:
    parser = argparse.ArgumentParser()
    so.add_scaleout_arguments(parser)
    args = parser.parse_args([])
    assert (args.packing, args.advantage_scale, args.advantage_scale_on) == ("none", "none", "step")
    text = parser.format_help()
    for words in ("position_ids", "cu_seqlens", "batch-tokens", "sequence-tokens", "micro-batch"):
        assert words in text
    args = parser.parse_args(["--packing", "cu_seqlens", "--advantage-scale-on", "rank"])
    from sigma_ref._options import pytest_argv

    assert pytest_argv(args) == [
        "--sigma-ref-packing",
        "cu_seqlens",
        "--sigma-ref-advantage-scale-on",
        "rank",
    ]


# ---------------------------------------------------------------------------
# on real ranks


def _failed(report: so.ScaleoutReport) -> str:
    return " | ".join(r.message for r in report.results if r.verdict == "FAIL")


def test_correct_pass_and_wrong_fail_named_with_their_factor_at_w2_m2() -> None:
    """One launch of two ranks: both packings and both scalings of a correct loss pass; the wrong
    ones fail with their class, and packed_row_seq_mean's factor is the proof's."""
    names = [
        "packed_seq_mean",
        "packed_seq_mean_varlen",
        "packed_row_seq_mean",
        "prescaled_token_sum[batch-tokens]",
        "scaled_per_micro_batch",
        "prescaled_token_mean",
    ]
    start = time.monotonic()
    reports = dict(
        zip(names, run_scaleout_many([_job(_entry(n), 2) for n in names], world_size=2), strict=True)
    )
    seconds = time.monotonic() - start
    assert seconds < 60, seconds
    for name in ("packed_seq_mean", "packed_seq_mean_varlen", "prescaled_token_sum[batch-tokens]"):
        assert reports[name].passed, reports[name].summary()
    for name in ("packed_row_seq_mean", "scaled_per_micro_batch", "prescaled_token_mean"):
        assert not reports[name].passed and _entry(name).expect in _failed(reports[name]), _failed(
            reports[name]
        )
    batch, scores, adv, rows = _designed()  # (1, 1): proofs/12_scale_out.py's c_row
    g_ok = -np.einsum(
        "nt,n,ntd->d",
        aggregation_weights(torch.tensor(batch.mask), "seq-mean-token-mean").numpy(),
        adv,
        scores,
    )
    w_row = pk.row_weights(batch.mask, "seq-mean-token-mean", rows, num_seqs=batch.n)
    c_row = float(-np.einsum("nt,n,ntd->d", w_row, adv, scores) @ g_ok) / float(g_ok @ g_ok)
    assert abs(c_row - 1) > 0.1
    assert f"full-batch gradient already differs (~{c_row:.3g}x" in _failed(reports["packed_row_seq_mean"])
    for name, lead in (
        ("packed_row_seq_mean", "packed_row_seq_mean: "),
        ("prescaled_token_mean", "sum normalised twice: "),
    ):
        lines = [r.message for r in reports[name].results if r.property.startswith("scaleout_prediction")]
        assert lines and all(line.startswith(lead) for line in lines), (
            lines
        )  # the class leads the summary line
    tokens = int(batch.mask.sum())
    assert f"is {1 / tokens:.3g}x the token-mean prediction" in _failed(reports["prescaled_token_mean"])


GRID_W = (1, 2, 4)


@pytest.fixture(scope="module")
def grid() -> dict[int, dict[str, so.ScaleoutReport]]:
    """Every entry of both patterns at M = 1, 2, 3: one launch per world size, on first use."""
    return {}


def _grid_report(
    grid: dict[int, dict[str, so.ScaleoutReport]], entry: gallery.Entry, w: int
) -> so.ScaleoutReport:
    if w not in grid:
        grid[w] = dict(
            zip(
                (e.name for e in ENTRIES),
                run_scaleout_many([_job(e) for e in ENTRIES], world_size=w),
                strict=True,
            )
        )
    return grid[w][entry.name]


@pytest.mark.slow
@pytest.mark.parametrize("world_size", GRID_W)
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_every_entry_on_the_grid(entry: gallery.Entry, world_size: int, grid: Any) -> None:
    report = _grid_report(grid, entry, world_size)
    if not entry.expect:
        assert report.passed, report.summary()
        return
    assert not report.passed, report.summary()
    assert entry.expect in _failed(report), _failed(report)


@pytest.mark.slow
def test_sigma_ref_check_runs_both_call_shapes_at_every_level() -> None:
    """Tried as a user would: a packed seq-mean loss with --packing position_ids, and a token-sum loss
    with --advantage-scale batch-tokens declared token-mean, are CONFORMANT at W = 2, M = 2,3 with a
    scale-out row; the packed row-mean loss passes levels 0 to 4 (one response per row) and FAILs at
    level 5 with its class leading the line."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, CI="true", OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    env.pop("HYPOTHESIS_PROFILE", None)

    def check(loss: str, aggregation: str, *options: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(Path(sys.executable).parent / "sigma-ref"), "check", "tests.gallery.correct:verl_index"]
        cmd += ["--layout", "index", "--loss", f"{gallery.M}:{loss}", "--aggregation", aggregation, *options]
        cmd += ["--world-size", "2", "--micro-batches", "2,3"]
        return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)

    for loss, aggregation, options in (
        ("packed_seq_mean", "seq-mean-token-mean", ("--packing", "position_ids")),
        ("prescaled_token_sum", "token-mean", ("--advantage-scale", "batch-tokens")),
    ):
        run = check(loss, aggregation, *options)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        assert re.search(r"^scale-out\s+3\s+0\s+0\s+0\s+0$", run.stdout, flags=re.MULTILINE), run.stdout[
            -3000:
        ]
    run = check("packed_row_seq_mean", "seq-mean-token-mean", "--packing", "position_ids")
    assert run.returncode == 1, run.stdout[-3000:]
    assert re.search(r"^scale-out\s+1\s+2\s+0\s+0\s+0$", run.stdout, flags=re.MULTILINE), run.stdout[-3000:]
    assert (
        "FAIL test_scaleout_prediction: scaleout_prediction[seq-mean-token-mean,W=2,M=2]: "
        "packed_row_seq_mean:" in run.stdout
    )


@pytest.mark.slow
def test_the_call_shapes_hold_under_the_other_level5_knobs() -> None:
    """One launch at W = 2, M = 2: the correct packed and pre-scaled losses pass with truncated
    responses (zero-token responses in rows and scalings), groups split across ranks, equal sizes and
    the trainer's 1/M, and the three other scalings; a scaling per rank is named as such."""
    g, shapes = gallery.M, scaleout_losses.M
    packed = {"layout": "index", "aggregation": "seq-mean-token-mean", "micro_batches": 2}
    scaled = {"layout": "index", "micro_batches": 2}
    jobs = {
        "packed, truncated": ScaleoutJob(
            ADV, f"{g}:packed_seq_mean", packing="position_ids", mask_truncated=True, **packed
        ),
        "varlen, split groups": ScaleoutJob(
            f"{shapes}:grpo_gathered",
            f"{g}:packed_seq_mean_varlen",
            packing="cu_seqlens",
            split="split-groups",
            **packed,
        ),
        "packed, equal, 1/M": ScaleoutJob(
            ADV,
            f"{g}:packed_seq_mean",
            packing="position_ids",
            sizes="equal",
            loss_scale="mean-over-micro-batches",
            **packed,
        ),
        "own tokens, truncated": ScaleoutJob(
            ADV,
            f"{g}:prescaled_token_sum",
            aggregation="seq-mean-token-mean",
            advantage_scale="sequence-tokens",
            mask_truncated=True,
            **scaled,
        ),
        "horizon": ScaleoutJob(
            ADV,
            f"{g}:prescaled_token_sum",
            aggregation="seq-mean-token-sum-norm",
            advantage_scale="batch-sequences-horizon",
            **scaled,
        ),
        "sequences": ScaleoutJob(
            ADV,
            f"{g}:prescaled_token_sum",
            aggregation="seq-mean-token-sum",
            advantage_scale="batch-sequences",
            **scaled,
        ),
    }
    wrong = ScaleoutJob(
        ADV,
        f"{g}:prescaled_token_sum",
        aggregation="token-mean",
        advantage_scale="batch-tokens",
        advantage_scale_on="rank",
        **scaled,
    )
    *reports, per_rank = run_scaleout_many([*jobs.values(), wrong], world_size=2)
    for name, report in zip(jobs, reports, strict=True):
        assert report.passed, (name, report.summary())
    assert not per_rank.passed
    assert "advantages scaled per rank, not per optimizer step" in _failed(per_rank), _failed(per_rank)
