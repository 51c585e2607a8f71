"""GSPO's two forms, the importance-weighted k3 and the geometric-mean rollout weight, in the oracle,
in the loss gallery (two seeds, both hypothesis profiles) and on the peers' own loss functions.

The oracle's gradients are checked against autograd of the losses as trainers write them (TRL 1.16.0's
sequence GSPO and ``use_bias_correction_kl``, verl 0.9.1's GSPO-token); the suite's verdicts against
what each row and gallery entry declares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
from hypothesis import settings

from sigma_ref import objectives as O  # noqa: N812
from sigma_ref.conformance import Adapter
from sigma_ref.conformance.core import evaluate
from sigma_ref.conformance.matrix import adapter_module, run_adapter
from sigma_ref.conformance.session import build_context
from sigma_ref.pytest_plugin import register_profiles

from .gallery import correct
from .gallery.losses import LOSSES, LossCase


def _rows(seed: int = 3) -> dict[str, torch.Tensor]:
    """Four responses of lengths 1, 5, 3, 4; ratios within [0.55, 1.8]; token advantages and weights."""
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.arange(5)[None, :] < torch.tensor([1, 5, 3, 4])[:, None]).double()
    old = -torch.rand(4, 5, generator=gen, dtype=torch.float64) * 2 - 0.1
    logp = old + (torch.rand(4, 5, generator=gen, dtype=torch.float64) * 2 - 1) * 0.6
    return {
        "logp": logp,
        "old_logp": old,
        "mask": mask,
        "ref_logp": old + torch.randn(4, 5, generator=gen, dtype=torch.float64) * 0.5,
        "rollout_logp": old + torch.randn(4, 5, generator=gen, dtype=torch.float64) * 0.5,
        "token_adv": torch.randn(4, 5, generator=gen, dtype=torch.float64),
    }


def _seq_ratio(logp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.exp(((logp - old) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True))


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"])
def test_gspo_forms_match_autograd_and_part_where_weights_vary(mode: str) -> None:
    """With token advantages and token rollout weights, autograd of the sequence form (TRL) is the oracle's
    ``gspo`` and of the token form (verl) its ``gspo-token``; the two differ there, and agree once the
    advantages and weights are one number per response."""
    x = _rows()
    m, old = x["mask"], x["old_logp"]
    w = O.aggregation_weights(m, mode)
    rho = O.importance_weights(old, x["rollout_logp"], m, cap=2.0)

    def measured(form: str, adv: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        lp = x["logp"].clone().requires_grad_(True)
        s = _seq_ratio(lp, old, m)
        if form == "token":  # sg(s_i) pi_it / sg(pi_it)
            s = torch.exp(lp - lp.detach() + torch.log(s.detach()))
        per_token = -torch.min(s * adv, torch.clamp(s, 0.8, 1.28) * adv) * weight
        (g,) = torch.autograd.grad((w * per_token).sum(), lp)
        return g

    found = {}
    for kind, form in (("gspo", "sequence"), ("gspo-token", "token")):
        obj = O.Objective(kind, eps_low=0.2, eps_high=0.28, aggregation=mode, tis_cap=2.0)
        want = O.loss_gradient(obj, x["logp"], old, x["token_adv"], m, rollout_logp=x["rollout_logp"])
        found[kind] = measured(form, x["token_adv"], rho)
        torch.testing.assert_close(found[kind], want, rtol=1e-12, atol=1e-15)
    gap = (found["gspo"] - found["gspo-token"]).abs().max() / found["gspo"].abs().max()
    assert gap > 0.1, gap  # measured: the forms part by more than 10% of the largest gradient
    scalar = x["token_adv"][:, :1].expand_as(m)
    torch.testing.assert_close(
        measured("sequence", scalar, m), measured("token", scalar, m), rtol=1e-12, atol=0
    )


@pytest.mark.parametrize("kind", ["ppo", "gspo", "gspo-token", "cispo"])
def test_k3_is_matches_autograd_of_ratio_times_k3(kind: str) -> None:
    """``kl="k3-is"``: the KL term's gradient is autograd of ``beta w q k3`` with the objective's own ratio
    ``q`` in the graph (token ratio; GSPO's sequence ratio, or its token form)."""
    x = _rows(5)
    m, old, ref = x["mask"], x["old_logp"], x["ref_logp"]
    w = O.aggregation_weights(m, "seq-mean-token-mean")
    lp = x["logp"].clone().requires_grad_(True)
    if kind == "gspo":
        q = _seq_ratio(lp, old, m).expand_as(m)
    elif kind == "gspo-token":
        q = torch.exp(lp - lp.detach() + torch.log(_seq_ratio(lp.detach(), old, m)))
    else:
        q = torch.exp(lp - old)
    k3 = torch.exp(ref - lp) - (ref - lp) - 1
    (g,) = torch.autograd.grad((w * 0.3 * q * k3).sum(), lp)
    obj = O.Objective(kind, aggregation="seq-mean-token-mean", kl="k3-is", kl_coef=0.3)
    terms = O.loss_gradient_terms(obj, x["logp"], old, torch.zeros(4), m, ref_logp=ref)
    torch.testing.assert_close(terms["kl"], g * m, rtol=1e-12, atol=1e-16)


def test_geometric_weight_is_the_mean_log_ratio_truncated() -> None:
    """``level="geometric"``: ``min(exp(mean_t log rho_t), C)`` on every token of the row, 0 on padding."""
    x = _rows(7)
    m = x["mask"]
    got = O.importance_weights(x["old_logp"], x["rollout_logp"], m, cap=1.1, level="geometric")
    log_rho = ((x["old_logp"] - x["rollout_logp"]) * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True)
    torch.testing.assert_close(got, torch.exp(log_rho).clamp(max=1.1) * m, rtol=1e-15, atol=0)
    assert bool((got[m > 0] == 1.1).any() and (got[m > 0] < 1.1).any())  # both sides of the cap


def test_objective_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match="kind='gspo-tokens' must be 'ppo', 'gspo', 'gspo-token' or 'cispo'"):
        O.Objective("gspo-tokens")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="declare kl='k3'"):
        O.Objective(kl="k3-is", kl_coef=0.1, kl_placement="reward")
    with pytest.raises(ValueError, match="tis_level='geo' must be 'token', 'sequence' or 'geometric'"):
        O.Objective(tis_cap=2.0, tis_level="geo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs ratio="):
        O.kl_estimate(torch.zeros(2), torch.zeros(2), "k3-is")
    with pytest.raises(ValueError, match="ratio has shape"):
        O.kl_estimate(torch.zeros(2), torch.zeros(2), "k3-is", ratio=torch.ones(3))
    with pytest.raises(ValueError, match="level='geo' must be"):
        O.importance_weights(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), cap=2.0, level="geo")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# the gallery entries of these forms, on two seeds and both profiles

