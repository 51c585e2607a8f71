"""AReaL, ms-swift, SkyRL and Unsloth in the matrix: each deviation and each estimator outside the
presets that the matrix's notes state is shown here on the input the note names, with the trainer's
own code (``spec/adapters/{areal,swift,skyrl,unsloth}.py``).

A trainer that is not installed is skipped with the reason (``make peers`` installs them).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sigma_ref.conformance import Batch
from sigma_ref.conformance.matrix import adapter_module

# groups of G = 4: k = 1, k = 2, a silent group, real rewards
PROBE = np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.5, 0.2, 0.9, 0.1]])
PROBE_BATCH = Batch.grouped(PROBE)


def _module(name: str):
    module = adapter_module(name)
    reason = module.unavailable()
    if reason is not None:
        pytest.skip(reason)
    return module


def _adv(peer: str, mode: str, batch: Batch = PROBE_BATCH) -> np.ndarray:
    out = _module(peer).ADAPTERS[mode](batch)
    return out.detach().to(torch.float64).numpy().reshape(PROBE.shape if batch is PROBE_BATCH else -1)


def _close(actual: np.ndarray, expected: np.ndarray, rtol: float = 2e-6) -> None:
    """float32 tolerance: AReaL returns float32, ms-swift's dynamic path computes in float32."""
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol)


def _bessel(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    return np.asarray(x.std(axis=axis, ddof=1, keepdims=axis is not None))


# --------------------------------------------------------------------------------------
# AReaL
def test_areal_group_norm_adds_1e5() -> None:
    """NormConfig(mean_level=group, std_level=group): Bessel std + eps 1e-5; [1,0,0,0] gives 0.75/0.50001."""
    mean = PROBE.mean(1, keepdims=True)
    _close(_adv("areal", "reward_norm[group]"), (PROBE - mean) / (_bessel(PROBE, 1) + 1e-5))
    assert _adv("areal", "reward_norm[group]")[0, 0] == pytest.approx(0.75 / 0.50001, rel=1e-6)


def test_areal_population_std_setting() -> None:
    mean = PROBE.mean(1, keepdims=True)
    expected = (PROBE - mean) / (PROBE.std(1, keepdims=True) + 1e-5)
    _close(_adv("areal", "reward_norm[group, std_unbiased=False]"), expected)


def test_areal_leave_one_out_std() -> None:
    """mean_leave1out with std_level=group: the std is taken about each response's leave-one-out mean."""
    g = PROBE.shape[1]
    loo = (PROBE.sum(1, keepdims=True) - PROBE) / (g - 1)
    std = np.sqrt(((PROBE - loo) ** 2).sum(1, keepdims=True) / (g - 1))
    _close(_adv("areal", "reward_norm[leave1out, group]"), (PROBE - loo) / (std + 1e-5))


def test_areal_group_mean_batch_std() -> None:
    centered = PROBE - PROBE.mean(1, keepdims=True)
    _close(_adv("areal", "reward_norm[group, batch std]"), centered / (_bessel(centered) + 1e-5))


def test_areal_batch_norm_ignores_groups() -> None:
    _close(_adv("areal", "reward_norm[batch]"), (PROBE - PROBE.mean()) / (_bessel(PROBE) + 1e-5))


@pytest.mark.parametrize(
    ("mode", "fifth"),
    [
        ("reward_norm[group]", 1.0 / 1e-5),
        ("reward_norm[group, std=None]", 1.0),
        ("reward_norm[leave1out, std=None]", 1.0),
    ],
)
def test_areal_trailing_partial_group_is_not_normalised(mode: str, fifth: float) -> None:
    """N = 5, group_size 4: the fifth response keeps mean 0 and std 0, so it gets R/(0 + 1e-5) or R."""
    fn = _module("areal").ADAPTERS[mode].advantages
    out = fn(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64), 4)
    assert float(out[4]) == pytest.approx(fifth, rel=1e-6)


