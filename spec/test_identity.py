"""Level 2, the identity.

The update built from the implementation's advantages (and, with ``--loss``, the
gradient of its own loss at ratio 1 on a small random policy) equals the oracle's
``(sigma^2/d) * (s+ - s-)`` per group; the convention is detected from probes
(SPEC section 7, level 2).

Each test runs ``sigma_ref.conformance.properties.PROPERTIES[name]``: designed inputs,
then hypothesis-generated ones (shrunk on failure).
"""

from __future__ import annotations

from sigma_ref.conformance.properties import Context
from sigma_ref.conformance.session import check_in_pytest


def test_advantage_identity(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """With the implementation's advantages, g = (1/G) sum_i A_i s_i = (sigma^2/d)(s+ - s-) per
    group for binary rewards and any scores s_i in R^3.
    """
    check_in_pytest(sigma_ctx, "advantage_identity", seed=sigma_seed)


def test_convention_detected(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Probing with designed rewards identifies the convention (ddof, eps and placement, scale,
    singleton and silent groups, a spread filter) and the working precision: a NOTE, never a failure.
    """
    check_in_pytest(sigma_ctx, "convention_detected", seed=sigma_seed)


def test_loss_gradient_identity(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """At ratio 1 on a small softmax policy, the gradient of the implementation's loss per group,
    -dL_g/dtheta, equals (sigma^2/d)(s+ - s-) with s_i = G sum_t w_it grad log pi(y_it) and
    w_it the loss's own aggregation weights.
    """
    check_in_pytest(sigma_ctx, "loss_gradient_identity", seed=sigma_seed)


def test_loss_is_policy_gradient(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """At ratio 1 the loss gradient is a weighted policy gradient: dL/dlogp_it = -w_it A_i with
    w_it >= 0 not depending on A.
    """
    check_in_pytest(sigma_ctx, "loss_is_policy_gradient", seed=sigma_seed)


def test_loss_ignores_padding(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Padding tokens (mask = 0) get no gradient: dL/dlogp_it = 0 where mask_it = 0."""
    check_in_pytest(sigma_ctx, "loss_ignores_padding", seed=sigma_seed)


def test_loss_aggregation(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """The per-token weights w_it = -dL/dlogp_it / A_i at ratio 1 are a known aggregation
    (token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm, token-sum),
    measured on responses of lengths 1 to T; a declared aggregation must match them.
    """
    check_in_pytest(sigma_ctx, "loss_aggregation", seed=sigma_seed)


def test_loss_clipped_surrogate(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """At ratios r != 1 the loss gradient is the clipped surrogate's: dL/dlogp_it = -w_it A_i r_it
    inside [1 - eps_low, 1 + eps_high] and 0 where the clip is active for the sign of A_i (dual
    clip: 0 for A < 0 beyond c), with the clip range declared or read off the gradient.
    """
    check_in_pytest(sigma_ctx, "loss_clipped_surrogate", seed=sigma_seed)


def test_loss_objective(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """With a declared objective (PPO, dual clip, GSPO, CISPO; truncated importance sampling; a
    k1/k2/k3 KL term in the loss or in the reward), dL/dlogp_it equals the oracle's per-token
    gradient (sigma_ref.objectives.loss_gradient) at ratios inside and outside every clip range; a
    mismatch names the term that differs.
    """
    check_in_pytest(sigma_ctx, "loss_objective", seed=sigma_seed)
