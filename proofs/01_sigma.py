# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01. The group standard deviation and the two advantage values
#
# A group of `G` binary rewards with `k` ones. This notebook derives, from the
# definitions, the three "sigmas" in circulation and the two values GRPO's advantage
# takes, and checks each against `sigma_ref.symbolic` (the stored expressions) and the
# numeric oracle `sigma_ref`.
#
# | name | formula | what it is |
# | --- | --- | --- |
# | `sigma` | `sqrt(k(G-k))/G` | population std (divide by `G`); the paper's and this project's |
# | `sigma_b` | `sqrt(k(G-k)/(G(G-1)))` | Bessel std (divide by `G-1`), `torch.std`'s default |
# | `centered_norm` | `sqrt(k(G-k)/G)` | the design card's and the post's "sigma": `‖R - mu‖`, not a std |

# %%
import sympy as sp

import sigma_ref
from sigma_ref import symbolic as S
from sigma_ref.symbolic import LIVE, G, k

# %% [markdown]
# ## Population std from its definition
#
# `k` rewards equal 1 and `G - k` equal 0, so
# `Var = (1/G) [k (1 - mu)^2 + (G - k) mu^2]` with `mu = k/G`.

# %%
mu = S.mean_reward()
sum_sq = k * (1 - mu) ** 2 + (G - k) * mu**2  # ||R - mu||^2
variance = sum_sq / G
assert sp.simplify(variance - S.sigma() ** 2) == 0
assert sp.simplify(variance - mu * (1 - mu)) == 0  # sigma = sqrt(mu (1 - mu))
sp.factor(variance)

# %% [markdown]
# The same from an explicit reward vector, for every `k` of `G = 8` (exact rationals):

# %%
for g in range(2, 9):
    for kk in range(g + 1):
        rewards = [1] * kk + [0] * (g - kk)
        mean = sp.Rational(sum(rewards), g)
        var = sum((sp.Integer(r) - mean) ** 2 for r in rewards) / g
        assert var == S.sigma(kk, g) ** 2
        assert sum((sp.Integer(r) - mean) ** 2 for r in rewards) / (g - 1) == S.sigma_bessel(kk, g) ** 2
[S.sigma(kk, 8) for kk in range(9)]

# %% [markdown]
# ## Bessel's std and the centered norm, and how the three relate
#
# `sigma_b = sqrt(G/(G-1)) * sigma` (both positive in a live group, so comparing squares
# suffices) and `centered_norm = ||R - mu|| = sqrt(G) * sigma`.
# The card's `sqrt(k(G-k)/G)` is therefore `sqrt(G)` times the standard deviation.

# %%
assert sp.simplify(S.sigma_bessel() ** 2 - sum_sq / (G - 1)) == 0
# both stds are positive in a live group, so equal squares mean equal values
assert sp.simplify((S.sigma_bessel() / S.sigma()) ** 2 - G / (G - 1)) == 0
assert sp.simplify(S.centered_norm() ** 2 - sum_sq) == 0
assert sp.simplify(S.centered_norm() - sp.sqrt(G) * S.sigma()) == 0
S.centered_norm() / S.sigma()

# %% [markdown]
# ## The two advantage values
#
# With `d = sigma`, GRPO's advantage `A_i = (R_i - mu)/sigma` takes two values in a live
# group (`0 < k < G`; the substitution `LIVE` writes `G = k + m` with `k, m >= 1`):
# `A+ = sqrt((G-k)/k)` on the correct responses and `A- = -sqrt(k/(G-k))` on the
# incorrect ones. They multiply to `-1`, sum to zero over the group, and have mean
# square 1 (unit population variance).

# %%
plus, minus = S.centered_rewards()
a_plus = (plus / S.sigma()).subs(LIVE)
a_minus = (minus / S.sigma()).subs(LIVE)
assert sp.simplify(a_plus - S.advantage_plus().subs(LIVE)) == 0
assert sp.simplify(a_minus - S.advantage_minus().subs(LIVE)) == 0
assert sp.simplify(S.advantage_plus() * S.advantage_minus()).subs(LIVE).simplify() == -1
assert sp.simplify((k * S.advantage_plus() + (G - k) * S.advantage_minus()).subs(LIVE)) == 0
assert sp.simplify((k * S.advantage_plus() ** 2 + (G - k) * S.advantage_minus() ** 2) / G) == 1
S.advantage_plus(), S.advantage_minus()

# %% [markdown]
# ## The numeric oracle agrees
#
# `sigma_ref.group_sigma`, `sigma_ref.centered_norm` and `sigma_ref.grpo_advantage` against
# the exact values for every `k` of `G = 2..16`. Tolerances are float64 rounding: the
# stds take one product, one division and one square root (relative error below `4e-16`,
# measured `2.2e-16`); the advantages go through a mean, a sum of squares, a square root
# and a division (below `1e-15`, measured `5.6e-16`).

# %%
import numpy as np

for g in range(2, 17):
    ks = np.arange(g + 1)
    exact = np.array([float(S.sigma(kk, g)) for kk in ks])
    assert np.allclose(sigma_ref.group_sigma(ks, g), exact, rtol=4e-16, atol=0)
    exact_b = np.array([float(S.sigma_bessel(kk, g)) for kk in ks])
    assert np.allclose(sigma_ref.group_sigma(ks, g, ddof=1), exact_b, rtol=4e-16, atol=0)
    exact_n = np.array([float(S.centered_norm(kk, g)) for kk in ks])
    assert np.allclose(sigma_ref.centered_norm(ks, g), exact_n, rtol=4e-16, atol=0)
    for kk in range(1, g):
        adv = sigma_ref.grpo_advantage(np.array([1.0] * kk + [0.0] * (g - kk)))
        assert np.allclose(adv[:kk], float(S.advantage_plus(kk, g)), rtol=1e-15, atol=0)
        assert np.allclose(adv[kk:], float(S.advantage_minus(kk, g)), rtol=1e-15, atol=0)
sigma_ref.grpo_advantage(np.array([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]))
