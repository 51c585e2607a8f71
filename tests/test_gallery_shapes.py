"""The call-shape gallery through the suite: token layout, dict and tuple hooks, losses, keep masks.

Every case of ``tests/gallery/trainers_token.py`` and ``tests/gallery/shapes.py`` is built as an
Adapter by :func:`tests.gallery.case_adapter` (as ``python -m tests.gallery --shapes`` does): a
correct one has no FAIL with nothing declared, and its declarations (aggregation and constant,
returns, keep metric) hold; a wrong one FAILs the property it breaks with a confirmed cause in its
words; a hygiene one gets its WARN and no FAIL. Each correct loss is detected as its mode with
nothing declared and measured as declared with the declaration.
"""

from __future__ import annotations

import pytest

from sigma_ref.conformance.core import get_property, run_suite
from sigma_ref.conformance.session import build_context
from sigma_ref.objectives import resolve_aggregation
from tests.gallery import case_adapter, caught_by
from tests.gallery.__main__ import SHAPE_CASES
from tests.gallery.cases import Case

CORRECT = [c for c in SHAPE_CASES if c.correct]
WRONG = [c for c in SHAPE_CASES if not c.correct and c.verdict == "FAIL"]
HYGIENE = [c for c in SHAPE_CASES if not c.correct and c.verdict == "WARN"]
LOSSES = [c for c in SHAPE_CASES if c.loss is not None]

#: What each wrong loss's weights are, as loss_aggregation names them with nothing declared.
WRONG_LOSS_DETECTED = {
    "loss_tuple_padded_length": "seq-mean-token-sum-norm, C = 5",
    "seq_mean_token_sum_over_length": "seq-mean-token-mean",
    "sum_norm_without_batch_mean": "seq-mean-token-sum-norm",  # C = T / N_seq, not an integer here
    "dr_grpo_batch_padded_length": "seq-mean-token-sum-norm, C = 5",
    "token_sum_left_normalised": "token-mean",
}


def _ids(cases: list[Case]) -> list[str]:
    return [c.name for c in cases]


def _outcomes(case: Case, *, declare: bool, names: tuple[str, ...] | None = None) -> list:
    ctx = build_context(case_adapter(case, declare=declare))
    return run_suite(ctx, max_examples=2, shrink=False, seed=0, names=names)


def test_the_gallery_covers_every_shape_and_mode() -> None:
    """Token, dict, loss-tuple and keep-mask entries, correct and wrong; a correct loss for each of the
    five aggregation modes, and a wrong one declaring each (with the trainer gallery's token-mean ones);
    every ``breaks`` is a property of the suite."""
    from sigma_ref.conventions import AGGREGATION_MODES
    from tests.gallery import trainers_wrong

    for shape in ("token", "dict", "loss-tuple", "keep-mask"):
        assert {c.correct for c in SHAPE_CASES if c.shape == shape} == {True, False}, shape
    modes = {resolve_aggregation(c.aggregation) for c in LOSSES if c.correct}
    wrong = [c for c in LOSSES + trainers_wrong.CASES if not c.correct and c.aggregation]
    wrong_modes = {resolve_aggregation(c.aggregation) for c in wrong}
    assert modes == wrong_modes == set(AGGREGATION_MODES)
    for case in WRONG + HYGIENE:
        for name in case.breaks:
            get_property(name)  # raises for a name that is not a property
    assert set(WRONG_LOSS_DETECTED) == {c.name for c in LOSSES if not c.correct}


@pytest.mark.parametrize("case", CORRECT, ids=_ids(CORRECT))
def test_correct_code_passes_with_nothing_declared(case: Case) -> None:
    """No property FAILs when nothing but the call (layout, hooks, loss, filter) is given."""
    outcomes = _outcomes(case, declare=False)
    fails = [o for o in outcomes if o.verdict == "FAIL"]
    assert not fails, "; ".join(f"{o.label}: {o.message[:300]}" for o in fails)


_DECLARED = ("token_returns", "keep_mask_rule", "dapo_keep_mask", "loss_aggregation", "convention_detected")


@pytest.mark.parametrize("case", CORRECT, ids=_ids(CORRECT))
def test_correct_code_keeps_its_declarations(case: Case) -> None:
    """Declared, the returns, the keep metric and the aggregation (with its constant) are what it does."""
    outcomes = _outcomes(case, declare=True, names=_DECLARED)
    by = {o.name: o for o in outcomes}
    assert not [o for o in outcomes if o.verdict == "FAIL"], [o.message[:300] for o in outcomes]
    if case.returns and case.shape == "token":
        assert by["token_returns"].verdict == "pass", by["token_returns"].message
    if case.keep_metric:
        assert by["keep_mask_rule"].verdict == "pass", by["keep_mask_rule"].message


@pytest.mark.parametrize("case", [c for c in LOSSES if c.correct], ids=_ids([c for c in LOSSES if c.correct]))
def test_correct_loss_is_detected_and_measured_as_its_mode(case: Case) -> None:
    """With nothing declared loss_aggregation names the mode (and C); declared, it measures it."""
    mode = resolve_aggregation(case.aggregation)  # type: ignore[arg-type]
    (bare,) = _outcomes(case, declare=False, names=("loss_aggregation",))
    constant = f", C = {case.aggregation_constant:g}" if case.aggregation_constant else ""
    if mode == "seq-mean-token-sum-norm" and not constant:
        constant = ", C = 5"  # the padded length of the suite's policy
    assert bare.verdict == "NOTE" and bare.message.startswith(f"aggregation: {mode}{constant} [detected"), (
        bare.message
    )
    (declared,) = _outcomes(case, declare=True, names=("loss_aggregation",))
    assert declared.verdict == "NOTE" and f"aggregation: {mode} [declared, measured]" in declared.message


@pytest.mark.parametrize("case", WRONG, ids=_ids(WRONG))
def test_wrong_code_fails_its_property_with_its_cause(case: Case) -> None:
    """With its intent declared, a property the case breaks FAILs, the cause confirmed, in its words."""
    outcomes = _outcomes(case, declare=True, names=case.breaks)
    assert caught_by(case, outcomes), [(o.label, o.verdict, o.message[:400]) for o in outcomes]


@pytest.mark.parametrize("case", HYGIENE, ids=_ids(HYGIENE))
def test_hygiene_code_gets_its_warn_and_no_fail(case: Case) -> None:
    """verl's rejected-row handling: a WARN on the property, with the measured change, and no FAIL."""
    outcomes = _outcomes(case, declare=True)
    assert caught_by(case, outcomes), [
        (o.label, o.verdict, o.message[:300]) for o in outcomes if o.verdict != "pass"
    ]


@pytest.mark.parametrize("name", sorted(WRONG_LOSS_DETECTED))
def test_wrong_loss_is_detected_as_what_it_computes(name: str) -> None:
    """With nothing declared, a wrong loss is no FAIL: loss_aggregation names the mode it does compute."""
    case = next(c for c in LOSSES if c.name == name)
    (bare,) = _outcomes(case, declare=False, names=("loss_aggregation",))
    assert bare.verdict == "NOTE" and bare.message.startswith(f"aggregation: {WRONG_LOSS_DETECTED[name]}"), (
        bare.message
    )
