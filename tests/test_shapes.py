"""Call shapes: layouts token and keep-mask, the inputs/output hooks, (loss, metrics), fail fast.

Each correct gallery entry (tests/gallery/shapes.py) has no FAIL; each wrong one FAILs the
property it breaks with a confirmed cause, or fails fast with the signature message.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sigma_ref.conformance import Adapter, Batch
from sigma_ref.conformance.adapter import CallMismatch, check_call, load_adapter, token_inputs
from sigma_ref.conformance.core import evaluate, run_suite
from sigma_ref.conformance.session import build_context
from tests.gallery import shapes as S  # noqa: N812


def _no_fail(adapter: Adapter, **kw: object) -> list:
    outcomes = run_suite(build_context(adapter, **kw), max_examples=3, shrink=False)
    fails = [o for o in outcomes if o.verdict == "FAIL"]
    assert not fails, "\n".join(f"{o.label}: {o.message[:300]}" for o in fails)
    return outcomes


def _verdict(adapter: Adapter, name: str, **kw: object):  # type: ignore[no-untyped-def]
    return evaluate(name, build_context(adapter, **kw), max_examples=3, shrink=False)


def test_token_inputs_place_the_reward_on_the_last_valid_token() -> None:
    """Lengths 1 and T come first; the reward sits at length - 1; an empty row has neither."""
    tok, mask = token_inputs(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1, 6, 0]))
    assert tok[0].tolist() == [1.0, 0, 0, 0, 0, 0] and tok[1, 5] == 2.0 and not tok[2].any()
    assert mask.sum(-1).tolist() == [1.0, 6.0, 0.0]


def test_verl_style_token_function_has_no_fail_and_warns_on_rejected_and_nan_rows() -> None:
    """verl's algorithm (returns = advantages declared) passes; verl's handling of rejected and NaN rows
    is a WARN with the measured change, a FAIL under strict."""
    outcomes = _no_fail(Adapter(S.verl_token, "token", returns="advantages"))
    by = {o.name: o for o in outcomes}
    assert by["convention_detected"].message.startswith("detected convention: verl")
    for name in ("token_reward_position", "token_broadcast", "token_returns", "advantage_values"):
        assert by[name].verdict == "pass", by[name].message
    assert by["rejected_rows_ignored"].verdict == "WARN"
    assert "counted as a response with reward 0" in by["rejected_rows_ignored"].message
    assert "[0.4472, 0.4472, 0.4472, 0.4472]" in by["rejected_rows_ignored"].message  # a silent group moved
    assert by["nan_rows_confined"].verdict == "WARN"
    strict = _verdict(Adapter(S.verl_token, "token"), "rejected_rows_ignored", strict=True)
    assert strict.verdict == "FAIL"


def test_token_function_that_leaves_rejected_rows_out_passes_everything() -> None:
    """The vectorised variant that excludes all-zero-mask rows and NaN rewards has no FAIL and no WARN
    from the token properties."""
    outcomes = _no_fail(Adapter(S.token_excluding_rejected, "token"))
    by = {o.name: o for o in outcomes}
    for name in ("rejected_rows_ignored", "nan_rows_confined", "token_broadcast", "token_reward_position"):
        assert by[name].verdict == "pass", by[name].message


@pytest.mark.parametrize(
    ("fn", "prop", "cause"),
    [
        (S.token_last_column, "token_reward_position", "read from the last column"),
        (S.token_unmasked, "token_broadcast", "not multiplied by response_mask"),
    ],
)
def test_wrong_token_functions_fail_with_a_confirmed_cause(fn, prop: str, cause: str) -> None:  # type: ignore[no-untyped-def]
    """Reading the last column and not masking padding are caught and named."""
    out = _verdict(Adapter(fn, "token"), prop)
    assert out.verdict == "FAIL", out.message
    assert out.finding is not None and out.finding.confirmed and cause in out.message


def test_returns_must_equal_the_advantages_when_declared() -> None:
    """returns='advantages' with a function that returns the raw scores as returns FAILs."""

    def scores_as_returns(tok, mask, index):  # type: ignore[no-untyped-def]
        adv, _ = S.verl_token(tok, mask, index)
        return adv, tok.sum(-1, keepdim=True) * mask

    out = _verdict(Adapter(scores_as_returns, "token", returns="advantages"), "token_returns")
    assert out.verdict == "FAIL" and "returns vs advantages" in out.message


def test_dict_in_dict_out_with_string_prompt_ids_has_no_fail() -> None:
    """inputs= builds {"rewards", "prompt_ids": [str]}; output="advantages" picks the result."""
    outcomes = _no_fail(S.DICT_ADAPTER)
    assert any(o.name == "interleaved_groups" and o.verdict == "pass" for o in outcomes)


def test_dict_function_with_the_wrong_layout_fails_fast() -> None:
    """Called as --layout index, the dict function stops at the first probe with the signature message."""
    with pytest.raises(CallMismatch) as info:
        build_context("tests.gallery.shapes:dict_batch", layout="index")
    text = str(info.value)
    assert "layout 'index'" in text and "Tensor[float64, (8,)], ndarray[int64, (8,)]" in text
    assert "raised TypeError" in text and "--output KEY|INDEX" in text


def test_sigma_ref_check_prints_the_fail_fast_message_as_a_fail(capsys: pytest.CaptureFixture[str]) -> None:
    """sigma-ref check stops before the suite: a FAIL line with the signature message, exit code 1;
    --output picks the advantages of the same function once the call fits."""
    from sigma_ref.cli import main

    code = main(["check", "tests.gallery.shapes:dict_batch", "--layout", "index"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.startswith("FAIL: ") and "the first probe did not fit layout 'index'" in out, out
    assert "result: NOT CONFORMANT" in out
    fits = load_adapter("tests.gallery.shapes:dict_batch", layout="index", output="advantages")
    with pytest.raises(CallMismatch, match="raised TypeError"):  # still one argument, a dict
        check_call(fits)


def test_output_shortcut_and_wrong_output_key() -> None:
    """--output picks a key or an index; a key that is not there fails fast and lists what came back."""
    assert load_adapter(S.DICT_ADAPTER, output="0").output == 0
    with pytest.raises(CallMismatch, match=r"raised KeyError: 'adv'.*dict\{'advantages': Tensor"):
        check_call(S.DICT_ADAPTER.replace(output="adv"))
    with pytest.raises(CallMismatch, match=r"should be an array of shape \(8,\)"):
        check_call(Adapter(lambda r, i: {"a": r}, "index"))


def test_loss_returning_loss_and_metrics_is_accepted() -> None:
    """A (loss, metrics) loss runs through the gradient properties."""
    adapter = Adapter(S.verl_token, "token", loss=S.loss_with_metrics)
    ctx = build_context(adapter)
    for name in ("loss_gradient_identity", "loss_is_policy_gradient", "loss_ignores_padding"):
        out = evaluate(name, ctx, max_examples=2, shrink=False)
        assert out.verdict == "pass", out.message


@pytest.mark.parametrize("adapter", [S.KEEP_ACCURACY, S.KEEP_SORTED], ids=["accuracy", "per-group-sorted"])
def test_keep_mask_filters_pass_and_advantage_properties_do_not_apply(adapter: Adapter) -> None:
    """A correct filter passes keep_mask_rule and dapo_keep_mask; the rest say why they do not apply."""
    outcomes = _no_fail(adapter)
    by = {o.name: o for o in outcomes}
    assert by["keep_mask_rule"].verdict == "pass" and by["dapo_keep_mask"].verdict == "pass"
    assert by["advantage_values"].verdict == "skip"
    assert "dynamic-sampling filter" in by["advantage_values"].message


def test_keep_mask_on_reward_spread_fails_when_declared_accuracy() -> None:
    """Dropping on the rewards' spread keeps an all-correct group of shaped rewards: caught and named."""
    out = _verdict(S.KEEP_SPREAD_AS_ACCURACY, "keep_mask_rule")
    assert out.verdict == "FAIL" and out.finding is not None and out.finding.confirmed
    assert "to the shaped reward, not the accuracy" in out.message
    assert (
        _verdict(S.KEEP_SPREAD_AS_ACCURACY.replace(keep_metric="reward"), "keep_mask_rule").verdict == "pass"
    )


