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
# # 08. Loss aggregation defines the score the identity sees
#
# Trainers do not form `(1/G) sum_i A_i s_i` directly: they minimise a per-token loss
# `L = -sum_{i,t} w_it A_i log pi(y_it)` (policy ratio 1) with weights `w_it` set by the
# aggregation mode (docs/spec.md §4). Its negative gradient is `sum_i A_i sum_t w_it grad log pi(y_it)
# = (1/G) sum_i A_i s_i` with
#
# `s_i = G * sum_t w_it * grad log pi(y_it)`,
#
# so the identity `g = (sigma^2/d) * delta_s` holds under every mode, with `delta_s` taken
# over these `s_i`:
#
# | mode | `w_it` (unmasked tokens) | `s_i` |
# | --- | --- | --- |
# | `token-mean` | `1/N_tok` (batch tokens) | `(G/N_tok) sum_t grad log pi_it`: long responses weigh more |
# | `seq-mean-token-mean` | `1/(N_seq |y_i|)` | `(G/N_seq) mean_t grad log pi_it`: length-normalised |
# | `seq-mean-token-sum` | `1/N_seq` | `(G/N_seq) grad log pi(y_i)`: the sequence score |
# | `seq-mean-token-sum-norm` | `1/H`, a constant (note below) | `(G/H) grad log pi(y_i)` (Dr. GRPO) |
# | `token-sum` | `1` | `G grad log pi(y_i)`: no normaliser |
#
# The horizon `H` is `N_seq C` in verl 0.9.1 and TRL 1.16 (`C` the maximum completion length), `C` alone
# in verl 0.4 to 0.6.
#
# Only the token-sum modes give (a constant multiple of) the sequence score
# `grad log pi(y_i) = sum_t grad log pi(y_it)`; with one group per batch (`N_seq = G`),
# `seq-mean-token-sum` gives it exactly.

# %%
import sympy as sp
import torch

import sigma_ref
from sigma_ref import symbolic as S
from sigma_ref.conventions import AGGREGATION_MODES

# %% [markdown]
# ## Symbolically, for a padded batch
#
# One group of `G = 3` responses of lengths 2, 3 and 1, padded to `T = 4`. `u_it` is the
# gradient of `log pi(y_it)` (one component; the loss is linear in the log-probabilities,
# so each component is the same statement). Writing `log pi(y_it) = c_it + theta u_it`
# near the current parameters, `-dL/dtheta` is the update. The loss is built the way the
# code builds it: a mask, token sums, per-sequence means.

# %%
lengths, T, Gs = [2, 3, 1], 4, 3
mask = sp.Matrix(Gs, T, lambda i, t: 1 if t < lengths[i] else 0)
theta = sp.Symbol("theta", real=True)
A = sp.symbols("A0:3", real=True)
U = sp.Matrix(Gs, T, lambda i, t: sp.Symbol(f"u{i}{t}", real=True))
C = sp.Matrix(Gs, T, lambda i, t: sp.Symbol(f"c{i}{t}", real=True))
logp = C + theta * U
per_token = sp.Matrix(Gs, T, lambda i, t: -A[i] * logp[i, t] * mask[i, t])
n_tok = sum(mask)
seq_sum = [sum(per_token.row(i)) for i in range(Gs)]
losses = {
    "token-mean": sum(per_token) / n_tok,
    "seq-mean-token-mean": sum(seq_sum[i] / sum(mask.row(i)) for i in range(Gs)) / Gs,
    "seq-mean-token-sum": sum(seq_sum) / Gs,
    "seq-mean-token-sum-norm": sum(seq_sum) / T,
}
scores = {}
for mode, loss in losses.items():
    update = -sp.diff(loss, theta)
    w = [
        S.aggregation_weight(mode, length=lengths[i], n_sequences=Gs, total_tokens=n_tok, horizon=T)
        for i in range(Gs)
    ]
    s = [Gs * w[i] * sum(U[i, t] * mask[i, t] for t in range(T)) for i in range(Gs)]
    assert sp.expand(update - sum(A[i] * s[i] for i in range(Gs)) / Gs) == 0, mode
    scores[mode] = s
scores

# %% [markdown]
# The sequence score of response `i` is `sum_t u_it` over its tokens. `seq-mean-token-sum`
# (one group, `N_seq = G`) reproduces it exactly, `seq-mean-token-sum-norm` up to the
# constant `G/T`, `token-mean` up to `G/N_tok` (a constant within one batch, but one that
# changes with the batch's total length); `seq-mean-token-mean` divides each response's
# score by its own length, so it is not a multiple of the sequence score.

