"""The loss gallery against the oracle: each correct loss's autograd gradient is the oracle's
per-token prediction for its declared objective; each wrong one differs on a designed input,
and where the gallery says what the wrong code computes, the oracle predicts that exactly."""

from __future__ import annotations

import math

import pytest
import torch

from sigma_ref import objectives as O  # noqa: N812

from .gallery.losses import LOSSES, LossCase

LENGTHS = [1, 7, 3, 5, 2, 6]  # length 1 and full length; halves hold 11 and 13 tokens
N, T = len(LENGTHS), 7


def designed_input() -> dict[str, torch.Tensor]:
    """Ratios from 0.22 to 4.5 (inside and outside every clip), advantages of both signs."""
    gen = torch.Generator().manual_seed(0)
    mask = (torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]).double()
    old = -torch.rand(N, T, generator=gen, dtype=torch.float64) * 2 - 0.1
    logp = old + (torch.rand(N, T, generator=gen, dtype=torch.float64) * 2 - 1) * 1.5
    return {
        "logp": logp,
        "old_logp": old,
        "advantages": torch.tensor([1.2, -0.7, 0.5, -1.5, 2.0, -0.3], dtype=torch.float64),
        "mask": mask,
        "ref_logp": old + torch.randn(N, T, generator=gen, dtype=torch.float64) * 0.5,
        "rollout_logp": old + torch.randn(N, T, generator=gen, dtype=torch.float64) * 0.5,
    }


def measured_gradient(
    case: LossCase, x: dict[str, torch.Tensor], *, at_ratio_one: bool = False
) -> torch.Tensor:
    """``d loss / d logp`` by autograd, the loss called in its own signature."""
    logp = x["logp"].clone().requires_grad_(True)
    old = logp.detach().clone() if at_ratio_one else x["old_logp"]
    extra = {k: x[k] for k in case.extras}
    out = case.fn(logp, old, x["advantages"], x["mask"], **extra)
    loss = out[0] if isinstance(out, tuple) else out
    (g,) = torch.autograd.grad(loss, logp)
    return g


def predicted(objective: O.Objective, x: dict[str, torch.Tensor]) -> torch.Tensor:
    return O.loss_gradient(
        objective,
        x["logp"],
        x["old_logp"],
        x["advantages"],
        x["mask"],
        ref_logp=x["ref_logp"],
        rollout_logp=x["rollout_logp"],
    )


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a, b, rtol=1e-10, atol=1e-14))


CORRECT = [c for c in LOSSES if c.correct]
WRONG = [c for c in LOSSES if not c.correct]


#: The relative tolerance of a loss computed in float32: 16 units of float32's roundoff (the ratio's
#: exp and the products each round once; measured: 1.35 units at most on the designed input).
FLOAT32_RTOL = 16 * 2.0**-24


@pytest.mark.parametrize("case", CORRECT, ids=[c.name for c in CORRECT])
def test_correct_loss_matches_the_oracle(case):
    x = designed_input()
    rtol = 1e-10 if case.precision == "float64" else FLOAT32_RTOL
    torch.testing.assert_close(measured_gradient(case, x), predicted(case.declared, x), rtol=rtol, atol=1e-14)


@pytest.mark.parametrize("case", WRONG, ids=[c.name for c in WRONG])
def test_wrong_loss_differs_from_the_oracle(case):
    x = designed_input()
    g = measured_gradient(case, x)
    assert not _close(g, predicted(case.declared, x)), f"{case.name} is not caught: {case.cause_words}"
    if case.explained_by is not None:
        torch.testing.assert_close(g, predicted(case.explained_by, x), rtol=1e-10, atol=1e-14)


def test_per_micro_batch_normaliser_is_the_effective_weights_prediction():
    """The accumulated gradient of per-micro-batch token means over M = 2 (each / 2)."""
    (case,) = [c for c in LOSSES if c.name == "per_micro_batch_count"]
    x = designed_input()
    micro = torch.tensor([0, 0, 0, 1, 1, 1])
    w = O.effective_weights(
        x["mask"], "token-mean", micro_batch=micro, normaliser="micro-batch", loss_scale=0.5
    )
    unit = predicted(O.Objective("ppo", eps_low=0.2, eps_high=0.28, aggregation="token-sum"), x)
    torch.testing.assert_close(measured_gradient(case, x), w * unit, rtol=1e-10, atol=1e-14)
    factor = (w / O.aggregation_weights(x["mask"], "token-mean"))[x["mask"].bool()].unique()
    torch.testing.assert_close(factor, torch.tensor([24 / (2 * 13), 24 / (2 * 11)], dtype=torch.float64))


AGGREGATION_CASES = [
    c for c in LOSSES if c.breaks in ("", "aggregation") and c.declared.kind == "ppo" and not c.extras
]


