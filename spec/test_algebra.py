"""Level 1, algebra.

Zero mean within each group; permutation equivariance within a group; groups
independent; invariance to a reward shift; GRPO invariant to a positive scale, Dr. GRPO and
RLOO equivariant; the binary two-valued structure (SPEC section 7, level 1).

Each test runs ``sigma_ref.conformance.properties.PROPERTIES[name]``: designed inputs,
then hypothesis-generated ones (shrunk on failure).
"""

from __future__ import annotations

from sigma_ref.conformance.properties import Context
from sigma_ref.conformance.session import check_in_pytest


def test_advantage_values(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """A == oracle(R) under the convention: (R - mu) / d per group (d = 1 for Dr. GRPO; RLOO:
    G/(G-1) (R - mu)).
    """
    check_in_pytest(sigma_ctx, "advantage_values", seed=sigma_seed)


def test_group_centering(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Zero mean within each group: sum_{i in g} A_i = 0."""
    check_in_pytest(sigma_ctx, "group_centering", seed=sigma_seed)


def test_permutation_equivariance(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Permuting responses within a group permutes their advantages: A(pi R) = pi A(R)."""
    check_in_pytest(sigma_ctx, "permutation_equivariance", seed=sigma_seed)


def test_group_independence(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Each group's advantages depend only on its own rewards: A_g(R) = A_g(R_g)."""
    check_in_pytest(sigma_ctx, "group_independence", seed=sigma_seed)


def test_shift_invariance(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """A reward shift changes nothing: A(R + c) = A(R)."""
    check_in_pytest(sigma_ctx, "shift_invariance", seed=sigma_seed)


def test_scale_behaviour(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """GRPO is invariant to a positive reward scale, A(lambda R) = A(R); Dr. GRPO and RLOO are
    equivariant, A(lambda R) = lambda A(R).
    """
    check_in_pytest(sigma_ctx, "scale_behaviour", seed=sigma_seed)


def test_binary_two_valued(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Binary rewards give two values per group: A+ on correct, A- on incorrect responses; with d =
    sigma, A+ = sqrt((G-k)/k) and A- = -sqrt(k/(G-k)).
    """
    check_in_pytest(sigma_ctx, "binary_two_valued", seed=sigma_seed)


def test_interleaved_groups(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Groups given by an index are found wherever their responses are: ragged, interleaved, any
    ids.
    """
    check_in_pytest(sigma_ctx, "interleaved_groups", seed=sigma_seed)


def test_partial_trailing_group(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """With N rewards not a multiple of G, a contiguous implementation raises, or treats the trailing N mod G
    responses as a group of their own; it never returns values computed from missing or padded entries.
    """
    check_in_pytest(sigma_ctx, "partial_trailing_group", seed=sigma_seed)


def test_token_reward_position(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Layout token: the scalar reward of a response is read at its last valid token (or the row is
    summed), not at the last column: with every response shorter than T, the advantage at the last
    valid token equals oracle(R).
    """
    check_in_pytest(sigma_ctx, "token_reward_position", seed=sigma_seed)
