"""Level 0, the contract.

Shape, dtype and device preserved; inputs not mutated; deterministic; finite outputs;
no autograd graph; a clear failure on malformed input (SPEC section 7, level 0).

Each test runs ``sigma_ref.conformance.properties.PROPERTIES[name]``: designed inputs,
then hypothesis-generated ones (shrunk on failure).
"""

from __future__ import annotations

from sigma_ref.conformance.properties import Context
from sigma_ref.conformance.session import check_in_pytest


def test_output_shape(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """out.shape == rewards.shape for the layout: [N] (contiguous, index) or [B, G] (grouped)."""
    check_in_pytest(sigma_ctx, "output_shape", seed=sigma_seed)


def test_output_dtype(sigma_ctx: Context, sigma_seed: int | None, param: str) -> None:
    """out.dtype == rewards.dtype for every floating dtype the implementation declares."""
    check_in_pytest(sigma_ctx, "output_dtype", param, seed=sigma_seed)


def test_output_device(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """out.device == rewards.device (CPU here; CUDA in numerics)."""
    check_in_pytest(sigma_ctx, "output_device", seed=sigma_seed)


def test_input_not_mutated(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """rewards (and index) are equal before and after the call."""
    check_in_pytest(sigma_ctx, "input_not_mutated", seed=sigma_seed)


def test_deterministic(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Two calls on equal rewards give bitwise equal advantages."""
    check_in_pytest(sigma_ctx, "deterministic", seed=sigma_seed)


def test_finite_output(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Finite rewards give finite advantages, silent groups included."""
    check_in_pytest(sigma_ctx, "finite_output", seed=sigma_seed)


def test_output_detached(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Advantages are constants of the update: out.requires_grad is False even when rewards require
    grad.
    """
    check_in_pytest(sigma_ctx, "output_detached", seed=sigma_seed)


def test_rejects_malformed(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """A NaN reward raises, or at least stays confined to its own group (advisory)."""
    check_in_pytest(sigma_ctx, "rejects_malformed", seed=sigma_seed)


def test_token_broadcast(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Layout token: the advantage is broadcast over the response, A_it = A_i on every valid token
    and A_it = 0 where response_mask is 0; token_level_rewards and response_mask are not mutated.
    """
    check_in_pytest(sigma_ctx, "token_broadcast", seed=sigma_seed)


def test_token_returns(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Layout token: returns (a tuple's second item, or a dict's 'returns') are what the
    implementation declares; returns='advantages' (verl's outcome estimators) means returns ==
    advantages exactly.
    """
    check_in_pytest(sigma_ctx, "token_returns", seed=sigma_seed)
