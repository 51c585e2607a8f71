"""The peer adapters (``spec/adapters``): each calls its framework's own code and computes
what its declared convention says, and each deviation listed under the README's peer
matrix is shown here on the input the sentence names.

Peers that are not installed are skipped with the reason (``make peers`` installs them);
the seed post's adapters always run.
"""

from __future__ import annotations

import functools
import inspect
import math
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

from sigma_ref import grpo_advantage, rloo_advantage
from sigma_ref.conformance import Adapter, Batch, detect_convention
from sigma_ref.conformance.losses import make_policy_loss
from sigma_ref.conformance.matrix import PEERS, adapter_module, run_adapter, run_matrix
from sigma_ref.testing import assert_advantages_close

# the probe groups of the study: k = 1, k = 2, two silent groups, real rewards (G = 4)
PROBE = np.array(
    [
        [1.0, 0.0, 0.0, 0.0],
        [1.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0],
        [1.0, 1.0, 1.0, 1.0],
        [0.5, 0.2, 0.9, 0.1],
    ]
)
PROBE_BATCH = Batch.grouped(PROBE)
# verl's ragged case: uid a has 4 interleaved members, b 2 (both 0), c is a singleton
RAGGED = Batch(np.array([1.0, 0.0, 0.7, 1.0, 0.0, 0.3, 0.0]), np.array([0, 1, 0, 2, 1, 0, 0]))


def _module(name: str):
    """The adapter module, its peer imported (outside any per-call time limit of the suite: an import
    cut short by the limit on a loaded machine leaves torch._dynamo half set up for every peer)."""
    module = adapter_module(name)
    reason = module.unavailable()
    if reason is not None:
        pytest.skip(reason)
    _warm_up(name)
    return module


@functools.cache
def _warm_up(name: str) -> None:
    first = next(iter(adapter_module(name).ADAPTERS.values()), None)
    if first is not None:
        first(Batch.grouped([[1.0, 0.0, 0.0, 0.0]]))


def _all_adapters() -> list:
    """Every mode with its own advantage function (objective variants share their base row's)."""
    params = []
    for peer in PEERS:
        module = adapter_module(peer)
        for mode in module.ADAPTERS:
            if mode not in getattr(module, "LOSS_ONLY", {}):
                params.append(pytest.param(peer, mode, id=f"{peer}:{mode}"))
    return params


