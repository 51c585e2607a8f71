"""Issue 20 and issue 26 (items 4, 5) through the suite: ``tests/gallery/trust.py``.

A correct entry has no FAIL with nothing declared and with its declarations, on two seeds: every
property with 2 generated examples, and the properties the entry is about at both hypothesis
profiles' example counts (ci: 25, dev: 100); a wrong entry FAILs the property it breaks with a
cause a probe confirmed, in its words, on both seeds; and each cause it gets is printed for its own
class only (no other wrong entry, and no correct one, gets it).
"""

from __future__ import annotations

import numpy as np
import pytest

from sigma_ref.conformance.adapter import Batch
from sigma_ref.conformance.core import evaluate, get_property, run_suite
from sigma_ref.conformance.session import build_context
from sigma_ref.pytest_plugin import PROFILES
from tests.gallery import case_adapter, caught_by
from tests.gallery.cases import Case
from tests.gallery.trust import CASES

CORRECT = [c for c in CASES if c.correct]
WRONG = [c for c in CASES if not c.correct]
SEEDS = (0, 1649476754)
#: The properties each correct entry is about (run at the dev profile's count too).
_ABOUT = ("dapo_keep_mask", "keep_mask_rule", "partial_trailing_group", "advantage_values", "nan_rewards")


def _ids(cases: list[Case]) -> list[str]:
    return [c.name for c in cases]


def test_every_break_is_a_property() -> None:
    for case in WRONG:
        for name in case.breaks:
            get_property(name)


@pytest.mark.parametrize("declare", [False, True], ids=["undeclared", "declared"])
@pytest.mark.parametrize("case", CORRECT, ids=_ids(CORRECT))
def test_correct_entry_passes_on_two_seeds_and_both_profiles(case: Case, declare: bool) -> None:
    """Every property (2 generated examples, as the gallery tables run), then the properties the entry
    is about at the ci and dev profiles' example counts (25 and 100), on two seeds."""
    ctx = build_context(case_adapter(case, declare=declare))
    for seed in SEEDS:
        outcomes = run_suite(ctx, max_examples=2, shrink=False, seed=seed)
        names = tuple(o.name for o in outcomes if o.name in _ABOUT)
        for profile in ("sigma-ref-ci", "sigma-ref-dev"):
            n = PROFILES[profile]["max_examples"]
            outcomes += run_suite(ctx, max_examples=n, shrink=False, seed=seed, names=names)
        fails = [o for o in outcomes if o.verdict == "FAIL"]
        assert not fails, [(seed, o.label, o.message[:300]) for o in fails]


@pytest.mark.parametrize("case", WRONG, ids=_ids(WRONG))
def test_wrong_entry_fails_with_its_cause_on_two_seeds(case: Case) -> None:
    for declare in (False, True):
        ctx = build_context(case_adapter(case, declare=declare))
        for seed in SEEDS:
            outcomes = run_suite(ctx, max_examples=10, shrink=False, seed=seed, names=case.breaks)
            assert caught_by(case, outcomes), [(seed, o.label, o.verdict, o.message[:400]) for o in outcomes]


def _cause_owner(words: tuple[str, ...]) -> list[str]:
    """The entries (correct or wrong) whose outcomes on the keep and silent properties print ``words``."""
    owners = []
    for case in CASES:
        ctx = build_context(case_adapter(case, declare=True))
        names = tuple(sorted({n for c in WRONG for n in c.breaks}))
        for o in run_suite(ctx, max_examples=10, shrink=False, seed=0, names=names):
            if o.finding is not None and o.finding.cause and all(w in o.finding.cause for w in words):
                owners.append(case.name)
                break
    return owners


def test_each_cause_is_printed_for_its_own_class_only() -> None:
    """Every wrong entry's cause words appear in no other entry's confirmed causes."""
    for case in WRONG:
        assert _cause_owner(case.cause_words) == [case.name], case.name


def test_contiguous_filter_is_never_called_with_interleaved_ids() -> None:
    """Issue 20 item 1: a filter over rewards.view(-1, G) gets its keep order without a probe."""
    from sigma_ref.conformance.adapter import detect_keep_order

    case = next(c for c in CASES if c.name == "dapo_view_filter")
    adapter = case_adapter(case, declare=False)
    assert detect_keep_order(adapter) == "first-seen"
    keep = adapter.keep(Batch.grouped([[1.0, 1.0], [1.0, 0.0]])).tolist()
    assert keep == [False, False, True, True]


def test_declared_convention_keeps_the_detected_spread_filter() -> None:
    """Issue 20 item 2: --convention trl keeps the spread skip detection found (a data policy), so a
    group near its threshold is expected to be skipped whatever the seed and profile."""
    case = next(c for c in CASES if c.name == "trl_spread_skip")
    ctx = build_context(case_adapter(case, declare=True))
    assert ctx.reference.name == "trl"
    assert 4e-5 < ctx.reference.silent_below < 1e-4  # max - min < 1e-4 <=> Bessel std below ~5e-5 (G=4)
    narrow = Batch.grouped([[0.5, 0.5 + 2e-5, 0.5, 0.5], [1.0, 0.0, 0.0, 1.0]])
    got = ctx.flat(narrow)
    np.testing.assert_array_equal(got[:4], 0.0)
    np.testing.assert_array_equal(ctx.expected(narrow)[:4], 0.0)


