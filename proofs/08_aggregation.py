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
