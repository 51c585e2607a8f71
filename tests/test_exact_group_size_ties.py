"""``exact_group_size`` at near-ties (issue 24, item 1): ``epsilon`` set to the float nearest the true
``1 - fidelity(p, G)`` (120 digits), so the true deficit lies within half an ulp of ``epsilon``, on
either side.

The least ``G`` is then ``G`` when the true ``1 - phi(G) <= epsilon`` and ``G + 1`` otherwise; which one
is decided here by 120-digit sums (``tests.helpers.windowed_expected_sigma``, an independent walk
from the mode), and ``exact_group_size`` must agree in every case (before the interval decision it
returned the wrong one of the two in 21 of these 40 cases: ``_deficit``'s ~1e-16 relative error
is as large as the gap).
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from sigma_ref import exact_group_size, fidelity
from sigma_ref._binomial_sums import _deficit
from sigma_ref.difficulty import _short_certified
from tests.helpers import windowed_expected_sigma

DPS = 120


def _true_deficit(p: float, G: int) -> mpmath.mpf:
    with mpmath.workdps(DPS):
        mp_p = mpmath.mpf(p)
        return 1 - windowed_expected_sigma(p, G, dps=DPS, cutoff=mpmath.mpf(10) ** -110) / mpmath.sqrt(
            mp_p * (1 - mp_p)
        )


def _cases(n: int = 40, seed: int = 24) -> list[tuple[float, int]]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.01, 0.99, n)
    G = rng.integers(3, 400, n)
    return [(float(pi), int(gi)) for pi, gi in zip(p, G, strict=True)]


@pytest.mark.parametrize("rounded", ["true deficit", "float fidelity"])
def test_ties_are_decided_exactly(rounded: str) -> None:
    """40 seeded ``(p, G)``, ``epsilon`` the float nearest the 120-digit deficit (or ``1 - fidelity(p, G)``
    in float64): the answer is ``G`` or ``G + 1`` as the 120-digit deficit says, and both outcomes
    occur (the test has teeth)."""
    outcomes = {"G": 0, "G + 1": 0}
    for p, G in _cases():
        eps = float(_true_deficit(p, G)) if rounded == "true deficit" else float(1 - fidelity(p, G))
        with mpmath.workdps(DPS):
            target = mpmath.mpf(eps)
            at_G = _true_deficit(p, G)
            assert _true_deficit(p, G - 1) > target  # G - 1 falls short by far
            assert _true_deficit(p, G + 1) < target  # G + 1 reaches by far
            want = G if at_G <= target else G + 1
        outcomes["G" if want == G else "G + 1"] += 1
        assert exact_group_size(p, epsilon=eps) == want, (p, G, eps, float((at_G - target) / target))
        assert exact_group_size(1 - p, epsilon=eps) == want or 1 - (1 - p) != p
    assert outcomes["G"] >= 5 and outcomes["G + 1"] >= 5, outcomes


@pytest.mark.parametrize(("p", "G"), [(0.3, 100), (0.03, 777), (0.5, 11), (0.2, 3000)])
def test_ties_at_the_float_deficit(p: float, G: int) -> None:
    """``epsilon = _deficit(p, G)`` (relative error ~1e-16 from the true deficit): same decision."""
    eps = float(_deficit(np.array([p]), np.array([float(G)]))[0])
    with mpmath.workdps(DPS):
        want = G if _true_deficit(p, G) <= mpmath.mpf(eps) else G + 1
    assert exact_group_size(p, epsilon=eps) == want


def test_certified_decision_exact_points() -> None:
    """``phi(1/2, 2) = 1/2`` and ``phi(1/2, 4) = 3/4`` exactly (``E[sqrt(k(G-k))]`` at ``k = 1, 2, 3``):
    an ``epsilon`` equal to the deficit counts as reached, one ulp below it does not."""
    assert _short_certified(0.5, 2, 0.5) is False
    assert _short_certified(0.5, 2, float(np.nextafter(0.5, 0))) is True
    # G = 4, p = 1/2: E[sqrt(k (4-k))] = (2 sqrt 3 + 2 * 6/16 ... ) is irrational: decided either side
    deficit = _true_deficit(0.5, 4)
    for eps in (float(deficit) * (1 - 1e-15), float(deficit) * (1 + 1e-15)):
        assert _short_certified(0.5, 4, eps) is (mpmath.mpf(eps) < deficit)


def test_closed_form_against_exact_at_the_hard_points() -> None:
    """The README's restated claim about the group-size law, at the points issue 24 named: equal at
    ``epsilon = 0.05`` for ``p`` in 0.46-0.54 except 0.5 (below there), above at ``(0.01, 0.9)``."""
    from sigma_ref import min_group_size

    p = np.round(np.arange(0.46, 0.545, 0.01), 2)
    closed, exact = np.asarray(min_group_size(p, epsilon=0.05)), np.asarray(exact_group_size(p, epsilon=0.05))
    assert ((closed == exact) == (p != 0.5)).all(), (closed, exact)
    assert (min_group_size(0.5, epsilon=0.05), exact_group_size(0.5, epsilon=0.05)) == (10, 11)
    assert (min_group_size(0.01, epsilon=0.9), exact_group_size(0.01, epsilon=0.9)) == (15, 3)
