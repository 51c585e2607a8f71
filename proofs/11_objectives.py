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
# # 11. The per-token gradient of GRPO-family objectives at any ratio
#
# A policy loss is `L = sum_it w_it ell_it` (weights `w_it` from the aggregation mode,
# `proofs/08_aggregation`). Its parameter gradient is `sum_it (dL/dlogp_it) grad log pi(y_it)`,
# so one number per token, `dL/dlogp_it`, says everything; `sigma_ref.objectives.loss_gradient`
# states it. This notebook derives it, term by term, with sympy differentiating the surrogate
# exactly as written (what is differentiated: `logp_it = log pi_theta(y_it)`; what is a
# constant: `old_logp`, `ref_logp`, `rollout_logp`, the advantages, and every `sg(.)`):
#
# * PPO clip, `r = exp(logp - old)`, `ell = -min(r A, clip(r, 1-el, 1+eh) A)`:
#   `dL/dlogp = -w A r` where the clip is inactive for A's sign (`A > 0`: `r <= 1+eh`;
#   `A < 0`: `r >= 1-el`), else 0;
# * dual clip `c > 1` (A < 0 only), `ell = -max(min(...), c A)`: also 0 where `r > c`;
# * GSPO, `s_i = exp(mean_t log r_it)`, `ell_it = -min(s_i A, clip(s_i) A)` on every token:
#   `dL/dlogp_it = -(sum_t' w_it') A s_i / |y_i|`, which is `-w_it A s_i` for row-constant `w`,
#   where `s_i` is inside the clip for A's sign, and 0 on the whole row where it is clipped;
#   GSPO-token (`s_it = sg(s_i) pi_it / sg(pi_it)`, verl's form): `-w_it rho_it A_it s_i`, which
#   parts from the sequence form when weights or advantages vary along a response;
# * CISPO, `ell = -sg(clip(r, lo, hi)) A logp`: `-w clip(r, lo, hi) A` (never 0);
# * rollout importance weights `rho` (TIS/MIS; per token, per sequence, or the sequence's
#   geometric mean), `rho * ell`: `rho` times the above;
# * KL in the loss, `beta k(logp - ref)`: `beta w k'`, with k1: 1, k2: `delta`, k3: `1 - exp(-delta)`,
#   and the importance-weighted `r k3` (TRL's default): `r delta`;
#
# and a theorem on the KL estimators' placement (section 5).

# %%
import math

import sympy as sp
import torch

from sigma_ref import objectives as O

ell, old, A = sp.symbols("ell old A", real=True)
r = sp.exp(ell - old)

# %% [markdown]
# ## 1. PPO clip and dual clip
#
# The surrogate exactly as trainers write it (`torch.min`/`torch.clamp` are `Min`/`Max`), with
# asymmetric `eps_low = 1/5`, `eps_high = 7/25` (DAPO's clip-higher) and dual clip `c = 3`
# (verl's `clip_ratio_c`). On each region the surrogate *is* one of its branches, whose
# derivative sympy gives exactly: the unclipped branch `r A` has `d(rA)/dlogp = A r`; the
# clipped branches `(1 + eh) A`, `(1 - el) A` and `c A` do not depend on `logp` (gradient 0).
# **What is proved and what is checked.** The branch derivatives are proved (symbolic, below).
# Which branch the surrogate equals on each region is *checked* at twelve sample ratios per sign
# of `A` (at least one inside every region, none on a boundary), not proved over the regions;
# so is the oracle's agreement with it.

# %%
lo, hi, c = 1 - sp.Rational(1, 5), 1 + sp.Rational(7, 25), sp.Integer(3)
clip = sp.Max(sp.Min(r, hi), lo)
surrogate = sp.Min(r * A, clip * A)
dual = sp.Piecewise((sp.Max(surrogate, c * A), A < 0), (surrogate, True))  # verl: torch.where(A < 0, ...)
assert sp.diff(r * A, ell) == A * r
assert all(sp.diff(branch * A, ell) == 0 for branch in (hi, lo, c))


def region_gradient(f, a, ratio):
    """d f / d logp at logp = old + log(ratio), A = a: exact (Heaviside of rationals)."""
    value = sp.diff(f, ell).subs({A: a}).subs(ell, old + sp.log(ratio))
    return sp.simplify(value.rewrite(sp.Piecewise))


