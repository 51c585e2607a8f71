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
# # 04. Expectations over `k ~ Binomial(G, p)`
#
# * `E[sigma] = (1/G) sum_{k=1}^{G-1} C(G,k) p^k (1-p)^(G-k) sqrt(k(G-k))`, the exact
#   expected GRPO update in units of `delta_s` (a finite sum; no closed form);
# * `E[sigma^2] = p(1-p)(1 - 1/G)`, the exact expected Dr. GRPO update: proved for every
#   `G = 2..12` as a polynomial identity in `p`, and for symbolic `G` from the binomial
#   moment generating function;
# * the fidelity `phi = E[sigma]/sqrt(p(1-p))` has the large-`G` expansion
#   `1 - 1/(8 G p(1-p)) - (7 - 16 p(1-p))/(128 G^2 p^2(1-p)^2) + O(G^-3)` (the delta
#   method, derived as a series); the first two terms are the attenuation law;
# * `phi <= sqrt(1 - 1/G) < 1` (Jensen).

# %%
import numpy as np
import sympy as sp

import sigma_ref
from sigma_ref import symbolic as S
from sigma_ref.symbolic import G, p

q = 1 - p

# %% [markdown]
# ## `E[sigma]`: the finite sum
#
# The `k = 0` and `k = G` terms vanish (silent groups, `sigma = 0`). For `G = 2` and `3`:

# %%
assert sp.expand(S.expected_sigma(2) - p * q) == 0  # k = 1 only: 2 p q * (1/2)
assert sp.expand(S.expected_sigma(3) - sp.sqrt(2) * p * q) == 0  # 3pq^2 + 3p^2q, times sqrt(2)/3
S.expected_sigma(), sp.factor(S.expected_sigma(3))

# %% [markdown]
# The numeric oracle (`sigma_ref.expected_gradient`, log-space binomial terms) against the
# sum evaluated with 30 significant digits at rational `p`: relative error below `1e-13`,
# the precision `sigma_ref.difficulty` documents.

# %%
# NBVAL_IGNORE_OUTPUT
worst = 0.0
for g in (2, 3, 5, 8, 13, 21, 34):
    for pr in (
        sp.Rational(1, 20),
        sp.Rational(1, 4),
        sp.Rational(1, 2),
        sp.Rational(7, 10),
        sp.Rational(19, 20),
    ):
        exact = sp.N(S.expected_sigma(g, pr), 30)
        got = sigma_ref.expected_gradient(float(pr), g)
        worst = max(worst, abs(got - float(exact)) / float(exact))
assert worst < 1e-13
f"worst relative error {worst:.1e}"

# %% [markdown]
# ## `E[sigma^2] = p(1-p)(1 - 1/G)`
#
# `sigma^2 = k(G-k)/G^2` is a polynomial in `k`, so its expectation is a polynomial in `p`.
# For each `G = 2..12` the sum over `k` equals the closed form exactly:

# %%
for g in range(2, 13):
    total = sum(S.binomial_pmf(j, g) * S.sigma(j, g) ** 2 for j in range(g + 1))
    assert sp.expand(total - S.expected_sigma_squared(g)) == 0
S.expected_sigma_squared()

# %% [markdown]
# **Symbolic `G`.** The binomial theorem gives the moment generating function
# `E[e^{tk}] = sum_k C(G,k) (p e^t)^k (1-p)^(G-k) = (1 - p + p e^t)^G`; its derivatives at
# `t = 0` are `E[k]` and `E[k^2]`, and `E[sigma^2] = E[k]/G - E[k^2]/G^2`.

# %%
t = sp.Symbol("t", real=True)
mgf = (q + p * sp.exp(t)) ** G
E_k = sp.diff(mgf, t).subs(t, 0)
E_k2 = sp.diff(mgf, t, 2).subs(t, 0)
assert sp.simplify(E_k - G * p) == 0
assert sp.simplify(E_k2 - (G * p * q + G**2 * p**2)) == 0
assert sp.simplify(E_k / G - E_k2 / G**2 - S.expected_sigma_squared()) == 0
sp.factor(sp.simplify(E_k / G - E_k2 / G**2))

