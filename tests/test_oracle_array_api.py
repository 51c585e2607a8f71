"""The oracle on other array-API libraries: array_api_strict (the strict test backend) and jax.

Every public oracle function of the ``sigma_ref`` namespace takes their arrays and gives the
caller's array type back, on the caller's device, with the *same bits* a numpy caller gets
(``sigma_ref._xp``: the statistics run once, in float64, on the host; the result is rounded
once to the caller's dtype). jax runs with ``jax_enable_x64`` here (module fixture); without
it jax holds no float64 and the float64 results come back as float32, one rounding
(:func:`test_jax_without_x64_rounds_once`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

import sigma_ref
from sigma_ref import _xp

xs = pytest.importorskip("array_api_strict")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@pytest.fixture(autouse=True)
def _x64() -> Iterator[None]:
    with jax.enable_x64(True):
        yield


REWARDS = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
FLAT = np.array([1.0, 0.0, 0.5, 1.0, 0.0, 0.0, 1.0])
IDS = np.array([7, 3, 7, 3, 5, 5, 3])
SCORES = np.random.default_rng(0).normal(size=(7, 3))
BINARY = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
P = np.array([0.05, 0.3, 0.5, 0.97])
G = np.array([8, 16, 4, 8])
K = np.array([1, 2, 0, 3])


# name -> call(convert): ``convert`` turns a numpy array into the library under test
# (``np.asarray`` gives the numpy reference).
CASES: dict[str, Callable[[Callable[[np.ndarray], Any]], Any]] = {
    "grpo_advantage": lambda c: sigma_ref.grpo_advantage(c(REWARDS)),
    "grpo_advantage[index]": lambda c: sigma_ref.grpo_advantage(c(FLAT), index=c(IDS), convention="post"),
    "grpo_advantage[int]": lambda c: sigma_ref.grpo_advantage(c(REWARDS.astype(np.int64)), convention="trl"),
    "dr_grpo_advantage": lambda c: sigma_ref.dr_grpo_advantage(c(FLAT), index=c(IDS)),
    "rloo_advantage": lambda c: sigma_ref.rloo_advantage(c(REWARDS), dim=0),
    "dapo_keep_mask": lambda c: sigma_ref.dapo_keep_mask(c(FLAT), index=c(IDS)),
    "group_statistics": lambda c: sigma_ref.group_statistics(c(FLAT), index=c(IDS), convention="verl"),
    "policy_gradient": lambda c: sigma_ref.policy_gradient(c(FLAT), c(SCORES), index=c(IDS)),
    "decompose": lambda c: sigma_ref.decompose(c(BINARY), c(SCORES), index=c(IDS)),
    "decompose_continuous": lambda c: sigma_ref.decompose_continuous(c(FLAT), c(SCORES), index=c(IDS)),
    "silent_group_rate": lambda c: sigma_ref.silent_group_rate(c(P), c(G)),
    "expected_gradient": lambda c: sigma_ref.expected_gradient(c(P), c(G), method="dr_grpo"),
    "fidelity": lambda c: sigma_ref.fidelity(c(P), 8),
    "attenuation": lambda c: sigma_ref.attenuation(c(P), c(G)),
    "min_group_size": lambda c: sigma_ref.min_group_size(c(P), epsilon=0.05),
    "exact_group_size": lambda c: sigma_ref.exact_group_size(c(P), epsilon=0.05),
    "difficulty_weight": lambda c: sigma_ref.difficulty_weight(c(P)),
    "mass_weight": lambda c: sigma_ref.mass_weight(c(P), method="grpo", G=c(G)),
    "mass_share": lambda c: sigma_ref.mass_share(c(P), c(P < 0.4)),
    "arcsine_objective": lambda c: sigma_ref.arcsine_objective(c(P)),
    "group_sigma": lambda c: sigma_ref.group_sigma(c(K), c(G), ddof=1),
    "centered_norm": lambda c: sigma_ref.centered_norm(c(K), 4),
    "corpus_audit": lambda c: sigma_ref.corpus_audit(c(P), G=8),
}

LIBRARIES = {
    "array_api_strict": (lambda a: xs.asarray(a), xs),
    "jax": (lambda a: jnp.asarray(a), jnp),
}


def _fields(result: Any) -> dict[str, Any]:
    """A result's arrays by name: itself, or a dataclass's array fields."""
    if hasattr(result, "__dataclass_fields__"):
        return {k: v for k, v in vars(result).items() if not k.startswith("_")}
    return {"": result}


@pytest.mark.parametrize("library", list(LIBRARIES))
@pytest.mark.parametrize("name", list(CASES))
def test_same_bits_in_the_callers_library(name: str, library: str) -> None:
    """Each result is the caller's array type (namespace, device, the numpy reference's dtype)
    holding exactly the numpy caller's values."""
    convert, xp = LIBRARIES[library]
    want = CASES[name](np.asarray)
    got = CASES[name](convert)
    if name == "corpus_audit":  # plain data: the same numbers
        assert got == want
        return
    for key, expected in _fields(want).items():
        actual = getattr(got, key) if key else got
        if isinstance(expected, float | int):
            assert type(actual) is type(expected) and actual == expected, key
            continue
        if not isinstance(expected, np.ndarray):
            assert actual == expected, key
            continue
        if key in ("ids", "group_ids"):  # numpy for every caller, torch's too (ids may be strings)
            np.testing.assert_array_equal(actual, expected, err_msg=key, strict=True)
            continue
        assert _xp.is_foreign(actual), f"{name}.{key} is a {type(actual).__name__}, not {library}'s array"
        import array_api_compat

        assert array_api_compat.array_namespace(actual) is array_api_compat.array_namespace(xp.asarray(0))
        assert str(array_api_compat.device(actual)) == str(array_api_compat.device(xp.asarray(0)))
        host, _ = _xp.to_numpy(actual)
        assert host.dtype == expected.dtype, f"{name}.{key}: {host.dtype} != {expected.dtype}"
        assert host.shape == expected.shape
        np.testing.assert_array_equal(host, expected, err_msg=f"{name}.{key}", strict=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_jax_narrow_dtypes_round_once(dtype: str) -> None:
    """A narrow jax caller gets its dtype back: the float64 result rounded once, as a torch caller
    of that dtype gets (the same bits)."""
    r = jnp.asarray(REWARDS, dtype=getattr(jnp, dtype))
    got = sigma_ref.grpo_advantage(r, convention="post")
    want = sigma_ref.grpo_advantage(torch.tensor(REWARDS, dtype=getattr(torch, dtype)), convention="post")
    assert got.dtype == getattr(jnp, dtype)
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), want.double().numpy())


