"""The identity ``g = (sigma**2 / d) * delta_s`` (docs/spec.md §3), on random scores.

Tolerance: the update is a sum of ``G`` products ``A_i s_i`` that may cancel, so
"1e-12 relative" is taken relative to the size of what is summed: per group and score
component, ``|g - prediction| <= 1e-12 * (1/G) sum_i |A_i| |s_i|``. Where there is no
heavy cancellation (``|prediction|`` at least 1e-3 of that scale) the plain relative
error ``|g - prediction| / |prediction|`` is also checked against 1e-9.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sigma_ref import (
    PAPER,
    PRESETS,
    Convention,
    decompose,
    decompose_continuous,
    grpo_advantage,
    policy_gradient,
)
from tests.helpers import assert_close, binary_rewards, group_members, ragged_batch, rows_as_ids

PRESET_LIST = list(PRESETS.values())
preset_ids = [c.name for c in PRESET_LIST]
seeds = st.integers(0, 2**32 - 1)


def _term_scale(adv: np.ndarray, scores: np.ndarray, ids: list) -> dict:
    """Per group id: ``(1/G) sum_i |A_i| |s_i|`` (the size of the summed terms)."""
    return {
        gid: np.abs(adv[pos])[:, None].T @ np.abs(scores[pos]) / len(pos)
        for gid, pos in group_members(ids).items()
    }


def _assert_identity(g: np.ndarray, prediction: np.ndarray, scale: np.ndarray, what: str) -> None:
    __tracebackhide__ = True
    assert g.shape == prediction.shape, f"g shape {g.shape}, prediction shape {prediction.shape} [{what}]"
    err = np.abs(g - prediction)
    bound = 1e-12 * scale + 1e-300
    worst = float(np.max(err / bound))
    assert worst <= 1.0, f"|g - prediction| is {worst:.3g} times 1e-12 of the term scale [{what}]"
    clear = (np.abs(prediction) >= 1e-3 * scale) & (prediction != 0)
    if clear.any():
        rel = float(np.max(err[clear] / np.abs(prediction[clear])))
        assert rel <= 1e-9, f"relative error {rel:.3g} [{what}]"


def _ref_divisor(r: np.ndarray, conv: Convention, batch: np.ndarray) -> float:
    """``d`` of one group with ``G >= 2`` under ``conv`` (docs/spec.md §4)."""
    if conv.scale == "none":
        return 1.0
    std = float(np.std(r if conv.scale == "group" else batch, ddof=conv.ddof))
    return std + conv.eps if conv.eps_placement == "add" else max(std, conv.eps)


# ---------------------------------------------------------------------------
# the identity, binary rewards


@pytest.mark.parametrize("conv", PRESET_LIST, ids=preset_ids)
@given(seed=seeds, n_rows=st.integers(1, 5), G=st.integers(2, 256), d=st.integers(1, 64))
@example(seed=0, n_rows=5, G=256, d=64)
@example(seed=1, n_rows=3, G=2, d=1)
def test_identity_grouped(conv: Convention, seed: int, n_rows: int, G: int, d: int) -> None:
    """``policy_gradient(grpo_advantage(R, c), S) == decompose(R, S, c).prediction``, ``[B, G]``."""
    rng = np.random.default_rng(seed)
    rewards = binary_rewards([G] * n_rows, rng).reshape(n_rows, G)
    scores = rng.normal(size=(n_rows, G, d)) * rng.lognormal(size=(n_rows, 1, d))
    adv = grpo_advantage(rewards, convention=conv)
    g = policy_gradient(adv, scores)
    dec = decompose(rewards, scores, convention=conv)
    ids = list(rows_as_ids(rewards.shape, -1).reshape(-1))
    scale = _term_scale(adv.reshape(-1), scores.reshape(-1, d), ids)
    _assert_identity(
        g, dec.prediction, np.stack([scale[i] for i in range(n_rows)]).reshape(n_rows, d), conv.name
    )
    # and the pieces are what the spec says they are
    k = rewards.sum(axis=1)
    assert dec.k.tolist() == k.astype(int).tolist()
    assert_close(dec.sigma, np.sqrt(k * (G - k)) / G, rtol=1e-14, atol=1e-300, what="sigma")
    live = (0 < k) & (k < G)
    for b in np.flatnonzero(live):
        plus = scores[b][rewards[b] == 1].mean(axis=0)
        minus = scores[b][rewards[b] == 0].mean(axis=0)
        assert_close(dec.delta_s[b], plus - minus, rtol=1e-12, atol=1e-12 * np.abs(scores[b]).max())
        divisor = _ref_divisor(rewards[b], conv, rewards)
        assert_close(dec.divisor[b], divisor, rtol=1e-13, what="divisor")
    assert np.all(dec.prediction[~live] == 0.0)
    assert np.all(g[~live] == 0.0)


@pytest.mark.parametrize("conv", PRESET_LIST, ids=preset_ids)
@given(
    seed=seeds,
    sizes=st.lists(st.integers(2, 256), min_size=1, max_size=5),
    d=st.integers(1, 64),
    kind=st.sampled_from(["int", "str", "tuple"]),
)
@example(seed=2, sizes=[256, 2, 131, 7, 256], d=64, kind="str")
def test_identity_ragged_index(conv: Convention, seed: int, sizes: list[int], d: int, kind: str) -> None:
    """The identity on a flat, ragged, interleaved batch with ``index=`` (plus singletons where
    the preset allows them)."""
    rng = np.random.default_rng(seed)
    if conv.singleton != "error":
        sizes = [*sizes, 1]
    index, perm = ragged_batch(sizes, kind, rng)
    rewards = binary_rewards(sizes, rng)[perm]
    scores = rng.normal(size=(len(index), d))
    adv = grpo_advantage(rewards, convention=conv, index=index)
    g = policy_gradient(adv, scores, index=index)
    dec = decompose(rewards, scores, convention=conv, index=index)
    order = list(dec.group_ids)
    scale = _term_scale(adv, scores, index)
    _assert_identity(g, dec.prediction, np.stack([scale[i].reshape(d) for i in order]), f"{conv.name}/{kind}")
    # brute force: (1/G) sum_i A_i s_i group by group
    members = group_members(index)
    brute = np.stack([(adv[members[i]][:, None] * scores[members[i]]).mean(axis=0) for i in order])
    assert_close(g, brute, rtol=1e-12, atol=1e-12 * np.abs(scores).max(), what="brute-force g")


@given(seed=seeds, G=st.integers(2, 64), n_rows=st.integers(1, 4))
def test_scalar_scores_give_scalar_updates(seed: int, G: int, n_rows: int) -> None:
    """Scores shaped like the rewards are scalar scores: results have no trailing axis."""
    rng = np.random.default_rng(seed)
    rewards = binary_rewards([G] * n_rows, rng).reshape(n_rows, G)
    scores = rng.normal(size=(n_rows, G))
    g = policy_gradient(grpo_advantage(rewards), scores)
    dec = decompose(rewards, scores)
    assert g.shape == dec.prediction.shape == (n_rows,)
    assert_close(g, dec.prediction, rtol=1e-12, atol=1e-12 * np.abs(scores).max())
    vector = decompose(rewards, scores[..., None]).prediction
    assert_close(dec.prediction, vector[..., 0], rtol=0, atol=0, what="d=1 vector scores")


@given(seed=seeds, G=st.integers(2, 200))
def test_bernoulli_logit_update_is_sigma(seed: int, G: int) -> None:
    """Scalar Bernoulli-logit prompt: ``s_i = y_i - p`` gives ``delta_s = 1`` and ``g = sigma``
    (PAPER), ``g = sigma**2 / d`` under any convention."""
    rng = np.random.default_rng(seed)
    p = rng.random()
    rewards = (rng.random((8, G)) < p).astype(np.float64)
    scores = rewards - p
    k = rewards.sum(axis=1)
    sigma = np.sqrt(k * (G - k)) / G
    g = policy_gradient(grpo_advantage(rewards), scores)
    assert_close(g, sigma, rtol=1e-12, atol=1e-15, what="g = sigma")
    for conv in PRESET_LIST:
        g_c = policy_gradient(grpo_advantage(rewards, convention=conv), scores)
        d = np.array([_ref_divisor(r, conv, rewards) for r in rewards])
        expected = np.divide(sigma**2, d, out=np.zeros_like(sigma), where=sigma > 0)
        assert_close(g_c, expected, rtol=1e-12, atol=1e-15, what=conv.name)


# ---------------------------------------------------------------------------
# real-valued rewards


@pytest.mark.parametrize("conv", PRESET_LIST, ids=preset_ids)
@given(seed=seeds, n_rows=st.integers(1, 4), G=st.integers(2, 40), d=st.integers(1, 8))
def test_decompose_continuous(conv: Convention, seed: int, n_rows: int, G: int, d: int) -> None:
    """Real rewards: ``g = Cov(R, s) / d = (sigma_R**2 / d) * beta`` with ``beta`` the
    least-squares slope (``np.linalg.lstsq`` per group, with an intercept)."""
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(n_rows, G)).round(1)
    rewards[0] = 0.3  # a silent non-binary group
    scores = rng.normal(size=(n_rows, G, d))
    out = decompose_continuous(rewards, scores, convention=conv)
    g = policy_gradient(grpo_advantage(rewards, convention=conv), scores)
    for b in range(n_rows):
        r, s = rewards[b], scores[b]
        if np.all(r == r[0]):
            assert np.all(out.prediction[b] == 0.0) and np.all(g[b] == 0.0)
            assert np.isnan(out.slope[b]).all()
            continue
        scale = np.abs(r - r.mean()) @ np.abs(s) / G / _ref_divisor(r, conv, rewards)
        _assert_identity(g[b], out.prediction[b], scale, f"{conv.name} row {b}")
        design = np.stack([np.ones(G), r], axis=1)
        beta = np.linalg.lstsq(design, s, rcond=None)[0][1]
        assert_close(out.slope[b], beta, rtol=1e-9, atol=1e-9 * np.abs(beta).max(), what="lstsq slope")
        sigma = np.std(r)
        assert_close(out.sigma[b], sigma, rtol=1e-12, what="sigma_R")
        predicted = sigma**2 / _ref_divisor(r, conv, rewards) * beta
        assert_close(out.prediction[b], predicted, rtol=1e-9, atol=1e-9 * scale.max(), what="sigma^2/d beta")


@given(seed=seeds, G=st.integers(2, 64), n_rows=st.integers(1, 4), d=st.integers(1, 8))
def test_continuous_reduces_to_binary(seed: int, G: int, n_rows: int, d: int) -> None:
    """For binary rewards ``decompose_continuous`` and ``decompose`` agree (``beta = delta_s``)."""
    rng = np.random.default_rng(seed)
    rewards = binary_rewards([G] * n_rows, rng).reshape(n_rows, G)
    scores = rng.normal(size=(n_rows, G, d))
    cont = decompose_continuous(rewards, scores)
    binary = decompose(rewards, scores)
    assert_close(cont.prediction, binary.prediction, rtol=1e-11, atol=1e-12 * np.abs(scores).max())
    live = binary.sigma > 0
    assert_close(cont.slope[live], binary.delta_s[live], rtol=1e-10, atol=1e-10 * np.abs(scores).max())


# ---------------------------------------------------------------------------
# baseline invariance


@pytest.mark.parametrize("conv", PRESET_LIST, ids=preset_ids)
@given(
    seed=seeds,
    n_rows=st.integers(1, 4),
    G=st.integers(2, 64),
    shift=st.sampled_from([0.5, -1.0, 3.25, -7.125, 1024.0]),
    binary=st.booleans(),
)
def test_baseline_invariance(
    conv: Convention, seed: int, n_rows: int, G: int, shift: float, binary: bool
) -> None:
    """Shifting every reward by a constant leaves advantages and ``g`` unchanged (``sum A_i = 0``).

    Shifts are dyadic so ``R + c`` is exact and only the mean's rounding differs.
    """
    rng = np.random.default_rng(seed)
    rewards = (
        binary_rewards([G] * n_rows, rng).reshape(n_rows, G)
        if binary
        else rng.integers(-4, 5, size=(n_rows, G)) / 4
    )
    scores = rng.normal(size=(n_rows, G, 3))
    adv = grpo_advantage(rewards, convention=conv)
    shifted = grpo_advantage(rewards + shift, convention=conv)
    assert_close(shifted, adv, rtol=1e-9, atol=1e-9, what=f"advantages, shift {shift}")
    g = policy_gradient(adv, scores)
    g_shift = policy_gradient(shifted, scores)
    assert_close(g_shift, g, rtol=1e-9, atol=1e-9 * np.abs(scores).max(), what="g")
    cont = decompose_continuous(rewards + shift, scores, convention=conv).prediction
    assert_close(cont, g, rtol=1e-9, atol=1e-9 * np.abs(scores).max(), what="Cov(R + c, s) / d")
    assert_close(adv.sum(axis=-1), np.zeros(n_rows), rtol=0, atol=1e-12 * max(1.0, np.abs(adv).max() * G))


def test_identity_with_paper_constants() -> None:
    """The three spec constants: GRPO ``sigma``, Dr. GRPO ``sigma**2``, Bessel ``sqrt((G-1)/G) sigma``."""
    rewards = np.array([[1.0, 0.0, 0.0, 1.0, 0.0]])
    scores = np.array([[[2.0], [1.0], [0.0], [4.0], [-1.0]]])
    sigma = math.sqrt(2 * 3) / 5
    delta = 3.0 - 0.0
    assert_close(decompose(rewards, scores).prediction, [[sigma * delta]], rtol=1e-15)
    assert_close(
        decompose(rewards, scores, convention="dr_grpo").prediction, [[sigma**2 * delta]], rtol=1e-15
    )
    bessel = PAPER.replace(name="bessel", ddof=1)
    assert_close(
        decompose(rewards, scores, convention=bessel).prediction,
        [[math.sqrt(4 / 5) * sigma * delta]],
        rtol=1e-15,
    )