# %% [markdown]
# The numeric oracle agrees (`expected_gradient(p, G, method="dr_grpo")`, float64 relative `1e-15`):

# %%
for g in (2, 3, 8, 100, 10**5):
    for pr in (sp.Rational(1, 20), sp.Rational(3, 10), sp.Rational(1, 2)):
        got = sigma_ref.expected_gradient(float(pr), g, method="dr_grpo")
        assert np.isclose(got, float(S.expected_sigma_squared(g, pr)), rtol=1e-15, atol=0)
"ok"

# %% [markdown]
# ## The attenuation law, derived as a series
#
# `sigma = f(mu)` with `f(x) = sqrt(x(1-x))` and `mu = k/G`. Expand `f` around `p` and take
# expectations term by term: `E[f(mu)] = f(p) + sum_r f^(r)(p)/r! * m_r`, with `m_r` the
# central moments of `mu`, from the centered moment generating function
# `E[e^{t(k - Gp)}] = e^{-Gpt} (1 - p + p e^t)^G` (symbolic `G`). `m_2 = pq/G`,
# `m_3, m_4 = O(G^-2)`, `m_5, m_6 = O(G^-3)`: orders 2..6 fix the coefficients of
# `1/G` and `1/G^2` exactly.

# %%
centered_mgf = sp.exp(-G * p * t) * mgf
moments = {r: sp.factor(sp.diff(centered_mgf, t, r).subs(t, 0) / G**r) for r in range(2, 7)}
assert sp.simplify(moments[2] - p * q / G) == 0
x = sp.Symbol("x", real=True)
f = sp.sqrt(x * (1 - x))
h = sp.Symbol("h", positive=True)  # h = 1/G
ratio = 1 + sum(
    sp.diff(f, x, r).subs(x, p) / sp.factorial(r) / f.subs(x, p) * moments[r] for r in range(2, 7)
)
numerator, denominator = sp.fraction(sp.cancel(sp.together(ratio.subs(G, 1 / h))))
c0, c1, c2 = (sp.factor(sp.Poly(numerator, h).coeff_monomial(h**j) / denominator) for j in range(3))
assert c0 == 1  # E[sigma] -> sqrt(p(1-p)) as G -> oo
assert sp.simplify(c1 + 1 / (8 * p * q)) == 0
assert sp.simplify(1 + c1 * h - S.attenuation().subs(G, 1 / h)) == 0
assert sp.simplify(c2 + (7 - 16 * p * q) / (128 * p**2 * q**2)) == 0
c1, c2

# %% [markdown]
# Numerically, `G^2 (phi - attenuation)` from the oracle's exact `fidelity` converges to
# `c2` (the next term is `O(1/G)`: the gap shrinks fourfold per fourfold `G`; with the
# oracle's `1e-13` relative precision the scaled gap at `G = 4000` is good to `2e-6`). This also
# shows where the law is weak: at `p = 0.1` the correction is 14 times larger than at
# `p = 0.5`.

# %%
# NBVAL_IGNORE_OUTPUT
table = []
for pr in (0.5, 0.3, 0.1):
    target = float(c2.subs(p, pr))
    gaps = []
    for g in (250, 1000, 4000):
        scaled = g**2 * (sigma_ref.fidelity(pr, g) - sigma_ref.attenuation(pr, g))
        gaps.append(abs(scaled - target))
    assert 3 < gaps[0] / gaps[1] < 5 and 3 < gaps[1] / gaps[2] < 5, (pr, gaps)  # the O(1/G) remainder
    assert gaps[2] < 5e-3 * abs(target), (pr, gaps)
    table.append((pr, round(target, 6), [f"{gap:.1e}" for gap in gaps]))
table

