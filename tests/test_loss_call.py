"""Issue 20 item 10: a loss's call shape fails fast, and a wrapper that swaps logp and old_logp is
told so (not "the wrong sign")."""

from __future__ import annotations

import pytest
import torch

from sigma_ref.conformance import Adapter
from sigma_ref.conformance.adapter import CallMismatch
from sigma_ref.conformance.core import evaluate
from sigma_ref.conformance.session import build_context
from tests.gallery import correct, wrong, wrong_context


def _per_token_advantages(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Written for advantages [N, T] (broadcast over tokens by the trainer before the call)."""
    ratio = torch.exp(logp - old_logp)
    return -(ratio * advantages * mask).sum() / mask.sum()


def _per_token_losses(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Returns the per-token losses, not their reduction."""
    return -(torch.exp(logp - old_logp) * advantages.unsqueeze(1)) * mask


def _raises_its_own_error(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    raise ValueError("the implementation's own check")


def test_a_loss_for_token_advantages_stops_at_the_first_call() -> None:
    with pytest.raises(CallMismatch) as info:
        build_context(Adapter(correct.post_contiguous, "contiguous", loss=_per_token_advantages))
    msg = str(info.value)
    assert "advantages=Tensor[float64, (8,)]" in msg and "mask=Tensor[float64, (8, 5)]" in msg
    assert "must match the size of tensor" in msg
    assert "advantages.unsqueeze(1).expand_as(logp)" in msg  # the wrapper that fixes it


def test_a_loss_that_does_not_reduce_stops_at_the_first_call() -> None:
    with pytest.raises(CallMismatch, match=r"returned Tensor\[float64, \(8, 5\)\], not a scalar Tensor"):
        build_context(Adapter(correct.post_contiguous, "contiguous", loss=_per_token_losses))


def test_the_implementations_own_error_is_left_to_the_properties() -> None:
    ctx = build_context(Adapter(correct.post_contiguous, "contiguous", loss=_raises_its_own_error))
    assert ctx.adapter.loss is _raises_its_own_error


@pytest.mark.parametrize(
    ("name", "cause"),
    [("loss_swapped_logp", "logp and old_logp are swapped"), ("loss_wrong_sign", "wrong sign")],
)
def test_a_swap_and_a_sign_flip_get_their_own_cause(name: str, cause: str) -> None:
    """Both raise log pi of negative-advantage responses at ratio 1; the probe at ratio exp(0.05)
    tells them apart (the flipped surrogate's gradient grows with the ratio, the swapped one's falls)."""
    case = next(c for c in wrong.WRONG if c.name == name)
    out = evaluate("loss_is_policy_gradient", wrong_context(case))
    assert out.verdict == "FAIL" and out.finding is not None and out.finding.confirmed
    assert cause in (out.finding.cause or "")
    other = "wrong sign" if name == "loss_swapped_logp" else "swapped"
    assert other not in (out.finding.cause or "")
