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
# # 14. What a rollout log says about other group sizes (`sigma_ref.corpus_prior`)
#
# A prompt has `k` correct of `n` logged rollouts, `k ~ Binomial(n, p)`. For a statistic `h(j)` of
# a group of `G` (`j ~ Binomial(G, p)` correct), its value is `f(p) = E[h(j)] = sum_j h(j) C(G,j)
# p^j q^(G-j)`, `q = 1 - p`. The audit needs `mean_i f(p_i)` for the silent indicator and for
# GRPO's update size `sqrt(j(G-j))/G`.
#
# 1. **`G <= n`: unbiased.** `U = sum_j h(j) C(k,j) C(n-k,G-j) / C(n,G)` (the mean of `h` over the
#    `C(n,G)` subsets of the logged rollouts) has `E[U] = f(p)`: `G` rollouts drawn without
#    replacement from `n` i.i.d. Bernoulli(`p`) are themselves `G` i.i.d. Bernoulli(`p`).
#    Proved below as a polynomial identity in `p` with `h` symbolic, for every `G <= n <= 6`.
# 2. **`G > n`: what has no unbiased estimate.** Any estimator `T(k)` has `E[T] = sum_k T(k)
#    C(n,k) p^k q^(n-k)`, a polynomial of degree `<= n`. So `f` has an unbiased estimator only if
#    its degree is `<= n`. `p^G + q^G` has degree `G` for even `G` and `G - 1` for odd `G`: none
#    exists for `G >= n + 2`, nor at `G = n + 1` even; at `G = n + 1` odd one does (the audit does
#    not use that exception: it switches to the model at every `G > n`).
# 3. **Empirical Bayes.** With `p ~ Beta(a, b)`, the posterior given `k` is `Beta(a + k, b + n - k)`
#    and `E[p^s q^(m-s)] = B(alpha + s, beta + m - s) / B(alpha, beta)`, a ratio of rising
#    factorials (`corpus_prior._beta_moments`), so `E[f | k] = sum_j h(j) C(G,j) B(alpha+j,
#    beta+G-j)/B(alpha,beta)` and `E[f^2 | k] = sum_s c_s B(alpha+s, beta+2G-s)/B(alpha,beta)`
#    with `c = (h C(G,.)) * (h C(G,.))` (a convolution: `f^2` is the expectation over two
#    independent groups). Checked below against sympy integrals over the Beta density.
# 4. **The mixture of posteriors** `mean_i Beta(a + k_i, b + n - k_i)` equals the prior in
#    expectation over `k` (Bayes: `sum_k P(k) post(p | k) = prior(p)`), proved below for `n <= 4`.
#    So when the pass rates follow the fitted Beta, the corpus mean of posterior means is unbiased
#    and the mixture's quantiles estimate the corpus's. Otherwise both carry the Beta's misfit.

# %%
import math

import numpy as np
import sympy as sp

from sigma_ref import corpus_prior as cp

p = sp.Symbol("p", positive=True)
q = 1 - p

# %% [markdown]
# ## 1. The subsampled estimate is unbiased for every statistic `h`

# %%
for n in range(1, 7):
    for G in range(1, n + 1):
        h = sp.symbols(f"h0:{G + 1}")
        target = sum(h[j] * sp.binomial(G, j) * p**j * q ** (G - j) for j in range(G + 1))
        estimate = sum(
            sp.binomial(n, k)
            * p**k
            * q ** (n - k)
            * sum(h[j] * sp.binomial(k, j) * sp.binomial(n - k, G - j) for j in range(G + 1))
            / sp.binomial(n, G)
            for k in range(n + 1)
        )
        assert sp.expand(estimate - target) == 0, (n, G)