# %%
sequence_score = [sum(U[i, t] * mask[i, t] for t in range(T)) for i in range(Gs)]
for i in range(Gs):
    assert sp.expand(scores["seq-mean-token-sum"][i] - sequence_score[i]) == 0
    assert sp.expand(scores["seq-mean-token-sum-norm"][i] - sp.Rational(Gs, T) * sequence_score[i]) == 0
    assert sp.expand(scores["token-mean"][i] - sp.Rational(Gs, n_tok) * sequence_score[i]) == 0
    assert sp.expand(scores["seq-mean-token-mean"][i] - sequence_score[i] / lengths[i]) == 0
ratios = [sp.simplify(scores["seq-mean-token-mean"][i] / sequence_score[i]) for i in range(Gs)]
assert len(set(ratios)) == Gs  # a different factor per response: length normalisation
ratios

# %% [markdown]
# ## With torch autograd, two groups, a 3-parameter policy
#
# A batch of `B = 2` groups of `G = 4` responses with lengths 1..5, padded to `T = 6`;
# token log-probabilities `log_softmax(theta . x_t)` over a 5-token vocabulary with fixed
# random features (seed 0). For each mode, the autograd gradient of the loss equals
# `sum over groups of (1/G) sum_i A_i s_i`, with `s_i = G sum_t w_it grad log pi(y_it)`
# from `S.aggregation_weight`, and equals the identity's prediction
# `sigma_ref.decompose(R, s).prediction` summed over groups (float64, relative `1e-12`).

# %%
gen = torch.Generator().manual_seed(0)
B, Gt, T6, V, D = 2, 4, 6, 5, 3
feats = torch.randn(B * Gt, T6, V, D, generator=gen, dtype=torch.float64)
tokens = torch.randint(0, V, (B * Gt, T6), generator=gen)
lens = torch.tensor([1, 3, 5, 2, 4, 2, 5, 1])
tmask = (torch.arange(T6)[None, :] < lens[:, None]).double()
rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
adv = sigma_ref.grpo_advantage(rewards).reshape(-1)
theta0 = torch.tensor([0.2, -0.1, 0.3], dtype=torch.float64)


def token_logp(th: torch.Tensor) -> torch.Tensor:
    logits = feats @ th
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens[..., None])[..., 0]


def loss_of(th: torch.Tensor, mode: str) -> torch.Tensor:
    pt = -adv[:, None] * token_logp(th) * tmask
    n_seq = B * Gt
    if mode == "token-mean":
        return pt.sum() / tmask.sum()
    if mode == "seq-mean-token-mean":
        return (pt.sum(-1) / tmask.sum(-1)).sum() / n_seq
    if mode == "seq-mean-token-sum":
        return pt.sum(-1).sum() / n_seq
    if mode == "token-sum":
        return pt.sum()
    return pt.sum() / T6


token_grads = torch.autograd.functional.jacobian(token_logp, theta0)  # [B*G, T, D]
for mode in AGGREGATION_MODES:
    th = theta0.clone().requires_grad_(True)
    loss_of(th, mode).backward()
    update = -th.grad
    w = torch.tensor(
        [
            [
                float(
                    S.aggregation_weight(
                        mode, length=int(n), n_sequences=B * Gt, total_tokens=int(lens.sum()), horizon=T6
                    )
                )
                for _ in range(T6)
            ]
            for n in lens
        ],
        dtype=torch.float64,
    )
    s = Gt * (w[..., None] * tmask[..., None] * token_grads).sum(1)  # [B*G, D]
    per_group = sigma_ref.policy_gradient(adv.reshape(B, Gt), s.reshape(B, Gt, D))
    prediction = sigma_ref.decompose(rewards, s.reshape(B, Gt, D)).prediction
    assert torch.allclose(update, per_group.sum(0), rtol=1e-12, atol=1e-14), mode
    assert torch.allclose(update, prediction.sum(0), rtol=1e-12, atol=1e-14), mode
"all five modes: autograd gradient = sum_groups (sigma^2/d) delta_s with s_i = G sum_t w_it grad log pi_it"

