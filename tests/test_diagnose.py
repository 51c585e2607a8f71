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
    actual = _contiguous(trainers_wrong.batch_std_of_centred, REWARDS, 4)
    cause = likely_cause(actual, REWARDS, np.repeat(np.arange(3), 4), reference_for("trl_batch"))
    assert cause is not None, actual
    # diagnose.py's messages keep "centred" until its restructure (issue 23 item 2) lands
    assert cause.startswith("the batch std is taken of the group-centred rewards"), cause


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
