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
# # 06. The arcsine objective and the implicit objectives of GRPO and Dr. GRPO
#
# * `d/dp 2 arcsin sqrt(p) = 1/sqrt(p(1-p))`, the difficulty weight `w(p)`.
# * Bernoulli-logit prompt (`p = sigmoid(theta)`, one parameter): the score of a response
#   is `s = y - p`, so `s+ = 1 - p`, `s- = -p`, `delta_s = 1`, and the identity gives
#   GRPO's update `g(k) = sigma` and Dr. GRPO's `g(k) = sigma^2`.
# * Taking expectations over `k`: Dr. GRPO's expected update is `(1 - 1/G) d/dtheta p`
#   exactly, for every `G` (it ascends `p`); GRPO's is `E[sigma] = phi(G, p) *
#   d/dtheta 2 arcsin sqrt(p)`, so it ascends the arcsine objective in the large-`G`
#   limit (`phi -> 1`), and at `G = 2, 3` it ascends `p` exactly (all live groups share
#   one sigma).

# %%
import numpy as np
import sympy as sp
import torch

import sigma_ref
from sigma_ref import symbolic as S
from sigma_ref.symbolic import G, k, p, theta, u

# %% [markdown]
# ## `d/dp 2 arcsin sqrt(p) = 1/sqrt(p(1-p))`
#
# With `p = u/(1+u)`, `u > 0`, sympy knows `1 - p > 0` and can merge the square roots.

# %%
derivative = sp.diff(S.arcsine_objective(), p)
assert sp.simplify((derivative - S.difficulty_weight()).subs(p, u / (1 + u))) == 0
assert S.arcsine_objective(sp.Rational(1, 2)) == sp.pi / 2 and S.arcsine_objective(1) == sp.pi
derivative

# %% [markdown]
# ## The Bernoulli-logit prompt
#
# `log pi(y) = y log p + (1 - y) log(1 - p)` with `p = sigmoid(theta)`; its
# `theta`-derivative is the score. `dp/dtheta = p(1 - p)`.

# %%
y = sp.Symbol("y", real=True)
sig = S.sigmoid()
score = S.bernoulli_logit_score(y)
assert sp.simplify(score - (y - sig)) == 0
assert sp.simplify(sp.diff(sig, theta) - sig * (1 - sig)) == 0
s_correct, s_wrong = sp.simplify(score.subs(y, 1)), sp.simplify(score.subs(y, 0))
assert sp.simplify(s_correct - (1 - sig)) == 0 and sp.simplify(s_wrong + sig) == 0
assert sp.simplify(s_correct - s_wrong) == 1  # delta_s = 1
score

# %% [markdown]
# So `S+ = k(1 - p)` and `S- = -(G - k)p`. The identity turns the update into sigma itself:
# GRPO (`d = sigma`) gives `g(k) = sigma`, Dr. GRPO (`d = 1`) gives `sigma^2`, whatever `p`.

# %%
sums = {"S_plus": k * (1 - p), "S_minus": -(G - k) * p}
assert sp.simplify(S.delta_s(**sums)) == 1
assert sp.simplify(S.update(d=S.sigma(), **sums) - S.sigma()) == 0
assert sp.simplify(S.update(d=1, **sums) - S.sigma() ** 2) == 0
sp.simplify(S.update(d=S.sigma(), **sums))

# %% [markdown]
# The same with torch autograd on the actual surrogate `mean_i A_i log pi(y_i)` at
# `theta = 0.3`, for every `k` of `G = 8`, advantages from `sigma_ref.grpo_advantage`
# (float64; relative `1e-12`).

# %%
for kk in range(9):
    t = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    y_t = torch.tensor([1.0] * kk + [0.0] * (8 - kk), dtype=torch.float64)
    prob = torch.sigmoid(t)
    logp = y_t * torch.log(prob) + (1 - y_t) * torch.log(1 - prob)
    adv = sigma_ref.grpo_advantage(y_t)
    (adv * logp).mean().backward()
    assert np.isclose(float(t.grad), float(S.sigma(kk, 8)), rtol=1e-12, atol=1e-15), kk
"autograd gradient = sigma(k, 8) for k = 0..8"

# %% [markdown]
# ## Expected updates and the implicit objectives
#
# Dr. GRPO: `E[sigma^2] = p(1-p)(1 - 1/G) = (1 - 1/G) d/dtheta p`, exactly: it ascends
# `E_x[p_x]` (scaled by `1 - 1/G`). GRPO: `d/dtheta 2 arcsin sqrt(p) = sqrt(p(1-p))`, so
# `E[sigma] = phi(G, p) * d/dtheta 2 arcsin sqrt(p)`, with `phi -> 1` as `G -> oo`.

# %%
dp = sp.diff(sig, theta)
assert sp.simplify(S.expected_sigma_squared(G, sig) - (1 - 1 / G) * dp) == 0
grpo_objective_slope = sp.diff(S.arcsine_objective(sig), theta)
assert sp.simplify(grpo_objective_slope - S.mass_weight(sig)) == 0
assert sp.simplify(S.mass_weight(sig) / S.mass_weight(sig, "dr_grpo") - S.difficulty_weight(sig)) == 0
sp.simplify(grpo_objective_slope)

# %% [markdown]
# At small `G` the arcsine is not what GRPO ascends: for `G = 2` and `3` every live group
# has the same sigma (`1/2`, `sqrt(2)/3`), so `E[sigma]` is a constant times `p(1-p)` and
# GRPO ascends `p`, like Dr. GRPO. From `G = 4` on, `E[sigma]/(p(1-p))` depends on `p`.

# %%
assert sp.simplify(S.expected_sigma(2) / (p * (1 - p))) == 1
assert sp.simplify(S.expected_sigma(3) / (p * (1 - p))) == sp.sqrt(2)
ratio4 = sp.simplify(S.expected_sigma(4) / (p * (1 - p)))
assert sp.diff(ratio4, p) != 0
ratio4

# %% [markdown]
# The large-`G` limit, numerically: the oracle's exact `E[sigma]` at `G = 10^5` is within
# the attenuation law's `1/(8 G p(1-p))` of `sqrt(p(1-p))` (to 1%).

# %%
for pr in (0.05, 0.2, 0.5, 0.9):
    ratio = sigma_ref.expected_gradient(pr, 10**5) / sigma_ref.mass_weight(pr)
    assert abs((1 - ratio) * 8 * 10**5 * pr * (1 - pr) - 1) < 0.01, pr
"ok"
