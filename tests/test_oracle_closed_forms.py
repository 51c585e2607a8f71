"""Closed forms in ``p`` against exact and high-precision sums (docs/spec.md §5).

References: exact rationals (``fractions``, with ``p`` the float's exact value) and square
roots at 50 digits for small ``G``; for large ``G`` an mpmath sum at 40 digits walked out
from the mode until the terms fall below ``1e-36`` of the largest (``tests.helpers``).
Largest ``G`` checked against that reference: ``2**40`` (``p = 1e-6``) and ``10**8``
(``p = 0.5``); at ``G = 10**9, p = 0.5`` the fidelity is checked against its own
expansion, whose remainder there is ``O(1e-19)``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from sigma_ref import (
    arcsine_objective,
    attenuation,
    difficulty_weight,
    exact_group_size,
    expected_gradient,
    fidelity,
    mass_share,
    mass_weight,
    min_group_size,
    silent_group_rate,
)
from tests.helpers import (
    assert_close,
    exact_dr_grpo,
    exact_expected_sigma_small,
    exact_silent_rate,
    windowed_expected_sigma,
)

probabilities = st.one_of(
    st.floats(1e-12, 1 - 1e-12),
    st.sampled_from([1e-6, 0.05, 0.5, 0.3, 0.999]),
    st.floats(-12, -1).map(lambda e: 10.0**e),
)


# ---------------------------------------------------------------------------
# expected_gradient


@given(p=probabilities, G=st.integers(2, 48))
def test_expected_gradient_small_G_exact(p: float, G: int) -> None:
    """``E[sigma] = (1/G) sum_k C(G,k) p^k q^(G-k) sqrt(k (G-k))``: exact weights, 50-digit roots."""
    exact = float(exact_expected_sigma_small(p, G))
    assert_close(expected_gradient(p, G), exact, rtol=1e-12, what=f"expected_gradient({p!r}, {G})")


@pytest.mark.parametrize("G", [10**4, 10**5, 10**6])
@pytest.mark.parametrize("p", [1e-6, 1e-3, 0.05, 0.3, 0.5, 0.999])
def test_expected_gradient_large_G(p: float, G: int) -> None:
    """Large ``G`` against the 40-digit windowed mpmath sum, to 1e-12 relative."""
    exact = float(windowed_expected_sigma(p, G))
    assert_close(expected_gradient(p, G), exact, rtol=1e-12, what=f"expected_gradient({p!r}, {G})")


@pytest.mark.parametrize(
    ("p", "G"),
    [(0.5, 10**8), (1e-3, 10**9), (1e-6, 10**9), (1e-6, 2**40), (0.3, 10**7)],
    ids=lambda v: f"{v:g}",
)
def test_expected_gradient_huge_G(p: float, G: int) -> None:
    """The largest ``G`` checked against the mpmath sum (the paper's script overflows at ~1030)."""
    exact = float(windowed_expected_sigma(p, G))
    assert_close(expected_gradient(p, G), exact, rtol=1e-12, what=f"expected_gradient({p!r}, {G})")


@pytest.mark.parametrize("p", [0.5, 0.3, 0.1])
def test_fidelity_at_G_1e9_matches_its_expansion(p: float) -> None:
    """``G = 10**9``: ``phi = 1 - 1/(8 G p q) + O(G**-2)``, the remainder ~1e-18, so the exact sum
    must agree with the expansion (computed here in mpmath) to 1e-13."""
    G = 10**9
    with mpmath.workdps(30):
        mp_p = mpmath.mpf(p)
        expansion = float(1 - 1 / (8 * G * mp_p * (1 - mp_p)))
    assert_close(fidelity(p, G), expansion, rtol=1e-13, what=f"fidelity({p}, 1e9)")


def test_expected_gradient_edges_and_vectorisation() -> None:
    """``p`` in {0, 1} gives exactly 0; arrays broadcast; torch in, torch out."""
    assert expected_gradient(0.0, 10) == 0.0 and expected_gradient(1.0, 10) == 0.0
    p = np.array([[0.1], [0.5], [0.9]])
    G = np.array([2, 7, 100, 5000])
    grid = expected_gradient(p, G)
    assert grid.shape == (3, 4)
    singles = np.array([[expected_gradient(float(pi), int(g)) for g in G] for pi in p[:, 0]])
    assert_close(grid, singles, rtol=1e-15, what="vectorised vs scalar")
    t = expected_gradient(torch.tensor([0.1, 0.5]), 8)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32


def test_expected_gradient_mixed_widths_stay_in_memory() -> None:
    """Many small groups next to one huge one are evaluated in bounded chunks (a chunk once
    padded 5000 rows to the widest row: 17 GB), and each value is the one computed alone."""
    p = np.full(5000, 0.5)
    G = np.r_[np.full(4999, 10), 10**9]
    out = expected_gradient(p, G)
    assert_close(out[:3], [expected_gradient(0.5, 10)] * 3, rtol=1e-15)
    assert_close(out[-1], expected_gradient(0.5, 10**9), rtol=1e-15)


@pytest.mark.parametrize("p", [1e-300, 1e-310, 1 - 1e-16])
def test_expected_gradient_extreme_p(p: float) -> None:
    """Extreme but valid ``p`` (a subnormal ``G p``, ``1 - p`` near an ulp): still the exact sum."""
    exact = float(exact_expected_sigma_small(p, 8))
    assert_close(expected_gradient(p, 8), exact, rtol=1e-12, what=f"p={p!r}")


@given(p=probabilities, G=st.integers(2, 60))
def test_dr_grpo_expected_sigma_squared_exact(p: float, G: int) -> None:
    """``E[sigma**2] = p (1-p) (1 - 1/G)`` against the exact rational sum over ``k``."""
    exact = exact_dr_grpo(p, G)
    assert exact == Fraction(p) * (1 - Fraction(p)) * (1 - Fraction(1, G))  # the algebra itself
    assert_close(expected_gradient(p, G, method="dr_grpo"), float(exact), rtol=1e-14)
    assert_close(mass_weight(p, method="dr_grpo", G=G), float(exact), rtol=1e-14, what="mass_weight with G")


# ---------------------------------------------------------------------------
# silent_group_rate


@given(p=st.one_of(probabilities, st.sampled_from([0.0, 1.0])), G=st.integers(2, 200))
def test_silent_group_rate_exact_small_G(p: float, G: int) -> None:
    """``p**G + (1-p)**G`` against exact rationals."""
    exact = exact_silent_rate(p, G)
    assert_close(silent_group_rate(p, G), float(exact), rtol=1e-15, atol=1e-300)


@pytest.mark.parametrize("G", [10**3, 10**5, 10**6, 10**9, 2**40])
@pytest.mark.parametrize("p", [1e-12, 1e-6, 1e-3, 0.3, 0.5, 0.7, 1 - 1e-9])
def test_silent_group_rate_large_G(p: float, G: int) -> None:
    """Large ``G`` against 60-digit mpmath powers (``1 - p`` must not be rounded first)."""
    with mpmath.workdps(60):
        mp_p = mpmath.mpf(p)
        exact = float(mp_p**G + (1 - mp_p) ** G)
    assert_close(silent_group_rate(p, G), exact, rtol=1e-15, atol=1e-300, what=f"silent({p!r}, {G})")


# ---------------------------------------------------------------------------
# fidelity and attenuation

P_GRID = np.r_[1e-4, 1e-3, np.linspace(0.01, 0.99, 21), 0.999, 1 - 1e-4]


def test_fidelity_in_unit_interval_and_increasing_in_G() -> None:
    """``0 <= phi <= 1`` and ``phi(G+1) > phi(G)`` on a grid: every ``G`` up to 300, then decades
    to ``10**7``."""
    for G in (np.arange(2, 301), 10.0 ** np.arange(2, 8)):
        phi = fidelity(P_GRID[:, None], G[None, :])
        assert np.all((phi >= 0) & (phi <= 1)), phi[(phi < 0) | (phi > 1)]
        steps = np.diff(phi, axis=1)
        assert np.all(steps > 0), f"fidelity not increasing at {np.argwhere(steps <= 0)[:5].tolist()}"
    assert np.all(fidelity(np.array([0.0, 1.0]), 10) == 0.0)


def test_fidelity_is_expected_gradient_over_root() -> None:
    """``phi = E[g] / sqrt(p q)``, with the root at 30 digits."""
    G = np.array([2, 8, 64, 4096])
    for p in P_GRID[::5]:
        with mpmath.workdps(30):
            root = float(mpmath.sqrt(mpmath.mpf(p) * (1 - mpmath.mpf(p))))
        assert_close(fidelity(p, G), expected_gradient(p, G) / root, rtol=1e-14, what=f"p={p}")


@pytest.mark.parametrize(("p", "first"), [(0.1, 3), (0.3, 3), (0.5, 3), (0.8, 3), (0.02, 4)])
def test_attenuation_approaches_fidelity(p: float, first: int) -> None:
    """``|phi - attenuation| = O(1/G**2)``: from ``G = 10**first`` to ``10**6``, ``G |gap|`` falls
    at least 5-fold a decade and ``G**2 |gap|`` settles (each decade within 10% of the last)."""
    G = 10.0 ** np.arange(first, 7)
    gap = np.abs(fidelity(p, G) - attenuation(p, G))
    scaled = G * gap
    assert np.all(scaled[1:] < scaled[:-1] / 5), scaled
    second = G**2 * gap
    assert np.all(np.abs(second[1:] / second[:-1] - 1) < 0.1), second


@given(p=st.floats(1e-6, 1 - 1e-6), G=st.integers(2, 10**6))
def test_attenuation_formula(p: float, G: int) -> None:
    """``attenuation = 1 - 1 / (8 G p (1-p))`` (40-digit reference)."""
    with mpmath.workdps(40):
        mp_p = mpmath.mpf(p)
        exact = float(1 - 1 / (8 * G * mp_p * (1 - mp_p)))
    assert_close(attenuation(p, G), exact, rtol=1e-14, atol=1e-14, what=f"attenuation({p}, {G})")


# ---------------------------------------------------------------------------
# group sizes


def test_min_group_size_post_values() -> None:
    """The seed post's corpus at epsilon = 0.05, in exact rationals: ``ceil(1 / (8 eps p q))``.

    (The post prints 10, 16, 28, 50, 138; its own formula gives these.)"""
    rates = ["0.5", "0.3", "0.15", "0.08", "0.03"]
    eps = Fraction("0.05")
    exact = [math.ceil(1 / (8 * eps * Fraction(r) * (1 - Fraction(r)))) for r in rates]
    assert exact == [10, 12, 20, 34, 86]
    assert min_group_size(np.array([float(r) for r in rates])).tolist() == exact
    assert [min_group_size(float(r)) for r in rates] == exact


@given(p=st.floats(1e-4, 1 - 1e-4), eps=st.floats(1e-3, 0.5))
def test_min_group_size_formula(p: float, eps: float) -> None:
    """``min_group_size = ceil(1 / (8 eps p (1-p)))`` (exact rational ceiling of the float inputs,
    off by one only where the real value is within a rounding of an integer)."""
    value = 1 / (8 * Fraction(eps) * Fraction(p) * (1 - Fraction(p)))
    got = min_group_size(p, epsilon=eps)
    assert isinstance(got, int)
    if abs(value - round(value)) > Fraction(1, 10**9) * value:
        assert got == math.ceil(value), (got, float(value))
    else:
        assert got in (math.ceil(value), math.ceil(value) + 1)


EPS_GRID = [0.3, 0.1, 0.05, 0.01, 0.002]
P_SIZES = np.r_[0.001, 0.01, 0.03, 0.08, 0.15, 0.3, 0.5, 0.7, 0.93, 0.999]


@pytest.mark.parametrize("eps", EPS_GRID)
def test_exact_group_size_is_least_G(eps: float) -> None:
    """``G = exact_group_size(p, eps)`` has ``phi(G) >= 1 - eps`` and (``G > 2``) ``phi(G-1) < 1 - eps``."""
    G = exact_group_size(P_SIZES, epsilon=eps)
    assert G.dtype == np.int64 and G.shape == P_SIZES.shape
    assert np.all(fidelity(P_SIZES, G) >= 1 - eps)
    above_two = G > 2
    before = fidelity(P_SIZES[above_two], G[above_two] - 1)
    assert np.all(before < 1 - eps), (P_SIZES[above_two][before >= 1 - eps], eps)
    singles = [exact_group_size(float(p), epsilon=eps) for p in P_SIZES]
    assert singles == G.tolist()


def test_exact_group_size_known_values() -> None:
    """At the post's ``p = 0.5`` the closed form says 10 but the least ``G`` is 11 (checked by
    brute force over ``G = 2..200`` with the exact sum)."""
    for p in (0.5, 0.03):
        brute = next(
            G
            for G in range(2, 300)
            if float(exact_expected_sigma_small(p, G, dps=30)) / math.sqrt(p * (1 - p)) >= 0.95
        )
        assert exact_group_size(p) == brute


# ---------------------------------------------------------------------------
# weights and the arcsine objective


@given(p=st.floats(1e-9, 1 - 1e-9))
def test_weights_and_objective_formulas(p: float) -> None:
    """``w = 1/sqrt(pq)``, mass ``sqrt(pq)`` / ``pq``, objective ``2 asin(sqrt(p))`` (40 digits)."""
    with mpmath.workdps(40):
        mp_p = mpmath.mpf(p)
        var = mp_p * (1 - mp_p)
        weight, root, objective = 1 / mpmath.sqrt(var), mpmath.sqrt(var), 2 * mpmath.asin(mpmath.sqrt(mp_p))
    assert_close(difficulty_weight(p), float(weight), rtol=1e-14)
    assert_close(mass_weight(p), float(root), rtol=1e-14)
    assert_close(mass_weight(p, method="dr_grpo"), float(var), rtol=1e-14)
    assert_close(arcsine_objective(p), float(objective), rtol=1e-14)
    assert_close(difficulty_weight(p) * mass_weight(p), 1.0, rtol=1e-14, what="w * sqrt(pq) = 1")


@pytest.mark.parametrize("p", [0.01, 0.05, 0.2, 0.5, 0.77, 0.99])
def test_arcsine_derivative_is_difficulty_weight(p: float) -> None:
    """``d/dp 2 asin(sqrt(p)) = difficulty_weight(p)``: central differences (h = 1e-5) and
    Richardson extrapolation of the oracle's own ``arcsine_objective``."""
    h = 1e-5

    def central(step: float) -> float:
        return (arcsine_objective(p + step) - arcsine_objective(p - step)) / (2 * step)

    richardson = (4 * central(h / 2) - central(h)) / 3
    assert_close(richardson, difficulty_weight(p), rtol=1e-8, what=f"p={p}")


def test_edges_of_the_weights() -> None:
    """At ``p`` in {0, 1}: weight infinite, masses 0, objective 0 and pi."""
    assert difficulty_weight(0.0) == math.inf and difficulty_weight(1.0) == math.inf
    assert mass_weight(0.0) == 0.0 and mass_weight(1.0, method="dr_grpo") == 0.0
    assert arcsine_objective(0.0) == 0.0 and arcsine_objective(1.0) == pytest.approx(math.pi, rel=1e-15)


@given(
    ps=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=8),
    data=st.data(),
    method=st.sampled_from(["grpo", "dr_grpo"]),
    G=st.sampled_from([None, 8, 24]),
)
def test_mass_share_formula(ps: list[float], data: st.DataObject, method: str, G: int | None) -> None:
    """``mass_share = sum(m(p[mask])) / sum(m(p))`` with ``m = sqrt(pq)``, ``pq`` or the exact
    ``E[g]`` at ``G``."""
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=len(ps), max_size=len(ps))))
    p = np.array(ps)
    if G is None:
        weights = np.sqrt(p * (1 - p)) if method == "grpo" else p * (1 - p)
    elif method == "dr_grpo":
        weights = p * (1 - p) * (1 - 1 / G)
    else:
        weights = np.array([float(exact_expected_sigma_small(float(pi), G, dps=30)) for pi in p])
    if weights.sum() == 0:
        with pytest.raises(ValueError, match="zero update mass"):
            mass_share(p, mask, method=method, G=G)
        return
    assert_close(
        mass_share(p, mask, method=method, G=G), weights[mask].sum() / weights.sum(), rtol=1e-12, atol=1e-15
    )
