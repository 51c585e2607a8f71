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