# %% [markdown]
# ## `phi <= 1` (Jensen)
#
# `sqrt` is concave on `[0, oo)`, so `E[sigma] = E[sqrt(sigma^2)] <= sqrt(E[sigma^2])
# = sqrt(p(1-p)) * sqrt(1 - 1/G)`: `phi <= sqrt(1 - 1/G) < 1`, strictly for finite `G`.

# %%
y = sp.Symbol("y", positive=True)
assert sp.diff(sp.sqrt(y), y, 2).is_negative  # concave
bound = sp.sqrt(S.expected_sigma_squared()) / sp.sqrt(p * q)
assert sp.simplify(bound**2 - (1 - 1 / G)) == 0
for g in range(2, 9):
    for pr in (sp.Rational(1, 10), sp.Rational(3, 10), sp.Rational(1, 2)):
        gap = S.expected_sigma_squared(g, pr) - S.expected_sigma(g, pr) ** 2  # >= 0 by Jensen
        assert sp.N(gap, 50) > 0
        assert sp.N(S.fidelity(g, pr) ** 2 - (1 - sp.Rational(1, g)), 50) < 0
grid_p = np.linspace(0.01, 0.99, 99)[:, None]
grid_G = np.array([2, 3, 4, 8, 16, 64, 256, 4096])[None, :]
phi = sigma_ref.fidelity(grid_p, grid_G)
assert (phi <= np.sqrt(1 - 1 / grid_G) * (1 + 1e-13)).all() and (phi < 1).all()
assert (np.diff(phi, axis=1) > 0).all()  # and increasing in G on this grid
S.fidelity(2, sp.Rational(1, 2)), sp.sqrt(1 - sp.Rational(1, 2))

# %% [markdown]
# ## Summing only a window of `k`: the tail bound
#
# `sigma_ref` sums `E[sqrt(k(G-k))] = sum_k t_k w_k` (`t_k` the pmf, `w_k = sqrt(k(G-k))`) only
# over a window `[lo, hi]` around the mode, for `p <= 1/2` (the sum is symmetric in
# `p <-> 1-p`). The bound on what it leaves out, step by step:
#
# 1. The exact term ratio is `r(k) = t_{k+1}/t_k = (G-k)/(k+1) * p/(1-p)`, decreasing in `k`;
#    for `a` the mode (clamped to `[1, G-1]`) `r(a) <= 1` and `t_{a-1}/t_a <= 1`, and
#    `r(a+i)/r(a) = (G-a-i)/(G-a) * (a+1)/(a+1+i)`.

# %%
k, i, a_ = sp.symbols("k i a", positive=True, integer=True)
t_k = sp.binomial(G, k) * p**k * q ** (G - k)
ratio = sp.simplify(sp.combsimp(t_k.subs(k, k + 1) / t_k))
assert sp.simplify(ratio - (G - k) / (k + 1) * p / q) == 0
r = sp.Lambda(k, (G - k) / (k + 1) * p / q)
assert sp.simplify(r(a_ + i) / r(a_) - (G - a_ - i) / (G - a_) * (a_ + 1) / (a_ + 1 + i)) == 0
left = sp.Lambda(k, k / (G - k + 1) * q / p)  # t_{k-1}/t_k
assert sp.simplify(sp.combsimp(t_k.subs(k, k - 1) / t_k) - left(k)) == 0
assert sp.simplify(left(a_ - i) / left(a_) - (a_ - i) / a_ * (G - a_ + 1) / (G - a_ + 1 + i)) == 0
ratio

# %% [markdown]
# 2. So `-log(t_{a+j}/t_a) >= sum_{i<j} [log(1 + i/c) - log(1 - i/d)]` with `c = a+1, d = G-a`
#    (and the same with `c = G-a+1, d = a` below the mode). The summand increases in `i`, so the
#    sum is at least the integral from `0` to `s = j - 1`, which is
#    `F(s) = c h(s/c) + d h(-s/d)` with Bennett's `h(u) = (1+u) log(1+u) - u`:

