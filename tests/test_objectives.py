"""``sigma_ref.objectives`` against torch autograd of straightforward losses written as trainers write them.

The reference losses below follow TRL 1.16.0 ``GRPOTrainer._compute_loss`` and verl 0.9.1
``core_algos`` line by line (single process), independently of the oracle's formulas; the oracle's
``dL/dlogp`` must equal ``torch.autograd.grad(loss, logp)`` at ratios inside and outside every clip.
"""

from __future__ import annotations

import math

import pytest
import torch

from sigma_ref import objectives as O  # noqa: N812

LENGTHS = [1, 7, 3, 5, 2, 4]
N, T = len(LENGTHS), 7


def _mask(lengths=LENGTHS, t=T) -> torch.Tensor:
    return (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).double()


def _inputs(seed: int = 0, spread: float = 1.5):
    gen = torch.Generator().manual_seed(seed)
    mask = _mask()
    old = -torch.rand(N, T, generator=gen, dtype=torch.float64) * 2 - 0.1
    # log-ratios uniform in [-spread, spread]: r from 0.22 to 4.5, across every clip boundary
    logp = old + (torch.rand(N, T, generator=gen, dtype=torch.float64) * 2 - 1) * spread
    adv = torch.tensor([1.2, -0.7, 0.5, -1.5, 2.0, -0.3], dtype=torch.float64)
    ref = old + torch.randn(N, T, generator=gen, dtype=torch.float64) * 0.5
    rollout = old + torch.randn(N, T, generator=gen, dtype=torch.float64) * 0.4
    return logp, old, adv, mask, ref, rollout


def _agg(loss_mat, mask, mode, constant=None):
    """verl 0.9.1 ``agg_loss`` (dp_size 1)."""
    if mode == "token-mean":
        return (loss_mat * mask).sum() / mask.sum()
    if mode == "token-sum":
        return (loss_mat * mask).sum()
    n_seq = (mask.sum(-1) > 0).double().sum()
    if mode == "seq-mean-token-mean":
        return ((loss_mat * mask).sum(-1) / (mask.sum(-1) + 1e-300)).sum() / n_seq
    loss = (loss_mat * mask).sum(-1).sum() / n_seq
    if mode == "seq-mean-token-sum-norm":
        loss = loss / (mask.shape[-1] if constant is None else constant)
    return loss


def _grad(loss_fn, logp):
    leaf = logp.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss_fn(leaf), leaf)
    return g


# --------------------------------------------------------------------------------------
# aggregation


@pytest.mark.parametrize("mode", O.AGGREGATION_MODES)
def test_aggregation_weights_are_the_autograd_weights_of_agg_loss(mode):
    """``aggregation_weights = d agg_loss(logp) / d logp`` for every verl mode (and a constant)."""
    logp, *_ = _inputs()
    mask = _mask()
    constant = 16 if mode == "seq-mean-token-sum-norm" else None
    g = _grad(lambda x: _agg(x, mask, mode, constant), logp)
    torch.testing.assert_close(O.aggregation_weights(mask, mode, constant=constant), g, rtol=1e-13, atol=0)


def _trl_loss(per_token_loss, mask, loss_type, max_completion_length):
    """TRL 1.16.0 ``_compute_loss`` aggregation, one process, one accumulation step."""
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return (per_token_loss * mask).sum() / (per_token_loss.size(0) * max_completion_length)
    if loss_type == "luspo":
        return (per_token_loss * mask).sum(-1).mean()
    num_items_in_batch = mask.sum()  # dapo / cispo: gathered over processes; W = 1 here
    return (per_token_loss * mask).sum() / num_items_in_batch.clamp(min=1.0)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"])
def test_trl_loss_types_are_their_aliases(loss_type):
    """TRL's ``loss_type`` names give the weights of the verl mode they alias (dr_grpo: C = max length)."""
    logp, *_ = _inputs()
    mask = _mask()
    g = _grad(lambda x: _trl_loss(x, mask, loss_type, 10), logp)
    constant = 10 if loss_type == "dr_grpo" else None
    torch.testing.assert_close(
        O.aggregation_weights(mask, loss_type, constant=constant), g, rtol=1e-13, atol=0
    )