_FORMS = {
    "gspo_token",
    "gspo_token_rollout_is",
    "gspo_token_through_sequence",
    "kl_k3_bias_corrected",
    "k3_without_bias_correction",
    "k3_ratio_detached",
    "tis_geometric",
    "tis_geometric_as_product",
    "tis_sequence_geo_mean",
}
FORM_CASES = [c for c in LOSSES if c.name in _FORMS]


@pytest.fixture(params=["sigma-ref-ci", "sigma-ref-dev"])
def profile(request: pytest.FixtureRequest) -> Iterator[str]:
    register_profiles()
    previous = settings.get_current_profile_name()
    settings.load_profile(request.param)
    try:
        yield request.param
    finally:
        settings.load_profile(previous)


def test_every_form_has_a_correct_and_a_wrong_entry() -> None:
    assert {c.name for c in FORM_CASES} == _FORMS
    kinds = {
        "gspo-token": lambda o: o.kind == "gspo-token",
        "k3-is": lambda o: o.kl == "k3-is",
        "geometric": lambda o: o.tis_level == "geometric",
    }
    for what, has in kinds.items():
        assert {c.correct for c in FORM_CASES if has(c.declared)} == {True, False}, what


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", FORM_CASES, ids=lambda c: c.name)
def test_form_verdicts_on_two_seeds_and_both_profiles(case: LossCase, seed: int, profile: str) -> None:
    """loss_objective with the objective the trainer's config declares: the correct entry matches (a
    NOTE), the wrong one FAILs with its confirmed cause, whatever the seed or profile."""
    adapter = Adapter(
        correct.post_contiguous,
        "contiguous",
        loss=case.fn,
        convention="post",
        name=case.name,
        objective=case.declared,
    )
    outcome = evaluate("loss_objective", build_context(adapter), max_examples=8, seed=seed, shrink=False)
    if case.correct:
        assert outcome.verdict == "NOTE", outcome.message
    else:
        assert outcome.verdict == "FAIL", outcome.message
        assert outcome.finding is not None and outcome.finding.confirmed, outcome.message
        assert case.cause_words in (outcome.finding.cause or ""), outcome.message


