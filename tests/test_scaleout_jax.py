"""Level 5 on JAX code: the ranks call a JAX loss through the bridge (``frameworks.py``), and
:func:`~sigma_ref.conformance.scaleout.spmd_loss` computes a loss the way a ``jax.sharding`` trainer
does, once on the global micro-batch of every rank.

The fast tier starts no process; the slow tier runs the JAX gallery (``tests/gallery/jax_functions.py``)
on two real gloo ranks: the token-mean loss given the step's token count passes, the one that divides
each micro-batch by its own tokens FAILs with its class named, and ``pytest spec`` on JAX code with
``--sigma-ref-world-size`` runs level 5 (it was a usage error).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sigma_ref.conformance import scaleout
from sigma_ref.conformance.frameworks import detect_framework, jax_loss, on_framework
from sigma_ref.conformance.scaleout import LOSS_PRECISION_RTOL, ScaleoutJob, run_scaleout_many, spmd_loss

pytest.importorskip("jax")

ADV = "sigma_ref.conformance.scaleout:oracle_advantages"
GALLERY = "tests.gallery.jax_functions"


def _token_mean(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return -(torch.exp(logp - old) * adv[:, None] * mask).sum() / mask.sum()


def test_spmd_loss_on_one_rank_is_the_loss() -> None:
    """At W = 1 nothing is gathered: the value and gradient are the loss's own."""
    gen = torch.Generator().manual_seed(0)
    logp = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    adv = torch.randn(3, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float64)
    wrapped = spmd_loss(_token_mean)
    value = wrapped(logp, logp.detach(), adv, mask, rank=0, world_size=1, process_group=None)
    (g,) = torch.autograd.grad(value, logp)
    (want,) = torch.autograd.grad(_token_mean(logp, logp.detach(), adv, mask), logp)
    torch.testing.assert_close(g, want, rtol=0, atol=0)
    assert wrapped.__name__ == "spmd[_token_mean]"


def test_spmd_loss_is_torch_glue_never_bridged_again() -> None:
    """The wrapper around a bridged JAX loss names its framework: detection and ``on_framework`` leave it
    as it is (its closure holds a JAX function, which detection alone would call JAX)."""
    import tests.gallery.jax_functions as jf

    inner = jax_loss(jf.token_mean_loss)
    wrapped = spmd_loss(inner)
    assert detect_framework(wrapped) == "torch"
    assert detect_framework(inner) == "jax"
    from sigma_ref.conformance import Adapter

    adapter = Adapter(lambda r, g: r, "contiguous", loss=wrapped)
    assert on_framework(adapter, "jax").loss is wrapped


def test_loss_precision_is_validated_before_any_process() -> None:
    with pytest.raises(ValueError, match="loss_precision='float16' must be one of"):
        run_scaleout_many(
            [ScaleoutJob(ADV, f"{GALLERY}:token_mean_loss", layout="index", loss_precision="float16")]
        )
    assert LOSS_PRECISION_RTOL["float32"] == pytest.approx(64 * 2.0**-24)


def _micro_token_mean_factor() -> float:
    """The factor a per-micro-batch token mean with 1/M accumulation has at W = 2, M = 2, predicted
    (``proofs/12_scale_out``, per-micro-batch normaliser: a token of piece ``(r, m)`` weighs
    ``N_tok / (W M n_rm)`` times the full batch's): the least-squares factor against the full-batch
    gradient, as the check measures it."""
    from sigma_ref.conformance.normalisers import token_scores

    batch = scaleout._job_batch(0, scaleout._n_groups(2, "uneven"), False)
    adv = scaleout.oracle_advantages(torch.tensor(batch.rewards), batch.index).numpy()
    scores = token_scores(batch.theta, batch.feats, batch.tokens)
    rank, micro = scaleout._assignment(batch, 2, 2, "whole-groups", "uneven")
    w_full = batch.mask / batch.mask.sum()
    w = np.zeros_like(batch.mask)
    for r in range(2):
        for m in range(2):
            rows = (rank == r) & (micro == m)
            w[rows] = batch.mask[rows] / batch.mask[rows].sum() / (2 * 2)  # 1/M, then DDP's 1/W
    g = -np.einsum("nt,n,ntd->d", w, adv, scores)
    ref = -np.einsum("nt,n,ntd->d", w_full, adv, scores)
    return float(g @ ref / (ref @ ref))


@pytest.mark.slow
def test_jax_losses_at_level_5_on_real_ranks() -> None:
    """One launch of 2 gloo ranks, M = 1, 2, 3: the JAX token-mean with ``global_num_tokens`` passes;
    the JAX token-mean over its own micro-batch FAILs as ``normaliser computed per micro-batch`` at
    every M (at M = 1 the micro-batch is the rank's uneven shard), confirmed by the probes, with the
    factor the derivation predicts; each rank ran the JAX code (jax.value_and_grad's gradient)."""
    good, bad = run_scaleout_many(
        [
            ScaleoutJob(
                ADV,
                f"{GALLERY}:global_token_mean_loss",
                layout="index",
                micro_batches=(1, 2, 3),
                aggregation="token-mean",
            ),
            ScaleoutJob(
                ADV,
                f"{GALLERY}:token_mean_loss",
                layout="index",
                micro_batches=(1, 2, 3),
                aggregation="token-mean",
                loss_scale="mean-over-micro-batches",
            ),
        ],
        world_size=2,
    )
    assert good.passed, good.summary()
    assert not bad.passed
    failed = [r for r in bad.results if r.verdict == "FAIL" and r.property.startswith("scaleout_gradient")]
    assert [r.property for r in failed] == [f"scaleout_gradient[W=2,M={m}]" for m in (1, 2, 3)]
    assert all(r.message.startswith("normaliser computed per micro-batch") for r in failed), failed
    assert all("Confirmed" in r.message for r in failed), failed
    m2 = failed[1]
    assert m2.factor is not None and m2.factor == pytest.approx(_micro_token_mean_factor(), rel=1e-9)


@pytest.mark.slow
def test_pytest_spec_level_5_on_jax_code_end_to_end() -> None:
    """``pytest spec --sigma-ref-world-size 2`` on a JAX function and a JAX loss, nothing said about
    JAX: level 5 runs (it was a usage error) and the per-micro-batch token mean FAILs with its class."""
    root = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-m", "pytest", "spec/test_scaleout.py", "-q", "-p", "no:cacheprovider"]
    argv += ["--sigma-ref-impl", f"{GALLERY}:grpo_advantages", "--sigma-ref-layout", "contiguous"]
    argv += ["--sigma-ref-loss", f"{GALLERY}:token_mean_loss", "--sigma-ref-aggregation", "token-mean"]
    argv += ["--sigma-ref-world-size", "2", "--sigma-ref-micro-batches", "2"]
    env = dict(os.environ, PYTHONPATH=str(root), CI="true", HYPOTHESIS_PROFILE="ci")
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-4000:]
    assert "normaliser computed per micro-batch" in out, out[-4000:]
    assert "not yet available" not in out
