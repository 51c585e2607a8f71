"""sigma_ref.testing.assert_advantages_close and convention detection, unit by unit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sigma_ref
from sigma_ref.conformance import Adapter, Batch, detect_convention, oracle_adapter
from sigma_ref.testing import TOLERANCES, assert_advantages_close, default_tolerance


def test_passes_on_the_oracle_in_every_dtype() -> None:
    """The oracle's own output passes at each dtype's default tolerance."""
    r = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.5, 2.0, 1.0, 0.25]])
    for dtype in TOLERANCES:
        x = r.to(dtype)
        out = sigma_ref.grpo_advantage(x, convention="trl")
        assert out.dtype == dtype
        assert_advantages_close(out, x, convention="trl")


def test_message_counts_and_names_the_worst_index() -> None:
    """Counts mismatches, names the worst index, expected and actual values, and the cause."""
    r = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0]])
    actual = sigma_ref.grpo_advantage(r, convention="post")
    with pytest.raises(AssertionError) as info:
        assert_advantages_close(actual, r, convention="paper", context="mine(r)")
    msg = str(info.value)
    assert msg.startswith("7 / 8 advantages mismatched (87.5%); greatest difference")
    assert (
        "at index 0: actual=1.5, but should be 1.7320508" in msg
        and "but should be" in msg
        and "[mine(r)]" in msg
    )
    assert "std is Bessel-corrected" in msg and "declare ddof=1" in msg


def test_tolerances_given_together() -> None:
    """rtol and atol: both or neither."""
    r = np.array([[1.0, 0.0]])
    with pytest.raises(ValueError, match="give both or neither"):
        assert_advantages_close(r, r, convention="paper", rtol=1e-3)


def test_explicit_tolerance_and_index_layout() -> None:
    """Explicit tolerances loosen the check; the index layout works."""
    r = np.array([1.0, 0.0, 0.0, 1.0])
    idx = np.array([0, 1, 0, 1])
    exact = sigma_ref.grpo_advantage(r, index=idx)
    assert_advantages_close(exact + 1e-4, r, convention="paper", index=idx, rtol=0.0, atol=1e-3)
    with pytest.raises(AssertionError, match="4 / 4"):
        assert_advantages_close(exact + 1e-4, r, convention="paper", index=idx)


def test_shape_and_rloo() -> None:
    """A wrong shape is named; ``convention='rloo'`` checks RLOO."""
    r = np.array([[1.0, 0.0, 0.0]])
    with pytest.raises(AssertionError, match=r"actual.shape=\(2,\), but should be \(1, 3\)"):
        assert_advantages_close(np.zeros(2), r, convention="paper")
    assert_advantages_close(sigma_ref.rloo_advantage(r), r, convention="rloo")
    with pytest.raises(AssertionError, match=r"\(G-1\)/G too small"):
        assert_advantages_close(sigma_ref.dr_grpo_advantage(r), r, convention="rloo")


def test_default_tolerance_of_numpy_dtypes() -> None:
    """numpy dtypes map to the same table."""
    assert default_tolerance(np.float32) == TOLERANCES[torch.float32]
    assert default_tolerance(np.dtype("float64")) == TOLERANCES[torch.float64]


def test_detects_floor_placement_and_custom_eps() -> None:
    """max(std, eps) is told apart from std + eps; an unknown eps names the nearest preset."""
    floor = sigma_ref.Convention("floor", ddof=1, eps=1e-4, eps_placement="floor", singleton="zero")
    det = detect_convention(oracle_adapter(floor))
    assert det.convention is not None and det.convention.eps_placement == "floor"
    assert det.preset is None and det.nearest == "trl"
    assert "eps placement floor vs add" in det.summary()


def test_detects_unrecognised_structure() -> None:
    """Centering on the batch mean is reported in words."""

    def batch_centered(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        return rewards - rewards.mean()

    det = detect_convention(Adapter(batch_centered, "contiguous"))
    assert det.family == "unknown" and det.preset is None
    assert "do not sum to zero within groups" in " ".join(det.notes)


def test_batch_reprs() -> None:
    """Batches print as the call's arguments."""
    assert repr(Batch.grouped([[1.0, 0.0]])) == "Batch(rewards=[1., 0.], G=2)"
    b = Batch(np.array([1.0, 0.0, 1.0]), np.array([2, 5, 2]))
    assert b.group_size is None and "index=[2, 5, 2]" in repr(b)


def test_adapter_argument_errors() -> None:
    """Bad adapters fail with the fix."""
    with pytest.raises(ValueError, match="layout='rows'"):
        Adapter(lambda r: r, "rows")
    with pytest.raises(ValueError, match="ragged=True needs layout 'index', 'token', 'keep-mask' or 'sizes'"):
        Adapter(lambda r, g: r, "contiguous", ragged=True)
    with pytest.raises(ValueError, match="choose from"):
        Adapter(lambda r, g: r, "contiguous", dtypes=("int8",))
