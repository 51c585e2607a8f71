"""The ``sizes`` layout (issue 26 item 6): positionally grouped batches of uneven group sizes.

``fn(rewards, group_sizes)``: the correct gallery entries pass the whole suite with their convention
declared (and detected), the wrong ones FAIL ``uneven_group_sizes`` with the cause a probe confirmed,
on two seeds and both hypothesis profiles; the oracle itself in this layout passes every property.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import settings

from sigma_ref import grpo_advantage
from sigma_ref.conformance import Adapter, Batch, oracle_adapter
from sigma_ref.conformance.core import evaluate, run_suite
from sigma_ref.conformance.session import build_context
from sigma_ref.pytest_plugin import register_profiles
from tests.gallery import case_adapter
from tests.gallery.trainers_sizes import CASES

CORRECT = [c for c in CASES if c.correct]
WRONG = [c for c in CASES if not c.correct]


@pytest.fixture(params=["sigma-ref-ci", "sigma-ref-dev"])
def profile(request: pytest.FixtureRequest) -> Iterator[str]:
    register_profiles()
    previous = settings.get_current_profile_name()
    settings.load_profile(request.param)
    try:
        yield request.param
    finally:
        settings.load_profile(previous)


def test_runs_gather_interleaved_groups_in_first_seen_order() -> None:
    batch = Batch(np.array([1.0, 0.0, 0.5, 1.0, 0.0, 2.0]), np.array(["b", "a", "b", "c", "a", "b"]))
    order, sizes = batch.runs()
    assert order.tolist() == [0, 2, 5, 1, 4, 3] and sizes == [3, 2, 1]
    contiguous = Batch(np.arange(21.0), np.repeat([4, 9, 2], [8, 5, 8]))
    order, sizes = contiguous.runs()
    assert order.tolist() == list(range(21)) and sizes == [8, 5, 8]


def test_an_interleaved_batch_is_gathered_and_scattered_back() -> None:
    """The function sees contiguous runs and the sizes; its result comes back in the batch's order."""
    seen: list[tuple[list[float], list[int]]] = []

    def fn(rewards: torch.Tensor, group_sizes: list[int]) -> torch.Tensor:
        seen.append((rewards.tolist(), list(group_sizes)))
        ids = np.repeat(np.arange(len(group_sizes)), group_sizes)
        return grpo_advantage(rewards, index=ids)  # type: ignore[return-value]

    batch = Batch(np.array([1.0, 0.0, 0.0, 1.0, 1.0]), np.array([7, 3, 7, 3, 7]))
    got = Adapter(fn, "sizes")(batch)
    assert seen == [([1.0, 0.0, 1.0, 0.0, 1.0], [3, 2])]
    torch.testing.assert_close(got, torch.as_tensor(grpo_advantage(batch.rewards, index=batch.index)))
    assert "group_sizes=[3, 2]" in Adapter(fn, "sizes").call_repr(batch)


def test_the_oracle_in_the_sizes_layout_passes_every_property() -> None:
    ctx = build_context(oracle_adapter("paper", layout="sizes"))
    outcomes = run_suite(ctx, max_examples=5, shrink=False)
    assert not [o.message for o in outcomes if o.verdict in ("FAIL", "WARN")]
    assert any(o.name == "uneven_group_sizes" and o.verdict == "pass" for o in outcomes)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", CORRECT, ids=lambda c: c.name)
def test_correct_sizes_code_passes(case, seed: int, profile: str) -> None:  # type: ignore[no-untyped-def]
    """No FAIL with the convention declared, and no WARN but hygiene (a NaN reward's group turning NaN,
    as trainers' torch.mean / torch.std do); undeclared, the convention is detected."""
    ctx = build_context(case_adapter(case, declare=True))
    outcomes = run_suite(ctx, max_examples=5, shrink=False, seed=seed)
    assert not [(o.name, o.message) for o in outcomes if o.verdict == "FAIL"]
    assert not [(o.name, o.message) for o in outcomes if o.verdict == "WARN" and o.name != "nan_rewards"]
    detected = build_context(case_adapter(case, declare=False))
    assert detected.detection is not None and detected.detection.preset == case.convention


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", WRONG, ids=lambda c: c.name)
def test_wrong_sizes_code_fails_with_its_cause(case, seed: int, profile: str) -> None:  # type: ignore[no-untyped-def]
    ctx = build_context(case_adapter(case, declare=True))
    for name in case.breaks:
        outcome = evaluate(name, ctx, max_examples=5, shrink=False, seed=seed)
        assert outcome.verdict == "FAIL", outcome.message
        assert outcome.finding is not None and outcome.finding.confirmed, outcome.message
        assert all(w in (outcome.finding.cause or "") for w in case.cause_words), outcome.message


def test_uneven_sizes_applies_to_the_sizes_layout_only() -> None:
    ctx = build_context(oracle_adapter("paper", layout="contiguous"))
    assert evaluate("uneven_group_sizes", ctx).verdict == "skip"


def test_level5_takes_the_sizes_layout() -> None:
    """Scale-out (W = 2 ranks, M = 2 micro-batches, real gloo processes): a sizes-layout function is called
    with the shards' group sizes, and its advantages and the accumulated gradient equal the full batch's."""
    from sigma_ref.conformance.scaleout import run_scaleout

    report = run_scaleout(
        "tests.gallery.trainers_sizes:split_normalise_trl",
        "sigma_ref.conformance.scaleout:oracle_loss",
        layout="sizes",
        world_size=2,
        micro_batches=2,
        aggregation="token-mean",
    )
    summary = report.summary()
    assert "pass" in summary.splitlines()[0].lower() and "FAIL" not in summary, summary
