"""``sigma_ref.symbolic`` (sympy) against the numeric oracle ``sigma_ref`` on grids of k, G, p.

The symbolic expressions are lambdified (or evaluated exactly) and compared with the
numeric functions they state. Tolerances are float64 rounding of the numeric side and
are given per test with the reason; integer results (group sizes, keep masks) and
rational results are compared exactly.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

import sigma_ref
from sigma_ref import symbolic as S  # noqa: N812 (S for the symbolic side, as in proofs/)
from sigma_ref.conventions import AGGREGATION_MODES

GROUP_SIZES = (2, 3, 4, 5, 7, 8, 16, 33, 64)
#: Dyadic probabilities, exact in binary, so float64 inputs carry no rounding of their own.
P_GRID = [sp.Rational(i, 64) for i in range(1, 64)]
P_FLOAT = np.array([float(x) for x in P_GRID])

#: One product, a division and a square root: at most ~2 units in the last place.
RTOL_ELEMENTARY = 4e-16
#: A group mean (its rounding grows with G), a sum of squares, a square root and a division.
RTOL_GROUP = 4e-15
#: ``sigma_ref.difficulty`` documents ~1e-13 relative for its log-space binomial sums.
RTOL_BINOMIAL_SUM = 1e-13


def _kG(G: int) -> tuple[np.ndarray, np.ndarray]:
    ks = np.arange(G + 1)
    return ks, np.full_like(ks, G)


def _exact(expr: sp.Expr) -> float:
    """A sympy number, correctly rounded to float64 (40-digit evaluation)."""
    return float(sp.N(expr, 40))


@pytest.mark.parametrize("G", GROUP_SIZES)
def test_stds_match_group_sigma_and_centered_norm(G: int) -> None:
    """sigma, sigma_b and the centered norm, lambdified, equal the oracle for every k of G."""
    ks, Gs = _kG(G)
    for expr, numeric in (
        (S.sigma(), sigma_ref.group_sigma(ks, Gs)),
        (S.sigma_bessel(), sigma_ref.group_sigma(ks, Gs, ddof=1)),
        (S.centered_norm(), sigma_ref.centered_norm(ks, Gs)),
    ):
        f = sp.lambdify((S.k, S.G), expr, "numpy")
        np.testing.assert_allclose(
            numeric, f(ks.astype(float), Gs.astype(float)), rtol=RTOL_ELEMENTARY, atol=0
        )
        exact = [_exact(expr.subs({S.k: int(k), S.G: G})) for k in ks]
        np.testing.assert_allclose(numeric, exact, rtol=RTOL_ELEMENTARY, atol=0)


@pytest.mark.parametrize("G", GROUP_SIZES)
def test_squared_sigma_is_exactly_rational(G: int) -> None:
    """sigma**2 = k (G - k) / G**2 exactly, and the oracle's sigma squares to it within 2 ulp."""
    for k in range(G + 1):
        exact = S.sigma(k, G) ** 2
        assert exact == sp.Rational(k * (G - k), G * G)
        assert float(sigma_ref.group_sigma(k, G)) ** 2 == pytest.approx(float(exact), rel=1e-15, abs=0)


