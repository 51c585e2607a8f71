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
# # 14. Two bounds behind the oracle's overflow checks
#
# 1. Under a group's own divisor, `|A_i| = |R_i - mu| / d <= sqrt(G - 1)`: GRPO's advantages with
#    `scale="group"` fit in every floating dtype (float16's largest value is 65504, so a group
#    would need `G > 4.29e9`), and `sigma_ref.advantages` checks a narrow output only for
#    `scale="none"`/`"batch"` and RLOO.
# 2. The continuous identity's slope `beta = Cov(R, s) / sigma**2` equals `mean(z s) / sigma` with
#    `z = (R - mu) / sigma`, and its prediction `Cov / d = mean(z s) * (sigma / d)`: neither
#    squares `sigma`, so no spread of the rewards under- or overflows them
#    (`sigma_ref.identity.decompose_continuous`).

# %%
from fractions import Fraction

import numpy as np
import sympy as sp

import sigma_ref

# %% [markdown]
# ## 1. `|R_i - mu| <= sqrt(G - 1) * sigma`
#
# With `c_j = R_j - mu` (so `sum c_j = 0` and `c_i = -sum_{j != i} c_j`) and `n = G - 1`
# others, Lagrange's identity `n sum x_j^2 - (sum x_j)^2 = sum_{j<k} (x_j - x_k)^2 >= 0`
# gives `c_i^2 <= n sum_{j != i} c_j^2`, so `G c_i^2 <= n sum_j c_j^2 = (G - 1) G sigma^2`.
# Checked exactly for `n = 1..7`:

# %%
for n in range(1, 8):
    x = sp.symbols(f"x1:{n + 1}", real=True)
    lagrange = (
        n * sum(v**2 for v in x)
        - sum(x) ** 2
        - sum((x[j] - x[k]) ** 2 for j in range(n) for k in range(j + 1, n))
    )
    assert sp.expand(lagrange) == 0
    c_i = -sum(x)  # the centered values sum to zero
    G = n + 1
    total = c_i**2 + sum(v**2 for v in x)  # = G sigma^2
    # (G - 1) * total - G * c_i^2 = n sum x^2 - (sum x)^2, Lagrange's sum of squares: >= 0
    assert sp.expand((G - 1) * total - G * c_i**2 - (n * sum(v**2 for v in x) - sum(x) ** 2)) == 0
"Lagrange's identity and the bound hold for G = 2..8"

# %% [markdown]
# The bound is attained (one reward apart from `G - 1` equal ones), and a larger divisor
# (Bessel's `std`, `+ eps`) only shrinks `|A|`. The oracle's float16 results for such a group:

# %%
for G in (2, 5, 64):
    rewards = np.zeros(G, dtype=np.float16)
    rewards[0] = 65504
    a = sigma_ref.grpo_advantage(rewards)
    assert a.dtype == np.float16 and np.isfinite(a).all()
    assert abs(float(a[0]) - np.sqrt(G - 1)) <= 2**-10 * np.sqrt(G - 1)  # float16's rounding
"|A_0| = sqrt(G - 1) for G = 2, 5, 64, in float16"

# %% [markdown]
# ## 2. The slope without `sigma**2`

# %%
cov, sigma, d, zs = sp.symbols("Cov sigma d zs", positive=True)
# zs = mean(z s) = mean((R - mu) s) / sigma = Cov / sigma
assert sp.simplify(cov / sigma**2 - (cov / sigma) / sigma) == 0
assert sp.simplify(cov / d - (cov / sigma) * (sigma / d)) == 0
"beta = mean(z s) / sigma and Cov / d = mean(z s) * sigma / d"

# %% [markdown]
# Tied to the code: the slope for rewards spread over `1e-300` to `1e300` against exact
# rationals (`Fraction` on the float64 inputs), to a few roundings of float64:

# %%
scores = [1.0, -1.0, 3.0, 0.5]
for scale in (1e-300, 1e-170, 1.0, 1e170, 1e300):
    rewards = [scale * v for v in (1.0, 0.0, 0.5, 0.25)]
    r = [Fraction(v) for v in rewards]
    s = [Fraction(v) for v in scores]
    mu, ms = sum(r) / 4, sum(s) / 4
    exact = sum((a - mu) * (b - ms) for a, b in zip(r, s, strict=True)) / sum((a - mu) ** 2 for a in r)
    got = float(sigma_ref.decompose_continuous(np.array(rewards), np.array(scores)).slope)
    assert abs(got - float(exact)) <= 1e-14 * abs(float(exact)), (scale, got, float(exact))
"the slope is right at every spread"
