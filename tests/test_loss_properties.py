"""The suite's loss properties (aggregation, clipped surrogate) against the loss gallery.

Every PPO-kind loss of ``tests/gallery/losses.py`` without a KL or importance-sampling term is checked
with its declared aggregation and clip: correct ones get no FAIL, wrong ones FAIL the property of the
term they break. Every loss is checked by ``loss_objective`` against its declared objective.
"""

from __future__ import annotations

import pytest

from sigma_ref.conformance import Adapter
from sigma_ref.conformance.core import evaluate
from sigma_ref.conformance.session import build_context

from .gallery import correct
from .gallery.losses import LOSSES, LossCase

_LOSS_PROPERTIES = (
    "loss_aggregation",
    "loss_clipped_surrogate",
    "loss_gradient_identity",
    "loss_is_policy_gradient",
)
_PLAIN = [
    c
    for c in LOSSES
    if c.declared.kind == "ppo"
    and c.declared.kl is None
    and c.declared.tis_cap is None
    and not c.extras
    and c.breaks != "scale-out"
]
_BREAKS = {"aggregation": "loss_aggregation", "clip": "loss_clipped_surrogate"}


def _context(case: LossCase, *, declare: bool = True):  # type: ignore[no-untyped-def]
    obj = case.declared
    kw = {}
    if declare:
        kw = dict(
            aggregation=obj.aggregation,
            aggregation_constant=obj.constant,
            clip=(obj.eps_low, obj.eps_low if obj.eps_high is None else obj.eps_high),
            dual_clip=obj.dual_clip,
        )
    adapter = Adapter(
        correct.post_contiguous, "contiguous", loss=case.fn, convention="post", name=case.name, **kw
    )
    return build_context(adapter)


@pytest.mark.parametrize("case", [c for c in _PLAIN if c.correct], ids=lambda c: c.name)
def test_correct_loss_passes_declared_and_detected(case: LossCase) -> None:
    """No FAIL with the aggregation and clip declared; detected ones are NOTEs naming the mode."""
    for declare in (True, False):
        ctx = _context(case, declare=declare)
        outcomes = [evaluate(name, ctx, max_examples=3, shrink=False) for name in _LOSS_PROPERTIES]
        assert not [o for o in outcomes if o.verdict == "FAIL"], [o.message for o in outcomes]
        if not declare:
            note = outcomes[0].message
            mode = case.declared.aggregation
            from sigma_ref.objectives import resolve_aggregation

            assert resolve_aggregation(mode) in note, note


@pytest.mark.parametrize(
    "case", [c for c in _PLAIN if not c.correct and c.breaks in _BREAKS], ids=lambda c: c.name
)
def test_wrong_loss_fails_its_term(case: LossCase) -> None:
    """The property of the broken term FAILs under the declaration."""
    ctx = _context(case)
    outcome = evaluate(_BREAKS[case.breaks], ctx, max_examples=3, shrink=False)
    assert outcome.verdict == "FAIL", outcome.message
    assert "but should be" in outcome.message


def test_padded_length_bug_names_the_padded_length() -> None:
    """Issue 10's planted bug: seq-mean-token-mean over the padded length is caught, with the cause."""
    case = next(c for c in LOSSES if c.name == "padded_length_mean")
    outcome = evaluate("loss_aggregation", _context(case), max_examples=3, shrink=False)
    assert outcome.verdict == "FAIL"
    assert "padded length" in outcome.message and "confirmed" in outcome.message, outcome.message


@pytest.mark.parametrize("case", [c for c in LOSSES if c.breaks != "scale-out"], ids=lambda c: c.name)
def test_declared_objective(case: LossCase) -> None:
    """loss_objective: every correct loss of the gallery matches its declared objective (a NOTE); every
    wrong one FAILs, naming the term where the oracle can say what the code computes instead."""
    adapter = Adapter(
        correct.post_contiguous,
        "contiguous",
        loss=case.fn,
        convention="post",
        name=case.name,
        objective=case.declared,
    )
    outcome = evaluate("loss_objective", build_context(adapter), max_examples=10)
    if case.correct:
        assert outcome.verdict == "NOTE", outcome.message
        assert ("k3 in the loss" in outcome.message) == (case.declared.kl == "k3"), outcome.message
    else:  # each wrong loss FAILs with the term it breaks named, confirmed by the gradient
        assert outcome.verdict == "FAIL", outcome.message
        assert outcome.finding is not None and outcome.finding.confirmed, outcome.message
        assert case.cause_words in (outcome.finding.cause or ""), outcome.message


def test_objective_kill_table_verdicts() -> None:
    """``python -m tests.gallery --markdown --objectives``: every correct loss matches its objective, every
    wrong one FAILs loss_objective with its confirmed term in the suite's words."""
    from .gallery.__main__ import objective_table

    table = objective_table(max_examples=2)
    n_correct = sum(c.correct for c in LOSSES)
    n_wrong = len(LOSSES) - n_correct
    assert table.startswith(f"Loss gallery: {n_correct}/{n_correct} correct losses match"), table
    assert f"{n_wrong}/{n_wrong} wrong ones FAIL" in table, table
    rows = {line.split("`")[1]: line.split(" | ") for line in table.splitlines() if line.startswith("| `")}
    assert set(rows) == {c.name for c in LOSSES if not c.correct}
    for case in LOSSES:
        if case.correct:
            continue
        verdict, words = rows[case.name][3], rows[case.name][4]
        assert verdict == "FAIL", rows[case.name]
        assert case.cause_words in words, rows[case.name]
