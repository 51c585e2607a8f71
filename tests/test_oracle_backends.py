"""numpy and torch, dtypes, devices, mutation and autograd (docs/spec.md §7, level 0).

CUDA cases carry ``@pytest.mark.cuda``; the root ``conftest.py`` skips them, with the
reason, where ``torch.cuda.is_available()`` is False.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from sigma_ref import (
    PRESETS,
    dapo_keep_mask,
    decompose,
    decompose_continuous,
    dr_grpo_advantage,
    grpo_advantage,
    policy_gradient,
    rloo_advantage,
)
from tests.helpers import assert_close, binary_rewards, ragged_batch


def _with_convention(conv) -> Callable:
    return lambda rewards, **kw: grpo_advantage(rewards, convention=conv, **kw)


ADVANTAGES: dict[str, Callable] = {
    "grpo": grpo_advantage,
    "dr_grpo": dr_grpo_advantage,
    "rloo": rloo_advantage,
    **{f"grpo[{name}]": _with_convention(c) for name, c in PRESETS.items()},
}
seeds = st.integers(0, 2**32 - 1)

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.cuda),
]
# bfloat16 and float16 keep 8 and 11 significant bits: compare with their resolution.
TORCH_DTYPES = [
    pytest.param(torch.float64, 1e-12, id="float64"),
    pytest.param(torch.float32, 1e-5, id="float32"),
    pytest.param(torch.float16, 2e-3, id="float16"),
    pytest.param(torch.bfloat16, 1.6e-2, id="bfloat16"),
]


def _case(seed: int, n_rows: int, G: int) -> np.ndarray:
    return binary_rewards([G] * n_rows, np.random.default_rng(seed)).reshape(n_rows, G)


@pytest.mark.parametrize("name", list(ADVANTAGES))
@given(seed=seeds, n_rows=st.integers(1, 5), G=st.integers(2, 32))
def test_numpy_and_torch_agree_float64(name: str, seed: int, n_rows: int, G: int) -> None:
    """The same rewards as a numpy array and a float64 CPU tensor give the same advantages."""
    rewards = _case(seed, n_rows, G)
    fn = ADVANTAGES[name]
    np_out = fn(rewards)
    torch_out = fn(torch.from_numpy(rewards.copy()))
    assert isinstance(np_out, np.ndarray) and isinstance(torch_out, torch.Tensor)
    assert torch_out.dtype == torch.float64
    assert_close(torch_out, np_out, rtol=0, atol=0, what=name)


@given(seed=seeds, sizes=st.lists(st.integers(2, 20), min_size=1, max_size=5), d=st.integers(1, 6))
def test_numpy_and_torch_agree_identity(seed: int, sizes: list[int], d: int) -> None:
    """``policy_gradient``, ``decompose`` and ``decompose_continuous`` agree across backends,
    with a torch index too."""
    rng = np.random.default_rng(seed)
    index, perm = ragged_batch(sizes, "int", rng)
    rewards = binary_rewards(sizes, rng)[perm]
    scores = rng.normal(size=(len(index), d))
    t_index = torch.tensor(index)
    t_rewards, t_scores = torch.from_numpy(rewards.copy()), torch.from_numpy(scores.copy())
    adv = grpo_advantage(rewards, index=index)
    t_adv = grpo_advantage(t_rewards, index=t_index)
    assert_close(t_adv, adv, rtol=0, atol=0)
    assert_close(
        policy_gradient(t_adv, t_scores, index=t_index), policy_gradient(adv, scores, index=index), rtol=0
    )
    dec, t_dec = decompose(rewards, scores, index=index), decompose(t_rewards, t_scores, index=t_index)
    for field in ("k", "G", "sigma", "divisor", "delta_s", "constant", "prediction"):
        assert_close(getattr(t_dec, field), getattr(dec, field), rtol=0, atol=0, what=field)
    cont = decompose_continuous(rewards, scores, index=index).prediction
    assert_close(decompose_continuous(t_rewards, t_scores, index=t_index).prediction, cont, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "tol"), TORCH_DTYPES)
@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "grpo[verl]"])
def test_torch_dtype_and_device_preserved(name: str, dtype: torch.dtype, tol: float, device: str) -> None:
    """Output on the input's device and dtype; values equal the float64 result to the dtype's
    resolution (computed in float64, rounded once)."""
    rewards = _case(3, 6, 8)
    fn = ADVANTAGES[name]
    x = torch.tensor(rewards, dtype=dtype, device=device)
    out = fn(x)
    assert out.dtype == dtype and out.device.type == device and out.shape == x.shape
    assert_close(out, fn(rewards), rtol=tol, atol=tol, what=f"{name} {dtype}")
    keep = dapo_keep_mask(x)
    assert keep.dtype == torch.bool and keep.device.type == device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "tol"), TORCH_DTYPES)
def test_identity_dtype_and_device_preserved(dtype: torch.dtype, tol: float, device: str) -> None:
    """``policy_gradient`` and ``decompose`` keep the device; the identity holds in every dtype
    to the dtype's resolution."""
    rng = np.random.default_rng(11)
    rewards = _case(5, 4, 16)
    scores = rng.normal(size=(4, 16, 3))
    x = torch.tensor(rewards, dtype=dtype, device=device)
    s = torch.tensor(scores, dtype=dtype, device=device)
    g = policy_gradient(grpo_advantage(x), s)
    dec = decompose(x, s)
    assert g.dtype == dtype and g.device.type == device
    assert dec.prediction.dtype == dtype and dec.prediction.device.type == device
    assert dec.k.dtype == torch.int64 and dec.sigma.dtype == torch.float64
    assert_close(g, dec.prediction, rtol=4 * tol, atol=4 * tol * np.abs(scores).max(), what=str(dtype))


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_numpy_float32_preserved(name: str) -> None:
    """A float32 numpy array gives float32; float16 numpy gives float16."""
    rewards = _case(1, 3, 5)
    fn = ADVANTAGES[name]
    for dtype in (np.float32, np.float16):
        out = fn(rewards.astype(dtype))
        assert out.dtype == dtype
        assert_close(out, fn(rewards), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(
    "rewards",
    [
        pytest.param(np.array([[1, 0, 0, 1]]), id="numpy-int64"),
        pytest.param(np.array([[1, 0, 0, 1]], dtype=np.uint8), id="numpy-uint8"),
        pytest.param(np.array([[True, False, False, True]]), id="numpy-bool"),
        pytest.param([[1, 0, 0, 1]], id="list-int"),
        pytest.param(torch.tensor([[1, 0, 0, 1]]), id="torch-int64"),
        pytest.param(torch.tensor([[True, False, False, True]]), id="torch-bool"),
    ],
)
def test_integer_and_bool_inputs_give_float64(rewards) -> None:
    """Integer and boolean rewards give float64 advantages with the exact values."""
    for fn in (grpo_advantage, dr_grpo_advantage, rloo_advantage):
        out = fn(rewards)
        assert out.dtype in (np.float64, torch.float64), (fn.__name__, out.dtype)
    assert_close(grpo_advantage(rewards), [[1.0, -1.0, -1.0, 1.0]], rtol=1e-15)
    dec = decompose(rewards, np.array([[[1.0], [0.0], [2.0], [3.0]]]))
    assert_close(dec.prediction, [[0.5 * (2.0 - 1.0)]], rtol=1e-15)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_inputs_never_mutated(backend: str) -> None:
    """Rewards, scores and index are unchanged after every call (compared with copies)."""
    rng = np.random.default_rng(2)
    rewards = np.array([0.1, 0.1, 1.0, 0.0, 1.0, 1.0, 0.0])
    index = np.array([5, 5, 3, 3, 3, 9, 9])
    scores = rng.normal(size=(7, 4))
    if backend == "torch":
        rewards, scores, index = torch.tensor(rewards), torch.tensor(scores), torch.tensor(index)
    copies = [a.copy() if isinstance(a, np.ndarray) else a.clone() for a in (rewards, scores, index)]
    binary = rewards.clone() if backend == "torch" else rewards.copy()
    binary[:2] = 0.0
    binary_copy = binary.clone() if backend == "torch" else binary.copy()
    for conv in PRESETS.values():
        grpo_advantage(rewards, convention=conv, index=index)
        decompose(binary, scores, convention=conv, index=index)
        decompose_continuous(rewards, scores, convention=conv, index=index)
    dr_grpo_advantage(rewards, index=index)
    rloo_advantage(rewards, index=index)
    dapo_keep_mask(rewards, index=index)
    policy_gradient(rewards, scores, index=index)
    for before, after in zip(copies, (rewards, scores, index), strict=True):
        assert (before == after).all()
    assert (binary_copy == binary).all()
    grouped = rewards.reshape(1, -1) * 1.0
    grouped_copy = grouped.copy() if backend == "numpy" else grouped.clone()
    grpo_advantage(grouped)
    assert (grouped == grouped_copy).all()


@pytest.mark.parametrize("device", DEVICES)
def test_outputs_never_require_grad(device: str) -> None:
    """Even from inputs that require grad, outputs are plain tensors (the oracle is a reference)."""
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]], device=device, requires_grad=True)
    scores = torch.randn(1, 4, 3, device=device, requires_grad=True)
    outs = [
        grpo_advantage(rewards),
        dr_grpo_advantage(rewards),
        rloo_advantage(rewards),
        policy_gradient(rewards, scores),
        decompose(rewards, scores).prediction,
        decompose_continuous(rewards, scores).prediction,
    ]
    for out in outs:
        assert not out.requires_grad and out.grad_fn is None
    assert rewards.grad is None


@pytest.mark.cuda
def test_cuda_matches_cpu() -> None:
    """On CUDA the float64 results equal the CPU ones (same float64 arithmetic, any reduction order)."""
    rng = np.random.default_rng(4)
    index, perm = ragged_batch([3, 7, 2, 64], "str", rng)
    rewards = binary_rewards([3, 7, 2, 64], rng)[perm]
    scores = rng.normal(size=(len(index), 5))
    cpu = decompose(torch.tensor(rewards), torch.tensor(scores), index=index, convention="verl")
    gpu = decompose(
        torch.tensor(rewards, device="cuda"),
        torch.tensor(scores, device="cuda"),
        index=index,
        convention="verl",
    )
    assert gpu.prediction.device.type == "cuda"
    assert_close(gpu.prediction, cpu.prediction, rtol=1e-12, atol=1e-14)
