"""``--advantage-scaler``: the trainer's own pre-scaling function at level 5 (and at levels 0-4).

A trainer that folds the aggregation into the advantages (SkyRL's driver calls
``apply_loss_reduction_to_advantages_minibatch`` on each mini-batch, then every worker takes a token
sum) is judged with its own function: level 5 calls it on the optimizer step's mask, in the order the
ranks hold the rows, and hands the loss ``s_i A_i`` (``normalisers.call_advantage_scaler``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sigma_ref.conformance import normalisers as nm
from sigma_ref.conformance import scaleout
from sigma_ref.conformance.launch import ScaleoutOptions, check_options
from tests.gallery import normalisers as gallery

G = "tests.gallery.normalisers"
ORACLE = "sigma_ref.conformance.scaleout:oracle_advantages"


def test_factors_per_response_and_per_token_and_the_globals() -> None:
    mask = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    per_token = nm.call_advantage_scaler(lambda m: torch.ones_like(m) / m.sum(), mask)
    assert per_token.tolist() == [1 / 6] * 3 + [0.0]  # a response without tokens: 0
    seen = {}

    def scaler(m, *, world_size, horizon):  # type: ignore[no-untyped-def]
        seen.update(world_size=world_size, horizon=horizon)
        return m.sum(-1)

    assert nm.call_advantage_scaler(scaler, mask, world_size=2, micro_batches=3).tolist() == [2, 1, 3, 0]
    assert seen == {"world_size": 2, "horizon": 3}
    legacy = nm.call_advantage_scaler(gallery.scale_by_micro_batch_tokens, mask, world_size=2)
    assert legacy.tolist() == [1 / 3 / 2, 1 / 3 / 2, 1 / 3 / 2, 0.0]


@pytest.mark.parametrize(
    ("scaler", "error", "words"),
    [
        (lambda m: m.sum(), ValueError, r"returned shape \(\)"),
        (lambda m: torch.arange(3.0)[None, :] * m + 1, ValueError, "different factors along its unmasked"),
        (lambda m: torch.full((m.shape[0],), float("inf")), ValueError, "non-finite factor"),
        (lambda m: [1.0] * m.shape[0], TypeError, "returned list"),
    ],
)
def test_a_bad_scaler_is_told_what_to_return(scaler, error, words: str) -> None:  # type: ignore[no-untyped-def]
    mask = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    with pytest.raises(error, match=words):
        nm.call_advantage_scaler(scaler, mask)


@pytest.mark.parametrize(
    ("kw", "error", "words"),
    [
        (
            {"advantage_scaler": f"{G}:scale_by_batch_tokens", "advantage_scale": "batch-tokens"},
            ValueError,
            "give one",
        ),
        ({"advantage_scaler": 3}, TypeError, "must be a 'pkg.module:attr' string"),
        ({"advantage_scaler": f"{G}:no_such_scaler"}, ValueError, "no_such_scaler"),
        ({"loss_precision": "bfloat16"}, ValueError, "loss_precision='bfloat16'"),
    ],
)
def test_scaler_usage_errors_before_any_process(kw, error, words: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=words):
        scaleout.run_scaleout(ORACLE, f"{G}:prescaled_token_sum", layout="index", **kw)


def test_scaler_without_a_loss_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="scales the advantages a loss gets"):
        scaleout.run_scaleout(ORACLE, None, layout="index", advantage_scaler=f"{G}:scale_by_batch_tokens")
    opts = ScaleoutOptions(world_size=2, advantage_scaler=f"{G}:scale_by_batch_tokens")
    with pytest.raises(ValueError, match=r"--advantage-scaler .* give the"):
        check_options(opts, None)


def test_prediction_tolerance_follows_the_working_precision() -> None:
    assert scaleout.prediction_rtol("float64") == 1e-8
    assert scaleout.prediction_rtol("float32") == 64 * 2.0**-24


@pytest.mark.slow
def test_the_trainers_own_scaler_passes_on_the_step_and_fails_per_micro_batch() -> None:
    """On real processes (W = 2, M = 1, 2, 3, equal micro-batches): the step's token count passes as
    token-mean; the mean of per-micro-batch token means FAILs at every M with its class named."""
    jobs = [
        scaleout.ScaleoutJob(
            ORACLE,
            f"{G}:prescaled_token_sum",
            layout="index",
            micro_batches=(1, 2, 3),
            aggregation="token-mean",
            sizes="equal",
            advantage_scaler=f"{G}:{name}",
        )
        for name in ("scale_by_batch_tokens", "scale_by_micro_batch_tokens")
    ]
    right, legacy = scaleout.run_scaleout_many(jobs, world_size=2)
    assert right.passed, right.summary()
    failed = [r for r in legacy.results if r.verdict == "FAIL"]
    grads = [r for r in failed if r.property.startswith("scaleout_gradient")]
    assert len(grads) == 3, legacy.summary()  # M = 1 too: each rank's chunk is a micro-batch of its own
    assert all("a mean of per-micro-batch means" in r.message for r in grads), legacy.summary()