# %% [markdown]
# ## The numeric oracle: `sigma_ref.objectives.aggregation_weights`, verl 0.9.1 and TRL 1.16.0
#
# The oracle states each mode's `[N, T]` weights once, under verl 0.9.1's names
# (`verl.trainer.ppo.core_algos.agg_loss`), plus `token-sum` (`w_it = 1`), and takes TRL 1.16.0's
# `loss_type` names as aliases (read in `GRPOTrainer._compute_loss`): `grpo` is
# seq-mean-token-mean, `bnpo` and `dapo` token-mean (over the local and the global
# accumulated batch), `dr_grpo` seq-mean-token-sum-norm with `C = max_completion_length`,
# `luspo` seq-mean-token-sum. Both sources divide `seq-mean-token-sum-norm` by the sequence
# count *and* the constant: verl 0.9.1 `masked_sum(seq_losses) / global_batch_size / C`, TRL
# `sum / (B * max_completion_length)`, so `w_it = 1/(N_seq C)`. The table above (and
# `S.aggregation_weight`) writes `1/T`, the form of verl 0.4.1 to 0.6.0 (checked), which divided the
# token sum by `C = T` alone: the two agree with `horizon = N_seq C`. The identity holds under either (the
# constant only rescales `s_i`), and under `token-sum` (`w_it = 1`, `s_i = G grad log pi(y_i)`).

# %%
from sigma_ref import objectives as O

for mode in O.AGGREGATION_MODES:
    w = O.aggregation_weights(tmask, mode)
    if mode == "token-sum":
        expected = tmask
    else:
        horizon = B * Gt * T6 if mode == "seq-mean-token-sum-norm" else T6
        expected = (
            torch.tensor(
                [
                    [
                        float(
                            S.aggregation_weight(
                                mode,
                                length=int(n),
                                n_sequences=B * Gt,
                                total_tokens=int(lens.sum()),
                                horizon=horizon,
                            )
                        )
                        for _ in range(T6)
                    ]
                    for n in lens
                ],
                dtype=torch.float64,
            )
            * tmask
        )
    assert torch.allclose(w, expected, rtol=1e-15, atol=0), mode
    th = theta0.clone().requires_grad_(True)
    (-(w * adv[:, None] * token_logp(th)).sum()).backward()
    s = Gt * (w[..., None] * token_grads).sum(1)
    prediction = sigma_ref.decompose(rewards, s.reshape(B, Gt, D)).prediction
    assert torch.allclose(-th.grad, prediction.sum(0), rtol=1e-12, atol=1e-14), mode
aliases = {name: O.resolve_aggregation(name) for name in O.AGGREGATION_ALIASES}
aliases

# %% [markdown]
# ## Detecting the mode from measured weights
#
# `O.detect_aggregation(w, mask)` compares measured weights (e.g. `-dL/dlogp_it / A_i` at ratio
# 1) with each mode's, simplest first (token-mean, seq-mean-token-mean, seq-mean-token-sum,
# token-sum), then reads a constant weight as seq-mean-token-sum-norm with `C = 1/(N_seq w)`.
# On this ragged batch every mode is recovered from its own weights; when all responses have
# one length, token-mean and seq-mean-token-mean coincide and the simpler name is reported.

# %%
detected = {
    mode: O.detect_aggregation(O.aggregation_weights(tmask, mode, constant=None), tmask)
    for mode in O.AGGREGATION_MODES
}
assert detected == {
    mode: (mode, T6 if mode == "seq-mean-token-sum-norm" else None) for mode in O.AGGREGATION_MODES
}
same = torch.ones(4, 5, dtype=torch.float64)
assert O.detect_aggregation(O.aggregation_weights(same, "seq-mean-token-mean"), same) == ("token-mean", None)
detected

# %% [markdown]
# ## Beside the five modes: `prompt-mean`
#
# Some trainers average per prompt: a token mean inside each prompt's group, then a mean over
# the `P` prompts, `L = (1/P) sum_g (1/N_tok(g)) sum_{i in g} sum_t ell_it`. So
#
# `w_it = 1 / (P N_tok(g(i)))` on unmasked tokens,
#
# every group weighs `1/P` whatever its length, and all weights sum to 1. Below: the loss
# built the way the code builds it (a loop over prompts), its update against `w`, and the two
# cases where it coincides with a mode (equal token counts per group: `token-mean`; one
# response per group: `seq-mean-token-mean`). The oracle is
# `sigma_ref.objectives.prompt_mean_weights(mask, index)`.