def test_resolve_aggregation_names():
    assert O.resolve_aggregation("seq_mean_token_sum_norm") == "seq-mean-token-sum-norm"
    assert {O.resolve_aggregation(k) for k in O.AGGREGATION_ALIASES} <= set(O.AGGREGATION_MODES)
    with pytest.raises(ValueError, match=r"aggregation='mean'.*token-mean"):
        O.resolve_aggregation("mean")
    with pytest.raises(TypeError, match="must be a string"):
        O.resolve_aggregation(3)


def test_empty_rows_are_not_counted_as_sequences():
    """verl drops fully masked rows from the sequence count."""
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    assert O.aggregation_weights(mask, "seq-mean-token-sum")[0, 0] == 1.0


@pytest.mark.parametrize("mode", O.AGGREGATION_MODES)
def test_detect_aggregation_recovers_each_mode(mode):
    mask = _mask()
    constant = 16 if mode == "seq-mean-token-sum-norm" else None
    w = O.aggregation_weights(mask, mode, constant=constant)
    assert O.detect_aggregation(w, mask) == (mode, constant)
    noisy = w.to(torch.float32).double()  # measured in float32
    assert O.detect_aggregation(noisy, mask) == (mode, constant)


def test_detect_aggregation_ties_and_misses():
    equal = _mask([3, 3, 3], 5)
    w = O.aggregation_weights(equal, "seq-mean-token-mean")  # = token-mean = 1/(N_seq * 3)
    assert O.detect_aggregation(w, equal) == ("token-mean", None)
    mask = _mask()
    w = O.aggregation_weights(mask, "seq-mean-token-mean")
    assert O.detect_aggregation(2 * w, mask) is None  # not a mode: length-dependent and off by 2
    assert O.detect_aggregation(1.5 * O.aggregation_weights(mask, "token-mean"), mask) == (
        "seq-mean-token-sum-norm",
        pytest.approx(mask.sum().item() / (1.5 * N)),
    )
    leaky = O.aggregation_weights(mask, "token-mean") + 0.01  # weight on padding
    assert O.detect_aggregation(leaky, mask) is None
    assert O.detect_aggregation(torch.zeros(N, T), mask) is None


def test_aggregation_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"mask has shape \(3,\)"):
        O.aggregation_weights(torch.ones(3), "token-mean")
    with pytest.raises(ValueError, match="mask contains 2"):
        O.aggregation_weights(torch.tensor([[1.0, 2.0]]), "token-mean")
    with pytest.raises(ValueError, match="no unmasked token"):
        O.aggregation_weights(torch.zeros(2, 2), "token-mean")
    with pytest.raises(ValueError, match="constant=4 is only used by 'seq-mean-token-sum-norm'"):
        O.aggregation_weights(_mask(), "token-mean", constant=4)
    with pytest.raises(ValueError, match="constant=-1 must be a positive"):
        O.aggregation_weights(_mask(), "dr_grpo", constant=-1)
    with pytest.raises(ValueError, match=r"weights has shape \(2, 2\)"):
        O.detect_aggregation(torch.ones(2, 2), _mask())
    with pytest.raises(ValueError, match="weights contains a NaN"):
        O.detect_aggregation(torch.full((N, T), math.nan), _mask())


# --------------------------------------------------------------------------------------
# scale-out: the accumulated gradient of a split batch, computed piece by piece


