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
# # 07. Silent groups and DAPO's dynamic sampling
#
# * `sigma = 0` iff `k in {0, G}`: DAPO's keep rule `0 < k < G` is exactly `sigma > 0`.
# * The silent-group rate is `p^G + (1-p)^G`; the keep probability `1 - p^G - (1-p)^G`.
# * Redrawing until a group is kept takes a geometric number of draws with mean
#   `1/(1 - p^G - (1-p)^G)` per kept group; `(p^G + (1-p)^G)/(1 - p^G - (1-p)^G)` of them
#   are generated and thrown away.
# * DAPO does not change the expected update per *drawn* group: `E[sigma | kept] * P(kept)
#   = E[sigma]`; it changes which groups fill the batch, not the compute per unit of signal.

# %%
import itertools
from fractions import Fraction

import numpy as np
import sympy as sp

import sigma_ref
from sigma_ref import symbolic as S
from sigma_ref.symbolic import LIVE, G, k, p

# %% [markdown]
# ## The keep rule is `sigma > 0`

# %%
assert set(sp.solve(sp.Eq(S.sigma() ** 2, 0), k)) == {0, G}
assert S.sigma().subs(LIVE).is_positive
assert S.sigma(0) == 0 and S.sigma(G, G) == 0
for g in range(2, 9):
    outcomes = np.array(list(itertools.product([0.0, 1.0], repeat=g)))
    counts = outcomes.sum(axis=1)
    keep = sigma_ref.dapo_keep_mask(outcomes)
    assert (keep == ((counts > 0) & (counts < g))[:, None]).all()
    assert ((sigma_ref.group_sigma(counts.astype(int), g) > 0) == keep[:, 0]).all()
"dapo_keep_mask == (0 < k < G) == (sigma > 0) on all 2^G outcomes, G = 2..8"

# %% [markdown]
# ## Silent-group rate and keep probability
#
# `P(silent) = P(k = 0) + P(k = G)`; `P(keep)` is the sum of the other binomial terms.
# Checked for `G = 2..10` as polynomials in `p`, and by exact enumeration of all `2^G`
# reward vectors through `sigma_ref.dapo_keep_mask` at `p = 1/20` with `fractions.Fraction`.

# %%
assert sp.simplify(S.binomial_pmf(0) + S.binomial_pmf(G) - S.silent_group_rate()) == 0
for g in range(2, 11):
    kept = sum(S.binomial_pmf(j, g) for j in range(1, g))
    assert sp.expand(kept - S.keep_probability(p, g)) == 0
p_frac = Fraction(1, 20)
for g in range(2, 11):
    outcomes = np.array(list(itertools.product([0, 1], repeat=g)), dtype=np.float64)
    keep = sigma_ref.dapo_keep_mask(outcomes)[:, 0]
    ones = outcomes.sum(axis=1).astype(int)
    total = sum(
        (p_frac**c * (1 - p_frac) ** (g - c) for c, kept in zip(ones, keep, strict=True) if kept), Fraction(0)
    )
    assert total == Fraction(str(S.keep_probability(sp.Rational(1, 20), g)))
S.silent_group_rate(), S.keep_probability()

# %% [markdown]
# ## Draws per kept group
#
# Each draw is kept independently with probability `a = P(keep)`; the number of draws
# until the first kept group is geometric. Writing the silent rate as `v/(1+v)` (`v > 0`,
# any rate in `(0, 1)`), `sum_{n>=1} n (1-a)^(n-1) a = 1/a`:

# %%
n = sp.Symbol("n", integer=True, positive=True)
v = sp.Symbol("v", positive=True)
silent = v / (1 + v)
mean_draws = sp.summation(n * silent ** (n - 1) * (1 - silent), (n, 1, sp.oo))
assert sp.simplify(mean_draws - 1 / (1 - silent)) == 0
assert sp.simplify(S.expected_draws_per_kept_group() - 1 / (1 - S.silent_group_rate())) == 0
wasted = sp.simplify(S.expected_draws_per_kept_group() - 1)
assert sp.simplify(wasted - S.silent_group_rate() / S.keep_probability()) == 0
S.expected_draws_per_kept_group()

# %% [markdown]
# The seed post's example, `p = 0.05`, `G = 8`, in exact rationals: 66.34% of groups are
# silent (the post's `(0.95)^8 ~ 66%` leaves out the all-correct term `0.05^8`,
# `3.9e-11`), and DAPO draws 2.97 groups per kept group.

# %%
pr, g = sp.Rational(1, 20), 8
rate = S.silent_group_rate(pr, g)
draws = S.expected_draws_per_kept_group(pr, g)
assert rate - sp.Rational(19, 20) ** 8 == sp.Rational(1, 20) ** 8
assert sp.Rational(6634, 10**4) < rate < sp.Rational(6635, 10**4)
assert sp.Rational(297, 100) < draws < sp.Rational(298, 100)
assert np.isclose(sigma_ref.silent_group_rate(0.05, 8), float(rate), rtol=1e-15, atol=0)
rate, float(rate), float(draws)

# %% [markdown]
# ## DAPO and the expected update
#
# Silent groups have `sigma = 0`, so `E[sigma] = P(keep) E[sigma | keep]`: per kept group
# the expected update is `E[sigma]/P(keep)`, but a kept group costs `1/P(keep)` draws, so
# the expected update per drawn group stays `E[sigma]`. The one fact this rests on, proved
# below for symbolic `G`, is `sigma(0, G) = sigma(G, G) = 0` (the dropped groups carry no update);
# the rest is the definition of a conditional mean. The loop over `G = 2..8` only re-does that
# algebra on finite sums (an identity by construction, not a test of the oracle).

# %%
assert S.sigma(0, G) == 0 and S.sigma(G, G) == 0  # symbolic G: silent groups have sigma = 0
for g in range(2, 9):
    conditional = sum(S.binomial_pmf(j, g) * S.sigma(j, g) for j in range(1, g)) / S.keep_probability(p, g)
    per_draw = conditional / S.expected_draws_per_kept_group(p, g)
    assert sp.simplify(per_draw - S.expected_sigma(g)) == 0
"ok"
