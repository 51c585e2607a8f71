"""tunix 0.1.7 (JAX) through its adapter (``spec/adapters/tunix.py``): its estimators against the
oracle, and what each of its loss aggregation modes computes (tunix reuses verl's mode names with
other meanings)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sigma_ref import Convention, dr_grpo_advantage, grpo_advantage, rloo_advantage
from sigma_ref.conformance import Batch
from sigma_ref.conformance.matrix import adapter_module
from sigma_ref.objectives import aggregation_weights

PROBE = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.2, 0.7, 0.7, 0.1]])
#: tunix's compute_advantages: Bessel std plus 1e-6 (verl's statistics; a group of one gets NaN).
TUNIX_GRPO = Convention("tunix", ddof=1, eps=1e-6)


@pytest.fixture(scope="module")
def tunix():
    module = adapter_module("tunix")
    reason = module.unavailable()
    if reason is not None:
        pytest.skip(reason)
    return module


@pytest.mark.parametrize(
    ("mode", "oracle"),
    [
        ("grpo", lambda r: grpo_advantage(r, convention=TUNIX_GRPO)),
        ("rloo", rloo_advantage),
        ("drgrpo", dr_grpo_advantage),
    ],
)
def test_estimators_equal_the_oracle(tunix, mode: str, oracle) -> None:
    """grpo = (R - mean) / (std(ddof=1) + 1e-6), rloo = R - leave-one-out mean, drgrpo = R - mean, in
    float64 (jax with x64), to float64 rounding."""
    got = tunix.ADAPTERS[mode](Batch.grouped(PROBE)).numpy().reshape(PROBE.shape)
    np.testing.assert_allclose(got, oracle(PROBE), rtol=1e-13, atol=1e-13)


def test_grpo_group_of_one_is_nan(tunix) -> None:
    """tunix's compute_advantages has no singleton rule: std(ddof=1) of one value is NaN."""
    got = tunix.ADAPTERS["grpo"].advantages(torch.tensor([0.7, 0.2], dtype=torch.float64), 1)
    assert torch.isnan(got).all()


def _weights(loss, mask: torch.Tensor) -> torch.Tensor:
    """w_it = -dL/dlogp_it at ratio 1 with every advantage 1."""
    logp = torch.zeros(mask.shape, dtype=torch.float64, requires_grad=True)
    out = loss(logp, logp.detach(), torch.ones(mask.shape[0], dtype=torch.float64), mask)
    out = out[0] if isinstance(out, tuple) else out
    (grad,) = torch.autograd.grad(out, logp)
    return -grad


MASK = torch.tensor(
    [[1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.float64
)


@pytest.mark.parametrize(
    ("mode", "computes"),
    [
        ("token-mean", "token-mean"),
        ("sequence-mean-token-mean", "seq-mean-token-mean"),
        ("sequence-mean-token-scale", "seq-mean-token-sum-norm"),
        ("seq-mean-token-sum", "seq-mean-token-sum"),
        ("sequence-mean-token-sum-norm", "seq-mean-token-sum"),
    ],
)
def test_aggregation_modes(tunix, mode: str, computes: str) -> None:
    """Each of aggregate_loss's modes, measured on grpo_loss_fn's gradient (lengths 1, 5, 3, 0, 2 in
    width T = 5; the empty row counts in no N_seq): its weights are the oracle's for ``computes``, to
    float32 rounding (tunix computes the loss in float32)."""
    name = f"loss[{mode}]" if mode != tunix.DEFAULT_MODE else "grpo"
    assert tunix.AGGREGATION_MODES[mode] == computes
    w = _weights(tunix.ADAPTERS[name].loss, MASK)
    torch.testing.assert_close(w, aggregation_weights(MASK, computes), rtol=1e-6, atol=1e-9)


def test_verl_names_with_other_meanings(tunix) -> None:
    """tunix's 'sequence-mean-token-sum-norm' is not verl's seq-mean-token-sum-norm (1 / (N_seq T)): it
    divides by N_seq alone; verl's sum-norm is tunix's 'sequence-mean-token-scale'."""
    w = _weights(tunix.ADAPTERS["loss[sequence-mean-token-sum-norm]"].loss, MASK)
    verl = aggregation_weights(MASK, "seq-mean-token-sum-norm")
    assert not torch.allclose(w, verl)
    assert torch.allclose(w, verl * MASK.shape[1], rtol=1e-6)


def test_grpo_float16_overflow_is_why_float16_is_not_declared(tunix) -> None:
    """tunix's rewards are float64; given float16, compute_advantages's std overflows (|R| = 1024)
    and the suite FAILs half_precision_range with that confirmed cause."""
    from sigma_ref.conformance.adapter import ALL_DTYPES
    from sigma_ref.conformance.matrix import run_adapter

    assert "float16" not in tunix.ADAPTERS["grpo"].dtypes
    (result,), _ = run_adapter(
        tunix.ADAPTERS["grpo"].replace(dtypes=ALL_DTYPES), max_examples=2, names=["half_precision_range"]
    )
    assert result["verdict"] == "FAIL" and "overflows in half precision" in result["message"], result