@pytest.mark.parametrize("G", GROUP_SIZES)
def test_advantage_values_match_grpo_rloo_dr_grpo(G: int) -> None:
    """A+ / A-, Dr. GRPO's centered rewards and RLOO's G/(G-1) multiple on every live group of G."""
    a_plus = sp.lambdify((S.k, S.G), S.advantage_plus(), "numpy")
    a_minus = sp.lambdify((S.k, S.G), S.advantage_minus(), "numpy")
    centered = sp.lambdify((S.k, S.G), S.centered_rewards(), "numpy")
    factor = sp.lambdify(S.G, S.rloo_factor(), "numpy")
    ks = np.arange(1, G)
    rewards = (np.arange(G)[None, :] < ks[:, None]).astype(np.float64)  # row i: k = i + 1 ones first
    grpo = sigma_ref.grpo_advantage(rewards)
    dr = sigma_ref.dr_grpo_advantage(rewards)
    rloo = sigma_ref.rloo_advantage(rewards)
    correct = rewards.astype(bool)
    kf = np.broadcast_to(ks[:, None], rewards.shape).astype(float)
    want_grpo = np.where(correct, a_plus(kf, float(G)), a_minus(kf, float(G)))
    plus, minus = centered(kf, float(G))
    want_dr = np.where(correct, plus, minus)
    np.testing.assert_allclose(grpo, want_grpo, rtol=RTOL_GROUP, atol=0)
    np.testing.assert_allclose(dr, want_dr, rtol=RTOL_GROUP, atol=1e-16)
    np.testing.assert_allclose(rloo, factor(float(G)) * want_dr, rtol=RTOL_GROUP, atol=1e-16)


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("eps", [0.0, 1e-8, 1e-4, 0.3])
@pytest.mark.parametrize("placement", ["add", "floor"])
def test_identity_constant_matches_decompose(ddof: int, eps: float, placement: str) -> None:
    """``identity_constant`` under (ddof, eps, placement) equals ``decompose(...).constant``.

    Also the update: ``S.update`` from the score sums equals ``policy_gradient`` of the
    oracle's advantages (float64, relative 1e-14: a std, a division, a mean of G products).
    """
    conv = sigma_ref.Convention("grid", ddof=ddof, eps=eps, eps_placement=placement)
    e = sp.Symbol("e", nonnegative=True)
    const = sp.lambdify(
        (S.k, S.G, e), S.identity_constant(ddof=ddof, eps=e, eps_placement=placement), "numpy"
    )
    g = sp.lambdify((S.k, S.G, S.d, S.S_plus, S.S_minus), S.update(), "numpy")
    rng = np.random.default_rng(7)
    for G in (2, 3, 5, 8, 16):
        ks = np.arange(1, G)
        rewards = (np.arange(G)[None, :] < ks[:, None]).astype(np.float64)
        scores = rng.normal(size=(G - 1, G, 3))
        out = sigma_ref.decompose(rewards, scores, convention=conv)
        np.testing.assert_allclose(out.constant, const(ks.astype(float), float(G), eps), rtol=1e-14, atol=0)
        grad = sigma_ref.policy_gradient(sigma_ref.grpo_advantage(rewards, convention=conv), scores)
        s_plus = (rewards[..., None] * scores).sum(1)
        s_minus = ((1 - rewards)[..., None] * scores).sum(1)
        kf = ks[:, None].astype(float)
        np.testing.assert_allclose(
            grad, g(kf, float(G), out.divisor[:, None], s_plus, s_minus), rtol=1e-13, atol=1e-15
        )


def test_identity_constant_batch_and_none_scales() -> None:
    """``scale="batch"`` (sigma_batch = the batch std) and ``scale="none"`` (d = 1)."""
    rewards = np.array([[1, 1, 0, 0, 0, 0, 0, 0], [1, 0, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 0]], float)
    ks = rewards.sum(1)
    for ddof, eps in ((0, 0.0), (1, 1e-4), (1, 0.0)):
        conv = sigma_ref.Convention("b", ddof=ddof, eps=eps, scale="batch")
        out = sigma_ref.decompose(rewards, np.ones((3, 8)), convention=conv)
        batch_std = np.std(rewards, ddof=ddof)  # numpy's std of the batch: independent of sigma_ref
        f = sp.lambdify((S.k, S.G, S.sigma_batch), S.identity_constant(scale="batch", eps=eps), "numpy")
        np.testing.assert_allclose(out.constant, f(ks, 8.0, batch_std), rtol=1e-14, atol=0)
    none = sp.lambdify((S.k, S.G), S.identity_constant(scale="none"), "numpy")
    out = sigma_ref.decompose(rewards, np.ones((3, 8)), convention="dr_grpo")
    np.testing.assert_allclose(out.constant, none(ks, 8.0), rtol=1e-15, atol=0)
    assert [S.identity_constant(scale="none", k=int(k), G=8) for k in ks] == [
        sp.Rational(int(k) * (8 - int(k)), 64) for k in ks
    ]