def test_non_dyadic_line_is_the_update_size() -> None:
    """Issue 20 item 3: |A| <= 1e-2 passes, 1e-2 < |A| <= 0.1 is a WARN, |A| > 0.1 a FAIL (float64)."""
    import torch

    from sigma_ref.conformance import Adapter

    def scaled(a: float):  # type: ignore[no-untyped-def]
        def fn(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
            r = rewards.view(-1, group_size)
            std = r.std(dim=1, unbiased=False, keepdim=True)
            out = (r - r.mean(dim=1, keepdim=True)) / (std + 1e-12)
            silent = r.max(dim=1, keepdim=True).values == r.min(dim=1, keepdim=True).values
            bump = torch.where(silent & ((r * 4) != torch.round(r * 4)), a, 0.0)  # non-dyadic silent only
            return (out.masked_fill(silent, 0.0) + bump).view(-1)

        return fn

    verdicts = []
    for a in (5e-3, 5e-2, 0.5):
        ctx = build_context(Adapter(scaled(a), "contiguous", name=f"bump_{a:g}", convention="paper"))
        verdicts.append(evaluate("non_dyadic_silent_group", ctx, seed=0).verdict)
    assert verdicts == ["pass", "WARN", "FAIL"]


def test_no_other_wrong_code_is_told_it_is_a_named_estimator() -> None:
    """Issue 20 item 8: the estimator causes belong to the estimator entries only: no wrong entry of
    the trainer gallery and no hand-written one gets "named estimator" on any FAIL."""
    from tests.gallery import trainers_wrong, wrong, wrong_context

    told = []
    for case in trainers_wrong.CASES:
        ctx = build_context(case_adapter(case, declare=True))
        for o in run_suite(ctx, max_examples=2, shrink=False, seed=0, names=("advantage_values",)):
            if o.finding is not None and "named estimator" in (o.finding.cause or ""):
                told.append(case.name)
    for hand in wrong.WRONG:
        for o in run_suite(
            wrong_context(hand), max_examples=2, shrink=False, seed=0, names=("advantage_values",)
        ):
            if o.finding is not None and "named estimator" in (o.finding.cause or ""):
                told.append(hand.name)
    assert not told, told


# --- issue 26 item 5: filters beyond 0 < k < G ------------------------------------------


def _filter_outcomes(name: str, *, declare: bool, seed: int, max_examples: int) -> list:
    from sigma_ref.conformance import Adapter
    from tests.gallery.trust import FILTERS

    _, fn, decl, _, _ = next(f for f in FILTERS if f[0] == name)
    ctx = build_context(Adapter(fn, "keep-mask", name=name, **(decl if declare else {})))  # type: ignore[arg-type]
    return run_suite(ctx, max_examples=max_examples, shrink=False, seed=seed)


def _filters(correct: bool) -> list[str]:
    from tests.gallery.trust import FILTERS

    return [f[0] for f in FILTERS if f[3] is correct]


@pytest.mark.parametrize("name", _filters(True))
def test_correct_filter_passes_declared_on_two_seeds_and_both_profiles(name: str) -> None:
    """A band on the accuracy's mean and a std threshold on the reward pass with the trainer's
    declarations; with nothing declared, their extra rule is named (a FAIL of keep_mask_rule)."""
    from tests.gallery.trust import FILTERS

    words = next(f[4] for f in FILTERS if f[0] == name)
    for seed in SEEDS:
        for profile in ("sigma-ref-ci", "sigma-ref-dev"):
            n = PROFILES[profile]["max_examples"]
            outcomes = _filter_outcomes(name, declare=True, seed=seed, max_examples=n)
            assert not [o for o in outcomes if o.verdict == "FAIL"], [o.message[:300] for o in outcomes]
        bare = {o.name: o for o in _filter_outcomes(name, declare=False, seed=seed, max_examples=25)}
        rule = bare["keep_mask_rule"]
        assert rule.verdict == "FAIL" and rule.finding is not None and rule.finding.confirmed, rule.message
        assert words in (rule.finding.cause or ""), rule.message


@pytest.mark.parametrize("name", _filters(False))
def test_wrong_filter_fails_declared_with_its_cause(name: str) -> None:
    from tests.gallery.trust import FILTERS

    words = next(f[4] for f in FILTERS if f[0] == name)
    for seed in SEEDS:
        by = {o.name: o for o in _filter_outcomes(name, declare=True, seed=seed, max_examples=25)}
        rule = by["keep_mask_rule"]
        assert rule.verdict == "FAIL" and rule.finding is not None and rule.finding.confirmed, rule.message
        assert words in (rule.finding.cause or ""), rule.message


def test_filter_rules_are_the_oracles_and_errors_name_the_fix() -> None:
    from sigma_ref.conformance import Adapter
    from sigma_ref.filters import filter_keep_mask

    acc = np.array([[1.0] * k + [0.0] * (8 - k) for k in range(9)])
    assert filter_keep_mask(acc, band=(0.2, 0.8))[:, 0].tolist() == [k in (2, 3, 4, 5, 6) for k in range(9)]
    spread = np.array([[0.1, 0.1, 0.1, 0.1 + d] for d in (0.0, 0.01, 0.3)])
    assert filter_keep_mask(spread, min_std=0.05)[:, 0].tolist() == [False, False, True]
    with pytest.raises(ValueError, match="keep_band"):
        Adapter(lambda r, i: r, "keep-mask", keep_band=(0.8, 0.2))
    with pytest.raises(ValueError, match="keep_min_std"):
        Adapter(lambda r, i: r, "keep-mask", keep_min_std=-1.0)


def test_fail_messages_carry_no_hypothesis_boilerplate() -> None:
    """Issue 20 item 11: the falsifying example stays; reproduce_failure lines and the Explanation
    (with sigma_ref's own source lines) go."""
    from sigma_ref.conformance.core import _user_notes

    notes = [
        "Falsifying example: test_x(example=Batch(...))",
        "Failing test case: ...\n@reproduce_failure('6.0', b'AAAA')",
        "Explanation:\n    These lines were always and only run by failing examples:\n"
        "        /site-packages/sigma_ref/conformance/guard.py:120",
        "You can reproduce this example by temporarily adding @reproduce_failure(...)",
        "",
    ]
    assert _user_notes(notes) == ["Falsifying example: test_x(example=Batch(...))"]


@pytest.mark.parametrize(
    ("name", "residue"),
    [("std_gt_zero_guard", True), ("std_over_wrong_dim", False)],
)
def test_the_rounding_residue_cause_needs_code_right_on_live_groups(name: str, residue: bool) -> None:
    """A silent group's O(1) advantage is blamed on the mean's rounding residue only when the code is
    right on live groups: a std over the wrong axis also moves silent groups, for another reason."""
    from tests.gallery import trainers_wrong

    case = next(c for c in trainers_wrong.CASES if c.name == name)
    out = evaluate("non_dyadic_silent_group", build_context(case_adapter(case, declare=True)))
    assert out.verdict == "FAIL", out.message[:300]
    cause = out.finding.cause if out.finding is not None else None
    assert ("rounding residue" in (cause or "")) is residue, (out.verdict, out.message[:300])


# --- issue 20 item 5: a singleton rule that depends on the batch is not "eps inside the sqrt" ---


def _told_eps_inside(ctx, seed: int) -> bool:  # type: ignore[no-untyped-def]
    names = ("advantage_values", "singleton_groups")
    for o in run_suite(ctx, max_examples=2, shrink=False, seed=seed, names=names):
        if o.finding is not None and o.finding.confirmed and "inside the sqrt" in (o.finding.cause or ""):
            return True
    return False


def test_eps_inside_cause_is_printed_for_eps_inside_code_only() -> None:
    """Every wrong entry of the trust, trainer and hand galleries, declared: "eps is inside the sqrt"
    is confirmed for the two eps-inside implementations and no other (the verl-style singleton
    variant, whose lone responses get 0 beside larger groups, included)."""
    from tests.gallery import trainers_wrong, wrong, wrong_context

    told = set()
    for case in WRONG + [c for c in trainers_wrong.CASES if not c.correct]:
        if _told_eps_inside(build_context(case_adapter(case, declare=True)), seed=0):
            told.add(case.name)
    for hand in wrong.WRONG:
        if _told_eps_inside(wrong_context(hand), seed=0):
            told.add(hand.name)
    assert told == {"eps_inside_sqrt_verl", "eps_inside_sqrt"}, told


def test_batch_dependent_singleton_rule_gets_its_own_cause_on_two_seeds() -> None:
    """The verl-style variant, undeclared (detection finds verl: lone responses alone are right)
    and declared: singleton_groups FAILs with the singleton cause confirmed beside a larger group,
    and never with "inside the sqrt"."""
    case = next(c for c in CASES if c.name == "verl_scatter_singleton")
    for declare in (False, True):
        ctx = build_context(case_adapter(case, declare=declare))
        assert ctx.reference.name == "verl"
        for seed in SEEDS:
            out = {o.name: o for o in run_suite(ctx, max_examples=25, shrink=False, seed=seed)}
            fails = {n: o for n, o in out.items() if o.verdict == "FAIL"}
            assert set(fails) == {"singleton_groups"}, [(n, o.message[:300]) for n, o in fails.items()]
            finding = fails["singleton_groups"].finding
            assert finding is not None and finding.confirmed, fails["singleton_groups"].message
            assert "only when the batch has larger groups" in (finding.cause or "")
            assert not any("inside the sqrt" in o.message for o in out.values())
