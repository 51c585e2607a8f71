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
# # 02. The group-standard-deviation identity `g = (sigma^2 / d) * delta_s`
#
# The per-prompt update of a group-relative method is `g = (1/G) sum_i A_i s_i` with
# `A_i = (R_i - mu)/d`. For binary rewards this notebook proves
#
# * `g = (sigma^2/d) * (s+ - s-)` for symbolic `k`, `G`, `d` and symbolic score sums, in any
#   dimension (the scores enter linearly; a matrix-symbol version closes the argument);
# * invariance to a reward shift and to a common shift of all scores (any baseline);
# * `g = 0` for a silent group, whatever `d`;
# * the constant `sigma^2/d` under each convention of docs/spec.md §4 (ddof 1, eps added or used as
#   a floor, batch scale, no scale), checked against every preset of `sigma_ref`;
# * the continuous-reward form `g = Cov(R, s)/d = (sigma_R^2/d) * beta`.

# %%
import numpy as np
import sympy as sp

import sigma_ref
from sigma_ref import symbolic as S
from sigma_ref.symbolic import LIVE, G, S_minus, S_plus, d, eps, k, sigma_batch

# %% [markdown]
# ## The identity, symbolically
#
# The `k` correct responses share the advantage `(1 - k/G)/d` and their scores sum to
# `S+`; the `G - k` incorrect ones share `-(k/G)/d` and sum to `S-`. `S.update()` is
# `g` written from that definition; the claim is that it equals
# `sigma^2/d * (S+/k - S-/(G-k))`.

# %%
g = S.update()
identity = S.sigma() ** 2 / d * S.delta_s()
assert sp.simplify(g - identity) == 0
g, sp.factor(identity)

# %% [markdown]
# **Any dimension.** Both sides are linear in the score sums, so the scalar proof holds
# component by component. The same with the score sums as `n x 1` matrix symbols
# (symbolic `n`): the difference, expanded, has a zero coefficient on each matrix.

# %%
n = sp.Symbol("n", integer=True, positive=True)
Sp, Sm = sp.MatrixSymbol("S_+", n, 1), sp.MatrixSymbol("S_-", n, 1)
diff = sp.expand(S.update(S_plus=Sp, S_minus=Sm) - S.sigma() ** 2 / d * S.delta_s(S_plus=Sp, S_minus=Sm))
coefficients: dict = {}
for term in diff.args if isinstance(diff, sp.MatAdd) else (diff,):
    c, mat = term.as_coeff_mmul()
    coefficients[mat] = coefficients.get(mat, 0) + c
assert all(sp.simplify(c) == 0 for c in coefficients.values())
sorted(map(str, coefficients))

# %% [markdown]
# **Response by response.** Building `g` from the individual responses (each score a
# 3-vector of free symbols, advantages from the explicit reward vector) for every live
# `k` of `G = 2..6`:

# %%
for size in range(2, 7):
    scores = [sp.Matrix(sp.symbols(f"s{i}_0:3", real=True)) for i in range(size)]
    for kk in range(1, size):
        rewards = [1] * kk + [0] * (size - kk)
        mean = sp.Rational(kk, size)
        update = (
            sum(((r - mean) / d * s for r, s in zip(rewards, scores, strict=True)), sp.zeros(3, 1)) / size
        )
        s_plus = sum(scores[:kk], sp.zeros(3, 1)) / kk
        s_minus = sum(scores[kk:], sp.zeros(3, 1)) / (size - kk)
        assert sp.simplify(update - S.sigma(kk, size) ** 2 / d * (s_plus - s_minus)) == sp.zeros(3, 1)
"checked G = 2..6, every live k, 3-dimensional symbolic scores"

# %% [markdown]
# ## Baseline invariance and silent groups
#
# Shifting every reward by `c` shifts `mu` by `c`, so the centered rewards (hence `A` and
# `g`) do not change. Adding a common vector `b` to every score adds
# `(1/G) sum_i A_i b = 0` because `sum_i A_i = 0`: `S+ -> S+ + k b`, `S- -> S- + (G-k) b`
# leaves `delta_s` and `g` unchanged. A silent group (`k = 0`, so `S+ = 0`; or `k = G`,
# so `S- = 0`) gives `g = 0` for every `d`.