def test_silent_groups_give_zero_under_every_convention() -> None:
    """k = 0 and k = G: the symbolic update and the oracle's constant are 0 (eps > 0 or not)."""
    for conv in sigma_ref.PRESETS.values():
        out = sigma_ref.decompose(np.array([[0.0] * 4, [1.0] * 4]), np.ones((2, 4, 2)), convention=conv)
        assert (out.constant == 0).all() and (out.prediction == 0).all(), conv.name
    assert S.update(k=0, S_plus=0) == 0
    assert sp.simplify(S.update(k=S.G, S_minus=0)) == 0


@pytest.mark.parametrize("G", [2, 3, 8, 30, 100, 1000])
def test_silent_keep_and_draws_in_p(G: int) -> None:
    """Silent rate, keep probability and DAPO's draws per kept group on a p grid.

    The oracle has no draws function: the symbolic ``1/(1 - p^G - (1-p)^G)`` is compared
    with ``1 / (1 - silent_group_rate)``. Exact rationals on the symbolic side; the
    numeric side is float64 powers (relative 1e-14 at G = 1000: ``q**G`` amplifies the
    rounding of ``q`` G-fold, which the oracle compensates; 1e-14 leaves room).
    """
    silent = [S.silent_group_rate(x, G) for x in P_GRID]
    numeric = sigma_ref.silent_group_rate(P_FLOAT, G)
    np.testing.assert_allclose(numeric, [_exact(v) for v in silent], rtol=1e-14, atol=0)
    keep = [_exact(S.keep_probability(x, G)) for x in P_GRID]
    draws = [_exact(S.expected_draws_per_kept_group(x, G)) for x in P_GRID]
    np.testing.assert_allclose(1 - numeric, keep, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(1 / (1 - numeric), draws, rtol=1e-12, atol=0)
    f = sp.lambdify(S.p, S.silent_group_rate(S.p, G), "numpy")
    np.testing.assert_allclose(numeric, f(P_FLOAT), rtol=1e-13, atol=0)


@pytest.mark.parametrize("G", [2, 3, 4, 6, 9, 17, 30])
def test_expected_sigma_matches_expected_gradient(G: int) -> None:
    """The finite sum E[sigma] (30-digit evaluation) equals ``expected_gradient`` (rtol 1e-13)."""
    exact = [_exact(S.expected_sigma(G, x)) for x in P_GRID]
    np.testing.assert_allclose(sigma_ref.expected_gradient(P_FLOAT, G), exact, rtol=RTOL_BINOMIAL_SUM, atol=0)
    fid = [_exact(S.fidelity(G, x)) for x in P_GRID]
    np.testing.assert_allclose(sigma_ref.fidelity(P_FLOAT, G), fid, rtol=RTOL_BINOMIAL_SUM, atol=0)


@pytest.mark.parametrize("G", [2, 3, 8, 100, 10**5])
def test_expected_sigma_squared_is_dr_grpo_expectation(G: int) -> None:
    """E[sigma^2] = p(1-p)(1 - 1/G), exact rationals vs ``expected_gradient(.., "dr_grpo")``."""
    exact = [S.expected_sigma_squared(G, x) for x in P_GRID]
    assert all(v.is_Rational for v in exact)
    got = sigma_ref.expected_gradient(P_FLOAT, G, method="dr_grpo")
    np.testing.assert_allclose(got, [float(v) for v in exact], rtol=RTOL_GROUP, atol=0)
    if G <= 8:  # and the defining sum, exactly
        for x, v in zip(P_GRID, exact, strict=True):
            total = sum(S.binomial_pmf(j, G, x) * S.sigma(j, G) ** 2 for j in range(G + 1))
            assert total == v


def test_closed_forms_in_p() -> None:
    """Attenuation, difficulty weight, mass weights and the arcsine objective on the p grid."""
    G = np.array([2.0, 8.0, 64.0, 1e4])[:, None]
    p = P_FLOAT[None, :]
    att = sp.lambdify((S.G, S.p), S.attenuation(), "numpy")
    np.testing.assert_allclose(sigma_ref.attenuation(p, G), att(G, p), rtol=1e-14, atol=1e-14)
    for expr, numeric in (
        (S.difficulty_weight(), sigma_ref.difficulty_weight(P_FLOAT)),
        (S.mass_weight(), sigma_ref.mass_weight(P_FLOAT)),
        (S.mass_weight(S.p, "dr_grpo"), sigma_ref.mass_weight(P_FLOAT, method="dr_grpo")),
        (S.arcsine_objective(), sigma_ref.arcsine_objective(P_FLOAT)),
    ):
        f = sp.lambdify(S.p, expr, "numpy")
        np.testing.assert_allclose(numeric, f(P_FLOAT), rtol=RTOL_GROUP, atol=0)
        np.testing.assert_allclose(
            numeric, [_exact(expr.subs(S.p, x)) for x in P_GRID], rtol=RTOL_GROUP, atol=0
        )
    # the difficulty weight is the p-derivative of the arcsine objective (central differences, h = 1e-6)
    h = 1e-6
    slope = (sigma_ref.arcsine_objective(P_FLOAT + h) - sigma_ref.arcsine_objective(P_FLOAT - h)) / (2 * h)
    np.testing.assert_allclose(slope, sigma_ref.difficulty_weight(P_FLOAT), rtol=1e-6)


@pytest.mark.parametrize("epsilon", [Fraction(1, 20), Fraction(1, 10), Fraction(1, 100), Fraction(1, 40)])
def test_group_size_law_ceiling_is_min_group_size(epsilon: Fraction) -> None:
    """ceil(1/(8 eps p(1-p))) in exact rationals equals ``min_group_size`` (integers, exactly)."""
    e = sp.Rational(epsilon.numerator, epsilon.denominator)
    grid = [sp.Rational(i, 100) for i in range(1, 100)]
    exact = [int(sp.ceiling(S.group_size_law(x, e))) for x in grid]
    got = sigma_ref.min_group_size(np.array([float(x) for x in grid]), epsilon=float(epsilon))
    assert got.tolist() == exact
    penalty = [S.group_size_law(x, e) / S.group_size_law(sp.Rational(1, 2), e) for x in grid]
    assert penalty == [S.difficulty_penalty(x) for x in grid]


@pytest.mark.parametrize(
    "p", [sp.Rational(1, 2), sp.Rational(3, 10), sp.Rational(1, 10), sp.Rational(3, 100)]
)
def test_exact_group_size_is_least_G(p: sp.Rational) -> None:
    """``exact_group_size``: fidelity (30-digit sum of ``S.fidelity``) reaches 0.95 at G, not at G-1."""
    G = int(sigma_ref.exact_group_size(float(p)))
    assert sp.N(S.fidelity(G, p), 30) >= sp.Rational(19, 20)
    assert sp.N(S.fidelity(G - 1, p), 30) < sp.Rational(19, 20)


def test_aggregation_weights_define_the_scores() -> None:
    """``aggregation_weight`` per mode, exact rationals, and its error for an unknown mode."""
    kw = {"length": 5, "n_sequences": 4, "total_tokens": 17, "horizon": 8}
    got = {mode: S.aggregation_weight(mode, **kw) for mode in AGGREGATION_MODES}
    assert got == {
        "token-mean": sp.Rational(1, 17),
        "seq-mean-token-mean": sp.Rational(1, 20),
        "seq-mean-token-sum": sp.Rational(1, 4),
        "seq-mean-token-sum-norm": sp.Rational(1, 8),
        "token-sum": sp.Integer(1),
    }
    with pytest.raises(ValueError, match="mode='sum'"):
        S.aggregation_weight("sum", **kw)  # type: ignore[arg-type]


def test_symbolic_argument_errors() -> None:
    """Bad convention fields and methods raise ValueError naming the value."""
    with pytest.raises(ValueError, match="ddof=2"):
        S.divisor(ddof=2)
    with pytest.raises(ValueError, match="scale='rank'"):
        S.divisor(scale="rank")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="eps_placement='max'"):
        S.divisor(eps_placement="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="method='ppo'"):
        S.mass_weight(method="ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="RLOO needs G >= 2"):
        S.rloo_advantage([1], 0)
    with pytest.raises(ValueError, match="equal lengths"):
        S.population_covariance([1, 2], [1])


def test_every_public_name_is_documented() -> None:
    """Each public function of ``sigma_ref.symbolic`` has a docstring with a formula and an example."""
    for name in S.__all__:
        obj = getattr(S, name)
        if callable(obj) and not isinstance(obj, sp.Basic):
            doc = obj.__doc__ or ""
            assert "=" in doc and ">>>" in doc, name
