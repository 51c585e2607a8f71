"""Level 5's normaliser patterns (``sigma_ref.conformance.normalisers``) and their gallery.

The fast tier starts no process: the uneven designs, the two accumulation readings, the
hypotheses' predicted gradients against the oracle's prediction and autograd, and that the
designed batch tells every wrong normaliser from the right one and from each other at the
probes the check runs. The slow tier runs ``tests/gallery/normalisers.py`` on real ranks over
W in {1, 2, 4} x M in {1, 2, 3} with uneven splits: every correct entry passes, every wrong one
FAILs naming its class.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch

from sigma_ref.conformance import normalisers as nm
from sigma_ref.conformance import scaleout
from sigma_ref.conformance.scaleout import ScaleoutJob, ScaleoutReport, run_scaleout_many
from tests.gallery import normalisers as gallery

COUNTED = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
WRONG = [h for h in nm.HYPOTHESES if not h.name.startswith("correct")]


def _design(world_size: int, *, truncated: bool = False) -> scaleout._Batch:
    return scaleout._job_batch(0, scaleout._n_groups(world_size, "uneven"), truncated)


def _counts(batch: scaleout._Batch) -> dict[str, tuple[float, float]]:
    """Counts of the outside scopes as the check computes them, with truncation and S = 2."""
    config = {"seed": 0, "steps_per_generation": 2, "mask_truncated": True}
    return scaleout._outside_counts(config, int(batch.index.max()) + 1)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# splits and readings


@pytest.mark.parametrize(("n", "parts"), [(n, p) for n in range(1, 30) for p in range(1, 8) if p <= n])
def test_uneven_sizes_cover_every_item_once_with_no_empty_piece(n: int, parts: int) -> None:
    sizes = nm.uneven_sizes(n, parts)
    assert sum(sizes) == n and len(sizes) == parts and min(sizes) >= 1, sizes
    pieces = nm.split_pieces(n, parts, "uneven")
    assert np.concatenate(pieces).tolist() == list(range(n))


def test_uneven_splits_differ_where_equal_ones_do_not() -> None:
    """The designed batch's rank shards and micro-batches hold different response counts at W = 2, 4
    and M = 2, 3 (``equal``: the same counts, as with a fixed per-device batch)."""
    for W in (2, 4):
        batch = _design(W)
        shards = [scaleout._shard_rows(batch, W, r, "whole-groups", "uneven") for r in range(W)]
        assert len({len(s) for s in shards}) == W, [len(s) for s in shards]
        for M in (2, 3):
            sizes = [len(p) for p in nm.split_pieces(len(shards[-1]), M, "uneven")]
            assert len(set(sizes)) == M, sizes
    equal = scaleout._design_batch(0, 4)
    shards = [scaleout._shard_rows(equal, 2, r, "whole-groups", "equal") for r in range(2)]
    assert [len(s) for s in shards] == [12, 12]


def test_split_groups_deal_uneven_member_counts() -> None:
    batch = _design(2)
    rows = [scaleout._shard_rows(batch, 2, r, "split-groups", "uneven") for r in range(2)]
    assert sorted(np.concatenate(rows).tolist()) == list(range(batch.n))
    assert len(rows[0]) != len(rows[1])


def test_readings_differ_by_exactly_m() -> None:
    g = np.array([0.3, -1.25, 7.0])
    for M in (1, 2, 3):
        for declared in nm.READINGS:
            r = nm.readings(g, M, declared)
            assert np.array_equal(r["none"], r["mean-over-micro-batches"] * M)
            assert np.array_equal(r[declared], g)


def test_judge_reading_prefers_the_declared_reading_and_says_the_other() -> None:
    ref = np.array([1.0, 2.0])
    g, reading, words = nm.judge_reading(ref, ref, 2, "none")
    assert reading == "none" and "right under loss_scale='none'" in words and "Declared" not in words
    g, reading, words = nm.judge_reading(ref, ref, 2, "mean-over-micro-batches")
    assert reading == "mean-over-micro-batches" and np.allclose(g, ref)
    g, reading, words = nm.judge_reading(ref / 2, ref, 2, "mean-over-micro-batches")
    assert reading == "none" and "under which it is 0.5x" in words
    assert nm.judge_reading(ref * 3, ref, 2, "none")[1:] == ("none", "")  # right under neither
    assert nm.judge_reading(ref * 3, ref, 1, "none")[2] == ""  # M = 1: one reading


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: nm.uneven_sizes(2, 3), "n=2 must be an int >= parts=3"),
        (lambda: nm.uneven_sizes(2, 0), "parts=0 must be a positive int"),
        (lambda: nm.split_pieces(4, 2, "ragged"), "sizes='ragged' must be one of"),
        (lambda: nm.readings([1.0], 2, "sum"), "measured_under='sum' must be one of"),
    ],
)
def test_errors_name_the_argument(call, words: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        call()


# ---------------------------------------------------------------------------
# hypotheses against the oracle


def test_token_scores_are_the_policy_gradient_autograd_computes() -> None:
    batch = _design(2)
    scores = nm.token_scores(batch.theta, batch.feats, batch.tokens)
    theta = torch.tensor(batch.theta, requires_grad=True)
    logp = scaleout._token_logp(theta, torch.tensor(batch.feats), torch.tensor(batch.tokens))
    (grad,) = torch.autograd.grad(logp[3, 2], theta)
    assert np.allclose(scores[3, 2], grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", [*COUNTED, "token-sum"])
def test_the_correct_hypothesis_is_the_oracles_prediction(mode: str) -> None:
    """The right normaliser's gradient at any split is the harness's full-batch prediction."""
    batch = _design(4)
    adv = scaleout.oracle_advantages(torch.tensor(batch.rewards), batch.index).numpy()
    probe = nm.Probe(nm.token_scores(batch.theta, batch.feats, batch.tokens), adv, batch.mask)
    pred = scaleout._prediction(batch, adv, mode)
    for W, M in [(1, 1), (4, 3), (2, 2)]:
        rank, micro = scaleout._assignment(batch, W, M, "whole-groups", "uneven")
        for h in nm.HYPOTHESES[:2]:
            g = nm.hypothesis_gradient(
                h, probe, mode, rank=rank, micro_batch=micro, world_size=W, micro_batches=M
            )
            expected = pred * h.tau(1, M)  # correct-mean: times M under the reading 'none'
            assert np.allclose(g, expected, rtol=1e-12, atol=0), (h.name, W, M)


@pytest.mark.parametrize("mode", COUNTED)
@pytest.mark.parametrize(("W", "M"), [(2, 2), (2, 3), (4, 2), (4, 3)])
def test_every_wrong_normaliser_shows_a_factor_and_is_named_alone(mode: str, W: int, M: int) -> None:
    """On the uneven design every wrong hypothesis's gradient differs from the right one at (W, M),
    and at the probes the check runs ((W, M), (1, M), (1, M + 1), (W, 1); with the outside counts)
    only that hypothesis predicts it, so the named class is the one the code has."""
    batch = _design(W, truncated=True)
    adv = scaleout.oracle_advantages(torch.tensor(batch.rewards), batch.index).numpy()
    scores = nm.token_scores(batch.theta, batch.feats, batch.tokens)
    counts = _counts(batch)
    probe = nm.Probe(scores, adv, batch.mask, counts=counts)

    def assign(w: int, m: int, split: str) -> tuple[np.ndarray, np.ndarray]:
        return scaleout._assignment(batch, w, m, split, "uneven")

    def grad(h: nm.Hypothesis, w: int, m: int) -> np.ndarray:
        rank, micro = assign(w, m, "whole-groups")
        return nm.hypothesis_gradient(
            h, probe, mode, rank=rank, micro_batch=micro, world_size=w, micro_batches=m
        )

    right = grad(nm.HYPOTHESES[0], W, M)
    probes = [(W, M), (1, M), (1, M + 1), (W, 1)]
    for h in (h for h in WRONG if h.applies(mode, counts)):  # prompt-mean's own class needs prompts
        g = grad(h, W, M)
        gap = np.linalg.norm(g - right) / np.linalg.norm(right)
        assert gap > 1e-3, f"{h.name} gives the right gradient at W={W}, M={M} ({mode})"
        grads = {(w, m, "whole-groups"): grad(h, w, m) for w, m in probes}
        found = nm.identify(grads, probe, mode, assign=assign)
        assert [f.name for f in found] == [h.name], (h.name, [f.name for f in found])


def _prompt_mean_probe(batch: scaleout._Batch) -> nm.Probe:
    """The designed batch with the oracle's advantages and each row's prompt."""
    adv = scaleout.oracle_advantages(torch.tensor(batch.rewards), batch.index).numpy()
    scores = nm.token_scores(batch.theta, batch.feats, batch.tokens)
    return nm.Probe(scores, adv, batch.mask, index=batch.index)


def _prompt_mean_grad(
    batch: scaleout._Batch, h: nm.Hypothesis, w: int, m: int, probe: nm.Probe
) -> np.ndarray:
    rank, micro = scaleout._assignment(batch, w, m, "whole-groups", "uneven")
    return nm.hypothesis_gradient(
        h, probe, "prompt-mean", rank=rank, micro_batch=micro, world_size=w, micro_batches=m
    )


@pytest.mark.parametrize(("W", "M"), [(2, 2), (2, 3), (4, 2), (4, 3)])
def test_every_wrong_prompt_mean_normaliser_is_named_alone(W: int, M: int) -> None:
    """Under prompt-mean (P and each prompt's tokens counted over the hypothesis's scope) the right
    hypothesis is the oracle's prediction, and every wrong one that applies shows a factor at (W, M)
    and is the only one predicting the gradient at the probes the check runs."""
    batch = _design(W)
    probe = _prompt_mean_probe(batch)

    def assign(w: int, m: int, split: str) -> tuple[np.ndarray, np.ndarray]:
        return scaleout._assignment(batch, w, m, split, "uneven")

    right = _prompt_mean_grad(batch, nm.HYPOTHESES[0], W, M, probe)
    assert np.allclose(
        right, scaleout._prediction(batch, probe.advantages, "prompt-mean"), rtol=1e-12, atol=0
    )
    applying = [h for h in WRONG if h.applies("prompt-mean", _counts(batch))]
    assert {h.name for h in WRONG} - {h.name for h in applying} == {
        "generation-count",
        "count-before-mask",
        "generation-count-mean",
    }  # counts outside the batch carry no prompts
    for h in applying:
        g = _prompt_mean_grad(batch, h, W, M, probe)
        assert np.linalg.norm(g - right) / np.linalg.norm(right) > 1e-3, (h.name, W, M)
        probes = [(W, M), (1, M), (1, M + 1), (W, 1)]
        grads = {(w, m, "whole-groups"): _prompt_mean_grad(batch, h, w, m, probe) for w, m in probes}
        found = nm.identify(grads, probe, "prompt-mean", assign=assign)
        assert [f.name for f in found] == [h.name], (h.name, [f.name for f in found])


def test_prompt_tokens_per_micro_batch_applies_to_prompt_mean_alone() -> None:
    """The straddling-prompt class is named on one rank too (no other class predicts it at M = 2, 3),
    and is never tried under the five modes."""
    h = next(h for h in nm.HYPOTHESES if h.name == "prompt-tokens-micro-batch")
    assert not any(h.applies(mode, None) for mode in (*COUNTED, "token-sum")) and h.applies(
        "prompt-mean", None
    )
    batch = _design(1)
    probe = _prompt_mean_probe(batch)
    for M in (2, 3):
        grads = {(1, m, "whole-groups"): _prompt_mean_grad(batch, h, 1, m, probe) for m in (1, M, M + 1)}
        found = nm.identify(
            grads, probe, "prompt-mean", assign=lambda w, m, s: scaleout._assignment(batch, w, m, s, "uneven")
        )
        assert [f.name for f in found] == [h.name], M
    zeros = np.zeros(batch.n, dtype=np.int64)
    with pytest.raises(ValueError, match=r"applies to \('prompt-mean',\), not mode='token-mean'"):
        nm.hypothesis_gradient(
            h, probe, "token-mean", rank=zeros, micro_batch=zeros, world_size=1, micro_batches=1
        )
    with pytest.raises(ValueError, match="needs index="):
        nm.hypothesis_gradient(
            h, dataclasses.replace(probe, index=None), "prompt-mean", rank=np.zeros(batch.n, dtype=np.int64),
            micro_batch=np.zeros(batch.n, dtype=np.int64), world_size=1, micro_batches=1,
        )  # fmt: skip


def test_a_named_class_reaches_the_report() -> None:
    """``_analyse`` on gradients a hypothesis predicts: the FAIL names it with its factor."""
    batch = _design(2)
    adv = scaleout.oracle_advantages(torch.tensor(batch.rewards), batch.index).numpy()
    probe = nm.Probe(nm.token_scores(batch.theta, batch.feats, batch.tokens), adv, batch.mask)
    twice = next(h for h in nm.HYPOTHESES if h.name == "division-twice")
    runs = {}
    for w, m in [(1, 1), (2, 2), (1, 2), (1, 3), (2, 1)]:
        rank, micro = scaleout._assignment(batch, w, m, "whole-groups", "uneven")
        g = nm.hypothesis_gradient(
            twice, probe, "token-mean", rank=rank, micro_batch=micro, world_size=w, micro_batches=m
        )
        runs[(w, m, "whole-groups")] = {"grad": g.tolist(), "advantages": adv.tolist()}
    results = scaleout._analyse(
        runs, batch, W=2, Ms=(2,), split="whole-groups", aggregation="token-mean", loss_scale="none",
        sizes="uneven",
    )  # fmt: skip
    grad = next(r for r in results if r.property == "scaleout_gradient[W=2,M=2]")
    assert grad.verdict == "FAIL" and grad.factor == pytest.approx(0.5, rel=1e-12)
    assert grad.message.startswith("accumulation division applied twice: the accumulated, rank-averaged "
                                   "gradient is 0.5x the full-batch gradient at W = 2, M = 2")  # fmt: skip
    assert "(0.25x under 'mean-over-micro-batches')" in grad.message


def test_a_prompt_mean_loss_is_detected_and_judged_at_level_5() -> None:
    """A gradient with the prompt-mean weights at every split: noted as prompt-mean undeclared, and
    every property passes when it is declared."""
    batch = _design(2)
    adv = scaleout.oracle_advantages(torch.tensor(batch.rewards), batch.index).numpy()
    g = scaleout._prediction(batch, adv, "prompt-mean")
    assert not np.allclose(g, scaleout._prediction(batch, adv, "token-mean"))
    keys = [(1, 1), (2, 2), (1, 2), (1, 3), (2, 1)]
    runs = {(w, m, "whole-groups"): {"grad": g.tolist(), "advantages": adv.tolist()} for w, m in keys}
    kw = {"W": 2, "Ms": (2,), "split": "whole-groups", "loss_scale": "none", "sizes": "uneven"}
    noted = scaleout._analyse(runs, batch, aggregation=None, **kw)  # type: ignore[arg-type]
    assert [r.verdict for r in noted] == ["pass", "NOTE", "pass"]
    assert "detected on the full batch: prompt-mean" in noted[1].message
    declared = scaleout._analyse(runs, batch, aggregation="prompt-mean", **kw)  # type: ignore[arg-type]
    assert all(r.verdict == "pass" for r in declared), [r.line() for r in declared]


def test_a_scope_outside_the_batch_needs_its_counts() -> None:
    batch = _design(1)
    h = next(h for h in nm.HYPOTHESES if h.scope == "generation")
    with pytest.raises(ValueError, match="scope 'generation' needs counts"):
        nm.hypothesis_gradient(
            h, nm.Probe(np.zeros((*batch.mask.shape, 4)), batch.rewards, batch.mask), "token-mean",
            rank=np.zeros(batch.n, dtype=np.int64), micro_batch=np.zeros(batch.n, dtype=np.int64),
            world_size=1, micro_batches=1,
        )  # fmt: skip


def test_truncation_masks_the_responses_that_reach_the_padded_length() -> None:
    batch, plain = _design(2, truncated=True), _design(2)
    full = plain.mask.sum(-1) == plain.mask.shape[1]
    assert full.any() and (batch.mask[full] == 0).all() and (batch.mask[~full] == plain.mask[~full]).all()
    assert _counts(batch)["before-mask"] == (int(plain.mask.sum()), plain.n)


# ---------------------------------------------------------------------------
# the gallery on real ranks (slow)

GRID_W = (1, 2, 4)
GRID_M = (1, 2, 3)


class _Reports:
    """One launch per world size for every gallery entry (``run_scaleout_many``), on first use."""

    def __init__(self) -> None:
        self.by_w: dict[int, dict[str, ScaleoutReport]] = {}

    def get(self, entry: gallery.Entry, world_size: int) -> ScaleoutReport:
        if world_size not in self.by_w:
            entries = gallery.CORRECT + gallery.WRONG
            jobs = [
                ScaleoutJob(scaleout_advantages(), e.loss, micro_batches=GRID_M, **e.kwargs())
                for e in entries
            ]
            reports = run_scaleout_many(jobs, world_size=world_size)
            self.by_w[world_size] = {e.name: r for e, r in zip(entries, reports, strict=True)}
        return self.by_w[world_size][entry.name]


def scaleout_advantages() -> str:
    return "sigma_ref.conformance.scaleout:oracle_advantages"


@pytest.fixture(scope="module")
def reports() -> _Reports:
    return _Reports()


@pytest.mark.slow
@pytest.mark.parametrize("world_size", GRID_W)
@pytest.mark.parametrize("entry", gallery.CORRECT, ids=lambda e: e.name)
def test_correct_entries_pass_on_the_grid(entry: gallery.Entry, world_size: int, reports: _Reports) -> None:
    report = reports.get(entry, world_size)
    assert report.passed, report.summary()
    assert sum(r.property.startswith("scaleout_gradient") for r in report.results) == len(GRID_M)


@pytest.mark.slow
@pytest.mark.parametrize("world_size", GRID_W)
@pytest.mark.parametrize("entry", gallery.WRONG, ids=lambda e: e.name)
def test_wrong_entries_fail_naming_their_class(
    entry: gallery.Entry, world_size: int, reports: _Reports
) -> None:
    report = reports.get(entry, world_size)
    assert not report.passed, report.summary()
    failed = " | ".join(r.message for r in report.results if r.verdict == "FAIL")
    assert entry.expect in failed, failed
    if world_size > 1:
        assert (entry.expect_at_ranks or entry.expect) in failed, failed


def test_every_pattern_has_a_wrong_and_a_correct_entry() -> None:
    assert set(gallery.PATTERNS) == {
        "steps per generation batch",
        "accumulation division applied twice",
        "uneven splits",
        "count taken before the mask changed",
        "NaN or inf at masked positions",
        "sequence packing",
        "aggregation folded into the advantages",
        "prompt-mean",
    }
    for pattern, (wrong, correct) in gallery.PATTERNS.items():
        assert wrong and correct, pattern
        assert all(e.expect for e in wrong) and not any(e.expect for e in correct), pattern
    assert len({e.name for e in itertools.chain(gallery.WRONG, gallery.CORRECT)}) == len(gallery.WRONG) + len(
        gallery.CORRECT
    )


@pytest.mark.slow
def test_no_verdict_changes_when_the_declared_loss_scale_is_wrong() -> None:
    """Issue 26: every level-5 gallery loss (both galleries) run under each declaration of the trainer's
    1/M gets the same verdict on every property at W = 2, M = 1, 2, 3; the lines say which reading the
    loss is right under."""
    from tests.gallery import scaleout_losses

    jobs, names = [], []
    for entry in gallery.CORRECT + gallery.WRONG:
        for declared in nm.READINGS:
            options = {**entry.kwargs(), "loss_scale": declared}
            jobs.append(ScaleoutJob(scaleout_advantages(), entry.loss, micro_batches=GRID_M, **options))
            names.append((entry.name, declared))
    for case in scaleout_losses.CORRECT + scaleout_losses.WRONG:
        for declared in nm.READINGS:
            options = {**case.kwargs(), "loss_scale": declared}
            jobs.append(ScaleoutJob(case.advantages, case.loss, micro_batches=GRID_M, **options))
            names.append((case.name, declared))
    reports = run_scaleout_many(jobs, world_size=2)
    verdicts: dict[str, list[list[tuple[str, str]]]] = {}
    for (name, _), report in zip(names, reports, strict=True):
        verdicts.setdefault(name, []).append([(r.property, r.verdict) for r in report.results])
    changed = {name: v for name, v in verdicts.items() if v[0] != v[1]}
    assert not changed, changed
