"""``group_sigma`` and ``centered_norm`` against independent formulas (docs/spec.md §1)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from sigma_ref import centered_norm, group_sigma
from tests.helpers import assert_close

counts = st.integers(2, 10**6).flatmap(lambda G: st.tuples(st.integers(0, G), st.just(G)))


@given(counts)
def test_group_sigma_is_the_population_std_of_k_ones(kG: tuple[int, int]) -> None:
    """``group_sigma(k, G) = sqrt(k (G-k)) / G`` = ``np.std`` of k ones and G-k zeros."""
    k, G = kG
    expected = math.sqrt(k * (G - k)) / G
    assert_close(group_sigma(k, G), expected, rtol=1e-15, what=f"group_sigma({k}, {G})")
    if G <= 4096:
        rewards = np.r_[np.ones(k), np.zeros(G - k)]
        assert_close(group_sigma(k, G), np.std(rewards), rtol=1e-12, atol=1e-15, what="np.std")
        assert_close(
            group_sigma(k, G, ddof=1), np.std(rewards, ddof=1), rtol=1e-12, atol=1e-15, what="ddof=1"
        )
    with mpmath.workdps(40):  # sqrt(mu (1 - mu)) with mu = k/G exact, at 40 digits
        mu = mpmath.mpf(k) / G
        exact = float(mpmath.sqrt(mu * (1 - mu)))
    assert_close(group_sigma(k, G), exact, rtol=4e-16, what="sqrt(mu (1 - mu)), 40 digits")


@given(counts)
def test_group_sigma_bessel(kG: tuple[int, int]) -> None:
    """``group_sigma(k, G, ddof=1) = sqrt(k (G-k) / (G (G-1)))``."""
    k, G = kG
    expected = math.sqrt(k * (G - k) / (G * (G - 1)))
    assert_close(group_sigma(k, G, ddof=1), expected, rtol=1e-15, what=f"group_sigma({k}, {G}, ddof=1)")


@given(counts)
def test_centered_norm_is_sqrt_G_sigma(kG: tuple[int, int]) -> None:
    """``centered_norm(k, G) = sqrt(k (G-k) / G) = ||R - mu|| = sqrt(G) * sigma``."""
    k, G = kG
    norm = centered_norm(k, G)
    assert_close(norm, math.sqrt(k * (G - k) / G), rtol=1e-15, what=f"centered_norm({k}, {G})")
    assert_close(norm, math.sqrt(G) * group_sigma(k, G), rtol=1e-14, what="sqrt(G) * sigma")
    if G <= 4096:
        rewards = np.r_[np.ones(k), np.zeros(G - k)]
        assert_close(norm, np.linalg.norm(rewards - rewards.mean()), rtol=1e-12, atol=1e-12, what="norm")


def test_group_sigma_vectorised_and_typed() -> None:
    """Arrays broadcast; a torch tensor gives a tensor, a Python scalar a float."""
    G = np.array([[4], [9]])
    k = np.arange(5)[None, :].clip(max=4)
    out = group_sigma(k, G)
    assert out.shape == (2, 5)
    assert_close(out, np.sqrt(k * (G - k)) / G, rtol=1e-15, what="broadcast")
    t = group_sigma(torch.tensor([1, 2]), 4)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float64
    assert isinstance(group_sigma(1, 4), float)
    assert isinstance(centered_norm(1, 4), float)