def predicted(a, ratio, dual_clip=None):
    """The oracle's rule: A r where the clip is inactive for A's sign, else 0."""
    inside = ratio <= hi if a > 0 else ratio >= lo
    if dual_clip is not None and a < 0 and ratio > dual_clip:
        inside = False
    return a * ratio if inside else 0


ratios = [sp.Rational(n, 20) for n in (1, 10, 15, 17, 20, 24, 26, 30, 40, 59, 61, 90)]  # no boundary
table = []
for a in (sp.Rational(3, 2), sp.Integer(-1)):
    for q in ratios:
        got_plain = region_gradient(surrogate, a, q)
        got_dual = region_gradient(dual, a, q)
        assert got_plain == predicted(a, q), (a, q, got_plain)
        assert got_dual == predicted(a, q, c), (a, q, got_dual)
        table.append((a, q, got_plain, got_dual))
        if a > 0:  # dual clip applied to A > 0 as well: c A beats every branch, the gradient vanishes
            assert region_gradient(sp.Max(surrogate, c * A), a, q) == 0
table[:6]

# %% [markdown]
# Reading the table: for `A > 0` the gradient is `A r` up to `r = 1 + eh` and 0 above (the
# clip stops pushing a token whose probability already rose); below `1 - el` it stays `A r`
# (PPO's min keeps the pessimistic, unclipped branch). For `A < 0` it is 0 below `1 - el` and
# `A r` above, *unbounded* in `r`: dual clip caps the loss at `-c A` for `r > c`, where the
# gradient is 0 again. Dual clip applied to `A > 0` as well is a bug, not a no-op:
# `max(min(...), c A)` with `c A > (1 + eh) A >= min(...)` is the constant `c A`, so every
# positive-advantage token loses its gradient (checked above); verl applies it under
# `torch.where(advantages < 0, ...)`.
#
# The oracle on the same grid (float64):

# %%
obj = O.Objective("ppo", eps_low=0.2, eps_high=0.28, dual_clip=3.0, aggregation="token-sum")
for a, q, _, got_dual in table:
    g = O.loss_gradient(
        obj,
        torch.tensor([[math.log(q)]], dtype=torch.float64),
        torch.zeros(1, 1),
        torch.tensor([float(a)]),
        torch.ones(1, 1),
    )
    assert math.isclose(-g.item(), float(got_dual), rel_tol=1e-14), (a, q)
"oracle = sympy at sample ratios in every region (a check), A > 0 and A < 0, with and without dual clip"

# %% [markdown]
# ## 2. GSPO: the sequence ratio
#
# `s_i = exp((1/|y_i|) sum_t (logp_it - old_it))`, clipped per sequence. Two ways to write the
# loss, both differentiated here for a batch of two sequences of lengths 3 and 1:
#
# * TRL 1.16.0 (`importance_sampling_level="sequence"`): the sequence surrogate `f_i = s_i A_i`
#   (inside the clip) broadcast over the row's tokens, then aggregated: `L = -sum_it w_it f_i`;
# * verl 0.9.1 (`compute_policy_loss_gspo`): the token form `s_it = sg(s_i) exp(logp_it -
#   sg(logp_it))`, `L = -sum_it w_it s_it A_i` (`sg(x)` is a symbol replaced by `x` after
#   differentiating).
#
# Both give `dL/dlogp_it = -(sum_t' w_it') A_i s_i / |y_i|` (TRL) and `-w_it A_i s_i` (verl),
# equal whenever `w` is constant along a row, which holds for every aggregation mode.

# %%
L1 = sp.symbols("l0:3", real=True)
O1 = sp.symbols("o0:3", real=True)
l2, o2 = sp.symbols("l3 o3", real=True)
A1, A2 = sp.symbols("A1 A2", real=True)
s1 = sp.exp(sum(a - b for a, b in zip(L1, O1, strict=True)) / 3)
s2 = sp.exp(l2 - o2)
w1, w2 = sp.symbols("w1 w2", positive=True)  # the row-constant weight of each sequence's tokens
trl_loss = -(3 * w1 * s1 * A1 + 1 * w2 * s2 * A2)
S1, Sg = sp.Symbol("S1", positive=True), sp.symbols("g0:3", real=True)
verl_loss = -sum(w1 * S1 * sp.exp(L1[t] - Sg[t]) * A1 for t in range(3)) - w2 * s2 * A2
for t in range(3):
    d_trl = sp.diff(trl_loss, L1[t])
    d_verl = sp.diff(verl_loss, L1[t]).subs({S1: s1, **{Sg[u]: L1[u] for u in range(3)}})
    assert sp.simplify(d_trl - (-w1 * A1 * s1)) == 0
    assert sp.simplify(d_verl - d_trl) == 0
