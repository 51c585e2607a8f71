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
# # 05. The group-size law and the difficulty penalty
#
# * The group-size law `G* = 1/(8 epsilon p(1-p))` is the inversion of the attenuation law:
#   the unique `G` at which `1 - 1/(8 G p(1-p)) = 1 - epsilon`, and every larger `G` keeps
#   the approximate fidelity above `1 - epsilon` (the attenuation increases in `G`).
# * The difficulty penalty: `G*(p)/G*(1/2) = 1/(4 p(1-p))`, exactly `1`, `25/9` and
#   `100/19` at `p = 0.5, 0.1, 0.05`.
# * Because the law inverts an asymptotic expansion, it tends to understate the least `G`
#   whose exact fidelity reaches `1 - epsilon`, most near `p in {0, 1}`. **This is a check at
#   five `p` (`epsilon = 0.05`), not a proof**, and it is not true everywhere: the law equals the
#   exact size where its ceiling absorbs the gap (`epsilon = 0.05`, `p` in 0.46-0.54 but 0.5) and
#   exceeds it at large `epsilon` (`p = 0.01`, `epsilon = 0.9`: 15 against 3). The exact sizes at
#   the five points are verified with 30-digit sums.

# %%
import sympy as sp

import sigma_ref
from sigma_ref import symbolic as S
from sigma_ref.symbolic import epsilon, p, u

# %% [markdown]
# ## Inverting the attenuation law
#
# Over the positive reals, `attenuation(G) = 1 - epsilon` has exactly one solution. With
# `p = u/(1+u)` (`u > 0` the odds) sympy knows `0 < p < 1`, so the derivative of the
# attenuation in `G` is visibly positive.

# %%
Gr = sp.Symbol("G_r", positive=True)  # G as a real variable
solutions = sp.solve(sp.Eq(S.attenuation(Gr, p), 1 - epsilon), Gr)
assert len(solutions) == 1
assert sp.simplify(solutions[0] - S.group_size_law()) == 0
slope = sp.simplify(sp.diff(S.attenuation(Gr, u / (1 + u)), Gr))
assert slope.is_positive
solutions[0], slope

# %% [markdown]
# The integer law is the ceiling. Exact rationals for the seed post's corpus (`epsilon =
# 1/20`) against `sigma_ref.min_group_size` (which computes the ceiling in float64; equal
# here because none of these values lies within float rounding of an integer, except
# `p = 1/2`, whose value `10` is exact in binary too).

# %%
post_corpus = [
    sp.Rational(1, 2),
    sp.Rational(3, 10),
    sp.Rational(15, 100),
    sp.Rational(8, 100),
    sp.Rational(3, 100),
]
closed = [sp.ceiling(S.group_size_law(pr, sp.Rational(1, 20))) for pr in post_corpus]
assert closed == [10, 12, 20, 34, 86]
assert list(sigma_ref.min_group_size([float(pr) for pr in post_corpus])) == closed
[S.group_size_law(pr, sp.Rational(1, 20)) for pr in post_corpus]

# %% [markdown]
# ## The difficulty penalty `1/(4 p(1-p))`

# %%
penalty = sp.simplify(S.group_size_law() / S.group_size_law(sp.Rational(1, 2)))
assert sp.simplify(penalty - S.difficulty_penalty()) == 0
values = {pr: S.difficulty_penalty(pr) for pr in (sp.Rational(1, 2), sp.Rational(1, 10), sp.Rational(1, 20))}
assert values == {
    sp.Rational(1, 2): 1,
    sp.Rational(1, 10): sp.Rational(25, 9),
    sp.Rational(1, 20): sp.Rational(100, 19),
}
assert S.difficulty_penalty(p).subs(p, 1 - p) == S.difficulty_penalty(p)  # symmetric in p <-> 1 - p
values, [float(v) for v in values.values()]

# %% [markdown]
# ## The law understates the need at these five points (a check)
#
# `sigma_ref.exact_group_size` finds the least `G` with exact fidelity `>= 1 - epsilon`.
# Each answer is re-verified independently here: the fidelity as a 30-digit sum of
# `S.fidelity` at `G` reaches `0.95`, and at `G - 1` it does not. That the law is below it is
# checked at these points only (see the list above for where it is not).

# %%
rows = []
for pr in (
    sp.Rational(1, 2),
    sp.Rational(3, 10),
    sp.Rational(1, 10),
    sp.Rational(1, 20),
    sp.Rational(3, 100),
):
    exact = int(sigma_ref.exact_group_size(float(pr)))
    law = int(sp.ceiling(S.group_size_law(pr, sp.Rational(1, 20))))
    assert sp.N(S.fidelity(exact, pr), 30) >= sp.Rational(19, 20)
    assert sp.N(S.fidelity(exact - 1, pr), 30) < sp.Rational(19, 20)
    assert exact > law
    rows.append((float(pr), law, exact, round(exact / law, 3)))
for pr, eps_, relation in (
    (sp.Rational(47, 100), sp.Rational(1, 20), "equal"),
    (sp.Rational(1, 100), sp.Rational(9, 10), "above"),
):
    exact = int(sigma_ref.exact_group_size(float(pr), epsilon=float(eps_)))
    law = int(sp.ceiling(S.group_size_law(pr, eps_)))
    assert (exact == law) if relation == "equal" else (law > exact), (pr, eps_, law, exact)
rows

# %% [markdown]
# The relative shortfall grows towards the edges: the next term of the expansion
# (`04_expectations`) scales like `1/(p(1-p))^2`, the first like `1/(p(1-p))`.

# %%
ratios = [r[3] for r in rows]
assert ratios == sorted(ratios)
ratios