# %%
s, c_, d_, u = sp.symbols("s c d u", positive=True)


def h(v):
    return (1 + v) * sp.log(1 + v) - v


F = c_ * h(s / c_) + d_ * h(-s / d_)
integrand = sp.log(1 + s / c_) - sp.log(1 - s / d_)  # F is its integral from 0: F(0) = 0, F' = it
assert F.subs(s, 0) == 0
assert sp.simplify(sp.expand_log(sp.diff(F, s) - integrand, force=True)) == 0
F_second = sp.simplify(sp.diff(F, s, 2))
assert sp.simplify(F_second - (1 / (c_ + s) + 1 / (d_ - s))) == 0  # > 0 on [0, d): F convex
F_second

# %% [markdown]
# 3. Closed-form starts for the root of `F(s) = L` (`_reach`): `h(u) >= u^2/(2(1+u/3))` and
#    `h(-u) >= u^2/2` (equal value and slope at 0, larger second derivative:
#    `1/(1+u) >= 27/(u+3)^3` since `(u+3)^3 - 27(1+u) = u^3 + 9u^2`; `1/(1-u) >= 1`). Newton
#    steps from above on the convex increasing `F` stay above the root.

# %%
bernstein = u**2 / (2 * (1 + u / 3))
for lower, v in ((bernstein, u), (u**2 / 2, -u)):
    gap = h(v) - lower
    assert gap.subs(u, 0) == 0 and sp.simplify(sp.diff(gap, u).subs(u, 0)) == 0
assert sp.expand((u + 3) ** 3 - 27 * (1 + u)) == u**3 + 9 * u**2
assert sp.simplify(sp.diff(bernstein, u, 2) - 27 / (u + 3) ** 3) == 0
assert sp.simplify(sp.diff(h(u), u, 2) - 1 / (1 + u)) == 0
assert sp.simplify(sp.diff(h(-u), u, 2) - 1 / (1 - u)) == 0
"h bounds ok"

# %% [markdown]
# 4. The share left out. Every term outside the window is below `exp(-L) t_a`; there are fewer
#    than `G` of them, each weight is at most `G/2`, and the sum is at least
#    `t_a w_a >= t_a sqrt(G-1)`. So the share is below `(G-1)(G/2) exp(-L)/sqrt(G-1)
#    <= G^(3/2) exp(-L)/2`, and `L = log(1/tail) + 1.5 log G` (`tail = 1e-17`) keeps it below
#    `tail/2`. Checked here at 50 digits on the first left-out term each side of the oracle's
#    windows (the pmf is unimodal: the rest are smaller still), and the width against the
#    Gaussian need `2 sqrt(2 L) sd`:

# %%
# NBVAL_IGNORE_OUTPUT
import math

import mpmath

from sigma_ref._binomial_sums import _TAIL, _window

Gs = sp.Symbol("G_s", positive=True)
share = (Gs - 1) * (Gs / 2) / sp.sqrt(Gs - 1)  # count x largest weight / smallest w_a (times exp(-L))
assert sp.simplify(share - Gs / 2 * sp.sqrt(Gs - 1)) == 0  # and sqrt(G - 1) < sqrt(G): < G^(3/2) / 2
rows = []
for pr, g in ((0.5, 64), (0.5, 10**6), (0.3, 10**9), (0.01, 5000), (1e-6, 2**40), (1e-12, 10**12)):
    lo, hi = (int(v[0]) for v in _window(np.array([pr]), np.array([1 - pr]), np.array([float(g)])))
    L = math.log(1 / _TAIL) + 1.5 * math.log(g)
    with mpmath.workdps(50):
        mp_p = mpmath.mpf(pr)

        def log_t(j, mp_p=mp_p, g=g):
            return (
                mpmath.loggamma(g + 1)
                - mpmath.loggamma(j + 1)
                - mpmath.loggamma(g - j + 1)
                + j * mpmath.log(mp_p)
                + (g - j) * mpmath.log(1 - mp_p)
            )

        mode = min(max(math.floor((g + 1) * pr), 1), g - 1)
        edges = [log_t(j) - log_t(mode) for j in (lo - 1, hi + 1) if 1 <= j <= g - 1]
        assert all(e <= -L for e in edges), (pr, g, edges)
    sd = math.sqrt(g * pr * (1 - pr))
    rows.append((pr, g, hi - lo + 1, round((hi - lo + 1) / (2 * math.sqrt(2 * L) * sd), 2)))