sp.diff(trl_loss, L1[0])

# %% [markdown]
# **Why token-summed aggregation weighs sequences by length.** The sequence objective
# `J_i = s_i A_i` has `grad J_i = A_i s_i mean_t grad log pi(y_it)`. Summing the per-token
# gradient over the row: `sum_t dL/dlogp_it = -(sum_t w_it) A_i s_i`, i.e. the loss is
# `-sum_i (sum_t w_it) J_i`. With `seq-mean-token-mean` (the GSPO paper) `sum_t w_it = 1/N_seq`:
# every sequence counts once. With `token-mean` `sum_t w_it = |y_i|/N_tok`: a sequence of 3
# tokens counts 3 times as much as one of 1 token, for the same `J_i`.

# %%
N_seq, N_tok = 2, 4
weights = {
    "seq-mean-token-mean": {w1: sp.Rational(1, N_seq * 3), w2: sp.Rational(1, N_seq * 1)},
    "token-mean": {w1: sp.Rational(1, N_tok), w2: sp.Rational(1, N_tok)},
}
per_sequence = {}
for mode, sub in weights.items():
    row1 = sum(sp.diff(trl_loss, L1[t]) for t in range(3)).subs(sub)
    row2 = sp.diff(trl_loss, l2).subs(sub)
    per_sequence[mode] = (sp.simplify(row1 / (-A1 * s1)), sp.simplify(row2 / (-A2 * s2)))
assert per_sequence["seq-mean-token-mean"] == (sp.Rational(1, 2), sp.Rational(1, 2))
assert per_sequence["token-mean"] == (sp.Rational(3, 4), sp.Rational(1, 4))
per_sequence

# %% [markdown]
# The oracle: with the clip inactive the per-token gradient is `-w_it A_i s_i` for every mode.

# %%
mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
logp = torch.tensor([[-0.5, -1.0, -0.2], [-0.7, 0.0, 0.0]], dtype=torch.float64)
oldp = torch.tensor([[-0.6, -0.9, -0.25], [-0.65, 0.0, 0.0]], dtype=torch.float64)
adv = torch.tensor([1.5, -0.5], dtype=torch.float64)
values = {L1[0]: -0.5, L1[1]: -1.0, L1[2]: -0.2, O1[0]: -0.6, O1[1]: -0.9, O1[2]: -0.25}
values.update({l2: -0.7, o2: -0.65, A1: 1.5, A2: -0.5})
for mode, sub in weights.items():
    g = O.loss_gradient(O.Objective("gspo", eps_low=0.5, aggregation=mode), logp, oldp, adv, mask)
    expected = [float(sp.diff(trl_loss, x).subs(sub).subs(values)) for x in (*L1, l2)]
    got = [g[0, 0].item(), g[0, 1].item(), g[0, 2].item(), g[1, 0].item()]
    assert all(math.isclose(a, b, rel_tol=1e-13) for a, b in zip(got, expected, strict=True)), mode
"GSPO: oracle = sympy for seq-mean-token-mean and token-mean"

# %% [markdown]
# **The clipped branch.** Outside the clip the sequence surrogate is
# `f_i = min(s_i A_i, clip(s_i, 1 - el, 1 + eh) A_i)` (TRL: `torch.min(coef_1 * A, torch.clamp(coef_1,
# ...) * A)`, verl: `torch.maximum(-A s_it, -A torch.clamp(s_it, ...))` on the token form). sympy
# differentiates both, `Min`/`Max` as written, with `el = 1/5`, `eh = 7/25`, at sequence ratios
# `s_1 = q` on every side of the clip (three equal log-ratios `log q`, so `s_1 = q` exactly) and both
# signs of `A_1`. The statement: `dL/dlogp_1t = -w_1 A_1 s_1` where the clip is inactive for A's sign
# (`A > 0`: `s <= 1 + eh`; `A < 0`: `s >= 1 - el`) and **0** where it is active, for every token of
# the row at once (the whole sequence leaves the update); PPO's pessimistic min keeps the unclipped
# branch on the other side (`A > 0` below `1 - el`, `A < 0` above `1 + eh`).