# %%
c, b = sp.symbols("c b", real=True)
r = sp.symbols("r0:5", real=True)
shifted = [ri + c for ri in r]
for i in range(5):
    assert sp.simplify((shifted[i] - S.population_mean(shifted)) - (r[i] - S.population_mean(r))) == 0
assert sp.simplify(k * S.centered_rewards()[0] + (G - k) * S.centered_rewards()[1]) == 0  # sum A_i = 0
assert sp.simplify(S.update(S_plus=S_plus + k * b, S_minus=S_minus + (G - k) * b) - S.update()) == 0
assert sp.simplify(S.delta_s(S_plus=S_plus + k * b, S_minus=S_minus + (G - k) * b) - S.delta_s()) == 0
assert S.update(k=0, S_plus=0) == 0
assert sp.simplify(S.update(k=G, S_minus=0)) == 0
S.update(k=0, S_plus=0), sp.simplify(S.update(k=G, S_minus=0))

# %% [markdown]
# ## The constant under each convention (docs/spec.md §4)
#
# `g = (sigma^2/d) * delta_s` holds for any `d`; the conventions only change `d`.
#
# | convention | `d` | constant `sigma^2/d` |
# | --- | --- | --- |
# | paper | `sigma` | `sigma` |
# | ddof 1 (Bessel) | `sigma_b` | `sqrt((G-1)/G) * sigma` |
# | eps added | `std + eps` | `sigma^2/(std + eps)` (`-> sigma` as `eps -> 0`) |
# | eps floor | `max(std, eps)` | `sigma` if `sigma >= eps`, else `sigma^2/eps` |
# | batch scale | `sigma_B (+ eps)` | `sigma^2 / sigma_B` |
# | no scale (Dr. GRPO) | `1` | `sigma^2` |

# %%
sigma = S.sigma()
assert sp.simplify(S.identity_constant() - sigma) == 0
bessel = S.identity_constant(ddof=1)
assert sp.simplify(bessel**2 - (G - 1) / G * sigma**2) == 0  # both sides >= 0
assert sp.simplify(S.identity_constant(eps=eps) - sigma**2 / (sigma + eps)) == 0
assert sp.limit(S.identity_constant(eps=eps).subs(LIVE), eps, 0) == sigma.subs(LIVE)
floor = S.identity_constant(eps=eps, eps_placement="floor").subs(LIVE)
s_live = sigma.subs(LIVE)
assert sp.simplify(floor.subs(eps, s_live / 2) - s_live) == 0  # std above the floor: paper's constant
assert sp.simplify(floor.subs(eps, 2 * s_live) - s_live / 2) == 0  # floor active: sigma^2 / eps
assert sp.simplify(S.identity_constant(scale="batch") - sigma**2 / sigma_batch) == 0
assert sp.simplify(S.identity_constant(scale="batch", eps=eps) - sigma**2 / (sigma_batch + eps)) == 0
assert sp.simplify(S.identity_constant(scale="none") - sigma**2) == 0
bessel, sp.sqrt((G - 1) / G) * sigma

# %% [markdown]
# With eps added, the silent group's update is `0 / eps = 0` (its centered rewards are exactly
# zero), and the relative shortfall from the paper's constant is `eps/(std + eps)`.

# %%
assert S.identity_constant(eps=eps, k=0) == 0
assert sp.simplify(1 - S.identity_constant(eps=eps) / sigma - eps / (sigma + eps)) == 0
sp.simplify(1 - S.identity_constant(eps=eps) / sigma)