def test_the_unbiased_kl_verdict_names_the_bias() -> None:
    """Declaring TRL's default (the bias-corrected r k3) asks whether the loss's KL is unbiased: plain k3
    in the loss FAILs, and the message says what k3's gradient is instead."""
    (case,) = [c for c in LOSSES if c.name == "k3_without_bias_correction"]
    adapter = Adapter(
        correct.post_contiguous, "contiguous", loss=case.fn, convention="post", objective=case.declared
    )
    outcome = evaluate("loss_objective", build_context(adapter), max_examples=4, shrink=False)
    assert outcome.verdict == "FAIL"
    assert "forward KL's" in outcome.message and "k3 in the loss" in outcome.message, outcome.message


# ---------------------------------------------------------------------------------------------------
# the peers' own losses: verl's GSPO is GSPO-token, TRL's the sequence form; TRL's default KL is k3-is


def _peer(name: str):  # type: ignore[no-untyped-def]
    module = adapter_module(name)
    reason = module.unavailable()
    if reason is not None:
        pytest.skip(reason)
    return module


def test_verl_gspo_row_judges_under_gspo_token() -> None:
    """verl's GSPO with token rollout weights passes loss_objective as ``gspo-token`` and FAILs as ``gspo``
    (the sequence form), the cause naming the GSPO-token form."""
    verl = _peer("verl")
    adapter = verl.ADAPTERS["policy[gspo, rollout_is=token]"]
    ((r,),) = [run_adapter(adapter, max_examples=6, names=["loss_objective"])[0]]
    assert r["verdict"] == "NOTE", r["message"]
    swapped = dataclasses.replace(adapter, objective=dataclasses.replace(adapter.objective, kind="gspo"))
    ((r,),) = [run_adapter(swapped, max_examples=6, names=["loss_objective"])[0]]
    assert r["verdict"] == "FAIL" and "GSPO-token form" in r["message"], r["message"]


@pytest.mark.parametrize("mode", ["loss[dapo, beta=0.04]", "loss[grpo, sequence, beta=0.04]"])
def test_trl_bias_corrected_kl_rows_match_k3_is(mode: str) -> None:
    """TRL's default ``use_bias_correction_kl=True`` (token and sequence level) is confirmed as ``k3-is``;
    declared as plain k3 the same loss FAILs."""
    trl = _peer("trl")
    adapter = trl.ADAPTERS[mode]
    ((r,),) = [run_adapter(adapter, max_examples=6, names=["loss_objective"])[0]]
    assert r["verdict"] == "NOTE" and "k3-is in the loss" in r["message"], r["message"]
    plain = dataclasses.replace(adapter, objective=dataclasses.replace(adapter.objective, kl="k3"))
    ((r,),) = [run_adapter(plain, max_examples=6, names=["loss_objective"])[0]]
    assert r["verdict"] == "FAIL" and "k3-is estimator in the loss" in r["message"], r["message"]


# ---------------------------------------------------------------------------------------------------
# the loss's working precision (issue 26 item 1)

