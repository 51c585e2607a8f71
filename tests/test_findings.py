"""Findings as data (issue 23, item 1): the :class:`Mismatch` record, the finding's fields, and their
round trip through plain data (JSON, pytest-xdist).

The words are rendered in one place (:meth:`Mismatch.render`, :meth:`Finding.render`); these tests
pin the facts the fields carry and that the rendered text of advantages is unchanged.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from sigma_ref._compare import Mismatch, find_mismatch
from sigma_ref.conformance import Adapter
from sigma_ref.conformance.core import (
    FINDING_KINDS,
    Finding,
    Outcome,
    evaluate,
    run_suite,
)
from sigma_ref.conformance.session import build_context
from tests.gallery import correct, wrong, wrong_context


def test_find_mismatch_measures_count_worst_index_values_and_tolerance() -> None:
    actual = np.array([[1.0, 2.0, 3.0], [4.0, 5.5, 6.0]])
    expected = np.array([[1.0, 2.1, 3.0], [4.0, 5.0, 6.0]])
    m = find_mismatch(actual, expected, rtol=0.0, atol=0.05, noun="gradient entries")
    assert m is not None
    assert (m.count, m.total, m.index) == (2, 6, (1, 1))  # the worst of the two, as an n-d index
    assert (m.actual, m.expected, m.difference) == (5.5, 5.0, 0.5)
    assert m.relative == pytest.approx(0.1) and m.tolerance == 0.05 and m.atol == 0.05
    assert m.render().startswith("2 / 6 gradient entries mismatched (33.3%); greatest difference 0.5")
    assert "at index (1, 1): actual=5.5, but should be 5 (rtol=0, atol=0.05)" in m.render()


def test_find_mismatch_per_element_tolerance_and_non_finite() -> None:
    tol = np.array([0.1, 0.1, 1e-3])
    assert (
        find_mismatch(np.array([1.0, 2.05, 3.0]), np.array([1.0, 2.0, 3.0]), rtol=0.0, atol=tol, noun="x")
        is None
    )
    m = find_mismatch(np.array([np.nan, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]), rtol=0.0, atol=tol, noun="x")
    assert m is not None and m.index == (0,) and math.isinf(m.difference) and m.atol is None
    assert m.tolerance == 0.1 and "(tolerance 0.1 there)" in m.render()
    # a non-finite actual never passes, not even against the same value
    assert find_mismatch(np.array([np.inf]), np.array([np.inf]), rtol=0.0, atol=1.0, noun="x") is not None


def test_advantages_render_as_before() -> None:
    """The advantages' sentence is the one the README and the gallery tables show."""
    m = find_mismatch(
        np.array([0.8660254037844386, 0.0]),
        np.array([1.7320508075688772, 0.0]),
        rtol=0.0,
        atol=np.array([1.2e-5, 1e-5]),
        noun="advantages",
    )
    assert m is not None
    assert m.render() == (
        "1 / 2 advantages mismatched (50.0%); greatest difference 0.866 (relative 0.5) at index 0: "
        "actual=0.8660254, but should be 1.7320508 (tolerance 1.2e-05 there)"
    )


def test_finding_kind_is_one_of_the_kinds() -> None:
    with pytest.raises(ValueError, match="must be one of"):
        Finding("x", kind="mistmatch")


def test_outcome_round_trips_through_json_with_its_mismatch() -> None:
    m = find_mismatch(np.array([1.0, 3.0]), np.array([1.0, 2.0]), rtol=1e-7, atol=1e-7, noun="advantages")
    assert m is not None
    finding = Finding(f"advantages: {m.render()}", "adv(...)", "paper", kind="mismatch", mismatch=m)
    outcome = Outcome("advantage_values", "algebra", None, "FAIL", finding.render(), finding)
    data = json.loads(json.dumps(outcome.to_dict()))
    back = Outcome.from_dict(data)
    assert back == outcome and isinstance(back.finding.mismatch, Mismatch)  # type: ignore[union-attr]
    assert back.finding.mismatch.index == (1,)  # type: ignore[union-attr]
    # the render's "cause not identified" reads the record, not the words
    assert finding.render().endswith("Cause not identified: no known deviation reproduces these values")


def _outcomes_of_wrong_cases() -> list[Outcome]:
    cases = [
        c for c in wrong.WRONG if c.name in ("batch_std", "in_place", "nan_on_silent", "dropped_last_group")
    ]
    return [o for c in cases for o in run_suite(wrong_context(c), max_examples=2, shrink=False, seed=0)]


def test_every_finding_has_a_kind_and_plain_data() -> None:
    """Every finding the suite reports on wrong implementations says what sort of fact it is, and its
    data survives JSON (what pytest-xdist and ``--json`` carry)."""
    outcomes = [o for o in _outcomes_of_wrong_cases() if o.finding is not None]
    assert outcomes
    for o in outcomes:
        assert o.finding is not None and o.finding.kind in FINDING_KINDS, (o.label, o.finding)
        if o.finding.kind == "mismatch":
            assert o.finding.mismatch is not None, o.label
        json.dumps(o.to_dict(), allow_nan=True)


def _positive_only_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """A token-mean surrogate that drops negative advantages: not linear in them."""
    ratio = torch.exp(logp - old_logp)
    return -(ratio * advantages.clamp(min=0).unsqueeze(1) * mask).sum() / mask.sum()


def test_gradient_mismatch_says_gradient_entries() -> None:
    """A loss's gradient that differs is counted in gradient entries, not advantages."""
    adapter = Adapter(correct.post_contiguous, "contiguous", loss=_positive_only_loss, convention="post")
    outcome = evaluate("loss_gradient_identity", build_context(adapter), max_examples=2, shrink=False, seed=0)
    assert outcome.verdict == "FAIL" and outcome.finding is not None
    assert outcome.finding.kind == "mismatch" and outcome.finding.mismatch is not None
    assert outcome.finding.mismatch.noun == "gradient entries"
    assert "gradient entries mismatched" in outcome.message and "advantages mismatched" not in outcome.message