def _accumulated(mask, mode, rank, micro, world_size, normaliser, loss_scale, constant=None):
    """Run every piece's loss as a trainer does and add the gradients; DDP: mean over ranks."""
    logp = torch.zeros_like(mask, requires_grad=True)
    total = torch.zeros_like(mask)
    for r in range(world_size):
        for m in sorted(set(micro[rank == r].tolist())):
            rows = (rank == r) & (micro == m)
            scope = {"global": torch.ones_like(rows), "rank": rank == r, "micro-batch": rows}[normaliser]
            piece = mask * rows[:, None]
            counts = mask[scope]
            n_tok = counts.sum()
            n_seq = (counts.sum(-1) > 0).double().sum()
            if mode == "token-mean":
                loss = (logp * piece).sum() / n_tok
            elif mode == "seq-mean-token-mean":
                loss = ((logp * piece).sum(-1) / piece.sum(-1).clamp(min=1)).sum() / n_seq
            elif mode == "seq-mean-token-sum":
                loss = (logp * piece).sum() / n_seq
            elif mode == "seq-mean-token-sum-norm":
                loss = (logp * piece).sum() / (n_seq * (constant or mask.shape[1]))
            else:
                loss = (logp * piece).sum()
            (g,) = torch.autograd.grad(loss * loss_scale, logp)
            total = total + g
    return total / world_size


SPLIT_RANK = torch.tensor([0, 0, 0, 1, 1, 1])
SPLIT_MICRO = torch.tensor([0, 1, 1, 0, 0, 1])


@pytest.mark.parametrize("normaliser", ["global", "rank", "micro-batch"])
@pytest.mark.parametrize("mode", O.AGGREGATION_MODES)
def test_effective_weights_predict_the_accumulated_gradient(mode, normaliser):
    mask = _mask()
    for loss_scale in (1.0, 0.5, 2.0):
        expected = _accumulated(mask, mode, SPLIT_RANK, SPLIT_MICRO, 2, normaliser, loss_scale)
        got = O.effective_weights(
            mask, mode, rank=SPLIT_RANK, micro_batch=SPLIT_MICRO, normaliser=normaliser, loss_scale=loss_scale
        )
        torch.testing.assert_close(got, expected, rtol=1e-13, atol=0)


@pytest.mark.parametrize("mode", O.AGGREGATION_MODES)
def test_global_normaliser_times_world_size_is_exact(mode):
    """verl's ``* dp_size`` with global counts: every split gives the full-batch weights."""
    mask = _mask()
    for world_size in (1, 2, 3):
        rank = torch.arange(N) % world_size
        micro = torch.arange(N) // world_size % 2
        got = O.effective_weights(mask, mode, rank=rank, micro_batch=micro, loss_scale=world_size)
        torch.testing.assert_close(got, O.aggregation_weights(mask, mode), rtol=1e-14, atol=0)


def test_micro_batch_normaliser_factors():
    """token-mean per micro-batch over M: exact for equal token counts, else N/(W M n_rm); no 1/M: M x."""
    mask = _mask([2, 2, 2, 2], 3)
    micro = torch.tensor([0, 0, 1, 1])
    full = O.aggregation_weights(mask, "token-mean")
    exact = O.effective_weights(
        mask, "token-mean", micro_batch=micro, normaliser="micro-batch", loss_scale=0.5
    )
    torch.testing.assert_close(exact, full, rtol=1e-14, atol=0)
    doubled = O.effective_weights(mask, "token-mean", micro_batch=micro, normaliser="micro-batch")
    torch.testing.assert_close(doubled, 2 * full, rtol=1e-14, atol=0)
    ragged = _mask([1, 3, 2, 2], 3)  # piece 0: 4 tokens, piece 1: 4 tokens -> still exact
    uneven = _mask([1, 1, 3, 3], 3)  # piece 0: 2 tokens, piece 1: 6 tokens
    for m, ok in ((ragged, True), (uneven, False)):
        got = O.effective_weights(
            m, "token-mean", micro_batch=micro, normaliser="micro-batch", loss_scale=0.5
        )
        assert torch.allclose(got, O.aggregation_weights(m, "token-mean"), rtol=1e-14) is ok
    factor = O.effective_weights(
        uneven, "token-mean", micro_batch=micro, normaliser="micro-batch", loss_scale=0.5
    )
    factor = factor / O.aggregation_weights(uneven, "token-mean")
    assert factor[0, 0].item() == pytest.approx(8 / (2 * 2)) and factor[2, 0].item() == pytest.approx(
        8 / (2 * 6)
    )