# %%
g_lo, g_hi = 1 - sp.Rational(1, 5), 1 + sp.Rational(7, 25)


def seq_surrogate(ratio, a):
    return sp.Min(ratio * a, sp.Max(sp.Min(ratio, g_hi), g_lo) * a)


trl_clipped = -(3 * w1 * seq_surrogate(s1, A1) + w2 * seq_surrogate(s2, A2))
verl_clipped = -sum(
    w1 * seq_surrogate(S1 * sp.exp(L1[t] - Sg[t]), A1) for t in range(3)
) - w2 * seq_surrogate(s2, A2)
second = {l2: 0, o2: 0, A2: 1}  # the other sequence: ratio 1, inside
clipped_table = []
for a in (sp.Rational(3, 2), sp.Integer(-1)):
    for q in (sp.Rational(1, 2), sp.Rational(9, 10), sp.Rational(6, 5), sp.Rational(3, 2), sp.Integer(3)):
        at = {**{L1[t]: sp.log(q) for t in range(3)}, **{O1[t]: 0 for t in range(3)}, A1: a, **second}
        inside = q <= g_hi if a > 0 else q >= g_lo
        want = -w1 * a * q if inside else 0
        for t in range(3):
            d_trl = sp.diff(trl_clipped, L1[t]).subs(at)
            d_verl = sp.diff(verl_clipped, L1[t]).subs({S1: s1, **{Sg[u]: L1[u] for u in range(3)}}).subs(at)
            assert sp.simplify(d_trl.rewrite(sp.Piecewise) - want) == 0, (a, q, d_trl)
            assert sp.simplify(d_verl.rewrite(sp.Piecewise) - want) == 0, (a, q, d_verl)
        clipped_table.append((a, q, "clip inactive" if inside else "clipped: 0", want))
        obj = O.Objective("gspo", eps_low=0.2, eps_high=0.28, aggregation="seq-mean-token-mean")
        g = O.loss_gradient(
            obj,
            torch.tensor([[math.log(q)] * 3, [0.0, 0.0, 0.0]], dtype=torch.float64),
            torch.zeros(2, 3, dtype=torch.float64),
            torch.tensor([float(a), 1.0], dtype=torch.float64),
            mask,
        )
        oracle_want = float(want.subs({w1: sp.Rational(1, 6)})) if inside else 0.0  # w_1t = 1/(N_seq |y_1|)
        assert all(math.isclose(g[0, t].item(), oracle_want, rel_tol=1e-14, abs_tol=0) for t in range(3))
clipped_table

# %% [markdown]
# **GSPO-token: where the two forms part.** Above, the advantage and the weight are one number per
# row. The GSPO paper also defines GSPO-token, `s_it = sg(s_i) pi_it / sg(pi_it)`, the form verl
# 0.9.1's `compute_policy_loss_gspo` writes (TRL 1.16.0 and OpenRLHF write the sequence form), so
# that a token-level advantage `A_it` or a rollout weight `rho_it` can vary along a response. With
# per-token `c_t = w_1t rho_1t A_1t` (symbols) on a row of three tokens, sympy differentiates both:
#
# * sequence form (`oracle kind="gspo"`, TRL): `L = -sum_t c_t s_1`, so `dL/dlogp_1t =
#   -(s_1 / |y_1|) sum_t' c_t'`: every token of the row gets the row's mean;
# * token form (`kind="gspo-token"`, verl): `L = -sum_t c_t s_1t`, so `dL/dlogp_1t = -c_t s_1`.
#
# They differ by `s_1 (c_t - mean_t' c_t')`: zero iff `c` is constant along the row, which is why
# the gallery's scalar-advantage GSPO losses agreed under either form. `sigma_ref.objectives` states
# both; the oracle matches sympy on a row with varying rollout weights and token advantages.