rows

# %% [markdown]
# ## The fidelity deficit `1 - phi` without subtracting from 1 (`_deficit`, `exact_group_size`)
#
# Near `phi = 1` (`epsilon = 1e-12` needs `G ~ 5e11`) float64 `phi` is flat over millions of `G`:
# `phi(G) - phi(G-1) ~ 1/(2 G^2) ~ 2e-24`, far below an ulp of 1. So `exact_group_size` decides on
# the deficit, computed with relative precision. With `Y = k(G-k)/(G^2 p q)` (so
# `sigma/sqrt(pq) = sqrt(Y)`) and `u = 1 - Y`:
#
# 1. `1 - sqrt(1-u) = u/2 + (u/(1 + sqrt(1-u)))^2 / 2` (an identity), so
#    `1 - phi = E[u]/2 + E[(u/(1+sqrt(1-u)))^2]/2` and the second expectation has nonnegative terms;
# 2. `E[u] = 1/G` exactly (`E[k(G-k)] = G(G-1)pq`, from the moments above);
# 3. `u = d (d - G(1-2p)) / (G^2 p q)` with `d = k - G p`: computed from `d` (carried exactly
#    along the walk) instead of `1 - Y`, it has no cancellation near the mode;
# 4. at `k = 0` and `k = G`, `u = 1` and the weight is `1/2`: those terms give half the silent rate.

# %%
uu = sp.Symbol("u", real=True)
root = sp.sqrt(1 - uu)
assert sp.simplify(1 - root - (uu / 2 + (uu / (1 + root)) ** 2 / 2)) == 0
for value in (sp.Rational(-7, 3), 0, sp.Rational(1, 3), 1):  # numerically too, u in [1 - 1/(4pq), 1]
    assert abs(sp.N((1 - root - uu / 2 - (uu / (1 + root)) ** 2 / 2).subs(uu, value), 40)) < 1e-35
u_of_k = 1 - k * (G - k) / (G**2 * p * q)
E_u = 1 - (G * E_k - E_k2) / (G**2 * p * q)  # E[k(G-k)] = G E[k] - E[k^2]
assert sp.simplify(E_u - 1 / G) == 0
d = k - G * p
assert sp.simplify(u_of_k - d * (d - G * (1 - 2 * p)) / (G**2 * p * q)) == 0
assert u_of_k.subs(k, 0) == 1 and sp.simplify(u_of_k.subs(k, G)) == 1
for g in range(2, 9):  # the whole identity, summed exactly over k, for G = 2..8 at rational p
    for pr in (sp.Rational(1, 10), sp.Rational(1, 2), sp.Rational(5, 7)):
        t_j = [sp.binomial(g, j) * pr**j * (1 - pr) ** (g - j) for j in range(g + 1)]
        u_j = [1 - sp.Rational(j * (g - j), g**2) / (pr * (1 - pr)) for j in range(g + 1)]
        deficit = sum(tj * (1 - sp.sqrt(1 - uj)) for tj, uj in zip(t_j, u_j, strict=True))
        second = sum(tj * (uj / (1 + sp.sqrt(1 - uj))) ** 2 for tj, uj in zip(t_j, u_j, strict=True))
        assert sp.simplify(sum(tj * uj for tj, uj in zip(t_j, u_j, strict=True)) - sp.Rational(1, g)) == 0
        assert abs(sp.N(deficit - (sp.Rational(1, 2 * g) + second / 2), 50)) < sp.Float(1e-45)
