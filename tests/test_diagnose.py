"""The diagnosis's hypotheses, each on an input where it is the one explanation.

``sigma_ref.conformance.diagnose.likely_cause`` names a deviation when it reproduces the code's
advantages on an input (the suite then confirms it on a designed probe). These inputs are chosen
by hand so that the right hypothesis, and no other, reproduces the values of trainer-style code
from the gallery.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sigma_ref.conformance.diagnose import likely_cause
from sigma_ref.conformance.reference import reference_for
from tests.gallery import trainers_wrong

REWARDS = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 3.0, 1.0, 0.0, 0.5, 0.25, 2.0, 1.0])


def _contiguous(fn, rewards: np.ndarray, group_size: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    return fn(torch.tensor(rewards, dtype=torch.float64), group_size).numpy()


def test_a_floored_mean_is_named() -> None:
    """Dr. GRPO with the mean as sum // G (group means 0.25, 1 and 0.9375: two of them floored)."""
    actual = _contiguous(trainers_wrong.integer_floor_mean, REWARDS, 4)
    cause = likely_cause(actual, REWARDS, np.repeat(np.arange(3), 4), reference_for("dr_grpo"))
    assert cause == "the group mean is a floor division (sum // G, integer division): use a float mean"


def test_a_batch_std_of_the_centered_rewards_is_named() -> None:
    """TRL's scale_rewards='batch' meant; the std taken of R - mean_g instead of R."""
    actual = _contiguous(trainers_wrong.batch_std_of_centered, REWARDS, 4)
    cause = likely_cause(actual, REWARDS, np.repeat(np.arange(3), 4), reference_for("trl_batch"))
    assert cause is not None, actual
    assert cause.startswith("the batch std is taken of the group-centered rewards"), cause


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (trainers_wrong.first_seen_vs_sorted, "in first-seen id order but looked up with the sorted-id"),
        (trainers_wrong.unique_without_inverse, "broadcast with repeat_interleave(counts)"),
    ],
)
def test_a_wrong_lookup_is_named_with_singletons_and_silent_groups(fn, words: str) -> None:  # type: ignore[no-untyped-def]
    """verl's statistics looked up in the wrong group order, on a batch with a group of one (mean 0,
    std 1 under verl) and a silent group (d = eps = 1e-6, which other groups' responses divide by)."""
    index = np.array(["q", "b", "q", "z", "b", "q", "s", "s", "b", "z"], dtype=object)
    rewards = np.array([0.1, 2.0, 0.9, 1.0, -1.0, 0.4, 0.7, 0.7, 0.5, 0.0])
    singleton = np.array(["q", "b", "q", "z", "b", "q", "s", "s", "b", "one"], dtype=object)
    for ids in (index, singleton):
        actual = fn(torch.tensor(rewards, dtype=torch.float64), ids).numpy()
        cause = likely_cause(actual, rewards, ids, reference_for("verl"))
        assert cause is not None and words in cause, (ids.tolist(), cause)


def test_eps_inside_keeps_the_conventions_singleton_rule() -> None:
    """A lone response that gets 0 beside a larger group (verl says R / (1 + 1e-6)) is not explained
    by eps inside the sqrt (which says nothing about a group of one), nor by a silent group rule."""
    from tests.gallery.trust import verl_scatter_singleton

    rewards, index = np.array([0.7, 1.0, 0.0, 0.2]), np.array([5, 1, 1, 9])
    actual = verl_scatter_singleton(torch.tensor(rewards, dtype=torch.float64), index).numpy()
    cause = likely_cause(actual, rewards, index, reference_for("verl"))
    assert cause == "groups of one response get other values than 'unit_std' (verl)", cause


def _verl_ctx(fn, layout: str):  # type: ignore[no-untyped-def]
    from sigma_ref.conformance import Adapter
    from sigma_ref.conformance.session import build_context

    return build_context(Adapter(fn, layout, name=fn.__name__, convention="verl"))


def test_a_probe_where_the_code_is_right_confirms_nothing() -> None:
    """The designed groups of five, on which the verl-style variant equals the reference to 1e-15,
    confirm no hypothesis, even one that reproduces the output there (the reference's own values)."""
    from sigma_ref.conformance.adapter import Batch
    from sigma_ref.conformance.diagnose import _PROBES_GROUPED, _confirmed_on, _explaining
    from tests.gallery.trust import verl_scatter_singleton

    ctx = _verl_ctx(verl_scatter_singleton, "index")
    probe = Batch.grouped(_PROBES_GROUPED)
    got = ctx.flat(probe)
    np.testing.assert_allclose(got, ctx.expected(probe), rtol=1e-12, atol=1e-12)
    explaining = _explaining(got, probe.rewards, probe.index, ctx.reference)
    assert explaining, "some hypothesis reproduces the reference's values at rtol 1e-4"
    assert _confirmed_on(ctx, probe, explaining) == []


def test_a_probe_of_lone_responses_confirms_only_singleton_causes() -> None:
    """Code whose lone responses get -R / (1 + 1e-6) and every larger group verl's values: on a batch
    of lone responses the wrong sign also reproduces the output, but only groups of one show it, so
    the cause printed is the singleton one."""
    from sigma_ref.conformance.adapter import Batch
    from sigma_ref.conformance.diagnose import diagnose_mismatch

    def lone_negated(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        if group_size == 1:
            return -rewards / (1.0 + 1e-6)
        r = rewards.view(-1, group_size)
        return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).view(-1)

    ctx = _verl_ctx(lone_negated, "contiguous")
    batch = Batch.grouped([[0.7], [0.2], [1.0]])
    actual = ctx.flat(batch)
    assert "wrong sign" in (likely_cause(actual, batch.rewards, batch.index, ctx.reference) or "")
    cause, confirmed = diagnose_mismatch(ctx, batch, actual)
    assert confirmed and cause == "groups of one response get other values than 'unit_std' (verl)", cause


def test_eps_inside_is_confirmed_near_sqrt_eps_only() -> None:
    """verl with sqrt(var + 1e-6): at std ~ 1 it is within 1e-6 of std + 1e-6 (the designed groups of
    five cannot tell them apart); the probe at std ~ sqrt(eps) = 1e-3 confirms it."""
    from sigma_ref.conformance.adapter import Batch
    from sigma_ref.conformance.diagnose import _PROBES_GROUPED, _confirmed_on, _eps_probe

    ctx = _verl_ctx(trainers_wrong.eps_inside_sqrt_verl, "index")
    cand = [("eps_inside", "eps is inside the sqrt: sqrt(var + eps) instead of std + eps")]
    assert _confirmed_on(ctx, Batch.grouped(_PROBES_GROUPED), cand) == []
    assert _confirmed_on(ctx, _eps_probe(1e-6), cand) == cand