@pytest.mark.parametrize("case", AGGREGATION_CASES, ids=[c.name for c in AGGREGATION_CASES])
def test_detected_aggregation_at_ratio_one(case):
    """Measured weights ``-dL/dlogp / A`` at ratio 1 (no KL term): the declared mode, or the bug's mode."""
    x = designed_input()
    g = measured_gradient(case, x, at_ratio_one=True)
    weights = -g / x["advantages"][:, None]
    detected = O.detect_aggregation(weights, x["mask"])
    expected = case.declared if case.correct else case.explained_by
    mode = O.resolve_aggregation(expected.aggregation)
    constant = (expected.constant or T) if mode == "seq-mean-token-sum-norm" else None
    if case.name == "constant_for_count":  # mask.numel() = N T: C = N T / N_seq = T
        constant = T
    assert detected == (mode, constant)


def test_gallery_is_complete():
    names = [c.name for c in LOSSES]
    assert len(names) == len(set(names))
    declared_modes = {O.resolve_aggregation(c.declared.aggregation) for c in CORRECT}
    assert declared_modes == set(O.AGGREGATION_MODES)
    assert all(c.cause_words and c.source and c.breaks for c in WRONG)
    assert {c.breaks for c in WRONG} == {
        "aggregation",
        "scale-out",
        "gspo",
        "cispo",
        "kl",
        "clip",
        "tis",
        "precision",
    }
    # every importance-sampling level and mode, and every KL estimator in the loss, has a correct entry
    declared = {c.declared for c in CORRECT}
    assert {(o.tis_level, o.tis_mode) for o in declared if o.tis_cap} >= {
        ("token", "truncate"),
        ("token", "mask"),
        ("sequence", "truncate"),
        ("geometric", "truncate"),
    }
    assert {o.kl for o in declared if o.kl and o.kl_placement == "loss"} == {"k1", "k2", "k3", "k3-is"}
    assert {o.kind for o in declared} == {"ppo", "gspo", "gspo-token", "cispo"}
    assert any(o.kl and o.kl_placement == "reward" for o in declared)


KL_CASES = [c for c in WRONG if c.breaks == "kl"]


@pytest.mark.parametrize("case", KL_CASES, ids=[c.name for c in KL_CASES])
def test_kl_bugs_are_in_the_kl_term(case):
    """The policy term of a KL bug agrees with the oracle; what is left is not the declared KL term."""
    x = designed_input()
    terms = O.loss_gradient_terms(
        case.declared,
        x["logp"],
        x["old_logp"],
        x["advantages"],
        x["mask"],
        ref_logp=x["ref_logp"],
        rollout_logp=x["rollout_logp"],
    )
    rest = measured_gradient(case, x) - terms["policy"]
    assert not _close(rest, terms["kl"])
    assert bool(rest.abs().max() > 0)
    if case.name == "kl_sign_flipped":
        torch.testing.assert_close(rest, -terms["kl"], rtol=1e-10, atol=1e-14)


def _case(name: str) -> LossCase:
    return next(c for c in LOSSES if c.name == name)


def test_importance_weight_bugs_are_the_oracle_with_their_weights():
    """The wrong TIS entries compute the declared surrogate with the weights of their own making, which
    the oracle takes as ``rho=``: max(rho, C) (clamp(min=C)) and the sequence's geometric mean."""
    x = designed_input()
    mask = x["mask"]
    raw = O.importance_weights(x["old_logp"], x["rollout_logp"], mask, cap=float("inf"))
    below = _case("tis_cap_from_below")
    torch.testing.assert_close(
        measured_gradient(below, x),
        O.loss_gradient(
            below.declared, x["logp"], x["old_logp"], x["advantages"], mask, rho=raw.clamp(min=2.0)
        ),
        rtol=1e-10,
        atol=1e-14,
    )
    geo = _case("tis_sequence_geo_mean")
    length = mask.sum(-1, keepdim=True)
    mean = torch.exp(((x["old_logp"] - x["rollout_logp"]) * mask).sum(-1, keepdim=True) / length)
    torch.testing.assert_close(
        measured_gradient(geo, x),
        O.loss_gradient(
            geo.declared,
            x["logp"],
            x["old_logp"],
            x["advantages"],
            mask,
            rho=mean.clamp(max=2.0).expand_as(mask),
        ),
        rtol=1e-10,
        atol=1e-14,
    )


def test_a_weight_that_is_not_detached_doubles_the_gradient_at_ratio_one():
    """At ratio 1 with rollout weight 1/2 the weight exp(logp - rollout_logp) carries d rho/dlogp = rho:
    d(rho ell)/dlogp = rho ell' + rho ell = 2 rho ell' (ell = -A r, r = 1); the declared TIS has rho ell'."""
    case = _case("tis_not_detached")
    x = designed_input()
    x = dict(x, old_logp=x["logp"], rollout_logp=x["logp"] + math.log(2))
    want = predicted(case.declared, x)
    torch.testing.assert_close(measured_gradient(case, x), 2 * want, rtol=1e-10, atol=1e-14)
