"""The suite on JAX code (``sigma_ref.conformance.frameworks``): detection, the bridge's exactness,
``jax.grad`` as the loss's autodiff, and the JAX gallery (``tests/gallery/jax_functions.py``):
two tunix-style correct functions CONFORMANT with nothing declared, two bugs FAIL with their
probe-confirmed causes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sigma_ref import Convention
from sigma_ref.conformance import Adapter
from sigma_ref.conformance.core import evaluate, get_property, run_suite
from sigma_ref.conformance.frameworks import detect_framework, jax_function, jax_loss, on_framework
from sigma_ref.conformance.session import build_context

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from .gallery import correct, jax_functions, wrong  # noqa: E402 (after the skip: the gallery imports jax)


def test_detect_framework() -> None:
    """JAX code is told from torch code by what its code refers to (or its module, or jax.jit)."""
    for fn in (
        jax_functions.grpo_advantages,
        jax_functions.token_mean_loss,
        jax_functions.padded_mean_loss,
        jax.jit(jax_functions.grpo_advantages, static_argnums=1),
    ):
        assert detect_framework(fn) == "jax", fn
    for fn in (correct.trl_contiguous, correct.token_mean_loss, wrong.batch_mean_centering, np.mean):
        assert detect_framework(fn) == "torch", fn


def test_framework_option_errors() -> None:
    """An unknown framework names the choices."""
    with pytest.raises(ValueError, match=r"--framework 'tf' must be 'auto' \(detect it\), 'torch' or 'jax'"):
        on_framework(Adapter(correct.trl_contiguous, "contiguous"), "tf")


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
def test_bridge_is_exact(dtype: str) -> None:
    """A tensor crosses to jax and back with its dtype and bits (bfloat16 too)."""
    t = torch.tensor([1.0, -0.3, 1e-3, 7.5], dtype=getattr(torch, dtype))
    out = jax_function(lambda x: x)(t)
    assert out.dtype == t.dtype and torch.equal(out, t)


def test_loss_gradient_is_jax_grad() -> None:
    """torch's backward through the bridge gives jax.grad of the JAX loss, bit for bit."""
    rng = np.random.default_rng(0)
    logp = rng.normal(size=(5, 4))
    old = logp + rng.normal(scale=0.3, size=(5, 4))
    adv = rng.normal(size=5)
    mask = (rng.random((5, 4)) < 0.7).astype(np.float64)
    leaf = torch.tensor(logp, requires_grad=True)
    value = jax_loss(jax_functions.token_mean_loss)(
        leaf, torch.tensor(old), torch.tensor(adv), torch.tensor(mask)
    )
    value.backward()
    with jax.enable_x64(True):
        args = (jnp.asarray(old), jnp.asarray(adv), jnp.asarray(mask))
        want_value, want = jax.value_and_grad(jax_functions.token_mean_loss)(jnp.asarray(logp), *args)
    assert float(value.detach()) == float(want_value)
    np.testing.assert_array_equal(leaf.grad.numpy(), np.asarray(want))


def test_loss_returning_aux() -> None:
    """A JAX loss returning ``(loss, aux)`` gives ``(loss, aux)`` back, aux as torch tensors."""

    def loss(logp, old_logp, advantages, mask):
        value = jax_functions.token_mean_loss(logp, old_logp, advantages, mask)
        return value, {"kl": jnp.mean(logp - old_logp)}

    leaf = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    value, aux = jax_loss(loss)(
        leaf, leaf.detach(), torch.tensor([1.0, -1.0], dtype=torch.float64), torch.ones(2, 3)
    )
    value.backward()
    assert isinstance(aux["kl"], torch.Tensor) and float(aux["kl"]) == 0.0
    assert leaf.grad is not None and torch.allclose(
        leaf.grad, torch.tensor([[-1 / 6] * 3, [1 / 6] * 3]).double()
    )


@pytest.mark.slow  # about 90 s on 2 cores: jax compiles its operations for every new shape
def test_jax_gallery_correct_is_conformant() -> None:
    """tunix-style GRPO advantages with a token-mean clipped loss: no FAIL, nothing declared; the
    detected convention is its own (ddof 1, eps 1e-6 added) and the aggregation token-mean."""
    ctx = build_context(
        Adapter(jax_functions.grpo_advantages, "contiguous", loss=jax_functions.token_mean_loss)
    )
    assert ctx.detection is not None
    conv = ctx.detection.convention
    assert (conv.ddof, conv.eps, conv.eps_placement, conv.scale) == (1, 1e-6, "add", "group")
    outcomes = run_suite(ctx, max_examples=3, shrink=False)
    fails = [f"{o.label}: {o.message}" for o in outcomes if o.verdict == "FAIL"]
    assert not fails, fails
    passed = {o.label for o in outcomes if o.verdict == "pass"}
    assert {"test_advantage_identity", "test_loss_gradient_identity", "test_loss_ignores_padding"} <= passed
    aggregation = next(o for o in outcomes if o.label == "test_loss_aggregation")
    assert "token-mean" in aggregation.message


@pytest.mark.parametrize(
    ("fn", "loss", "breaks", "says"),
    [
        (jax_functions.batch_mean_advantages, None, "group_centering", "batch mean"),
        (jax_functions.grpo_advantages, jax_functions.padded_mean_loss, "loss_ignores_padding", "padding"),
    ],
    ids=["batch_mean_advantages", "padded_mean_loss"],
)
def test_jax_gallery_wrong_fails_with_its_cause(fn, loss, breaks: str, says: str) -> None:
    """Each JAX bug FAILs the property it breaks, with the cause a probe confirmed."""
    declared = Convention("tunix", ddof=1, eps=1e-6)  # what the author meant: tunix's GRPO statistics
    ctx = build_context(Adapter(fn, "contiguous", loss=loss, convention=declared))
    prop = get_property(breaks)
    outcomes = [evaluate(prop, ctx, p, max_examples=10, shrink=False) for p in prop.params(ctx.adapter)]
    hit = [o for o in outcomes if o.verdict == "FAIL"]
    assert hit, [o.verdict for o in outcomes]
    assert any(says in o.message for o in hit), hit[0].message
    assert any(o.finding is not None and o.finding.confirmed for o in hit), hit[0].message


def test_pytest_spec_on_jax_code_end_to_end() -> None:
    """``pytest spec --sigma-ref-impl`` on a JAX function, nothing said about JAX: it is detected,
    called with jax arrays, and its bug fails with the confirmed cause (exit 1)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-m", "pytest", "spec", "-q", "-p", "no:cacheprovider", "-k", "group_centering"]
    argv += ["--sigma-ref-impl", "tests.gallery.jax_functions:batch_mean_advantages"]
    argv += ["--sigma-ref-layout", "contiguous", "--sigma-ref-convention", "verl"]
    argv += ["--sigma-ref-timeout", "120"]  # importing jax on a busy 2-core machine can take 10 s
    env = dict(os.environ, PYTHONPATH=str(root), CI="true", HYPOTHESIS_PROFILE="ci")
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "FAIL test_group_centering" in done.stdout
    assert "centered on the batch mean, not the group mean" in done.stdout
