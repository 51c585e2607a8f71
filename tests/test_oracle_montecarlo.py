"""Monte-Carlo checks of the closed forms (seeded ``numpy.random.Generator``, deterministic).

Tolerance: 5 standard errors computed from the sample itself, ``5 * std(x) / sqrt(n)``
(for a rate, ``5 * sqrt(r (1 - r) / n)`` with ``r`` the sample rate). With fixed seeds the
tests are deterministic; a correct formula lies outside 5 SE with probability ~6e-7
per check, a wrong one (off by more than 5 SE, about 1e-3 relative here) is caught.
"""

from __future__ import annotations

import numpy as np
import pytest

from sigma_ref import expected_gradient, grpo_advantage, policy_gradient, silent_group_rate

N_DRAWS = 400_000
CASES = [(0.5, 2), (0.5, 8), (0.05, 8), (0.3, 16), (0.03, 64), (0.9, 5), (0.15, 40), (0.001, 1000)]


def _within_5_se(samples: np.ndarray, expected: float, what: str) -> None:
    __tracebackhide__ = True
    mean = samples.mean()
    se = samples.std(ddof=1) / np.sqrt(samples.size)
    assert se > 0, f"degenerate sample [{what}]"
    assert abs(mean - expected) <= 5 * se, (
        f"sample mean {mean:.6g} is {abs(mean - expected) / se:.2f} SE from {expected:.6g} [{what}]"
    )


@pytest.mark.parametrize(("p", "G"), CASES, ids=[f"p={p}-G={G}" for p, G in CASES])
def test_sigma_moments_and_silent_rate(p: float, G: int) -> None:
    """``k ~ Bin(G, p)``: mean of ``sigma = sqrt(k (G-k)) / G`` matches ``expected_gradient(p, G)``,
    mean of ``sigma**2`` matches the Dr. GRPO value, the silent share matches
    ``silent_group_rate`` (each within 5 sample SE)."""
    rng = np.random.default_rng(20260 + G)
    k = rng.binomial(G, p, size=N_DRAWS).astype(np.float64)
    sigma = np.sqrt(k * (G - k)) / G
    _within_5_se(sigma, expected_gradient(p, G), f"E[sigma], p={p}, G={G}")
    _within_5_se(sigma**2, expected_gradient(p, G, method="dr_grpo"), f"E[sigma^2], p={p}, G={G}")
    silent = ((k == 0) | (k == G)).astype(np.float64)
    _within_5_se(silent, silent_group_rate(p, G), f"silent rate, p={p}, G={G}")


@pytest.mark.parametrize(("p", "G"), [(0.5, 8), (0.05, 8), (0.3, 32), (0.8, 3)])
def test_end_to_end_bernoulli_logit(p: float, G: int) -> None:
    """Sample binary rewards, take GRPO advantages and the Bernoulli-logit score ``s = y - p``,
    average ``policy_gradient`` over groups: the mean matches ``expected_gradient(p, G)``."""
    rng = np.random.default_rng(7 * G + 1)
    n_groups = 60_000
    rewards = (rng.random((n_groups, G)) < p).astype(np.float64)
    scores = rewards - p  # d log sigmoid(theta)^y (1 - sigmoid(theta))^(1-y) / d theta
    g = policy_gradient(grpo_advantage(rewards), scores)
    assert g.shape == (n_groups,)
    _within_5_se(g, expected_gradient(p, G), f"E[g], p={p}, G={G}")