def _fp(adapter: Adapter, batch: Batch, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Raw output of the adapter (as the layout calls it) for rewards of ``dtype``."""
    return adapter.call_raw(batch, torch.tensor(batch.rewards, dtype=dtype))


# --------------------------------------------------------------------------------------
# every adapter: its own code, its declared convention
@pytest.mark.parametrize(("peer", "mode"), _all_adapters())
def test_adapter_matches_oracle_on_probe(peer: str, mode: str) -> None:
    """On the probe groups (k = 1, 2, silent, real rewards) each mode equals the oracle under its
    declared convention, to float32 precision (several peers compute in float32)."""
    adapter = _module(peer).ADAPTERS[mode]
    if adapter.convention is None:
        pytest.skip(f"{adapter.name} declares no convention (see test_trl_normalize_then_sum)")
    actual = adapter(PROBE_BATCH)
    assert_advantages_close(
        actual.reshape(PROBE.shape),
        PROBE,
        convention=adapter.convention,
        rtol=3e-6,
        atol=3e-6,
        context=adapter.name,
    )


@pytest.mark.parametrize(("peer", "mode"), _all_adapters())
def test_adapter_is_detected_as_declared(peer: str, mode: str) -> None:
    """The probes of ``detect_convention`` name the declared convention."""
    adapter = _module(peer).ADAPTERS[mode]
    if adapter.convention is None:
        pytest.skip(f"{adapter.name} declares no convention")
    det = detect_convention(adapter)
    if peer == "post" and mode == "dapo":
        # the post's dapo_advantage takes sum(R) in {0, G} for "silent": the structure probe
        # [[1,0,0,0],[0,3,1,0]] has sum 4 = G in its second group, which it drops
        assert det.preset is None and det.family == "unknown"
        return
    assert det.preset == adapter.convention, det.summary()


def test_post_is_always_available() -> None:
    """The seed post's adapters need nothing but sigma-ref."""
    module = adapter_module("post")
    assert module.available() and module.unavailable() is None
    assert set(module.ADAPTERS) == {"grpo", "dr_grpo", "dapo"}


@pytest.mark.parametrize("peer", [p for p in PEERS if p != "post"])
def test_unavailable_reason_or_version(peer: str) -> None:
    """A peer is either installed (with a version) or says why not and how to fix it."""
    module = adapter_module(peer)
    if module.available():
        assert module.PEER.version is not None and module.unavailable() is None
    else:
        assert "make peers" in module.unavailable()
        adapter = next(iter(module.ADAPTERS.values()))
        with pytest.raises(ImportError, match="make peers"):
            adapter(PROBE_BATCH)


# --------------------------------------------------------------------------------------
# 1-2: Bessel std and a different eps in each peer's GRPO
@pytest.mark.parametrize(
    ("peer", "mode", "eps", "a_plus"),
    [
        ("verl", "grpo", 1e-6, 1.49999702),
        ("verl", "grpo_vectorized", 1e-6, 1.49999702),
        ("trl", "group", 1e-4, 1.49970007),
        ("openrlhf", "group_norm", 1e-9, 1.5),
    ],
)
def test_grpo_uses_bessel_std_plus_eps(peer: str, mode: str, eps: float, a_plus: float) -> None:
    """[1,0,0,0]: A+ = 3/4 / (sigma_b + eps) with sigma_b = 1/2 (Bessel), not the paper's sqrt(3)."""
    adapter = _module(peer).ADAPTERS[mode]
    a = adapter(Batch.grouped([[1.0, 0.0, 0.0, 0.0]]))
    assert float(a[0]) == pytest.approx(0.75 / (0.5 + eps), rel=1e-7)
    assert float(a[0]) == pytest.approx(a_plus, abs=1e-7)
    paper = float(grpo_advantage(np.array([1.0, 0.0, 0.0, 0.0]))[0])
    assert paper == pytest.approx(math.sqrt(3))
    assert float(a[0]) / paper == pytest.approx(math.sqrt(3 / 4), rel=3e-4)
    det = detect_convention(adapter)
    assert det.convention is not None and det.convention.ddof == 1
    assert det.convention.eps == pytest.approx(eps, rel=0.05)


def test_silent_groups_get_zero_everywhere() -> None:
    """[0,0,0,0] and [1,1,1,1] get exactly 0 (no NaN) in every installed GRPO, RLOO, Dr. GRPO mode."""
    seen = 0
    for peer in PEERS:
        module = adapter_module(peer)
        if not module.available():
            continue
        for mode, adapter in module.ADAPTERS.items():
            if mode in getattr(module, "LOSS_ONLY", {}):  # the advantage of its base row
                continue
            if adapter.convention is None:  # TRL normalize_then_sum: see its own test
                continue
            a = adapter(PROBE_BATCH).numpy().reshape(5, 4)
            assert (a[2:4] == 0).all(), (adapter.name, a[2:4])
            seen += 1
    assert seen >= 3


# --------------------------------------------------------------------------------------
# 3: singleton groups
def test_verl_singletons_disagree_between_code_paths() -> None:
    """Ragged uids [a,b,a,c,b,a,a], rewards [1,0,.7,1,0,.3,0]: the singleton c (R = 1) gets
    R/(1+1e-6) in grpo and grpo_vectorized, R in grpo(norm off) and rloo, but 0 in rloo_vectorized."""
    verl = _module("verl")
    c = 3  # position of the singleton
    modes = [m for m in verl.ADAPTERS if "[" not in m]
    got = {mode: float(verl.ADAPTERS[mode](RAGGED)[c]) for mode in modes}
    # mean 0 and std 1 are float32 scalars in verl, so 1 + 1e-6 is rounded to float32
    assert got["grpo"] == pytest.approx(1 / (1 + 1e-6), rel=1e-7)
    assert got["grpo_vectorized"] == pytest.approx(1 / (1 + 1e-6), rel=1e-7)
    assert got["grpo_no_std"] == 1.0 and got["grpo_vectorized_no_std"] == 1.0
    assert got["rloo"] == 1.0
    assert got["rloo_vectorized"] == 0.0
    # the other groups agree between the two RLOO paths and with the oracle
    rloo, vec = verl.ADAPTERS["rloo"](RAGGED), verl.ADAPTERS["rloo_vectorized"](RAGGED)
    others = np.array([i != c for i in range(RAGGED.n)])
    assert torch.allclose(rloo[others], vec[others], atol=1e-12)
    expected = grpo_advantage(RAGGED.rewards[others], convention="verl", index=RAGGED.index[others])
    assert np.allclose(verl.ADAPTERS["grpo"](RAGGED)[others].numpy(), expected, atol=1e-7)


def test_trl_group_of_one_gets_zero() -> None:
    """num_generations = 1 (TRL's eval path), rewards [1, 0, .7]: every scale gives A = 0."""
    trl = _module("trl")
    batch = Batch.grouped([[1.0], [0.0], [0.7]])
    for mode in ("group", "batch", "none"):
        assert trl.ADAPTERS[mode](batch).tolist() == [0.0, 0.0, 0.0]


def test_openrlhf_group_of_one_is_nan() -> None:
    """n_samples_per_prompt = 1, rewards [1, 0, .7]: group_norm and rloo give NaN (0/0), dr_grpo 0
    (OpenRLHF's CLI refuses n = 1 for these estimators)."""
    orl = _module("openrlhf")
    batch = Batch.grouped([[1.0], [0.0], [0.7]])
    with pytest.warns(UserWarning):
        assert torch.isnan(orl.ADAPTERS["group_norm"](batch)).all()
    assert torch.isnan(orl.ADAPTERS["rloo"](batch)).all()
    assert orl.ADAPTERS["dr_grpo"](batch).tolist() == [0.0, 0.0, 0.0]


# --------------------------------------------------------------------------------------
# 4-5: TRL's batch scale and normalize_then_sum
def test_trl_batch_scale_couples_groups() -> None:
    """scale_rewards='batch' on the probe batch: one Bessel std over all 20 rewards (0.47713509),
    so [1,0,0,0] gets 1.57155252, and changing another group changes it."""
    trl = _module("trl")
    a = trl.ADAPTERS["batch"](PROBE_BATCH)
    assert float(a[0]) == pytest.approx(0.75 / (0.47713509 + 1e-4), rel=1e-6)
    assert float(a[0]) == pytest.approx(1.57155252, abs=1e-6)
    changed = PROBE.copy()
    changed[4] = [5.0, 0.0, 0.0, 0.0]
    b = trl.ADAPTERS["batch"](Batch.grouped(changed))
    assert abs(float(b[0]) - float(a[0])) > 0.5
    assert_advantages_close(a.reshape(PROBE.shape), PROBE, convention="trl_batch", rtol=1e-6, atol=1e-6)


def test_trl_normalize_then_sum_renormalises_over_the_batch() -> None:
    """multi_objective_aggregation='normalize_then_sum', one reward function, probe batch: each
    group is normalised (Bessel + 1e-4), then divided again by one std over the whole batch, so
    [1,0,0,0] gets 2.179 (not 1.4997) and depends on the other groups; silent groups get the
    batch mean's rounding (about 1e-17 here, -1e-8 in float32), not exactly 0."""
    trl = _module("trl")
    a = trl.ADAPTERS["normalize_then_sum"](PROBE_BATCH).numpy().reshape(5, 4)
    group = trl.ADAPTERS["group"](PROBE_BATCH).numpy().reshape(5, 4)
    assert a[0, 0] == pytest.approx(2.17917013, abs=1e-6)
    batch_std = np.std(group.reshape(-1), ddof=1)
    assert np.allclose(a, group / (batch_std + 1e-4), atol=1e-12)
    assert (np.abs(a[2:4]) < 1e-7).all()
    changed = PROBE.copy()
    changed[4] = [0.0, 0.0, 0.0, 0.0]  # one more silent group shrinks the batch std
    b = trl.ADAPTERS["normalize_then_sum"](Batch.grouped(changed)).numpy()
    assert b[0] > a[0, 0] + 0.1


# --------------------------------------------------------------------------------------
# 6-7: OpenRLHF's clamp and reinforce_baseline
def test_openrlhf_clamps_advantages_to_ten() -> None:
    """group_norm, G = 128, k = 1: A+ = 127/sqrt(128 * 127/128)... = 11.225320 under the oracle's
    openrlhf convention, but reward.clip_range (default (-10, 10)) clamps it to 10.0; at G = 101
    (A+ = 9.950372) nothing is clamped."""
    orl = _module("openrlhf")
    for G, clamped in ((101, False), (128, True)):
        rewards = np.zeros((1, G))
        rewards[0, 0] = 1.0
        a = orl.ADAPTERS["group_norm"](Batch.grouped(rewards))
        want = float(grpo_advantage(rewards, convention="openrlhf")[0, 0])
        if clamped:
            assert want == pytest.approx(11.225320, abs=1e-6)
            assert float(a[0]) == 10.0
        else:
            assert float(a[0]) == pytest.approx(want, rel=1e-6)


def test_openrlhf_clamp_breaks_dr_grpo_and_rloo_beyond_ten() -> None:
    """The clamp acts on un-normalised advantages too: rloo on [0,12,4,0] gives 10.0 instead of
    10.6667 (the group no longer sums to 0), dr_grpo on [0,0,0,40] gives [-10,-10,-10,10]."""
    orl = _module("openrlhf")
    a = orl.ADAPTERS["rloo"](Batch.grouped([[0.0, 12.0, 4.0, 0.0]])).numpy()
    assert np.allclose(a, [-5.333333333333333, 10.0, 0.0, -5.333333333333333], atol=1e-12)
    assert float(rloo_advantage(np.array([0.0, 12.0, 4.0, 0.0]))[1]) == pytest.approx(10.666666666666666)
    assert abs(a.sum()) > 0.6
    d = orl.ADAPTERS["dr_grpo"](Batch.grouped([[0.0, 0.0, 0.0, 40.0]])).tolist()
    assert d == [-10.0, -10.0, -10.0, 10.0]


@pytest.mark.parametrize(
    ("peer", "mode"), [("verl", "rloo"), ("verl", "rloo_vectorized"), ("openrlhf", "rloo")]
)
def test_rloo_is_exact_below_the_clamp(peer: str, mode: str) -> None:
    """RLOO = G/(G-1)(R - mu) to 1e-12 in float64 on the probe batch (verl and OpenRLHF)."""
    adapter = _module(peer).ADAPTERS[mode]
    expected = rloo_advantage(PROBE).reshape(-1)
    assert np.abs(adapter(PROBE_BATCH).numpy() - expected).max() < 1e-12


def test_openrlhf_reinforce_baseline_whitens_the_batch() -> None:
    """Estimator reinforce_baseline (not a GRPO mode) = R - mean, then divided by one population
    std over every token of the batch: [1,0,0,0] in the probe batch gets 2.294, not 0.75."""
    orl = _module("openrlhf")
    fn = orl._advantages("reinforce_baseline")
    a = fn(torch.tensor(PROBE.reshape(-1)), 4)
    centered = PROBE - PROBE.mean(1, keepdims=True)
    assert np.allclose(a.numpy(), (centered / centered.std()).reshape(-1), atol=1e-6)
    assert float(a[0]) == pytest.approx(2.29415751, abs=1e-5)


# --------------------------------------------------------------------------------------
# 8: grouping
def test_verl_groups_by_uid_interleaved() -> None:
    """verl groups by uid wherever the samples are; the oracle with index= agrees (ragged batch,
    singleton c excluded, its convention differs per path)."""
    verl = _module("verl")
    keep = RAGGED.index != 2
    batch = Batch(RAGGED.rewards[keep], RAGGED.index[keep])
    for mode, conv in (
        ("grpo", "verl"),
        ("grpo_vectorized", "verl"),
        ("rloo", "rloo"),
        ("grpo_no_std", "dr_grpo"),
    ):
        assert_advantages_close(
            verl.ADAPTERS[mode](batch),
            batch.rewards,
            convention=conv,
            index=batch.index,
            rtol=1e-6,
            atol=1e-6,
        )


def test_trl_and_openrlhf_group_by_position() -> None:
    """[1,0,1,0, 0,0,0,0] with G = 4: two groups by position, whatever prompts the rows came from."""
    for peer, mode in (("trl", "group"), ("openrlhf", "group_norm")):
        module = adapter_module(peer)
        if not module.available():
            continue
        a = module.ADAPTERS[mode](Batch.grouped([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
        assert a[4:].tolist() == [0.0] * 4
        assert float(a[0]) == pytest.approx(-float(a[1]))


# --------------------------------------------------------------------------------------
# 10: dtypes
def test_verl_vectorized_computes_statistics_in_float32() -> None:
    """float64 probe batch: grpo matches the oracle to 1e-12, grpo_vectorized only to ~1e-7 (its
    group statistics are float32); bf16 rewards give float32 (grpo_vectorized) and float64
    (rloo_vectorized) advantages."""
    verl = _module("verl")
    expected = grpo_advantage(PROBE, convention="verl").reshape(-1)
    loop = verl.ADAPTERS["grpo"](PROBE_BATCH).numpy()
    vec = verl.ADAPTERS["grpo_vectorized"](PROBE_BATCH).numpy()
    assert np.abs(loop - expected).max() < 1e-12
    assert 1e-9 < np.abs(vec - expected).max() < 1e-6
    assert _fp(verl.ADAPTERS["grpo"], PROBE_BATCH, torch.bfloat16).dtype == torch.bfloat16
    assert _fp(verl.ADAPTERS["grpo_vectorized"], PROBE_BATCH, torch.bfloat16).dtype == torch.float32
    assert _fp(verl.ADAPTERS["rloo_vectorized"], PROBE_BATCH, torch.bfloat16).dtype == torch.float64
    assert _fp(verl.ADAPTERS["grpo_vectorized"], PROBE_BATCH, torch.float64).dtype == torch.float64
    big = np.zeros((1, 4096))
    big[0, :7] = 1.0
    want = float(grpo_advantage(big, convention="verl")[0, 0])
    assert want == pytest.approx(24.165512, abs=1e-6)
    assert float(verl.ADAPTERS["grpo"](Batch.grouped(big))[0]) == pytest.approx(want, rel=1e-12)
    assert float(verl.ADAPTERS["grpo_vectorized"](Batch.grouped(big))[0]) == pytest.approx(
        24.165935, abs=1e-6
    )


def test_trl_bf16_rewards_give_float32() -> None:
    """bf16 rewards times TRL's float32 reward_weights: float32 advantages; float64 stays float64."""
    trl = _module("trl")
    assert _fp(trl.ADAPTERS["group"], PROBE_BATCH, torch.bfloat16).dtype == torch.float32
    assert _fp(trl.ADAPTERS["group"], PROBE_BATCH, torch.float64).dtype == torch.float64


def test_openrlhf_advantages_take_the_kl_dtype() -> None:
    """float64 rewards with float32 kl (the log-prob dtype of a float32 or bf16 run): OpenRLHF
    computes in float64 but writes float32 advantages; bf16 rewards are computed in float32."""
    orl = _module("openrlhf")
    rewards = torch.tensor(PROBE.reshape(-1))
    out = orl._advantages("group_norm", kl_dtype=torch.float32)(rewards, 4)
    assert out.dtype == torch.float32
    assert torch.equal(out, orl.ADAPTERS["group_norm"](PROBE_BATCH).float())
    assert _fp(orl.ADAPTERS["group_norm"], PROBE_BATCH, torch.bfloat16).dtype == torch.bfloat16


def test_post_group_of_one_is_nan() -> None:
    """The post's grpo_advantage on one response: tensor.std() of one element is NaN."""
    post = adapter_module("post")
    with pytest.warns(UserWarning):
        assert torch.isnan(post.ADAPTERS["grpo"](Batch.grouped([[0.7], [0.2]]))).all()


def test_post_computes_in_float32_and_keeps_the_graph() -> None:
    """The post's functions call rewards.float(): float64 in, float32 out; rewards that require
    grad give advantages that require grad (no detach)."""
    post = adapter_module("post")
    for mode in ("grpo", "dr_grpo", "dapo"):
        out = _fp(post.ADAPTERS[mode], PROBE_BATCH, torch.float64)
        assert out.dtype == torch.float32
        r = torch.tensor(PROBE, requires_grad=True)
        assert post.ADAPTERS[mode].advantages(r).requires_grad


# --------------------------------------------------------------------------------------
# 11: loss aggregation weights at ratio 1: dL/dlogp_it = -w_it A_i
N_LOSS, T_LOSS = 6, 5
LENGTHS = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 5.0], dtype=torch.float64)
MASK = (torch.arange(T_LOSS)[None, :] < LENGTHS[:, None]).to(torch.float64)


def _weights(loss) -> torch.Tensor:
    """w_it = -dL/dlogp_it / A_i at ratio 1, for A = 1..N."""
    gen = torch.Generator().manual_seed(0)
    logp = (torch.randn(N_LOSS, T_LOSS, generator=gen, dtype=torch.float64) * 0.1 - 1).requires_grad_(True)
    adv = torch.arange(1.0, N_LOSS + 1, dtype=torch.float64)
    loss(logp, logp.detach(), adv, MASK).backward()
    return -logp.grad / adv[:, None]


_TOKEN = MASK / MASK.sum()
_SEQ = MASK / (N_LOSS * LENGTHS[:, None])
_SEQ_EPS = MASK / (N_LOSS * (LENGTHS[:, None] + 1e-8))  # verl and OpenRLHF divide by n_i + 1e-8
_CONST = MASK / (N_LOSS * T_LOSS)
WEIGHTS = {
    ("trl", "loss[dapo]"): _TOKEN,
    ("trl", "loss[bnpo]"): _TOKEN,
    ("trl", "loss[grpo]"): _SEQ,
    ("trl", "loss[sapo]"): _SEQ,
    ("trl", "loss[dr_grpo]"): _CONST,
    ("trl", "loss[luspo]"): MASK / N_LOSS,
    ("trl", "loss[cispo]"): 0.2 * _TOKEN,  # default epsilon_high 0.2 caps the ratio weight
    ("trl", "loss[vespo]"): _TOKEN,
    ("verl", "loss[token-mean]"): _TOKEN,
    ("verl", "loss[token-sum]"): MASK,
    ("verl", "loss[seq-mean-token-sum]"): MASK / N_LOSS,
    ("verl", "loss[seq-mean-token-mean]"): _SEQ_EPS,
    ("verl", "loss[seq-mean-token-sum-norm]"): _CONST,
    ("openrlhf", "group_norm"): _TOKEN,
    ("openrlhf", "loss[seq-mean-token-mean]"): _SEQ_EPS,
}


@pytest.mark.parametrize(("peer", "mode"), list(WEIGHTS), ids=[f"{p}:{m}" for p, m in WEIGHTS])
def test_loss_aggregation_weights(peer: str, mode: str) -> None:
    """Each loss's weights w_it at ratio 1 (lengths 1..5 in width 5, N = 6): token-mean 1/sum n,
    per-sequence 1/(N n_i) (verl and OpenRLHF: 1/(N (n_i + 1e-8))), constant 1/(N T), token-sum 1,
    luspo 1/N; cispo's default epsilon_high = 0.2 scales its weights by 0.2."""
    adapter = _module(peer).ADAPTERS[mode]
    w = _weights(adapter.loss)
    assert torch.allclose(w, WEIGHTS[(peer, mode)], rtol=1e-9, atol=1e-12), w


@pytest.mark.parametrize(
    ("peer", "mode", "aggregation"),
    [
        ("trl", "loss[bnpo]", "token_mean"),
        ("trl", "loss[grpo]", "seq_mean_token_mean"),
        ("trl", "loss[dr_grpo]", "seq_mean_token_sum_norm"),
        ("verl", "loss[token-mean]", "token_mean"),
        ("verl", "loss[seq-mean-token-mean]", "seq_mean_token_mean"),
        ("verl", "loss[seq-mean-token-sum-norm]", "seq_mean_token_sum_norm"),
        ("openrlhf", "group_norm", "token_mean"),
        ("openrlhf", "loss[seq-mean-token-mean]", "seq_mean_token_mean"),
    ],
)
def test_loss_equals_reference_loss(peer: str, mode: str, aggregation: str) -> None:
    """Off ratio 1 too (random old log-probs, clipping active), the peer's loss and gradient equal
    the suite's reference clipped surrogate with the same aggregation (to 1e-8 relative: verl and
    OpenRLHF add 1e-8 to each sequence's token count)."""
    adapter = _module(peer).ADAPTERS[mode]
    gen = torch.Generator().manual_seed(1)
    logp = (torch.randn(N_LOSS, T_LOSS, generator=gen, dtype=torch.float64) * 0.3 - 1).requires_grad_(True)
    old = logp.detach() + torch.randn(N_LOSS, T_LOSS, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.linspace(-1.5, 2.0, N_LOSS, dtype=torch.float64)
    ours = make_policy_loss(aggregation)(logp, old, adv, MASK)
    (g_ours,) = torch.autograd.grad(ours, logp)
    theirs = adapter.loss(logp, old, adv, MASK)
    (g_theirs,) = torch.autograd.grad(theirs, logp)
    rtol = 1e-7 if aggregation == "seq_mean_token_mean" and peer != "trl" else 1e-12
    assert theirs.item() == pytest.approx(ours.item(), rel=rtol, abs=1e-14)
    assert torch.allclose(g_theirs, g_ours, rtol=rtol, atol=1e-14)


# --------------------------------------------------------------------------------------
# 12: DAPO keep mask (the post's)
def test_post_dapo_counts_k_as_the_reward_sum() -> None:
    """The post's dapo_advantage calls a group silent iff sum(R) in {0, G}: binary groups are
    right, but [0, 3, 1, 0] (sum 4 = G, sigma > 0) and [-1, 1, 0, 0] (sum 0) are dropped
    too, and [0.5, 0.5] (sigma = 0, sum 1) is kept."""
    post = adapter_module("post")
    dapo = post.ADAPTERS["dapo"]
    binary = Batch.grouped([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    assert dapo.keep(binary).tolist() == [True] * 4 + [False] * 8
    real = Batch.grouped([[0.0, 3.0, 1.0, 0.0], [-1.0, 1.0, 0.0, 0.0]])
    assert not dapo.keep(real).any()
    assert dapo(real).abs().max() == 0
    assert dapo.keep(Batch.grouped([[0.5, 0.5]])).all()


# --------------------------------------------------------------------------------------
# the matrix
def test_matrix_rows_for_every_mode() -> None:
    """The post's rows: checked with the declared convention, one n/a row for the missing loss;
    peers that are not installed are one 'not installed' row; the markdown holds no timings."""
    matrix = run_matrix(PEERS, max_examples=2, modes=["post:grpo", "post:loss"])
    by = {(r.implementation, r.mode): r for r in matrix.rows}
    grpo = by[("seed post", "grpo")]
    assert grpo.status == "checked" and grpo.declared == "post" and grpo.detected == "post"
    assert grpo.cells["identity"].outcome == "pass"
    # float32 results for other dtypes are hygiene: a WARN, not a FAIL
    assert "output_dtype[float64, bfloat16, float16]" in grpo.cells["contract"].warned
    assert grpo.cells["contract"].outcome == "pass"
    assert by[("seed post", "loss")].status == "n/a"
    for peer in PEERS[1:]:
        module = adapter_module(peer)
        if not module.available():
            assert by[(module.PEER.title, "")].status == "not installed"
    md = matrix.to_markdown()
    assert "| seed post | `grpo` | post | post |" in md
    assert " s " not in md and "seconds" not in md
    assert (
        matrix.to_markdown()
        == run_matrix(PEERS, max_examples=2, modes=["post:grpo", "post:loss"]).to_markdown()
    )


def test_run_adapter_reports_each_property() -> None:
    """One outcome per property and parameter, with its level."""
    results, ctx = run_adapter(adapter_module("post").ADAPTERS["dr_grpo"], max_examples=2)
    names = {r["property"] for r in results}
    assert {"output_shape", "advantage_values", "silent_group_zero", "dtype_accuracy"} <= names
    assert ctx.reference.name == "dr_grpo"
    verdicts = {r["verdict"] for r in results}
    assert verdicts <= {"pass", "FAIL", "WARN", "NOTE", "skip"}


@pytest.mark.slow
def test_verdicts_do_not_depend_on_seed_or_threads() -> None:
    """The verl part of the matrix, twice: another hypothesis seed and another torch thread count
    give the same verdict for every property (docs/spec.md §7: a verdict never depends on them)."""
    if not adapter_module("verl").available():
        pytest.skip("verl is not installed (make peers)")
    modes = ["verl:grpo", "verl:grpo_vectorized", "verl:rloo_vectorized", "verl:loss[seq-mean-token-mean]"]
    first = run_matrix(["verl"], max_examples=10, seed=0, threads=1, modes=modes, scaleout=False)
    second = run_matrix(["verl"], max_examples=10, seed=987654321, threads=2, modes=modes, scaleout=False)

    def verdicts(m):  # type: ignore[no-untyped-def]
        return {
            (r.mode, p["property"], p["param"]): p["verdict"]
            for r in m.rows
            if r.status == "checked"
            for p in r.properties
        }

    a, b = verdicts(first), verdicts(second)
    assert a.keys() == b.keys()
    assert {k: (a[k], b[k]) for k in a if a[k] != b[k]} == {}


def test_matrix_runs_on_the_threads_it_is_given_and_restores_them() -> None:
    """``run_matrix(threads=n)`` runs torch on ``n`` intra-op threads and gives the caller's back."""
    import torch

    from sigma_ref.conformance.matrix import _matrix_profile

    before = torch.get_num_threads()
    for threads in (1, 2):
        with _matrix_profile(threads):
            assert torch.get_num_threads() == threads
        assert torch.get_num_threads() == before


def test_matrix_and_cli_register_without_the_suites_machinery() -> None:
    """The matrix's columns are the suite's levels, and the CLI and the matrix import neither
    hypothesis nor pytest until the suite runs (``sigma-ref audit`` stays light)."""
    code = (
        "import sys, sigma_ref.cli, sigma_ref.conformance.matrix as m, sigma_ref.conformance.levels as lv; "
        "assert m.LEVELS is lv.LEVELS; print(sorted({'hypothesis', 'pytest'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------
# 13: ratio != 1, the objective each loss computes (the matrix's objective column)
def _declared_objectives() -> list:
    params = []
    for peer in PEERS:
        module = adapter_module(peer)
        for mode, adapter in module.ADAPTERS.items():
            if adapter.objective is not None:
                params.append(pytest.param(peer, mode, id=f"{peer}:{mode}"))
    return params


@pytest.mark.parametrize(("peer", "mode"), _declared_objectives())
def test_declared_objective_matches_the_loss(peer: str, mode: str) -> None:
    """Every declared objective (PPO clip and dual clip, DAPO's clip-higher, TRL's delta as a dual clip,
    GSPO, CISPO, GPG as CISPO clipped to [1, 1], OpenRLHF's truncated and masked importance weights,
    k1/k2/k3 KL terms and verl's k3+ as k2's gradient) equals the oracle's per-token gradient on the
    suite's probe (ratios 0.55 to 3.5, rollout weights 0.3 to 3, a reference policy off by up to 1 nat)."""
    adapter = _module(peer).ADAPTERS[mode]
    results, _ctx = run_adapter(adapter, max_examples=1, names=["loss_objective"])
    (r,) = results
    assert r["verdict"] == "NOTE" and r["message"].startswith("objective:"), r


def _probe() -> dict:
    from sigma_ref.spec.test_identity import _objective_probe

    return _objective_probe()


def _grad(loss, x: dict, **kw) -> torch.Tensor:  # type: ignore[no-untyped-def]
    leaf = x["logp"].clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss(leaf, x["old_logp"], x["advantages"], x["mask"], **kw), leaf)
    return g


@pytest.mark.parametrize("name", ["sapo", "geo_mean"])
def test_verl_sapo_and_geo_mean_ignore_loss_agg_mode(name: str) -> None:
    """verl loss_mode sapo and geo_mean with loss_agg_mode='token-mean' (the default): the weights at
    ratio 1 are seq-mean-token-mean's, 1/(N (n_i + 1e-8)) (1/6 for length 1 of lengths 1..5, N = 6),
    not token-mean's 1/sum n (1/20): both hard-code their aggregation."""
    verl = _module("verl")
    w = _weights(verl.ADAPTERS[f"policy[{name}]"].loss)
    assert torch.allclose(w, _SEQ_EPS, rtol=1e-7, atol=1e-12), w
    assert not torch.allclose(w, _TOKEN)
    assert float(w[0, 0]) == pytest.approx(1 / 6, rel=1e-7)


def test_trl_sequence_level_with_dapo_weights_sequences_by_length() -> None:
    """importance_sampling_level='sequence' (GSPO): with loss_type='grpo' each sequence's gradient
    sum is -A_i s_i / N (GSPO's sequence mean); with 'dapo' (the default) it is -A_i s_i |y_i| / N_tok:
    on the probe (lengths 6, 5, 1, 6, 3, 4) the length-6 rows weigh 6x the length-1 row."""
    from sigma_ref.objectives import Objective, loss_gradient

    trl = _module("trl")
    x = _probe()
    lengths = x["mask"].sum(-1)
    s = torch.exp(((x["logp"] - x["old_logp"]) * x["mask"]).sum(-1) / lengths)
    for mode, weight in (("loss[grpo, sequence]", 1 / 6), ("loss[dapo, sequence]", lengths / lengths.sum())):
        g = _grad(trl.ADAPTERS[mode].loss, x)
        agg = "grpo" if "grpo" in mode else "dapo"
        want = loss_gradient(
            Objective("gspo", aggregation=agg), x["logp"], x["old_logp"], x["advantages"], x["mask"]
        )
        assert torch.allclose(g, want, atol=1e-12)
        inside = (s >= 0.8) & (s <= 1.2)  # rows whose sequence ratio is inside the clip
        per_row = g.sum(-1)[inside] / (-x["advantages"] * s)[inside]
        expected = weight[inside] if isinstance(weight, torch.Tensor) else torch.full_like(per_row, weight)
        assert torch.allclose(per_row, expected, atol=1e-12), (mode, per_row)


def test_trl_kl_with_bias_correction_has_the_ratio_times_k2_gradient() -> None:
    """beta = 0.04 with use_bias_correction_kl=True (TRL's default): the KL term is r k3, whose gradient
    is 0.04 r (logp - ref) w (the reverse-KL gradient under the old policy's samples), neither k3's
    0.04 (1 - exp(ref - logp)) w nor k2's 0.04 (logp - ref) w; with the correction off it is k3's."""
    trl = _module("trl")
    x = _probe()
    r = torch.exp(x["logp"] - x["old_logp"])
    delta = x["logp"] - x["ref_logp"]
    w = x["mask"] / x["mask"].sum()
    policy = _grad(trl.ADAPTERS["loss[dapo]"].loss, x)
    kl = _grad(trl.ADAPTERS["loss[dapo, beta=0.04]"].loss, x, ref_logp=x["ref_logp"]) - policy
    assert torch.allclose(kl, 0.04 * w * r * delta, atol=1e-12)
    # the README's example: ratio 3.5 at row 3, token 5
    assert float(r[3, 5]) == pytest.approx(3.5)
    assert float(kl[3, 5]) == pytest.approx(0.003794, abs=5e-7)
    assert float(0.04 * w[3, 5] * (1 - torch.exp(-delta[3, 5]))) == pytest.approx(0.000787, abs=5e-7)
    assert (kl - 0.04 * w * delta).abs().max() > 1e-3
    plain = _grad(
        trl.ADAPTERS["loss[dapo, beta=0.04, use_bias_correction_kl=False]"].loss, x, ref_logp=x["ref_logp"]
    )
    assert torch.allclose(plain - policy, 0.04 * w * (1 - torch.exp(-delta)) * x["mask"], atol=1e-12)


@pytest.mark.parametrize(("peer", "mode"), [("verl", "kl[low_var_kl]"), ("openrlhf", "kl[k3]")])
def test_k3_in_the_loss_has_the_forward_kl_gradient(peer: str, mode: str) -> None:
    """k3 in the loss (verl's default kl_loss_type low_var_kl, OpenRLHF's kl.estimator k3): the KL
    gradient is 0.1 w (1 - pi_ref/pi), the forward KL's, not the reverse KL's 0.1 w (logp - ref)
    (k2's, and verl's k3+): on the probe they differ by up to 0.1 w x 0.47 (at logp - ref = -0.83)."""
    module = _module(peer)
    x = _probe()
    base = "loss[token-mean]" if peer == "verl" else "group_norm"
    policy = _grad(module.ADAPTERS[base].loss, x)
    kl = _grad(module.ADAPTERS[mode].loss, x, ref_logp=x["ref_logp"]) - policy
    delta = x["logp"] - x["ref_logp"]
    w = x["mask"] / x["mask"].sum()
    assert torch.allclose(kl, 0.1 * w * (1 - torch.exp(-delta)), atol=1e-7)
    gap = ((kl - 0.1 * w * delta) / (0.1 * w)).abs()[x["mask"] > 0]
    assert 0.3 < float(gap.max()) < 0.72


# --------------------------------------------------------------------------------------
# 14: level 5, each peer's loss split over W ranks and M micro-batches with the globals it takes
def _split_gradient(module, spec, W: int, M: int) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
    """In one process: the gradient of the spec's at-scale loss summed over W x M pieces (each scaled
    as the engine scales it, averaged over W as DDP does) and the W = M = 1 gradient. An SPMD loss
    (:func:`~sigma_ref.conformance.scaleout.spmd_loss`, tunix's: it takes ``process_group``) is one
    computation per micro-batch index over every rank's piece, as jax.sharding runs it."""
    gen = torch.Generator().manual_seed(3)
    n, t = 24, 8
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(torch.float64)
    logp = (torch.randn(n, t, generator=gen, dtype=torch.float64) * 0.3 - 1).requires_grad_(True)
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    fn = getattr(module.AT_SCALE, spec.loss)

    def run(w: int, m: int) -> torch.Tensor:
        logp.grad = None
        rows = torch.arange(n).chunk(w)
        if "process_group" in inspect.signature(fn).parameters:  # SPMD: the global micro-batch j
            for j in range(m):
                piece = torch.cat([r.chunk(m)[j] for r in rows])
                out = fn(
                    logp[piece],
                    logp[piece].detach(),
                    adv[piece],
                    mask[piece],
                    rank=0,
                    world_size=1,
                    process_group=None,
                )
                scale = 1 / m if spec.loss_scale == "mean-over-micro-batches" else 1.0
                (out * scale).backward()
            return logp.grad.clone()
        for r in rows:
            for piece in r.chunk(m):
                env = {
                    "global_num_tokens": int(mask.sum()),
                    "global_num_seqs": n,
                    "world_size": w,
                    "dp_size": w,
                    "micro_batches": m,
                }
                kw = {k: v for k, v in env.items() if k in inspect.signature(fn).parameters}
                out = fn(logp[piece], logp[piece].detach(), adv[piece], mask[piece], **kw)
                scale = 1 / m if spec.loss_scale == "mean-over-micro-batches" else 1.0
                (out * scale / w).backward()
        return logp.grad.clone()

    return run(W, M), run(1, 1)


def _scaleout_specs() -> list:
    params = []
    for peer in PEERS:
        module = adapter_module(peer)
        for name in sorted(
            {s.loss for s in getattr(module, "SCALEOUT", {}).values() if not isinstance(s, str)}
        ):
            why = UNJUDGED.get((peer, name))
            marks = [pytest.mark.skip(reason=why)] if why else []
            params.append(pytest.param(peer, name, id=f"{peer}:{name}", marks=marks))
    return params


#: At-scale losses whose pieces do not add up to the full batch, and why (read from the peer's code).
SPLIT_DEPENDENT: dict[tuple[str, str], str] = {
    ("trl", "bnpo"): "divides each micro-batch by its own token count ('normalization is performed over "
    "the local batch')",
    ("verl", "policy_geo_mean"): "compute_policy_loss_geo_mean ends in torch.mean over the micro-batch's "
    "sequences and ignores global_batch_info",
    ("unsloth", "bnpo"): "divides each micro-batch by its own token count (its comment: 'BNPO uses the "
    "local micro-batch token count')",
    ("tunix", "token_mean"): "aggregate_loss divides each micro-batch by its own token count and "
    "optax.MultiSteps averages the micro-batch gradients (the tunix row's note)",
}
#: At-scale losses this one-process probe cannot judge: verl's clip_cov drops the tokens it picks by
#: covariance within the micro-batch (a random subset of the top ones) whose clip is active; on this
#: probe it picks none, on the designed batch of level 5 it does (the matrix's cell, on real processes).
UNJUDGED: dict[tuple[str, str], str] = {
    ("verl", "policy_clip_cov"): "clip_cov's token choice is empty on this probe; level 5 measures it",
    **{
        ("areal", name): "AReaL's compute_total_loss_weight all-reduces over the process group, which one "
        "process cannot simulate; tests/test_peers_areal_scale.py measures it on real processes"
        for name in vars(adapter_module("areal").AT_SCALE)
    },
}


@pytest.mark.parametrize(("peer", "loss"), _scaleout_specs())
def test_at_scale_losses_add_up_to_the_full_batch(peer: str, loss: str) -> None:
    """The glue of the scale-out column, in one process: each peer's at-scale loss on 2 ranks x 2
    micro-batches adds up to its full-batch gradient, except those of :data:`SPLIT_DEPENDENT` (TRL's
    bnpo, Unsloth's bnpo, verl's geo_mean and clip_cov), whose step depends on the split."""
    module = _module(peer)
    spec = next(s for s in module.SCALEOUT.values() if not isinstance(s, str) and s.loss == loss)
    torch.manual_seed(0)
    split, full = _split_gradient(module, spec, 2, 2)
    if (peer, loss) in SPLIT_DEPENDENT:
        assert not torch.allclose(split, full, rtol=1e-6)
    else:
        assert torch.allclose(split, full, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("peer", PEERS)
def test_the_scaleout_column_covers_every_loss_row(peer: str) -> None:
    """Every mode of every peer that has a loss runs at level 5 (a ScaleOut, never a reason it cannot
    run: issue 19), and its at-scale loss and advantage scaler are in the module's AT_SCALE."""
    module = _module(peer)
    at_scale = vars(getattr(module, "AT_SCALE", types.SimpleNamespace()))
    for mode, adapter in module.ADAPTERS.items():
        if adapter.loss is None:
            continue
        spec = module.SCALEOUT.get(mode)
        assert spec is not None, f"{peer}:{mode} has a loss but no SCALEOUT entry"
        assert not isinstance(spec, str), f"{peer}:{mode}: level 5 does not run ({spec})"
        assert spec.loss in at_scale, f"{peer}:{mode}: AT_SCALE has no {spec.loss!r}"
        assert spec.scaler is None or spec.scaler in at_scale, (
            f"{peer}:{mode}: AT_SCALE has no {spec.scaler!r}"
        )


#: The scale-out cells checked on real processes (each its own test, all from one launch).
SCALEOUT_CELLS = [
    ("verl", "loss[token-mean]", "pass"),
    ("verl", "loss[seq-mean-token-sum-norm]", "pass"),
    ("trl", "loss[dapo]", "pass"),
    (
        "trl",
        "loss[bnpo]",
        "FAIL ~1.03x the full-batch gradient: normaliser computed per micro-batch and divided by M in "
        "the loss",
    ),
    ("trl", "loss[cispo]", "invariant; FAIL 0.2x the token-mean prediction (as at W = 1, M = 1)"),
    ("openrlhf", "group_norm", "pass"),
    ("verl", "policy[geo_mean]", "FAIL ~2.82x the full-batch gradient: normaliser computed per micro-batch"),
    (
        "verl",
        "policy[clip_cov]",
        "FAIL ~0.914x the full-batch gradient: normaliser computed per micro-batch",
    ),
    ("verl", "kl[low_var_kl]", "pass"),
    ("verl", "rollout_corr[sequence]", "pass"),
    ("trl", "loss[dapo, vllm token_truncate]", "pass"),
    ("trl", "loss[dapo, beta=0.04, use_bias_correction_kl=False]", "pass"),
    ("openrlhf", "kl[k3]", "pass"),
    ("openrlhf", "policy[is_correction token clip 0,2]", "pass"),
    ("unsloth", "loss[dapo]", "pass"),
    ("skyrl", "loss[token_mean]", "pass"),
    ("skyrl", "loss[sequence_mean]", "pass"),
    ("skyrl", "loss[seq_mean_token_sum_norm]", "pass"),
    ("skyrl", "policy[dual_clip]", "pass"),
    ("skyrl", "loss[prompt_mean]", "pass"),
    (
        "skyrl",
        "loss[token_mean_legacy]",
        "FAIL ~1.03x the full-batch gradient: normaliser computed per micro-batch and divided by M in "
        "the loss",
    ),
    (
        "unsloth",
        "loss[bnpo]",
        "FAIL ~0.904x the full-batch gradient: normaliser computed per micro-batch and divided by M in "
        "the loss",
    ),
    ("tunix", "grpo", "pass"),
    ("tunix", "loss[token-mean]", "FAIL ~0.96x the full-batch gradient: normaliser computed per micro-batch"),
    ("tunix", "loss[sequence-mean-token-scale]", "pass"),
]


@pytest.fixture(scope="module")
def scaleout_cells() -> dict[tuple[str, str], tuple[str, list]]:
    """Every installed peer's cell of SCALEOUT_CELLS, run on one launch of 2 processes (the first
    test that asks starts it; run_scaleout_cells gives each cell the results of its run alone)."""
    from sigma_ref.conformance.matrix import run_scaleout_cells

    wanted = []
    for peer, mode, _ in SCALEOUT_CELLS:
        module = adapter_module(peer)
        if module.unavailable() is None:
            wanted.append((peer, mode, module))
    cells = run_scaleout_cells([(module, module.SCALEOUT[mode]) for _, mode, module in wanted])
    return {(peer, mode): cell for (peer, mode, _), cell in zip(wanted, cells, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize(("peer", "mode", "text"), SCALEOUT_CELLS)
def test_scaleout_cell_on_real_processes(
    peer: str, mode: str, text: str, scaleout_cells: dict[tuple[str, str], tuple[str, list]]
) -> None:
    """The scale-out column at W = 2, M = 2 on real gloo processes: verl's agg_loss with dp_size and the
    global counts, TRL's dapo with num_items_in_batch and OpenRLHF's step-global normalisers pass; TRL's
    bnpo is ~1.03x (1.16x at W = 1, M = 2); TRL's default cispo is invariant but 0.2x token-mean."""
    _module(peer)  # skipped with the reason when the peer is not installed
    got, results = scaleout_cells[(peer, mode)]
    assert got == text, [r.line() for r in results]


@pytest.mark.slow
def test_tunix_token_mean_factor_is_the_spmd_prediction(
    scaleout_cells: dict[tuple[str, str], tuple[str, list]],
) -> None:
    """tunix's token-mean cell measures the factor ``proofs/12_scale_out`` derives for one loss per
    global micro-batch and optax.MultiSteps' mean: a token of micro-batch ``m`` weighs
    ``N_tok / (M n_m)`` times the step's token mean, ``n_m`` the tokens of every rank's piece ``m``."""
    from sigma_ref.conformance import scaleout
    from sigma_ref.conformance.normalisers import token_scores

    _module("tunix")
    _, results = scaleout_cells[("tunix", "loss[token-mean]")]
    (measured,) = [r for r in results if r.property == "scaleout_gradient[W=2,M=2]"]
    batch = scaleout._job_batch(0, scaleout._n_groups(2, "equal"), False)
    adv = scaleout.oracle_advantages(torch.tensor(batch.rewards), batch.index).numpy()
    scores = token_scores(batch.theta, batch.feats, batch.tokens)
    _, micro = scaleout._assignment(batch, 2, 2, "whole-groups", "equal")  # global micro-batch m
    n_m = np.array([batch.mask[micro == m].sum() for m in micro])
    w = batch.mask / (2 * n_m[:, None])
    g = -np.einsum("nt,n,ntd->d", w, adv, scores)
    ref = -np.einsum("nt,n,ntd->d", batch.mask / batch.mask.sum(), adv, scores)
    assert measured.factor == pytest.approx(float(g @ ref / (ref @ ref)), rel=1e-6)  # float32 loss


def test_trl_vllm_importance_sampling_ratio_is_the_oracles_weight() -> None:
    """TRL's own vLLM importance-sampling block (run as the adapter runs it) gives the oracle's
    ``importance_weights`` in each of its four modes, on ratios on both sides of the cap 3."""
    from sigma_ref.objectives import importance_weights

    trl = _module("trl")
    gen = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    old = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    rollout = old - torch.tensor([[1.5, -0.5, 0.2, 9.0], [0.1, 0.3, 9.0, 9.0], [-2.0, 0.4, 0.4, 0.5]])
    for mode in ("sequence_mask", "sequence_truncate", "token_mask", "token_truncate"):
        level, how = mode.split("_")
        got = trl.vllm_importance_sampling_ratio(old, rollout, mask, mode=mode, clip_max=3.0)
        want = importance_weights(old, rollout, mask, cap=3.0, level=level, mode=how)  # type: ignore[arg-type]
        torch.testing.assert_close((got * mask).to(torch.float64), want, rtol=1e-12, atol=0.0, msg=mode)
        raw = importance_weights(old, rollout, mask, cap=math.inf, level=level)  # type: ignore[arg-type]
        assert bool((raw > 3.0).any() and ((raw < 3.0) & (mask > 0)).any()), mode  # both sides of the cap


#: Each peer's rollout-correction rows: TRL's vLLM importance sampling, verl's rollout_correction,
#: OpenRLHF's is_correction.
ROLLOUT_CORRECTION_ROWS = {
    "trl": [f"loss[dapo, vllm {m}_{how}]" for m in ("sequence", "token") for how in ("mask", "truncate")],
    "verl": ["rollout_corr[token]", "rollout_corr[sequence]"],
    "openrlhf": ["policy[is_correction token clip 0,2]", "policy[is_correction token mask 0,2]"],
}


@pytest.mark.parametrize("peer", sorted(ROLLOUT_CORRECTION_ROWS))
def test_rollout_correction_modes_are_told_apart(peer: str) -> None:
    """Each rollout-correction row passes loss_objective only under its own weight: declared with
    another row's level or mode, or with no importance weight, the same loss FAILs (the property can
    tell them apart on its generated rollout log-probs)."""
    import dataclasses

    module = _module(peer)
    rows = ROLLOUT_CORRECTION_ROWS[peer]
    objectives = {mode: module.ADAPTERS[mode].objective for mode in rows}
    objectives["no IS"] = dataclasses.replace(objectives[rows[0]], tis_cap=None)
    verdicts = {}
    for mode in rows:
        for declared, objective in objectives.items():
            adapter = dataclasses.replace(module.ADAPTERS[mode], objective=objective)
            (r,) = run_adapter(adapter, max_examples=10, names=["loss_objective"])[0]
            verdicts[mode, declared] = r["verdict"]
    expected = {(m, d): "NOTE" if d == m else "FAIL" for m in rows for d in objectives}
    assert verdicts == expected


def test_trl_stand_ins_survive_a_later_config() -> None:
    """Building a GRPOConfig resets accelerate's shared state; a TRL loss built before still computes
    (the adapter sets the state up again), whatever the order tests or matrix rows run in."""
    trl = _module("trl")
    loss = trl.ADAPTERS["loss[dapo, vllm token_truncate]"].loss
    logp = torch.log(torch.tensor([[0.5, 0.4], [0.3, 0.2]], dtype=torch.float64))
    args = (logp, logp - 0.1, torch.tensor([1.0, -1.0], dtype=torch.float64), torch.ones(2, 2))
    before = loss(*args, rollout_logp=logp - 0.5)
    trl._config("grpo", (), 2)
    torch.testing.assert_close(loss(*args, rollout_logp=logp - 0.5), before, rtol=0.0, atol=0.0)