sp.simplify(E_u)

# %% [markdown]
# **Window for the deficit.** `0 <= k(G-k) <= G^2/4`, so `Y in [0, 1/(4pq)]`, `|u| <= 1/(4pq)`
# (as `1/(4pq) >= 1`) and each weight `(u/(1+sqrt(1-u)))^2/2 <= u^2/2 <= 1/(32 p^2 q^2)`. Terms left
# out of the window are each below `exp(-L) t_a <= exp(-L)` and fewer than `G`, while the deficit is
# at least `1/(2G)`: the share left out is below `G^2 exp(-L) / (16 p^2 q^2)`. So the deficit's
# window takes `L = log(1/tail) + 2 log G + 2 log(1/(4pq))`, i.e. the expectation's
# `L = log(1/tail) + 1.5 log G` plus `0.5 log G - 2 log(4pq)` (the `extra` of `_window`).
#
# **The lower end of the search.** The second sum is positive (its `k = 0` term alone is
# `(1-p)^G/2 > 0`), so `1 - phi(G) > 1/(2G)`: every `G <= 1/(2 epsilon)` falls short, and
# `exact_group_size` starts its bracket at `floor(1/(2 epsilon))`. At `p = 1/2` the expansion above
# gives `1 - phi = 1/(2G) + 3/(8 G^2) + O(G^-3)`; at `epsilon = 1e-12` that is `1e-12 + 1.5e-24` at
# `G = 5e11` and `1e-12 - 0.5e-24` at `G = 5e11 + 1`: the least `G` is `500000000001`, which the
# oracle returns (in one evaluation: the start is the lower end). **This last step is a check, not
# a proof**: the `O(G^-3)` remainder's constant is not bounded here (the next coefficient of the
# expansion is of order one, which would make it ~`1e-35`, far inside the `0.5e-24` margin, but an
# asymptotic series' remainder needs its own bound, which this notebook does not derive).

# %%
Gd = sp.Symbol("G_d", positive=True)
share_left = Gd * (1 / (32 * p**2 * q**2)) / (1 / (2 * Gd))  # count x largest weight / smallest deficit
assert sp.simplify(share_left - Gd**2 / (16 * p**2 * q**2)) == 0
L_tail = sp.Symbol("L_tail", positive=True)  # log(1/tail)
L_def = L_tail + 2 * sp.log(Gd) + 2 * sp.log(1 / (4 * p * q))
assert sp.simplify(sp.expand_log(share_left * sp.exp(-L_def), force=True) - sp.exp(-L_tail)) == 0
extra = L_def - (L_tail + sp.Rational(3, 2) * sp.log(Gd))
assert sp.simplify(sp.expand_log(extra - (sp.log(Gd) / 2 - 2 * sp.log(4 * p * q)), force=True)) == 0
assert c1.subs(p, sp.Rational(1, 2)) == -sp.Rational(1, 2)  # at p = 1/2: 1 - phi = 1/(2G) + ...
assert c2.subs(p, sp.Rational(1, 2)) == -sp.Rational(3, 8)  # ... + 3/(8 G^2) + O(G^-3)
g0 = 5 * 10**11
for g, expect_short in ((g0, True), (g0 + 1, False)):
    two_terms = sp.Rational(1, 2 * g) + sp.Rational(3, 8 * g**2)
    assert (two_terms > sp.Rational(10**-12)) == expect_short  # epsilon = 1e-12 as the float it is
    assert abs(two_terms - sp.Rational(10**-12)) > 10**10 * sp.Rational(1, g**3)  # margin >> G^-3 (a check)
assert sigma_ref.exact_group_size(0.5, epsilon=1e-12) == g0 + 1
"least G at (1/2, 1e-12): 500000000001"