def test_effective_weights_errors():
    mask = _mask()
    with pytest.raises(ValueError, match="rank must be 6 non-negative integers"):
        O.effective_weights(mask, "token-mean", rank=[0, 1])
    with pytest.raises(ValueError, match="micro_batch must be 6 non-negative integers"):
        O.effective_weights(mask, "token-mean", micro_batch=torch.zeros(6))
    with pytest.raises(ValueError, match="world_size=1 must be an integer >= the largest rank"):
        O.effective_weights(mask, "token-mean", rank=SPLIT_RANK, world_size=1)
    with pytest.raises(ValueError, match="normaliser='step'"):
        O.effective_weights(mask, "token-mean", normaliser="step")
    with pytest.raises(ValueError, match="loss_scale=nan"):
        O.effective_weights(mask, "token-mean", loss_scale=math.nan)


# --------------------------------------------------------------------------------------
# objectives at ratio != 1: reference losses written as the trainers write them


def _ppo_loss(logp, old, adv, mask, lo, hi, c, mode, rho=None, kl=None):
    """verl 0.9.1 ``compute_policy_loss_vanilla`` (dual clip when ``c``), ``rollout_is_weights = rho``."""
    a = adv[:, None]
    ratio = torch.exp(logp - old)
    l1 = -a * ratio
    l2 = -a * torch.clamp(ratio, lo, hi)
    clip1 = torch.maximum(l1, l2)
    losses = torch.where(a < 0, torch.minimum(-a * c, clip1), clip1) if c is not None else clip1
    if rho is not None:
        losses = losses * rho
    if kl is not None:
        losses = losses + kl
    return _agg(losses, mask, mode)