def test_areal_loss_is_token_mean_ppo() -> None:
    """ppo_actor_loss_fn at ratio 1: dL/dlogp = -A / (number of valid tokens)."""
    loss = _module("areal").ADAPTERS["reward_norm[group]"].loss
    assert loss is not None
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    logp = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    loss(logp, logp.detach(), torch.tensor([1.0, -2.0], dtype=torch.float64), mask).backward()
    assert logp.grad is not None
    np.testing.assert_allclose(logp.grad.numpy(), [[-1 / 3, -1 / 3], [2 / 3, 0.0]], rtol=1e-12)


# --------------------------------------------------------------------------------------
# ms-swift
def test_swift_rloo_over_the_group_std() -> None:
    g = PROBE.shape[1]
    rloo = g / (g - 1) * (PROBE - PROBE.mean(1, keepdims=True))
    _close(_adv("swift", "rloo[group]"), rloo / (_bessel(PROBE, 1) + 1e-4))
    _close(_adv("swift", "rloo[batch]"), rloo / (_bessel(PROBE) + 1e-4))


def test_swift_reinforce_plus_plus_batch_scales_the_centered_rewards() -> None:
    centered = PROBE - PROBE.mean(1, keepdims=True)
    _close(_adv("swift", "reinforce_plus_plus[batch]"), centered / (_bessel(centered) + 1e-4))


def test_swift_gdpo_normalises_twice() -> None:
    """scale_rewards=gdpo: per group (Bessel + 1e-8, silent groups 0), then over the batch (+ 1e-8)."""
    first = (PROBE - PROBE.mean(1, keepdims=True)) / (_bessel(PROBE, 1) + 1e-8)
    _close(_adv("swift", "grpo[gdpo]"), (first - first.mean()) / (_bessel(first) + 1e-8), rtol=1e-5)


def test_swift_dynamic_path_raises_on_float64_rewards() -> None:
    """compute_advantages_dynamic keeps its group means in a float32 buffer: float64 rewards raise
    (the trainer always passes float32 ``rewards_per_func``, as the adapter does)."""
    _module("swift")
    from swift.rl_core.advantage import compute_advantages_dynamic

    with pytest.raises(RuntimeError, match="dtypes match"):
        compute_advantages_dynamic(
            torch.tensor([[1.0], [0.0]], dtype=torch.float64), torch.ones(1), ["p", "p"], ["a", "b"]
        )


def test_swift_dynamic_groups_by_prompt_id_ragged() -> None:
    """The request-aware path groups by prompt id (ragged, interleaved) and matches TRL's convention."""
    batch = Batch(np.array([1.0, 0.0, 0.7, 1.0, 0.0, 0.3, 0.0]), np.array([0, 1, 0, 2, 1, 0, 0]))
    out = _module("swift").ADAPTERS["dynamic:grpo[group]"](batch).to(torch.float64).numpy()
    a = np.array([1.0, 0.7, 0.3, 0.0])
    expected_a = (a - a.mean()) / (a.std(ddof=1) + 1e-4)
    _close(out[[0, 2, 5, 6]], expected_a)
    assert out[1] == out[4] == 0.0 and out[3] == 0.0  # a silent pair, a group of one


# --------------------------------------------------------------------------------------
# SkyRL
def test_skyrl_maxrl_divides_by_the_group_mean() -> None:
    batch = Batch.grouped(PROBE[[0, 1, 3]])
    out = _module("skyrl").ADAPTERS["maxrl"](batch).to(torch.float64).numpy().reshape(3, 4)
    p = PROBE[[0, 1, 3]]
    mean = p.mean(1, keepdims=True)
    _close(out, (p - mean) / (mean + 1e-6))