def test_jax_without_x64_rounds_once() -> None:
    """Without ``jax_enable_x64`` the statistics still run in float64; jax's float32 holds the result
    rounded once (the numpy result cast to float32), and integer results are jax's int32."""
    with jax.enable_x64(False):
        r = jnp.asarray(REWARDS.astype(np.int32))
        got = sigma_ref.grpo_advantage(r)
        stats = sigma_ref.group_statistics(r)
    assert got.dtype == jnp.float32 and stats.size.dtype == jnp.int32
    want = sigma_ref.grpo_advantage(REWARDS).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_foreign_inputs_are_not_written() -> None:
    """The oracle never writes to a caller's buffer (jax has no in-place updates; array_api_strict's
    arrays are views of numpy buffers the oracle could write through)."""
    base = FLAT.copy()
    x = xs.asarray(base)
    sigma_ref.grpo_advantage(x, index=xs.asarray(IDS))
    np.testing.assert_array_equal(_xp.to_numpy(x)[0], FLAT)


def test_foreign_errors_name_the_argument() -> None:
    """Bad foreign input fails as numpy input does: the argument, the value, the fix."""
    with pytest.raises(ValueError, match=r"rewards contains nan in group with index id 3 \(flat position 1"):
        sigma_ref.grpo_advantage(jnp.asarray([1.0, float("nan")]), index=jnp.asarray([3, 3]))
    with pytest.raises(ValueError, match=r"p=1\.5 is outside \[0, 1\]"):
        sigma_ref.fidelity(xs.asarray([0.5, 1.5]), 8)
    with pytest.raises(TypeError, match="rewards has dtype complex128"):
        sigma_ref.grpo_advantage(jnp.asarray([1.0 + 1j, 0.0]))


def test_is_foreign() -> None:
    """numpy, torch, Python data and numpy scalars keep their own paths."""
    assert _xp.is_foreign(jnp.zeros(2)) and _xp.is_foreign(xs.zeros(2))
    for value in (np.zeros(2), np.float64(1.0), torch.zeros(2), [1.0], 1.0, None):
        assert not _xp.is_foreign(value)


@pytest.mark.parametrize("library", list(LIBRARIES))
def test_objectives_take_foreign_arrays(library: str) -> None:
    """``sigma_ref.objectives`` returns torch tensors for every caller (numpy's too: its documented
    contract); it reads foreign arrays as it reads numpy, with the same values."""
    from sigma_ref import objectives

    convert, _ = LIBRARIES[library]
    mask = np.array([[1, 1, 0], [1, 1, 1]])
    logp = np.random.default_rng(1).normal(size=(2, 3))
    for name, call in {
        "aggregation_weights": lambda c: objectives.aggregation_weights(c(mask), "seq-mean-token-mean"),
        "kl_estimate": lambda c: objectives.kl_estimate(c(logp), c(logp * 0.5), "k3")[0],
    }.items():
        got, want = call(convert), call(np.asarray)
        assert isinstance(got, torch.Tensor) and torch.equal(got, want), name


@pytest.mark.parametrize("library", list(LIBRARIES))
def test_assert_advantages_close_on_foreign_arrays(library: str) -> None:
    """``sigma_ref.testing.assert_advantages_close`` judges foreign advantages as numpy ones."""
    from sigma_ref.testing import assert_advantages_close

    convert, _ = LIBRARIES[library]
    good = sigma_ref.grpo_advantage(convert(REWARDS), convention="verl")
    assert_advantages_close(good, convert(REWARDS), convention="verl")
    with pytest.raises(AssertionError, match="advantages mismatched"):
        assert_advantages_close(good, convert(REWARDS), convention="paper")