def test_keep_order_is_detected() -> None:
    """A per-group result in sorted id order is spread over the responses correctly."""
    batch = Batch(np.array([1.0, 0.0, 1.0, 1.0]), np.array([9, 2, 9, 2]))
    assert S.KEEP_SORTED.keep(batch).tolist() == [False, True, False, True]


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"returns": "scores"}, "returns='scores'"),
        ({"keep_metric": "acc"}, "keep_metric='acc'"),
        ({"keep_order": "reversed"}, "keep_order='reversed'"),
    ],
)
def test_adapter_argument_errors(kw: dict, words: str) -> None:
    """Bad hook values name the argument and the choices."""
    with pytest.raises(ValueError, match=words):
        Adapter(S.verl_token, "token", **kw)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"output=3\.5"):
        Adapter(S.verl_token, "token", output=3.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("layout", ["token", "keep-mask"])
def test_the_oracle_passes_in_the_new_layouts(layout: str) -> None:
    """The oracle as a token-level estimator (rejected rows left out) and as a keep-mask filter: every
    applicable property passes, so the new properties hold for the reference itself."""
    outcomes = run_suite(build_context(None, layout=layout), max_examples=2, shrink=False)
    assert {o.verdict for o in outcomes} <= {"pass", "skip", "NOTE"}, [
        (o.label, o.message[:200]) for o in outcomes if o.verdict not in ("pass", "skip", "NOTE")
    ]
    assert sum(o.verdict == "pass" for o in outcomes) >= (30 if layout == "token" else 2)


def test_declarations_reach_the_adapter_the_summary_and_the_child_pytest() -> None:
    """--keep-metric, --returns and --aggregation-constant set the Adapter fields of those names (over the
    adapter's own), the summary lists every declaration, and sigma-ref check forwards them."""
    import argparse

    from sigma_ref._options import pytest_argv
    from sigma_ref.conformance.session import summary

    ctx = build_context(S.KEEP_SPREAD_AS_ACCURACY, keep_metric="reward")
    assert ctx.adapter.keep_metric == "reward"
    ctx = build_context(
        Adapter(S.verl_token, "token", loss=S.loss_with_metrics),
        returns="advantages",
        aggregation="dr_grpo",
        aggregation_constant=16.0,
        clip="0.2,0.28",
        output="0",
    )
    a = ctx.adapter
    assert (a.returns, a.aggregation, a.aggregation_constant, a.clip, a.output) == (
        "advantages",
        "dr_grpo",
        16.0,
        (0.2, 0.28),
        0,
    )
    text = summary(ctx, [], seed=None, profile="ci", seconds=0.0)
    assert (
        "declared:   output 0, aggregation seq-mean-token-sum-norm (dr_grpo), C = 16, clip 0.2,0.28, "
        "returns advantages"
    ) in text
    args = argparse.Namespace(keep_metric="accuracy", aggregation_constant=16.0, returns="advantages")
    assert pytest_argv(args) == [
        "--sigma-ref-aggregation-constant",
        "16.0",
        "--sigma-ref-returns",
        "advantages",
        "--sigma-ref-keep-metric",
        "accuracy",
    ]


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"aggregation_constant": 16.0}, r"--aggregation-constant 16\.0 is the C of seq-mean-token-sum-norm"),
        (
            {"aggregation": "token-mean", "aggregation_constant": 16.0},
            r"but the aggregation is 'token-mean': add --aggregation seq-mean-token-sum-norm",
        ),
        ({"keep_metric": "acc"}, r"keep_metric='acc' must be 'accuracy', 'reward' or None"),
        ({"returns": "scores"}, r"returns='scores' must be one of \('advantages',\)"),
    ],
)
def test_bad_declarations_name_the_option_and_the_fix(kw: dict, words: str) -> None:
    """A constant without seq-mean-token-sum-norm, an unknown metric or returns: a ValueError with the fix."""
    with pytest.raises(ValueError, match=words):
        build_context(Adapter(S.verl_token, "token", loss=S.loss_with_metrics), **kw)