@pytest.mark.parametrize(
    ("reduction", "weights"),
    [
        ("token_mean", [[1 / 3, 1 / 3], [1 / 3, 0.0]]),
        ("token_mean_legacy", [[1 / 3, 1 / 3], [1 / 3, 0.0]]),
        ("sequence_mean", [[1 / 4, 1 / 4], [1 / 2, 0.0]]),
        ("seq_mean_token_sum_norm", [[1 / 4, 1 / 4], [1 / 4, 0.0]]),
    ],
)
def test_skyrl_loss_reduction_by_prescaled_advantages(reduction: str, weights: list[list[float]]) -> None:
    """apply_loss_reduction_to_advantages_minibatch then a token sum: dL/dlogp = -w_it A at ratio 1
    (lengths 2 and 1, padded width 2, one micro-batch)."""
    loss = _module("skyrl").ADAPTERS[f"loss[{reduction}]"].loss
    assert loss is not None
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    logp = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    loss(logp, logp.detach(), torch.ones(2, dtype=torch.float64), mask).backward()
    assert logp.grad is not None
    # float32 inside SkyRL's ratio (safe_exp_delta): the weights to float32 precision
    np.testing.assert_allclose((-logp.grad).numpy(), weights, rtol=1e-6)


def test_skyrl_ratio_is_float32_whatever_the_input() -> None:
    """safe_exp_delta casts the log-ratio to float32 and back: a float64 call gets a float32 gradient
    (why the adapter passes float32 log-probs, as SkyRL's workers hold them)."""
    pu = _module("skyrl")._ppo_utils()
    delta = torch.tensor([0.1], dtype=torch.float64, requires_grad=True)
    out = pu.safe_exp_delta(delta, clip=20.0, out_dtype=torch.float64)
    assert out.dtype == torch.float64
    assert float(out) == float(torch.tensor(0.1, dtype=torch.float32).exp())


# --------------------------------------------------------------------------------------
# Unsloth
def _unsloth_grad(mode: str, mask: torch.Tensor) -> torch.Tensor:
    loss = _module("unsloth").ADAPTERS[mode].loss
    assert loss is not None
    logp = torch.zeros(mask.shape, dtype=torch.float64, requires_grad=True)
    loss(logp, logp.detach(), torch.ones(mask.shape[0], dtype=torch.float64), mask).backward()
    assert logp.grad is not None
    return -logp.grad


def test_unsloth_cispo_default_caps_the_weight_at_0_2() -> None:
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    np.testing.assert_allclose(_unsloth_grad("loss[cispo]", mask).numpy(), [[0.2 / 3] * 2, [0.2 / 3, 0.0]])
    np.testing.assert_allclose(
        _unsloth_grad("loss[cispo, epsilon_high=5]", mask).numpy(), [[1 / 3, 1 / 3], [1 / 3, 0.0]]
    )


def test_unsloth_bnpo_normalises_each_micro_batch_locally() -> None:
    """At scale, bnpo ignores num_items_in_batch: two micro-batches of 1 and 3 tokens (M = 2) give
    token weights 1/2 and 1/6 where the global token mean gives 1/4 each; dapo gives 1/4."""
    unsloth = _module("unsloth")
    grads = {}
    for t in ("bnpo", "dapo"):
        fn = getattr(unsloth.AT_SCALE, t)
        parts = []
        for mask in (torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([[1.0, 1.0, 1.0]])):
            mask = mask.to(torch.float64)
            logp = torch.zeros(mask.shape, dtype=torch.float64, requires_grad=True)
            fn(logp, logp.detach(), torch.ones(1, dtype=torch.float64), mask,
               global_num_tokens=4, world_size=1, micro_batches=2).backward()  # fmt: skip
            assert logp.grad is not None
            parts.append((-logp.grad)[mask > 0].tolist())
        grads[t] = parts
    assert grads["bnpo"] == [pytest.approx([1 / 2]), pytest.approx([1 / 6] * 3)]
    assert grads["dapo"] == [pytest.approx([1 / 4]), pytest.approx([1 / 4] * 3)]
