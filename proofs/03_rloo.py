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
# # 03. RLOO is `G/(G-1)` times mean-centering
#
# RLOO's advantage subtracts the mean of the *other* responses:
# `A_i = R_i - (1/(G-1)) sum_{j != i} R_j`. Since `sum_{j != i} R_j = G mu - R_i`,
# `A_i = G/(G-1) * (R_i - mu)`: RLOO is Dr. GRPO scaled by `G/(G-1)`, so its update is
# `G/(G-1) * sigma^2 * delta_s` (the identity with `d = (G-1)/G`).

# %%
import numpy as np
import sympy as sp

import sigma_ref
from sigma_ref import symbolic as S
from sigma_ref.symbolic import G, k

# %% [markdown]
# ## Symbolic `G`
#
# Write `T = sum_j R_j` (so `mu = T/G`) for a response with reward `R_i`:

# %%
R_i, T = sp.symbols("R_i T", real=True)
leave_one_out = R_i - (T - R_i) / (G - 1)
assert sp.simplify(leave_one_out - S.rloo_factor() * (R_i - T / G)) == 0
sp.factor(leave_one_out)

# %% [markdown]
# ## Every concrete `G = 2..8`, free real rewards
#
# `S.rloo_advantage` applies the definition literally to a list of free symbols.

# %%
for size in range(2, 9):
    r = sp.symbols(f"r0:{size}", real=True)
    mean = S.population_mean(r)
    for i in range(size):
        assert sp.expand(S.rloo_advantage(r, i) - S.rloo_factor(size) * (r[i] - mean)) == 0
[S.rloo_advantage(sp.symbols("r0:3"), i) for i in range(3)]

# %% [markdown]
# ## Binary rewards: the two values and the update
#
# `A+ = (G-k)/(G-1)`, `A- = -k/(G-1)`, and the update is `G/(G-1) * sigma^2 * delta_s`:
# the identity with `d = (G-1)/G`.

# %%
plus, minus = S.centered_rewards()
assert sp.simplify(S.rloo_factor() * plus - (G - k) / (G - 1)) == 0
assert sp.simplify(S.rloo_factor() * minus + k / (G - 1)) == 0
rloo_update = S.update(d=(G - 1) / G)
assert sp.simplify(rloo_update - S.rloo_factor() * S.sigma() ** 2 * S.delta_s()) == 0
assert sp.simplify(rloo_update / S.update(d=1) - S.rloo_factor()) == 0  # Dr. GRPO times G/(G-1)
sp.simplify(S.rloo_factor() * plus), sp.simplify(S.rloo_factor() * minus)

# %% [markdown]
# ## The numeric oracle agrees
#
# `sigma_ref.rloo_advantage` against the definition evaluated in exact rationals, for
# reward vectors of sizes 2..8 with entries in `{0, 1/4, ..., 2}` (float64 relative
# `1e-15` plus absolute `1e-15` for exact zeros: a mean and two roundings).

# %%
rng = np.random.default_rng(3)
for size in range(2, 9):
    for _ in range(5):
        quarters = rng.integers(0, 9, size)
        exact = [S.rloo_advantage([sp.Rational(int(q), 4) for q in quarters], i) for i in range(size)]
        got = sigma_ref.rloo_advantage(quarters / 4)
        assert np.allclose(got, [float(e) for e in exact], rtol=1e-15, atol=1e-15)
binary = np.array([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
assert np.allclose(sigma_ref.rloo_advantage(binary), sigma_ref.dr_grpo_advantage(binary) * 8 / 7, rtol=1e-15)
sigma_ref.rloo_advantage(binary)