# %% [markdown]
# ## Every preset of the numeric oracle
#
# For each `sigma_ref` preset: a batch of two groups of 8 with integer 2-vector scores.
# The symbolic constant (the preset's `ddof`, `eps`, placement and scale substituted; the
# batch std computed exactly) must equal `decompose(...).constant`, and the update
# `policy_gradient(grpo_advantage(R), S)` must equal `constant * delta_s`. Tolerance:
# float64 relative `1e-14` (one std, one division, one mean of eight products).

# %%
rewards = np.array([[1, 1, 0, 0, 0, 0, 0, 0], [1, 0, 1, 1, 0, 0, 0, 0]], dtype=np.float64)
scores = np.arange(32, dtype=np.float64).reshape(2, 8, 2) % 7 - 3
batch_std = {}
flat = [sp.Integer(int(x)) for x in rewards.reshape(-1)]
for ddof in (0, 1):
    batch_std[ddof] = sp.sqrt(sum((x - S.population_mean(flat)) ** 2 for x in flat) / (len(flat) - ddof))
rows = []
for name, conv in sigma_ref.PRESETS.items():
    out = sigma_ref.decompose(rewards, scores, convention=conv)
    grad = sigma_ref.policy_gradient(sigma_ref.grpo_advantage(rewards, convention=conv), scores)
    for row in range(2):
        kk = int(rewards[row].sum())
        const = S.identity_constant(
            ddof=conv.ddof,
            eps=sp.Float(conv.eps, 30),
            eps_placement=conv.eps_placement,
            scale=conv.scale,
            k=kk,
            G=8,
        ).subs(sigma_batch, batch_std[conv.ddof])
        assert np.isclose(out.constant[row], float(const), rtol=1e-14, atol=0), (name, row)
        assert np.allclose(grad[row], float(const) * out.delta_s[row], rtol=1e-14, atol=1e-15), (name, row)
    rows.append((name, [round(float(x), 6) for x in out.constant]))
rows

# %% [markdown]
# ## Beyond binary rewards: the regression form
#
# For real rewards `g = (1/G) sum_i (R_i - mu) s_i / d = Cov(R, s)/d = (sigma_R^2/d) * beta`,
# `beta` the least-squares slope of the scores on the rewards. Proved here for five free
# rewards and scores; then, for binary rewards, `beta = delta_s` (symbolic `k`, `G`): the
# covariance is `g` with `d = 1`, that is `sigma^2 * delta_s`.

# %%
r = sp.symbols("r0:5", real=True)
s = sp.symbols("s0:5", real=True)
g_real = sum((ri - S.population_mean(r)) * si for ri, si in zip(r, s, strict=True)) / (5 * d)
assert sp.simplify(g_real - S.population_covariance(r, s) / d) == 0
assert sp.simplify(g_real - S.population_covariance(r, r) / d * S.least_squares_slope(r, s)) == 0
covariance_binary = S.update(d=1)  # Cov(R, s) for binary rewards, from the score sums
assert sp.simplify(covariance_binary / S.sigma() ** 2 - S.delta_s()) == 0
sp.factor(S.least_squares_slope([1, 1, 0, 0, 0], s))

# %% [markdown]
# The numeric oracle agrees on a concrete example (`decompose_continuous`, exact rationals
# on the symbolic side, float64 relative `1e-14`).

# %%
r_num = [sp.Rational(v) for v in ("0", "1/4", "1/2", "3/4", "2")]
s_num = [sp.Rational(v) for v in ("1", "-2", "3", "5", "1/2")]
out = sigma_ref.decompose_continuous(np.array([float(v) for v in r_num]), np.array([float(v) for v in s_num]))
assert np.isclose(out.covariance, float(S.population_covariance(r_num, s_num)), rtol=1e-14, atol=0)
assert np.isclose(out.slope, float(S.least_squares_slope(r_num, s_num)), rtol=1e-14, atol=0)
exact_g = S.population_covariance(r_num, s_num) / sp.sqrt(S.population_covariance(r_num, r_num))
assert np.isclose(out.prediction, float(exact_g), rtol=1e-14, atol=0)
S.least_squares_slope(r_num, s_num), exact_g