def test_adapter_constant_needs_its_mode() -> None:
    """Adapter(aggregation_constant=) belongs to seq-mean-token-sum-norm and is a positive number."""
    with pytest.raises(ValueError, match=r"aggregation_constant=16 is the C of seq-mean-token-sum-norm"):
        Adapter(S.verl_token, "token", aggregation="grpo", aggregation_constant=16)
    with pytest.raises(ValueError, match=r"aggregation_constant=-1 must be a positive number"):
        Adapter(S.verl_token, "token", aggregation="dr_grpo", aggregation_constant=-1)
    assert Adapter(S.verl_token, "token", aggregation="dr_grpo", aggregation_constant=16).aggregation_constant


def test_keep_metric_is_detected_when_not_declared() -> None:
    """Undeclared, a filter on the accuracy and one on the reward's spread are both correct DAPO filters."""
    from sigma_ref.conformance.adapter import detect_keep_metric

    assert detect_keep_metric(S.KEEP_ACCURACY.replace(keep_metric=None)) == "accuracy"
    assert detect_keep_metric(S.KEEP_SORTED) == "reward"
    for adapter in (
        S.KEEP_ACCURACY.replace(keep_metric=None),
        S.KEEP_SPREAD_AS_ACCURACY.replace(keep_metric=None),
    ):
        out = _verdict(adapter, "keep_mask_rule")
        assert out.verdict == "pass", out.message
