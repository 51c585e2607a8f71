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
# # 10. The subsampled silent rate: an unbiased estimate from a rollout log
#
# A log holds `n` rollouts of a prompt, `k` of them correct (`k ~ Binomial(n, p)`). The
# audit wants the silent-group rate at a group size `G <= n`, `p^G + (1-p)^G`.
#
# * The plug-in `p_hat^G + (1-p_hat)^G` with `p_hat = k/n` is **biased** (upwards: by
#   Jensen, `x -> x^G` is convex); at `G = 2` the bias is exactly `2p(1-p)/n`.
# * The without-replacement estimate `S(n, k, G) = (C(k,G) + C(n-k,G)) / C(n,G)` — the share
#   of the `C(n,G)` groups of `G` one can draw from the `n` logged rollouts that are silent
#   — is **unbiased**: `E[S] = p^G + (1-p)^G` for every `p`, `n >= G`.
# * It is the conditional expectation of "a group of `G` of the logged rollouts is silent"
#   given `k` (the rollouts are exchangeable), so among estimators built from the log's
#   groups it has the least variance (Rao-Blackwell); at `n = G` it is the observed
#   indicator itself.
#
# `sigma_ref.rollouts.subsampled_silent_rate` implements `S`; the audit reports it beside the
# plug-in and the observed fraction of the log's own groups.

# %%
from fractions import Fraction
from math import comb

import numpy as np
import sympy as sp

from sigma_ref.rollouts import subsampled_silent_rate

p = sp.Symbol("p", positive=True)
n, k, G = sp.symbols("n k G", integer=True, nonnegative=True)


def S(n_, k_, G_):
    """The estimator, exactly: (C(k,G) + C(n-k,G)) / C(n,G)."""
    return (sp.binomial(k_, G_) + sp.binomial(n_ - k_, G_)) / sp.binomial(n_, G_)


def expectation(f, n_):
    """E over k ~ Binomial(n, p) of f(k), as a polynomial in p."""
    return sp.expand(sum(sp.binomial(n_, kk) * p**kk * (1 - p) ** (n_ - kk) * f(kk) for kk in range(n_ + 1)))


# %% [markdown]
# ## Unbiased: every `n <= 10`, every `G <= n`, symbolic `p`

# %%
for n_ in range(1, 11):
    for G_ in range(1, n_ + 1):
        bias = expectation(lambda kk, n_=n_, G_=G_: S(n_, kk, G_), n_) - (p**G_ + (1 - p) ** G_)
        assert sp.expand(bias) == 0, (n_, G_)
"checked n = 1..10, G = 1..n"

# %% [markdown]
# ## The general argument, with its key step proved for symbolic `n`, `k`, `G`
#
# `C(k,G)/C(n,G)` is the probability that a uniformly drawn `G`-subset of the `n` rollouts
# is all correct, given that `k` are. Averaging over `k` gives the probability that `G`
# rollouts, drawn independently of the outcomes, are all correct: `p^G`, since the outcomes
# are i.i.d. Bernoulli(`p`). The same for all wrong gives `(1-p)^G`. In algebra:
# `C(n,k) C(k,G) = C(n,G) C(n-G, k-G)` (choose the `G` first), so
# `sum_k C(n,k) p^k (1-p)^(n-k) C(k,G)/C(n,G) = p^G sum_j C(n-G, j) p^j (1-p)^(n-G-j) = p^G`
# by the binomial theorem (`j = k - G`).

# %%
lhs = sp.binomial(n, k) * sp.binomial(k, G)
rhs = sp.binomial(n, G) * sp.binomial(n - G, k - G)
assert sp.simplify(sp.combsimp((lhs / rhs).rewrite(sp.factorial))) == 1
# the binomial theorem sum_j C(m, j) p^j (1-p)^(m-j) = 1 (sympy returns it only under a
# convergence condition for symbolic m, so it is checked for each m = n - G used above)
for m in range(0, 12):
    assert sp.expand(sum(sp.binomial(m, jj) * p**jj * (1 - p) ** (m - jj) for jj in range(m + 1))) == 1
lhs, rhs

# %% [markdown]
# ## The plug-in is biased

# %%
n_ = sp.Symbol("n", positive=True, integer=True)
p_hat_moment2 = p**2 + p * (1 - p) / n_  # E[(k/n)^2] for k ~ Bin(n, p)
plug_in_G2 = p_hat_moment2 + (1 - 2 * p + p_hat_moment2)  # E[p_hat^2 + (1 - p_hat)^2]
assert sp.simplify(plug_in_G2 - (p**2 + (1 - p) ** 2) - 2 * p * (1 - p) / n_) == 0
for n_small in range(2, 9):  # the second moment used above, checked for explicit n
    assert (
        sp.expand(
            expectation(lambda kk, n_small=n_small: sp.Rational(kk, n_small) ** 2, n_small)
            - p_hat_moment2.subs(n_, n_small)
        )
        == 0
    )
bias8 = sp.factor(
    expectation(lambda kk: sp.Rational(kk, 16) ** 8 + (1 - sp.Rational(kk, 16)) ** 8, 16)
    - (p**8 + (1 - p) ** 8)
)
assert all(bias8.subs(p, sp.Rational(i, 10)) > 0 for i in range(1, 10))
"plug-in bias at n = 16, G = 8, p = 0.1: " + str(sp.N(bias8.subs(p, sp.Rational(1, 10)), 4))

# %% [markdown]
# ## At `n = G` it is the observed indicator; it averages the observed groups

# %%
for G_ in range(1, 9):
    assert [S(G_, kk, G_) for kk in range(G_ + 1)] == [1] + [0] * (G_ - 1) + [1] if G_ > 1 else [1, 1]
# n = 4 rollouts logged as two groups of 2: S is the mean over all C(4,2) = 6 pairs,
# the two logged pairs among them; for every outcome vector, E[indicator | k] = S.
for outcome in np.ndindex(2, 2, 2, 2):
    y = np.array(outcome)
    pairs = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    silent = [y[a] == y[b] for a, b in pairs]
    assert Fraction(sum(silent), len(pairs)) == S(4, int(y.sum()), 2)
"ok"

# %% [markdown]
# ## The oracle's implementation equals the exact value

# %%
rows = [(nn, kk, GG) for nn in range(1, 41) for kk in range(nn + 1) for GG in range(1, nn + 1)]
nn, kk, GG = (np.array(c) for c in zip(*rows, strict=True))
got = np.concatenate([subsampled_silent_rate(nn[GG == g], kk[GG == g], int(g)) for g in range(1, 41)])
want = np.concatenate(
    [
        [
            float(Fraction(comb(int(b), g) + comb(int(a - b), g), comb(int(a), g)))
            for a, b in zip(nn[GG == g], kk[GG == g], strict=True)
        ]
        for g in range(1, 41)
    ]
)
assert np.allclose(got, want, rtol=1e-13, atol=0)
assert np.isnan(subsampled_silent_rate([3], [1], 4)).all()
f"{len(rows)} (n, k, G) cells, max relative error {np.max(np.abs(got - want)[want > 0] / want[want > 0]):.1e}"