_PRECISION_PROPERTIES = (
    "loss_aggregation",
    "loss_clipped_surrogate",
    "loss_gradient_identity",
    "loss_is_policy_gradient",
    "loss_objective",
)
PRECISION_CASES = [c for c in LOSSES if c.breaks == "precision" or c.precision != "float64"]


def _declared_adapter(case: LossCase, **kw: object) -> Adapter:
    """What a user declares from the trainer's config: aggregation, clip and objective."""
    obj = case.declared
    return Adapter(
        correct.post_contiguous,
        "contiguous",
        loss=case.fn,
        convention="post",
        name=case.name,
        aggregation=obj.aggregation,
        clip=(obj.eps_low, obj.eps_low if obj.eps_high is None else obj.eps_high),
        objective=obj,
        **kw,  # type: ignore[arg-type]
    )


def test_precision_cases_are_a_correct_and_a_wrong_one() -> None:
    assert {c.name: c.correct for c in PRECISION_CASES} == {"float32_ratio": True, "bfloat16_ratio": False}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", PRECISION_CASES, ids=lambda c: c.name)
def test_loss_judged_at_its_working_precision(case: LossCase, seed: int, profile: str) -> None:
    """A float32 ratio inside a float64 loss passes every gradient property (judged at float32, detected);
    a bfloat16 ratio FAILs each of them with the precision named as the cause, confirmed by the probe."""
    ctx = build_context(_declared_adapter(case))
    outcomes = [
        evaluate(name, ctx, max_examples=5, seed=seed, shrink=False) for name in _PRECISION_PROPERTIES
    ]
    if case.correct:
        assert not [o.message for o in outcomes if o.verdict == "FAIL"]
    else:
        for o in outcomes:
            assert o.verdict == "FAIL", (o.name, o.message)
            assert o.finding is not None and o.finding.confirmed, (o.name, o.message)
            assert case.cause_words in (o.finding.cause or ""), (o.name, o.message)


def test_detected_precision_is_reported_and_declaring_replaces_it() -> None:
    """The probe: float64 for a float64 loss, float32 for the float32 ratio, coarser for bfloat16; a
    declaration replaces the measurement (and a float32 one judges a float32 loss at float32)."""
    from sigma_ref.conformance.loss_precision import loss_precision

    by_name = {c.name: c for c in LOSSES}
    seen = {
        name: loss_precision(build_context(_declared_adapter(by_name[name]))).measured
        for name in ("token_mean", "float32_ratio", "bfloat16_ratio")
    }
    assert seen == {
        "token_mean": "float64",
        "float32_ratio": "float32",
        "bfloat16_ratio": "coarser than float32",
    }
    declared = loss_precision(
        build_context(_declared_adapter(by_name["float32_ratio"], loss_precision="float32"))
    )
    assert declared.declared and declared.judged == "float32" and "[declared]" in declared.describe()
    note = evaluate("convention_detected", build_context(_declared_adapter(by_name["float32_ratio"])))
    assert "loss working precision: float32 [detected" in note.message, note.message


def test_a_loss_not_linear_in_the_advantages_is_not_called_a_precision() -> None:
    """A loss that re-normalises the advantages has a large residual whose entries are no bfloat16 or
    float16 numbers: it is judged at float64 and FAILs with its own cause."""
    from sigma_ref.conformance.loss_precision import loss_precision

    def renormalised(logp, old_logp, advantages, mask):  # type: ignore[no-untyped-def]
        adv = (advantages / (1.0 + advantages.abs().sum())).unsqueeze(1)
        return -(torch.exp(logp - old_logp) * adv * mask).sum() / mask.sum()

    ctx = build_context(Adapter(correct.post_contiguous, "contiguous", loss=renormalised, convention="post"))
    found = loss_precision(ctx)
    assert found.judged == "float64" and found.residual > 0.01, found
    outcome = evaluate("loss_is_policy_gradient", ctx, max_examples=3, shrink=False)
    assert outcome.verdict == "FAIL" and "re-normalises" in outcome.message, outcome.message


def test_loss_precision_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match="loss_precision='float8' must be one of"):
        Adapter(correct.post_contiguous, "contiguous", loss_precision="float8")