def _gspo_trl(logp, old, adv, mask, lo, hi, mode, rho=None):
    """TRL 1.16.0 ``importance_sampling_level="sequence"``: the sequence ratio broadcast over tokens."""
    log_w = ((logp - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    coef_1 = torch.exp(log_w)[:, None]
    coef_2 = torch.clamp(coef_1, lo, hi)
    a = adv[:, None]
    per_token = -torch.min(coef_1 * a, coef_2 * a).expand(-1, logp.shape[1])
    if rho is not None:
        per_token = per_token * rho
    return _agg(per_token, mask, mode)


def _gspo_verl(logp, old, adv, mask, lo, hi, mode):
    """verl 0.9.1 ``compute_policy_loss_gspo``: the token form ``sg(s_i) pi_it / sg(pi_it)``."""
    seq = ((logp - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    s = torch.exp(logp - logp.detach() + seq.detach()[:, None])
    a = adv[:, None]
    return _agg(torch.maximum(-a * s, -a * torch.clamp(s, lo, hi)), mask, mode)


def _cispo(logp, old, adv, mask, lo, hi, mode):
    """verl 0.9.1 ``compute_policy_loss_cispo`` (TRL: ``lo = -inf``, ``hi = epsilon_high``)."""
    ratio = torch.exp(logp - old)
    return _agg(-torch.clamp(ratio, lo, hi).detach() * adv[:, None] * logp, mask, mode)


def _rho(old, rollout, mask, cap, level, mode):
    diff = (old - rollout) * mask
    if level == "sequence":
        diff = diff.sum(-1, keepdim=True)
    ratio = torch.exp(diff)
    ratio = torch.clamp(ratio, max=cap) if mode == "truncate" else ratio.masked_fill(ratio > cap, 0.0)
    return ratio.expand_as(mask)


def _regions_hit(logp, old, adv, mask, lo, hi, c=None):
    r = torch.exp(logp - old)[mask.bool()]
    a = adv[:, None].expand_as(mask)[mask.bool()]
    hit = {
        "A>0 inside": bool(((a > 0) & (r <= hi)).any()),
        "A>0 above": bool(((a > 0) & (r > hi)).any()),
        "A<0 inside": bool(((a < 0) & (r >= lo) & (r <= hi)).any()),
        "A<0 below": bool(((a < 0) & (r < lo)).any()),
        "A<0 above": bool(((a < 0) & (r > hi)).any()),
    }
    if c is not None:
        hit["A<0 beyond c"] = bool(((a < 0) & (r > c)).any())
    assert all(hit.values()), hit


@pytest.mark.parametrize("seed", [0, 1, 4])  # seeds whose ratios hit every region (checked)
@pytest.mark.parametrize("mode", O.AGGREGATION_MODES)
@pytest.mark.parametrize("dual_clip", [None, 2.0])
def test_ppo_clip_gradient(mode, dual_clip, seed):
    logp, old, adv, mask, *_ = _inputs(seed)
    obj = O.Objective("ppo", eps_low=0.2, eps_high=0.28, dual_clip=dual_clip, aggregation=mode)
    lo, hi = obj.clip_range
    _regions_hit(logp, old, adv, mask, lo, hi, dual_clip)
    g = _grad(lambda x: _ppo_loss(x, old, adv, mask, lo, hi, dual_clip, mode), logp)
    torch.testing.assert_close(O.loss_gradient(obj, logp, old, adv, mask), g, rtol=1e-12, atol=1e-15)


def test_ppo_gradient_is_a_times_r_inside_and_zero_where_clipped():
    """The closed form by hand on four tokens: A r inside, 0 where the clip binds for A's sign."""
    obj = O.Objective("ppo", eps_low=0.2, eps_high=0.2, dual_clip=3.0, aggregation="token-sum")
    r = torch.tensor([[1.1, 1.5, 0.5, 4.0]], dtype=torch.float64)
    mask = torch.ones(1, 4)
    for a, expected in ((1.0, [-1.1, 0, -0.5, 0]), (-1.0, [1.1, 1.5, 0, 0])):
        got = O.loss_gradient(obj, r.log(), torch.zeros(1, 4), torch.tensor([a]), mask)
        torch.testing.assert_close(got, torch.tensor([expected], dtype=torch.float64))


@pytest.mark.parametrize("mode", O.AGGREGATION_MODES)
def test_gspo_gradient_matches_trl_and_verl_forms(mode):
    logp, old, adv, mask, *_ = _inputs(1, spread=0.6)
    s = torch.exp(((logp - old) * mask).sum(-1) / mask.sum(-1))
    obj = O.Objective("gspo", eps_low=0.1, eps_high=0.1, aggregation=mode)
    lo, hi = obj.clip_range
    assert bool(((s >= lo) & (s <= hi)).any()) and bool(((s < lo) | (s > hi)).any())
    expected = O.loss_gradient(obj, logp, old, adv, mask)
    for form in (_gspo_trl, _gspo_verl):
        g = _grad(lambda x, form=form: form(x, old, adv, mask, lo, hi, mode), logp)
        torch.testing.assert_close(expected, g, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("a", [1.5, -1.0])
def test_gspo_clipped_branch_matches_proofs_11(a):
    """proofs/11_objectives §2, the clipped branch: with three equal log-ratios log q (s = q) next to an
    inside sequence, dL/dlogp_1t = -w A q where the clip is inactive for A's sign and 0 on the whole row
    where it is active; the oracle, TRL's and verl's forms (autograd) agree on every region."""
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    obj = O.Objective("gspo", eps_low=0.2, eps_high=0.28, aggregation="seq-mean-token-mean")
    lo, hi = obj.clip_range
    old, adv = torch.zeros(2, 3, dtype=torch.float64), torch.tensor([a, 1.0], dtype=torch.float64)
    for q in (0.5, 0.9, 1.2, 1.5, 3.0):
        logp = torch.tensor([[math.log(q)] * 3, [0.0] * 3], dtype=torch.float64)
        inside = q <= hi if a > 0 else q >= lo
        got = O.loss_gradient(obj, logp, old, adv, mask)
        want = torch.full((3,), -a * q / 6 if inside else 0.0, dtype=torch.float64)  # w = 1/(N_seq |y|)
        torch.testing.assert_close(got[0], want, rtol=1e-14, atol=0)
        for form in (_gspo_trl, _gspo_verl):
            g = _grad(lambda x, form=form: form(x, old, adv, mask, lo, hi, "seq-mean-token-mean"), logp)
            torch.testing.assert_close(got, g, rtol=1e-12, atol=1e-15)


def test_gspo_token_mean_weighs_sequences_by_length():
    """Token-summed: sequence i's objective gets |y_i|/N_tok; seq-mean-token-mean gives 1/N_seq."""
    mask = _mask([1, 4], 4)
    logp = torch.zeros(2, 4, dtype=torch.float64)
    obj = O.Objective("gspo", aggregation="token-mean")
    per_seq = O.loss_gradient(obj, logp, logp, torch.tensor([1.0, 1.0]), mask).sum(-1)
    # dL/dlog s_i = sum_t dL/dlogp_it (log s_i is the token mean of the log-ratios); s_i = A_i = 1
    torch.testing.assert_close(per_seq, -mask.sum(-1) / mask.sum())
    obj = O.Objective("gspo", aggregation="seq-mean-token-mean")
    per_seq = O.loss_gradient(obj, logp, logp, torch.tensor([1.0, 1.0]), mask).sum(-1)
    torch.testing.assert_close(per_seq, torch.full((2,), -0.5, dtype=torch.float64))


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_cispo_gradient_verl_and_trl_bounds(mode):
    logp, old, adv, mask, *_ = _inputs(2)
    verl = O.Objective("cispo", eps_low=0.2, eps_high=0.28, aggregation=mode)
    g = _grad(lambda x: _cispo(x, old, adv, mask, 0.8, 1.28, mode), logp)
    torch.testing.assert_close(O.loss_gradient(verl, logp, old, adv, mask), g, rtol=1e-12, atol=1e-15)
    trl = O.Objective("cispo", eps_low=math.inf, eps_high=4.0, aggregation=mode)  # TRL epsilon_high=5.0
    g = _grad(lambda x: _cispo(x, old, adv, mask, -math.inf, 5.0, mode), logp)
    torch.testing.assert_close(O.loss_gradient(trl, logp, old, adv, mask), g, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("tis_mode", ["truncate", "mask"])
@pytest.mark.parametrize("kind", ["ppo", "gspo"])
def test_importance_weights_multiply_the_policy_gradient(level, tis_mode, kind):
    logp, old, adv, mask, _, rollout = _inputs(3, spread=0.8)
    obj = O.Objective(
        kind, tis_cap=1.5, tis_level=level, tis_mode=tis_mode, aggregation="seq-mean-token-mean"
    )
    rho = _rho(old, rollout, mask, 1.5, level, tis_mode)
    assert bool((rho[mask.bool()] == (0 if tis_mode == "mask" else 1.5)).any())  # the cap binds somewhere
    torch.testing.assert_close(
        O.importance_weights(old, rollout, mask, cap=1.5, level=level, mode=tis_mode), rho * mask
    )
    lo, hi = obj.clip_range
    if kind == "ppo":
        g = _grad(lambda x: _ppo_loss(x, old, adv, mask, lo, hi, None, "seq-mean-token-mean", rho=rho), logp)
    else:
        g = _grad(lambda x: _gspo_trl(x, old, adv, mask, lo, hi, "seq-mean-token-mean", rho=rho), logp)
    got = O.loss_gradient(obj, logp, old, adv, mask, rollout_logp=rollout)
    torch.testing.assert_close(got, g, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kind", ["ppo", "gspo", "cispo"])
def test_given_importance_weights_are_used_as_they_are(kind):
    """``rho=`` replaces the declared weights (any constants, e.g. a wrong implementation's): with the
    declared ones it is the declared objective; with others, autograd of the surrogate times them."""
    logp, old, adv, mask, _, rollout = _inputs(4, spread=0.8)
    obj = O.Objective(kind, tis_cap=1.5, aggregation="token-mean")
    rho = O.importance_weights(old, rollout, mask, cap=1.5)
    torch.testing.assert_close(
        O.loss_gradient(obj, logp, old, adv, mask, rho=rho),
        O.loss_gradient(obj, logp, old, adv, mask, rollout_logp=rollout),
        rtol=0,
        atol=0,
    )
    other = torch.rand(mask.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3
    plain = O.loss_gradient(O.Objective(kind, aggregation="token-mean"), logp, old, adv, mask)
    if kind != "gspo":  # token objectives: the weight multiplies each token's gradient
        torch.testing.assert_close(
            O.loss_gradient(obj, logp, old, adv, mask, rho=other), plain * other * mask
        )
    with pytest.raises(ValueError, match=r"rho has shape \(6, 1\) but mask has shape"):
        O.loss_gradient(obj, logp, old, adv, mask, rho=other[:, :1])
    with pytest.raises(ValueError, match="rho contains a negative, NaN or infinite weight"):
        O.loss_gradient(obj, logp, old, adv, mask, rho=-other)


def _k(logp, ref, kind):
    if kind == "k1":
        return logp - ref
    if kind == "k2":
        return 0.5 * (logp - ref) ** 2
    return torch.exp(ref - logp) - (ref - logp) - 1  # TRL 1.16.0 / verl low_var_kl (unclamped)


@pytest.mark.parametrize("kl", ["k1", "k2", "k3"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_kl_in_the_loss_adds_its_estimator_gradient(kl, mode):
    logp, old, adv, mask, ref, _ = _inputs(4)
    obj = O.Objective("ppo", eps_low=0.2, eps_high=0.28, kl=kl, kl_coef=0.04, aggregation=mode)
    lo, hi = obj.clip_range
    g = _grad(lambda x: _ppo_loss(x, old, adv, mask, lo, hi, None, mode, kl=0.04 * _k(x, ref, kl)), logp)
    torch.testing.assert_close(
        O.loss_gradient(obj, logp, old, adv, mask, ref_logp=ref), g, rtol=1e-12, atol=1e-15
    )
    in_reward = O.Objective("ppo", eps_low=0.2, eps_high=0.28, kl=kl, kl_coef=0.04, kl_placement="reward")
    plain = O.Objective("ppo", eps_low=0.2, eps_high=0.28)
    torch.testing.assert_close(
        O.loss_gradient(in_reward, logp, old, adv, mask), O.loss_gradient(plain, logp, old, adv, mask)
    )
    value, slope = O.kl_estimate(logp, ref, kl)
    torch.testing.assert_close(value, _k(logp, ref, kl))
    torch.testing.assert_close(slope, _grad(lambda x: _k(x, ref, kl).sum(), logp))


def test_kl_placement_bias_exact_over_a_categorical_policy():
    """The theorem of proofs/11: expected gradients of each placement, exact sums over 5 outcomes.

    ``y ~ pi = softmax(theta)``; ``k(delta_y)`` with ``delta = log pi - log q``. In the loss the
    expected gradient is ``E[dk/ddelta * grad log pi]``; in the reward (REINFORCE with penalty
    ``k``) it is ``E[k * grad log pi]``. k2-in-loss and k1-in-reward are the reverse KL's gradient,
    k3-in-loss is the forward KL's, k1-in-loss is 0; k2- and k3-in-reward are neither.
    """
    gen = torch.Generator().manual_seed(5)
    theta = torch.randn(5, generator=gen, dtype=torch.float64)
    logq = torch.log_softmax(torch.randn(5, generator=gen, dtype=torch.float64), 0)
    logpi = torch.log_softmax(theta, 0)
    pi = logpi.exp()
    score = torch.autograd.functional.jacobian(lambda th: torch.log_softmax(th, 0), theta)  # [y, d]

    def reverse(th):
        lp = torch.log_softmax(th, 0)
        return (lp.exp() * (lp - logq)).sum()

    def forward(th):
        return (logq.exp() * (logq - torch.log_softmax(th, 0))).sum()

    g_rev = torch.autograd.functional.jacobian(reverse, theta)
    g_fwd = torch.autograd.functional.jacobian(forward, theta)
    expected = {}
    for kl in ("k1", "k2", "k3"):
        value, slope = O.kl_estimate(logpi, logq, kl)
        expected[(kl, "loss")] = (pi * slope) @ score
        expected[(kl, "reward")] = (pi * value) @ score
    close = lambda a, b: torch.allclose(a, b, rtol=1e-10, atol=1e-12)  # noqa: E731
    assert close(expected[("k1", "loss")], torch.zeros(5, dtype=torch.float64))
    assert close(expected[("k2", "loss")], g_rev) and close(expected[("k1", "reward")], g_rev)
    assert close(expected[("k3", "loss")], g_fwd)
    for key in (("k2", "reward"), ("k3", "reward")):
        assert not close(expected[key], g_rev) and not close(expected[key], g_fwd), key


def test_objective_errors_name_the_field():
    with pytest.raises(ValueError, match="kind='grpo' must be"):
        O.Objective("grpo")
    with pytest.raises(ValueError, match=r"eps_low=-0.1 must be a number >= 0"):
        O.Objective(eps_low=-0.1)
    with pytest.raises(ValueError, match=r"dual_clip=0.5 must be a number > 1"):
        O.Objective(dual_clip=0.5)
    with pytest.raises(ValueError, match=r"dual_clip=3.0 applies to kind='ppo'"):
        O.Objective("gspo", dual_clip=3.0)
    with pytest.raises(ValueError, match=r"kl_coef=0.1 needs an estimator"):
        O.Objective(kl_coef=0.1)
    with pytest.raises(ValueError, match="kl='k4'"):
        O.Objective(kl="k4")
    with pytest.raises(ValueError, match="tis_cap=0 must be a positive"):
        O.Objective(tis_cap=0)
    with pytest.raises(ValueError, match="aggregation='mean'"):
        O.Objective(aggregation="mean")
    logp, old, adv, mask, *_ = _inputs()
    with pytest.raises(ValueError, match="needs ref_logp="):
        O.loss_gradient(O.Objective(kl="k3", kl_coef=0.1), logp, old, adv, mask)
    with pytest.raises(ValueError, match="needs rollout_logp="):
        O.loss_gradient(O.Objective(tis_cap=2.0), logp, old, adv, mask)
    with pytest.raises(ValueError, match=r"advantages has shape \(3,\)"):
        O.loss_gradient(O.Objective(), logp, old, adv[:3], mask)
    with pytest.raises(ValueError, match="logp contains a NaN"):
        O.loss_gradient(O.Objective(), torch.full_like(logp, math.nan), old, adv, mask)
    with pytest.raises(TypeError, match=r"must be a sigma_ref.objectives.Objective"):
        O.loss_gradient("ppo", logp, old, adv, mask)
    with pytest.raises(ValueError, match="estimator='k5'"):
        O.kl_estimate(logp, old, "k5")
    with pytest.raises(ValueError, match="level='batch'"):
        O.importance_weights(old, old, mask, cap=2.0, level="batch")


@pytest.mark.cuda
def test_aggregation_weights_stay_on_the_masks_device() -> None:
    """A CUDA mask gets CUDA weights (the reference loss of level 5 multiplies them with CUDA log-probs
    on nccl ranks), equal to the CPU ones."""
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"):
        on_gpu = O.aggregation_weights(mask.cuda(), mode, num_tokens=10, num_seqs=4)
        assert on_gpu.device.type == "cuda"
        assert torch.equal(on_gpu.cpu(), O.aggregation_weights(mask, mode, num_tokens=10, num_seqs=4))
