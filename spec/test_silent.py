"""Level 3, silent groups and DAPO.

Silent groups give zero advantages and a zero update, never NaN; DAPO's keep mask is
``0 < k < G``; groups of one follow the convention (SPEC section 7, level 3).

Each test runs ``sigma_ref.conformance.properties.PROPERTIES[name]``: designed inputs,
then hypothesis-generated ones (shrunk on failure).
"""

from __future__ import annotations

from sigma_ref.conformance.properties import Context
from sigma_ref.conformance.session import check_in_pytest


def test_silent_group_zero(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """A silent group (all rewards equal, k = 0 or k = G) gets A = 0 exactly, never NaN."""
    check_in_pytest(sigma_ctx, "silent_group_zero", seed=sigma_seed)


def test_all_silent_batch(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """A batch of only silent groups gets A = 0 everywhere (the batch std is 0 too)."""
    check_in_pytest(sigma_ctx, "all_silent_batch", seed=sigma_seed)


def test_silent_zero_update(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Silent groups give a zero update: g = 1{0<k<G} sigma delta_s = 0, finite, through the loss."""
    check_in_pytest(sigma_ctx, "silent_zero_update", seed=sigma_seed)


def test_dapo_keep_mask(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """DAPO's dynamic sampling keeps a group iff 0 < k < G (sigma > 0): the implementation's keep
    mask (or its set of groups with non-zero advantages) equals dapo_keep_mask(R).
    """
    check_in_pytest(sigma_ctx, "dapo_keep_mask", seed=sigma_seed)


def test_singleton_groups(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """A group of one response follows the convention: error (raise), zero (A = 0) or unit_std (A =
    R / (1 + eps)); never NaN. Advisory where the convention says error.
    """
    check_in_pytest(sigma_ctx, "singleton_groups", seed=sigma_seed)


def test_non_dyadic_silent_group(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """A silent group of rewards that are not exact binary fractions (0.1, 0.3, 1/3, 0.7) still gets |A| <=
    1e-2, never an O(1) advantage from a rounding residue divided by a tiny std (a WARN for code computing in
    float32, where an eps below the rewards' rounding cannot guard it).
    """
    check_in_pytest(sigma_ctx, "non_dyadic_silent_group", seed=sigma_seed)


def test_rejected_rows_ignored(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Layout token: a rejected response (response_mask all 0) gets A = 0 on every token and does
    not move its siblings' baseline: their advantages equal oracle(R) of the group without it
    (counting it as reward 0, as verl 0.9.1 does, is a WARN with the measured change).
    """
    check_in_pytest(sigma_ctx, "rejected_rows_ignored", seed=sigma_seed)


def test_nan_rows_confined(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Layout token: a response with a NaN reward raises, or leaves its siblings' baseline unmoved
    (their advantages equal oracle(R) of the group without it) and other groups untouched; NaN
    siblings are a WARN, silently moved finite values a FAIL.
    """
    check_in_pytest(sigma_ctx, "nan_rows_confined", seed=sigma_seed)


def test_keep_mask_rule(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """A dynamic-sampling filter keeps a response iff 0 < k < G in its group, k counted on its
    declared metric: accuracy (R > 0.5; rewards are accuracy plus a bonus in [0, 0.5)), so shaped
    rewards that differ while every response is right (or wrong) are dropped, or the reward (keep
    iff not all equal); per response or per group.
    """
    check_in_pytest(sigma_ctx, "keep_mask_rule", seed=sigma_seed)