# the code: cp.unbiased with h = silent and signal equals the formula in exact rationals
for n, k, G in ((6, 2, 3), (8, 5, 8), (5, 0, 2)):
    for stat in (cp.silent, cp.signal):
        hv = stat(np.arange(G + 1, dtype=float), G)
        exact = sum(
            float(hv[j]) * math.comb(k, j) * math.comb(n - k, G - j) for j in range(G + 1)
        ) / math.comb(n, G)
        assert math.isclose(float(cp.unbiased([n], [k], G, stat)[0]), exact, rel_tol=1e-13)
"unbiased for every h, G <= n <= 6; the code agrees"

# %% [markdown]
# ## 2. The degree of the silent rate

# %%
for G in range(2, 12):
    degree = sp.Poly(sp.expand(p**G + q**G), p).degree()
    assert degree == (G if G % 2 == 0 else G - 1), (G, degree)
"deg(p^G + q^G) = G (even G), G - 1 (odd G)"

# %% [markdown]
# ## 3. Posterior moments against integrals over the Beta density

# %%
for alpha, beta in ((sp.Rational(3, 2), sp.Rational(5, 2)), (sp.Rational(7, 10), sp.Integer(3))):
    density = p ** (alpha - 1) * q ** (beta - 1) / sp.beta(alpha, beta)
    prior = cp.BetaPrior(float(alpha), float(beta), 1)  # n = 0 rollouts: the posterior is the prior
    for G in (2, 3, 5):
        for stat in (cp.silent, cp.signal):
            hv = [
                sp.nsimplify(float(v)) if stat is cp.silent else sp.sqrt(j * (G - j)) / G
                for j, v in enumerate(stat(np.arange(G + 1, dtype=float), G))
            ]
            f = sum(hv[j] * sp.binomial(G, j) * p**j * q ** (G - j) for j in range(G + 1))
            first = float(sp.Integral(f * density, (p, 0, 1)).evalf(30))
            second = float(sp.Integral(f**2 * density, (p, 0, 1)).evalf(30))
            # one prompt with n = 1, k = 0 and the prior shifted back: posterior Beta(alpha, beta)
            shifted = cp.BetaPrior(float(alpha), float(beta) - 1, 1)
            est, sd = cp.posterior([1], [0], G, stat, shifted)
            assert math.isclose(float(est[0]), first, rel_tol=1e-12), (alpha, beta, G, stat.__name__)
            assert math.isclose(sd**2, second - first**2, rel_tol=1e-9, abs_tol=1e-15), (G, stat.__name__)
    root = float(sp.Integral(sp.sqrt(p * q) * density, (p, 0, 1)).evalf(30))
    assert math.isclose(
        float(cp.posterior_root([1], [0], cp.BetaPrior(float(alpha), float(beta) - 1, 1))[0]),
        root,
        rel_tol=1e-12,
    )
"posterior mean, second moment and E[sqrt(pq)] = the Beta integrals"

# %% [markdown]
# ## 4. The mixture of posteriors is the prior in expectation

# %%
a, b = sp.Rational(3, 5), sp.Rational(6, 5)
prior_density = p ** (a - 1) * q ** (b - 1) / sp.beta(a, b)
for n in range(1, 5):
    mixture = 0
    for k in range(n + 1):
        marginal = sp.binomial(n, k) * sp.beta(a + k, b + n - k) / sp.beta(a, b)  # beta-binomial P(k)
        posterior = p ** (a + k - 1) * q ** (b + n - k - 1) / sp.beta(a + k, b + n - k)
        mixture += marginal * posterior
    assert sp.simplify(sp.expand_func(mixture - prior_density)) == 0, n
# and the fitted prior of a log drawn from a Beta recovers it (20,000 prompts, n = 16)
rng = np.random.default_rng(14)
truth = rng.beta(0.6, 1.2, 20_000)
fitted = cp.fit_prior(np.full(truth.size, 16), rng.binomial(16, truth))
assert abs(fitted.a - 0.6) < 0.05 and abs(fitted.b - 1.2) < 0.1, fitted
"mixture = prior in expectation; Beta(0.6, 1.2) recovered: " + f"Beta({fitted.a:.3f}, {fitted.b:.3f})"