# %%
p_lengths, p_index = [2, 3, 1, 4, 3], [0, 0, 0, 1, 1]  # 6 tokens in prompt 0, 7 in prompt 1
Np, Tp = len(p_lengths), 4
pmask = sp.Matrix(Np, Tp, lambda i, t: 1 if t < p_lengths[i] else 0)
pA = sp.symbols(f"A0:{Np}", real=True)
pU = sp.Matrix(Np, Tp, lambda i, t: sp.Symbol(f"v{i}{t}", real=True))
plogp = sp.Matrix(Np, Tp, lambda i, t: sp.Symbol(f"e{i}{t}", real=True)) + theta * pU
ptok = sp.Matrix(Np, Tp, lambda i, t: -pA[i] * plogp[i, t] * pmask[i, t])
prompts = sorted(set(p_index))
group_tokens = {g: sum(sum(pmask.row(i)) for i in range(Np) if p_index[i] == g) for g in prompts}
loss_pm = sum(
    sum(sum(ptok.row(i)) for i in range(Np) if p_index[i] == g) / group_tokens[g] for g in prompts
) / len(prompts)
w_pm = [sp.Rational(1, len(prompts) * group_tokens[p_index[i]]) for i in range(Np)]
update_pm = -sp.diff(loss_pm, theta)
predicted = sum(pA[i] * w_pm[i] * sum(pU[i, t] * pmask[i, t] for t in range(Tp)) for i in range(Np))
assert sp.expand(update_pm - predicted) == 0
assert sum(w_pm[i] * sum(pmask.row(i)) for i in range(Np)) == 1
for g in prompts:
    assert sum(w_pm[i] * sum(pmask.row(i)) for i in range(Np) if p_index[i] == g) == sp.Rational(
        1, len(prompts)
    )
w_pm

# %% [markdown]
# **When it is another mode.** With `n_g = N_tok(g)` and `N_tok = sum_g n_g`,
# `1/(P n_g) = 1/N_tok` for every `g` iff `n_g = N_tok/P` for every `g`: prompt-mean is
# token-mean exactly when every group holds as many tokens. With one response per group,
# `n_g = |y_i|` and `P = N_seq`: it is seq-mean-token-mean.

# %%
n = sp.symbols("n0:3", positive=True)
P = len(n)
equal = {n[1]: n[0], n[2]: n[0]}
assert all(sp.simplify((1 / (P * n[g]) - 1 / sum(n)).subs(equal)) == 0 for g in range(P))
solved = sp.solve([sp.Eq(1 / (P * n[g]), 1 / sum(n)) for g in range(P)], n[1:], dict=True)
assert solved == [{n[1]: n[0], n[2]: n[0]}]  # the only solution: equal counts
solved

# %% [markdown]
# **The oracle.** On a random padded batch, the weights a prompt-mean loss written with a
# Python loop over prompts puts on each token (measured by autograd as `-dL/dlogp_it / A_i`)
# equal `prompt_mean_weights`; `detect_aggregation(..., index=)` names it, and without the
# index (or with one prompt per response) it reads as the mode it coincides with.

# %%
g_rng = torch.Generator().manual_seed(8)
lens = torch.randint(1, 7, (9,), generator=g_rng)
pm_mask = (torch.arange(6)[None, :] < lens[:, None]).to(torch.float64)
pm_index = torch.tensor([3, 3, 3, 7, 7, 1, 1, 1, 1])
pm_adv = torch.randn(9, generator=g_rng, dtype=torch.float64)
pm_logp = torch.randn(9, 6, generator=g_rng, dtype=torch.float64).requires_grad_(True)
terms = []
for g in pm_index.unique():
    rows = pm_index == g
    per_token = -pm_adv[rows, None] * pm_logp[rows] * pm_mask[rows]
    terms.append(per_token.sum() / pm_mask[rows].sum())
(sum(terms) / len(terms)).backward()
measured = -pm_logp.grad / pm_adv[:, None]
oracle_pm = O.prompt_mean_weights(pm_mask, pm_index)
assert torch.allclose(measured, oracle_pm, rtol=1e-13, atol=0)
assert O.detect_aggregation(measured, pm_mask, index=pm_index) == ("prompt-mean", None)
assert O.detect_aggregation(measured, pm_mask) is None
one_each = O.prompt_mean_weights(pm_mask, torch.arange(9))
assert O.detect_aggregation(one_each, pm_mask, index=torch.arange(9)) == ("seq-mean-token-mean", None)
oracle_pm