# %% [markdown]
# ## Small groups, term by term (`_dense_root`, `G <= 16`)
#
# `sum_{k=1}^{G-1} C(G,k) p^k q^(G-k) sqrt(k(G-k)) = q^G sum_k w_k x^k` with `w_k = C(G,k) sqrt(k(G-k))`
# and the odds `x = p/q`, summed by Horner's rule (positive coefficients, `x <= 1` for `p <= 1/2`:
# no cancellation). `(1-p)^G = q^G (1 + c/q)^G` for `q = fl(1-p)` and `c = (1-p) - q`, whose
# first order `1 + G c/q` leaves `binomial(G, 2) (c/q)^2 <= 120 * 2^-104 < 1e-28` (`G <= 16`).

# %%
xx = sp.Symbol("x", positive=True)
for g in range(2, 17):
    w = [sp.binomial(g, j) * sp.sqrt(j * (g - j)) for j in range(g + 1)]
    horner = w[g - 1]
    for j in range(g - 2, 0, -1):
        horner = horner * xx + w[j]
    horner = horner * xx
    dense = sum(w[j] * p**j * q ** (g - j) for j in range(1, g))
    assert sp.cancel(sp.together(q**g * horner.subs(xx, p / q) - dense)) == 0
    assert sp.expand(horner - sum(w[j] * xx**j for j in range(1, g))) == 0
eta = sp.Symbol("eta", positive=True)  # c/q
second = sp.series((1 + eta) ** 16, eta, 0, 3).removeO() - (1 + 16 * eta)
assert second == 120 * eta**2 and float(120 * sp.Rational(2) ** -104) < 1e-28
"Horner form of the small-group sum: G = 2..16"

# %% [markdown]
# ## Tiny `p`: the one-term limit of the fidelity (`_fidelity` below `p = 2**-600`)
#
# With `q = 1 - p` and `t_k = C(G,k) p^k q^(G-k)`, the `k = 1` term of `phi = E[sqrt(k(G-k))] /
# (G sqrt(pq))` is exactly `sqrt(p (G-1)) q^(G - 3/2)`. Every other term relative to it is
# `rho_k = C(G,k)/G (p/q)^(k-1) sqrt(k(G-k)/(G-1))` (and `k = G` contributes 0). Since
# `C(G,k)/G <= G^(k-1)/k!` and `sqrt(k(G-k)/(G-1)) <= sqrt(k) <= k`, `rho_k <= x^(k-1)/(k-1)!`
# with `x = G p / q`, so `sum_{k>=2} rho_k <= e^x - 1 <= (e - 1) x <= 2x` for `x <= 1` (convexity).
# And
# `1 >= q^(G-3/2) >= 1 - (G - 3/2) p >= 1 - x`. So `phi = sqrt(p (G-1)) (1 + d)` with
# `-x <= d <= 2x`, `|d| <= 3 G p` (as `q >= 1/2`). Below `p = 2**-600` with `G <= 2**40`,
# `3 G p < 2**-558`: the one-term form is exact to far below an ulp. (The two inequalities on
# `rho_k` are checked below with exact integers on a grid; the rest is the text's algebra.)

# %%
for g in (2, 3, 5, 17, 100, 1000):
    for k in range(2, min(g, 12) + 1):
        lhs_sq = (sp.binomial(g, k) / g) ** 2 * sp.Rational(k * (g - k), g - 1)  # squares: rational
        rhs_sq = (sp.Integer(g) ** (k - 1) / sp.factorial(k - 1)) ** 2
        assert lhs_sq <= rhs_sq, (g, k)
assert bool(sp.E - 1 < 2)  # e^x - 1 is convex, 0 at 0: below its chord (e - 1) x <= 2 x on [0, 1]
for tiny in (5e-324, 1e-310, 2.0**-601):
    for g in (2, 8, 1000, 2**40):
        with mpmath.workdps(40):
            one_term = mpmath.sqrt(mpmath.mpf(tiny) * (g - 1))
        assert abs(sigma_ref.fidelity(tiny, g) - float(one_term)) <= 2 * 2.0**-52 * float(one_term)
"tiny p: fidelity = sqrt(p (G-1)) to an ulp and a half"