# %%
cw = sp.symbols("c0:3", real=True)  # c_t = w_1t rho_1t A_1t, constants of the loss
seq_form = -sum(cw[t] * s1 for t in range(3))
tok_form = -sum(cw[t] * S1 * sp.exp(L1[t] - Sg[t]) for t in range(3))
undo_sg = {S1: s1, **{Sg[u]: L1[u] for u in range(3)}}
gaps = []
for t in range(3):
    d_seq = sp.diff(seq_form, L1[t])
    d_tok = sp.diff(tok_form, L1[t]).subs(undo_sg)
    assert sp.simplify(d_seq - (-s1 * sum(cw) / 3)) == 0
    assert sp.simplify(d_tok - (-cw[t] * s1)) == 0
    gaps.append(sp.simplify(d_tok - d_seq))
    assert sp.simplify(gaps[-1].subs({cw[1]: cw[0], cw[2]: cw[0]})) == 0  # constant c: the forms agree
assert sp.simplify(gaps[0].subs({cw[0]: 1, cw[1]: 0, cw[2]: 0}) - (-sp.Rational(2, 3) * s1)) == 0
# the oracle, token-mean weights 1/4, rollout weights and token advantages varying along row 1
mask_r = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
lp_r = torch.tensor([[-0.5, -1.0, -0.2], [-0.7, 0.0, 0.0]], dtype=torch.float64)
old_r = torch.tensor([[-0.6, -0.9, -0.25], [-0.65, 0.0, 0.0]], dtype=torch.float64)
adv_r = torch.tensor([[1.5, -0.25, 0.75], [-0.5, 0.0, 0.0]], dtype=torch.float64)
rho_r = torch.tensor([[0.5, 1.25, 2.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
c_row = [0.25 * float(rho_r[0, t]) * float(adv_r[0, t]) for t in range(3)]
for kind, form in (("gspo", seq_form), ("gspo-token", tok_form)):
    obj = O.Objective(kind, eps_low=0.2, eps_high=0.28, aggregation="token-mean")
    g = O.loss_gradient(obj, lp_r, old_r, adv_r, mask_r, rho=rho_r)
    at = {**{cw[t]: c_row[t] for t in range(3)}, **{L1[t]: float(lp_r[0, t]) for t in range(3)}}
    at.update({O1[t]: float(old_r[0, t]) for t in range(3)})
    for t in range(3):
        want = float(sp.diff(form, L1[t]).subs(undo_sg).subs(at))
        assert math.isclose(g[0, t].item(), want, rel_tol=1e-13), (kind, t)
g_seq = O.loss_gradient(O.Objective("gspo", aggregation="token-mean"), lp_r, old_r, adv_r, mask_r, rho=rho_r)
g_tok = O.loss_gradient(
    O.Objective("gspo-token", aggregation="token-mean"), lp_r, old_r, adv_r, mask_r, rho=rho_r
)
gap_row = (g_tok - g_seq)[0].abs().max().item() / g_seq[0].abs().max().item()
assert gap_row > 0.5  # measured: the forms differ by more than half the row's largest gradient
gaps

# %% [markdown]
# ## 3. CISPO
#
# MiniMax-M1's CISPO: `ell = -sg(clip(r, 1 - eps_low, 1 + eps_high)) A logp` (the paper tunes
# only the upper bound; TRL 1.16.0 writes `clamp(r, max=epsilon_high)` with an *absolute*
# `epsilon_high`, recommended 5.0; verl 0.9.1 `clamp(r, 1 - clip_ratio_low, 1 + clip_ratio_high)`).
# With `sg(clip(r)) = C` a constant, `dell/dlogp = -C A`: the gradient is never zero, the
# clipped ratio only bounds its size (PPO drops clipped tokens; CISPO keeps them).

# %%
C = sp.Symbol("C", positive=True)
cispo = -C * A * ell
assert sp.diff(cispo, ell) == -C * A
clipped = sp.Max(sp.Min(r, hi), lo)
for q in ratios:
    expected = -clipped.subs(ell, old + sp.log(q)) * A
    obj = O.Objective("cispo", eps_low=0.2, eps_high=0.28, aggregation="token-sum")
    g = O.loss_gradient(
        obj,
        torch.tensor([[math.log(q)]], dtype=torch.float64),
        torch.zeros(1, 1),
        torch.tensor([2.0]),
        torch.ones(1, 1),
    )
    assert math.isclose(g.item(), float(expected.subs(A, 2)), rel_tol=1e-14)
"CISPO: dL/dlogp = -clip(r) A, checked at the grid's sample ratios"

# %% [markdown]
# ## 4. Rollout importance sampling (TIS / MIS)
#
# `rho_it = min(pi_old / pi_rollout, C)` (truncate) or `rho * 1[rho <= C]` (mask), per token or
# per sequence (`prod_t`, TRL's `sequence_*` modes), is computed from constants: `d(rho ell)/dlogp
# = rho dell/dlogp`. It multiplies the policy term only, not a KL term added after it.

# %%
rho = sp.Symbol("rho", positive=True)
assert sp.diff(rho * surrogate, ell) - rho * sp.diff(surrogate, ell) == 0
"TIS/MIS: a multiplicative constant on the policy term's gradient"

# %% [markdown]
# **The geometric-mean sequence weight.** verl 0.9.1's `geo_mean` loss weighs a sequence by the
# geometric mean of its token weights, `(prod_t rho_t)^(1/|y|) = exp(mean_t log rho_t)`, a weight
# that does not grow or shrink with the length as `prod_t rho_t` does (`importance_weights(...,
# level="geometric")`). It is computed from constants too, so the rule above holds: its gradient is
# the weight times the surrogate's. sympy states the weight of three token weights, and the oracle's
# weight equals it (the cube root of 2 * 1/2 * 8 = 8 is 2).

# %%
rhos = sp.symbols("rho0:3", positive=True)
geometric = sp.exp(sum(sp.log(v) for v in rhos) / 3)
assert sp.simplify(geometric - sp.root(sp.Mul(*rhos), 3)) == 0
assert sp.diff(geometric * surrogate, ell) - geometric * sp.diff(surrogate, ell) == 0
w_geo = O.importance_weights(
    torch.zeros(1, 3, dtype=torch.float64),
    -torch.log(torch.tensor([[2.0, 0.5, 8.0]], dtype=torch.float64)),
    torch.ones(1, 3),
    cap=10.0,
    level="geometric",
)
assert torch.allclose(w_geo, torch.full((1, 3), 2.0, dtype=torch.float64), rtol=1e-15, atol=0)
"geometric-mean weight: (prod_t rho_t)^(1/|y|), a constant factor on the policy term's gradient"

# %% [markdown]
# ## 5. KL estimators: in the loss or in the reward
#
# For `y ~ pi`, `delta = log pi(y) - log pi_ref(y)` and `r = pi_ref/pi = exp(-delta)`, Schulman's
# estimators of the reverse KL `KL(pi || pi_ref) = E_pi[delta]` are `k1 = delta`,
# `k2 = delta^2/2`, `k3 = r - 1 - log r`. Placed **in the loss** (`L += beta k(delta_y)`,
# differentiated through `log pi(y)`), the expected gradient is `E_pi[k'(delta) grad log pi]`;
# placed **in the reward** (`R -= beta k(delta_y)`, a constant, reaching the parameters through
# the policy-gradient term), it is `E_pi[k(delta) grad log pi]`.
#
# **Theorem** (exact, any categorical `pi_theta` with full support, on-policy samples). With
# `grad KL_rev = grad KL(pi || pi_ref)` and `grad KL_fwd = grad KL(pi_ref || pi)`:
#
# | placement | k1 | k2 | k3 |
# | --- | --- | --- | --- |
# | loss | `0` | `grad KL_rev` | `grad KL_fwd` |
# | reward | `grad KL_rev` | neither (biased) | `grad KL_rev - grad KL_fwd` (biased) |
#
# k1-in-reward and k2-in-loss are the unbiased gradients of the reverse KL; k3-in-loss (GRPO's,
# TRL's and verl's `low_var_kl` default) is the gradient of the *forward* KL; k1-in-loss has
# zero expected gradient (it only adds variance). Proof over a three-outcome softmax policy
# with symbolic logits and a symbolic reference distribution:

# %%
th = sp.symbols("theta0:3", real=True)
q = sp.symbols("q0:3", positive=True)
Z = sum(sp.exp(t) for t in th)
logpi = [t - sp.log(Z) for t in th]
pi = [sp.exp(x) for x in logpi]
delta = [logpi[y] - sp.log(q[y]) for y in range(3)]
k = {
    "k1": lambda d: d,
    "k2": lambda d: d**2 / 2,
    "k3": lambda d: sp.exp(-d) - 1 + d,
}
x = sp.Symbol("x", real=True)
reverse = sum(pi[y] * delta[y] for y in range(3))
forward = sum(q[y] * (sp.log(q[y]) - logpi[y]) for y in range(3))
qsum = {q[2]: 1 - q[0] - q[1]}  # the reference is a distribution (only the forward KL needs it)


def expected_gradient(estimator, placement, j):
    total = 0
    for y in range(3):
        score = sp.diff(logpi[y], th[j])
        factor = (
            sp.diff(k[estimator](x), x).subs(x, delta[y]) if placement == "loss" else k[estimator](delta[y])
        )
        total += pi[y] * factor * score
    return total


def is_zero(e):
    return sp.simplify(sp.expand(e.subs(qsum))) == 0


for j in range(3):
    g_rev, g_fwd = sp.diff(reverse, th[j]), sp.diff(forward, th[j])
    assert is_zero(expected_gradient("k1", "loss", j))
    assert is_zero(expected_gradient("k2", "loss", j) - g_rev)
    assert is_zero(expected_gradient("k3", "loss", j) - g_fwd)
    assert is_zero(expected_gradient("k1", "reward", j) - g_rev)
    # k3 in the reward: E[(r - 1 - log r) grad log pi] = E_pi[r grad log pi] + grad KL_rev
    #                                                  = grad KL_rev - grad KL_fwd
    assert is_zero(expected_gradient("k3", "reward", j) - (g_rev - g_fwd))
verdict = "k1-loss: 0; k2-loss = k1-reward = grad KL_rev; k3-loss = grad KL_fwd; k3-reward = rev - fwd"
verdict

# %% [markdown]
# k2 in the reward is biased too: at a point, its expected gradient differs from both KL
# gradients (exact rationals and logs, evaluated to 30 digits):

# %%
point = {
    th[0]: sp.Rational(1, 3),
    th[1]: -sp.Rational(1, 2),
    th[2]: 0,
    q[0]: sp.Rational(1, 2),
    q[1]: sp.Rational(1, 3),
}
k2r = sp.N(expected_gradient("k2", "reward", 0).subs(qsum).subs(point), 30)
rev = sp.N(sp.diff(reverse, th[0]).subs(qsum).subs(point), 30)
fwd = sp.N(sp.diff(forward, th[0]).subs(qsum).subs(point), 30)
assert abs(k2r - rev) > sp.Rational(1, 100) and abs(k2r - fwd) > sp.Rational(1, 100)
"k2 in the reward: neither the reverse nor the forward KL gradient"

# %% [markdown]
# The same theorem numerically with the oracle's estimators (`kl_estimate`: values and
# derivatives) on a 5-outcome softmax policy, exact expectations (sums over outcomes), float64:

# %%
gen = torch.Generator().manual_seed(0)
theta = torch.randn(5, generator=gen, dtype=torch.float64)
logq = torch.log_softmax(torch.randn(5, generator=gen, dtype=torch.float64), 0)
lp = torch.log_softmax(theta, 0)
score = torch.autograd.functional.jacobian(lambda t: torch.log_softmax(t, 0), theta)
g_rev = torch.autograd.functional.jacobian(
    lambda t: (torch.softmax(t, 0) * (torch.log_softmax(t, 0) - logq)).sum(), theta
)
g_fwd = torch.autograd.functional.jacobian(
    lambda t: (logq.exp() * (logq - torch.log_softmax(t, 0))).sum(), theta
)
E = {}
for est in ("k1", "k2", "k3"):
    value, slope = O.kl_estimate(lp, logq, est)
    E[est, "loss"], E[est, "reward"] = (lp.exp() * slope) @ score, (lp.exp() * value) @ score
assert torch.allclose(E["k1", "loss"], torch.zeros(5, dtype=torch.float64), atol=1e-15)
assert torch.allclose(E["k2", "loss"], g_rev, atol=1e-14) and torch.allclose(
    E["k1", "reward"], g_rev, atol=1e-14
)
assert torch.allclose(E["k3", "loss"], g_fwd, atol=1e-14)
assert torch.allclose(E["k3", "reward"], g_rev - g_fwd, atol=1e-14)
"the oracle's estimators reproduce the theorem on a 5-outcome policy"

# %% [markdown]
# **Off-policy samples.** With `y ~ pi_old` and the ratio `r = pi/pi_old` *kept in the graph*
# (TRL's `use_bias_correction_kl`: `k3 * coef_1`), `E_old[r k] = E_pi[k]` identically in
# `theta`, so the expected gradient is `grad E_pi[k]`: the reverse KL's gradient for k1 and k3
# (both unbiased estimators of its value), not the forward KL's.

# %%
p_old = sp.symbols("p0:3", positive=True)
weighted = sum(p_old[y] * (pi[y] / p_old[y]) * k["k3"](delta[y]) for y in range(3))
assert all(is_zero(sp.diff(weighted, th[j]) - sp.diff(reverse, th[j])) for j in range(3))
"E_old[r k3] has the reverse KL's gradient"

# %% [markdown]
# **Its per-token gradient** (the oracle's `kl="k3-is"`). Differentiated as TRL writes it,
# `k3 * coef_1` with `coef_1 = exp(logp - old)` in the graph: `d(r k3)/dlogp = r k3 + r (1 - exp(-delta))
# = r delta`, so on-policy (`r = 1`) the slope is `delta`, k2's, not k3's `1 - exp(-delta)`. With a
# sequence ratio (`importance_sampling_level="sequence"`, the GSPO objective) `s_i` moves with every
# token of the row: `d/dlogp_1t sum_t' w_t' s_1 k3_t' = w_t s_1 (1 - exp(-delta_t)) + (s_1 / |y_1|)
# sum_t' w_t' k3_t'` (sympy on a row of three tokens); the oracle matches both at a point.

# %%
d_sym, o_sym = sp.symbols("delta_s o_s", real=True)
k3_of = sp.exp(-(ell - d_sym)) - 1 + (ell - d_sym)  # ell = logp, d_sym = ref_logp
assert sp.simplify(sp.diff(sp.exp(ell - o_sym) * k3_of, ell) - sp.exp(ell - o_sym) * (ell - d_sym)) == 0
refs = sp.symbols("f0:3", real=True)
ws = sp.symbols("v0:3", positive=True)
k3_row = [sp.exp(refs[t] - L1[t]) - 1 + L1[t] - refs[t] for t in range(3)]
seq_kl = sum(ws[t] * s1 * k3_row[t] for t in range(3))
for t in range(3):
    want = ws[t] * s1 * (1 - sp.exp(refs[t] - L1[t])) + s1 / 3 * sum(ws[u] * k3_row[u] for u in range(3))
    assert sp.simplify(sp.diff(seq_kl, L1[t]) - want) == 0
lp_k = torch.tensor([[-0.5, -1.0, -0.2]], dtype=torch.float64)
old_k = torch.tensor([[-0.6, -0.9, -0.25]], dtype=torch.float64)
ref_k = torch.tensor([[-0.9, -0.4, -0.3]], dtype=torch.float64)
point_k = {L1[t]: float(lp_k[0, t]) for t in range(3)}
point_k.update({O1[t]: float(old_k[0, t]) for t in range(3)})
point_k.update({refs[t]: float(ref_k[0, t]) for t in range(3)})
point_k.update({ws[t]: sp.Rational(1, 3) for t in range(3)})  # token-mean over one row of 3
for kind in ("ppo", "gspo", "gspo-token"):
    obj = O.Objective(kind, aggregation="token-mean", kl="k3-is", kl_coef=1.0)
    g_kl = O.loss_gradient_terms(obj, lp_k, old_k, torch.zeros(1), torch.ones(1, 3), ref_logp=ref_k)["kl"]
    for t in range(3):
        if kind == "gspo":
            want = sp.diff(seq_kl, L1[t])
        else:  # a per-token ratio: r_t (ppo) or the value s_1 with d/dlogp_t = s_1 (gspo-token)
            ratio_t = sp.exp(L1[t] - O1[t]) if kind == "ppo" else s1
            want = ws[t] * ratio_t * (L1[t] - refs[t])
        assert math.isclose(g_kl[0, t].item(), float(want.subs(point_k)), rel_tol=1e-13), (kind, t)
"k3-is: d(r k3)/dlogp = r delta per token; GSPO's sequence ratio adds the row's mean k3"

# %% [markdown]
# ## 6. Entropy bonus
#
# Not in the oracle: the gradient of the entropy of `pi(. | context)` depends on the whole
# next-token distribution, not on `log pi(y_it)` alone, so it is not a per-token weight on
# `grad log pi(y_it)` and cannot be stated from the inputs a policy loss receives.
