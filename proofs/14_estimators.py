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
# # 14. Named estimators: RLOO over the std, leave-one-out std, two-stage, GDPO, MaxRL
#
# `sigma_ref.estimators` names advantage families real trainers ship that are not one divisor
# per group. Each is built from the oracle's functions; this notebook derives the identities
# those constructions rely on and ties each function to its definition, evaluated exactly and compared
# at float64 relative `1e-14` (a mean, a std and a division: a few roundings of `2^-53`).

# %%
import numpy as np
import sympy as sp

import sigma_ref
from sigma_ref import estimators as E
from sigma_ref import symbolic as S
from sigma_ref.symbolic import G, k

# %% [markdown]
# ## RLOO divided by the group std
#
# The leave-one-out baseline gives `R_i - mean_{j!=i} R_j = G/(G-1) (R_i - mu)` (notebook 03),
# so `rloo_std = G/(G-1) (R_i - mu) / (std + eps)`: one divisor per group,
# `d = (G-1)/G (std + eps)`, and the update is `(sigma^2 / d) delta_s` with that `d`.
# For binary rewards and `ddof = 0`, `eps = 0`: `sigma^2 / d = G/(G-1) sigma`.

# %%
d_rloo_std = (G - 1) / G * S.sigma()
assert sp.simplify(S.update(d=d_rloo_std) - S.rloo_factor() * S.sigma() * S.delta_s()) == 0
sp.simplify(S.update(d=d_rloo_std) / S.delta_s())

# %% [markdown]
# ## The leave-one-out sum of squares
#
# With `S = sum_j (R_j - mu)^2` and `m_i = mean_{j!=i} R_j`:
# `sum_{j!=i} (R_j - m_i)^2 = S - G/(G-1) (R_i - mu)^2`. Checked for free real rewards of every
# `G = 2..7` (the leave-one-out std then has `G - 1 - ddof` in its denominator).

# %%
for size in range(2, 8):
    r = sp.symbols(f"r0:{size}", real=True)
    mu = S.population_mean(r)
    total = sum((x - mu) ** 2 for x in r)
    for i in range(size):
        others = [r[j] for j in range(size) if j != i]
        m_i = S.population_mean(others)
        loo = sum((x - m_i) ** 2 for x in others)
        assert sp.expand(loo - (total - S.rloo_factor(size) * (r[i] - mu) ** 2)) == 0
"checked G = 2..7"

# %% [markdown]
# So the leave-one-out std is not one number per group: `loo_std` is a named deviation, not a
# convention. On binary rewards a correct response's siblings hold `k - 1` successes of `G - 1`
# and an incorrect one's `k`: the two values of `A` come from two different stds.

# %%
k_, G_ = 2, 5
plus_others = [1] * (k_ - 1) + [0] * (G_ - k_)
minus_others = [1] * k_ + [0] * (G_ - k_ - 1)
std0 = lambda v: sp.sqrt(sum((x - S.population_mean(v)) ** 2 for x in v) / len(v))  # noqa: E731
a_plus = (1 - S.population_mean(plus_others)) / std0(plus_others)
a_minus = (0 - S.population_mean(minus_others)) / std0(minus_others)
got = E.loo_std_advantage(np.array([[1.0] * k_ + [0.0] * (G_ - k_)]), ddof=0)[0]
assert np.allclose(got, [float(a_plus)] * k_ + [float(a_minus)] * (G_ - k_), rtol=1e-14, atol=0)
sp.nsimplify(a_plus), sp.nsimplify(a_minus)

# %% [markdown]
# ## Two-stage (group, then batch) normalisation
#
# Every group's GRPO advantages sum to 0 (`sum_i (R_i - mu) = 0`), so the batch mean of the
# first stage is 0 and the second stage divides every group by one constant
# `c = std_batch(a) + eps`: the identity holds with `d_g c` in place of `d_g`.

# %%
a_i = sp.symbols("a0:4", real=True)
R = sp.symbols("R0:4", real=True)
centered = [x - S.population_mean(R) for x in R]
assert sp.simplify(sum(centered)) == 0
c = sp.symbols("c", positive=True)
assert sp.simplify(S.update(d=S.sigma() * c) - S.update(d=S.sigma()) / c) == 0
rewards = np.array([[1.0, 0.0, 0.0, 1.0], [0.5, 0.25, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
a = np.asarray(sigma_ref.grpo_advantage(rewards))
assert abs(a.sum()) < 1e-15
two = E.group_then_batch_advantage(rewards)
assert np.allclose(two, a / a.std(), rtol=1e-14, atol=0)
# with population stds in both stages each live group has sum a^2 = G, so the batch std is
# sqrt(live / N): without silent groups the second stage is the identity, and each silent group
# scales the others up by sqrt(N / live)
live = np.array([[1.0, 0.0, 0.0, 1.0], [0.5, 0.25, 0.0, 1.0]])
assert np.allclose(E.group_then_batch_advantage(live), sigma_ref.grpo_advantage(live), rtol=1e-14, atol=0)
assert np.allclose(two[:2], a[:2] * np.sqrt(12 / 8), rtol=1e-14, atol=0)
float(a.std())

# %% [markdown]
# ## GDPO: normalise each reward component, sum, normalise the batch
#
# With one component GDPO is the two-stage estimator; with several, a component that is silent in
# a group adds 0 there (its centered values are exactly 0), so it never moves that group.

# %%
two_col = np.stack([rewards.reshape(-1), np.repeat([1.0, 0.0, 1.0], 4)], axis=1)
index = np.repeat([0, 1, 2], 4)
one = E.gdpo_advantage(two_col[:, :1], index=index).reshape(-1)
assert np.allclose(one, E.group_then_batch_advantage(rewards).reshape(-1), rtol=1e-14, atol=0)
both = E.gdpo_advantage(two_col, index=index).reshape(-1)
assert np.allclose(both, one, rtol=1e-14, atol=0)  # the second component is silent in every group
both[:4]

# %% [markdown]
# ## MaxRL: the mean in place of the std
#
# `A_i = (R_i - mu) / mu`. For binary rewards `A+ = (1 - p)/p = (G - k)/k`, `A- = -1`, and the
# update is the identity with `d = mu = k/G`: `sigma^2 / mu = (1 - p)`, so
# `g = (1 - p) delta_s`: a group's weight falls linearly with its pass rate.

# %%
plus, minus = S.centered_rewards()
mu_k = S.mean_reward()
assert sp.simplify(plus / mu_k - (G - k) / k) == 0
assert sp.simplify(minus / mu_k + 1) == 0
assert sp.simplify(S.update(d=mu_k) - (1 - k / G) * S.delta_s()) == 0
for size in range(2, 9):
    for kk in range(1, size + 1):
        got = E.maxrl_advantage(np.array([[1.0] * kk + [0.0] * (size - kk)]))[0]
        want = [sp.Rational(size - kk, kk)] * kk + [sp.Integer(-1) if kk < size else 0] * (size - kk)
        assert np.allclose(got, [float(w) for w in want], rtol=1e-14, atol=0)
sp.simplify(S.update(d=mu_k) / S.delta_s())
