"""Level 4, numerics.

float64, float32, float16 and bfloat16 within the tolerances of
``sigma_ref.testing.TOLERANCES``; large G; many groups; CUDA when present (SPEC section 7,
level 4).

Each test runs ``sigma_ref.conformance.properties.PROPERTIES[name]``: designed inputs,
then hypothesis-generated ones (shrunk on failure).
"""

from __future__ import annotations

from sigma_ref.conformance.properties import Context
from sigma_ref.conformance.session import check_in_pytest


def test_dtype_accuracy(sigma_ctx: Context, sigma_seed: int | None, param: str) -> None:
    """In each declared dtype, |A - oracle(R)| <= c (2 + log2 G) u kappa_g (1 + |A|) + u_out |A| with u
    the unit roundoff of the working precision (the coarser of the input dtype and the precision the
    implementation computes in) and kappa_g = max|R| / d the group's condition number.
    """
    check_in_pytest(sigma_ctx, "dtype_accuracy", param, seed=sigma_seed)


def test_large_group(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """G = 4096 (k = 1, 7, G/2, G-1, and real rewards) in float64 and float32 stays within the
    dtype's tolerance: A+ = sqrt((G-k)/k) reaches 64.
    """
    check_in_pytest(sigma_ctx, "large_group", seed=sigma_seed)


def test_half_precision_range(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """float16 and bfloat16 rewards of magnitude up to 1024 (squares beyond float16's range) give
    finite advantages within the dtype's tolerance.
    """
    check_in_pytest(sigma_ctx, "half_precision_range", seed=sigma_seed)


def test_large_batch(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """A batch of 512 groups matches the oracle group for group (no group dropped or mixed)."""
    check_in_pytest(sigma_ctx, "large_batch", seed=sigma_seed)


def test_cuda_device(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """On a CUDA tensor the advantages stay on the device and equal the oracle's (float64
    tolerance).
    """
    check_in_pytest(sigma_ctx, "cuda_device", seed=sigma_seed)


def test_half_precision_silent(sigma_ctx: Context, sigma_seed: int | None) -> None:
    """Silent groups stay 0 in float16 and bfloat16 too (an eps below float16's smallest subnormal, 6e-8,
    rounds to 0 and gives 0/0): a WARN, as trainers feed float32 rewards.
    """
    check_in_pytest(sigma_ctx, "half_precision_silent", seed=sigma_seed)
