"""The symbolic side of sigma-ref: sympy symbols and the expressions ``proofs/`` derives.

Every function here returns a sympy expression (never a float), built from the
symbols below or from whatever the caller passes in their place, so the same
expression serves a proof (symbolic arguments), an exact check (integers and
``sympy.Rational``) and a test that lambdifies it and compares it with the numeric
oracle in :mod:`sigma_ref`. Nothing here calls the numeric oracle, and the numeric
oracle never calls this module: the two are independent statements of docs/spec.md
§1-§5, and ``tests/test_symbolic.py`` pins one to the other.

Symbols (module constants)
--------------------------

=================== ============================================================
``k``               correct responses in a group, integer ``>= 0``
``G``               group size, integer ``>= 1``
``m``               incorrect responses ``G - k`` of a live group, integer ``>= 1``
                    (substitute ``G = k_live + m`` where sympy needs ``0 < k < G``)
``k_live``          ``k`` of a live group, integer ``>= 1``
``p``               success probability of the policy on the prompt, ``0 < p < 1``
                    (sympy only knows ``p > 0``; substitute ``p = u / (1 + u)``
                    with ``u > 0`` or ``p = sigmoid(theta)`` where ``1 - p > 0``
                    matters)
``u``               the odds ``p / (1 - p)``, positive
``theta``           the logit of a Bernoulli-logit prompt, real
``d``               a generic positive divisor of GRPO's advantage
``eps``             the std stabiliser of a convention (``std + eps``, ``max(std, eps)``)
``epsilon``         the fidelity loss the group-size law targets (fidelity ``1 - epsilon``)
``sigma_batch``     the std of the whole batch (``scale="batch"``), positive
``S_plus``          sum of the scores of the correct responses (one component: the
                    identity is linear in the scores, so a scalar per component
                    proves it in any dimension)
``S_minus``         sum of the scores of the incorrect responses
=================== ============================================================

>>> from sigma_ref import symbolic as S
>>> S.sigma(2, 8)
sqrt(3)/4
>>> S.identity_constant().subs(S.G, 8).subs(S.k, 2)
sqrt(3)/4
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import sympy as sp
from sympy import Expr

from ._vocabulary import PLACEMENTS, Aggregation, Method, Placement, Scale
from .conventions import AGGREGATION_MODES

__all__ = [
    # symbols
    "k",
    "G",
    "m",
    "k_live",
    "p",
    "u",
    "theta",
    "d",
    "eps",
    "epsilon",
    "sigma_batch",
    "S_plus",
    "S_minus",
    "LIVE",
    # group statistics and advantages
    "mean_reward",
    "sigma",
    "sigma_bessel",
    "centered_norm",
    "centered_rewards",
    "advantage_plus",
    "advantage_minus",
    "rloo_factor",
    "rloo_advantage",
    # the identity
    "divisor",
    "identity_constant",
    "update",
    "s_plus",
    "s_minus",
    "delta_s",
    "population_mean",
    "population_covariance",
    "least_squares_slope",
    # closed forms in p
    "binomial_pmf",
    "expected_sigma",
    "expected_sigma_squared",
    "fidelity",
    "attenuation",
    "group_size_law",
    "difficulty_penalty",
    "difficulty_weight",
    "mass_weight",
    "arcsine_objective",
    "sigmoid",
    "bernoulli_logit_score",
    "silent_group_rate",
    "keep_probability",
    "expected_draws_per_kept_group",
    # loss aggregation
    "aggregation_weight",
]

#: What the functions accept in place of a symbol: a sympy expression or a Python int
#: (sympy ships no type information, so to mypy ``Expr`` is ``Any``).
Value: TypeAlias = Expr | int

k = sp.Symbol("k", integer=True, nonnegative=True)
G = sp.Symbol("G", integer=True, positive=True)
m = sp.Symbol("m", integer=True, positive=True)
k_live = sp.Symbol("k", integer=True, positive=True)
p = sp.Symbol("p", positive=True)
u = sp.Symbol("u", positive=True)
theta = sp.Symbol("theta", real=True)
d = sp.Symbol("d", positive=True)
eps = sp.Symbol("eps", nonnegative=True)
epsilon = sp.Symbol("epsilon", positive=True)
sigma_batch = sp.Symbol("sigma_B", positive=True)
S_plus = sp.Symbol("S_+", real=True)
S_minus = sp.Symbol("S_-", real=True)

#: ``{k: k_live, G: k_live + m}``: a live group (``0 < k < G``) in symbols sympy can
#: reason about, e.g. ``expr.subs(LIVE)`` before ``sympy.simplify``.
LIVE: dict[sp.Symbol, Expr] = {k: k_live, G: k_live + m}


# --------------------------------------------------------------------------------------
# group statistics and advantages (docs/spec.md §1-§2)


def mean_reward(k: Value = k, G: Value = G) -> Expr:
    """Group mean reward of ``k`` ones among ``G``: ``mu = k / G``.

    >>> mean_reward(2, 8)
    1/4
    """
    return sp.sympify(k) / G


def sigma(k: Value = k, G: Value = G) -> Expr:
    """Population std of ``k`` ones and ``G - k`` zeros: ``sigma = sqrt(k (G - k)) / G``.

    For binary rewards this is ``sqrt(mu (1 - mu))``; the paper's and this project's sigma.

    >>> sigma()
    sqrt(k)*sqrt(G - k)/G
    >>> sigma(2, 8)
    sqrt(3)/4
    """
    k, G = sp.sympify(k), sp.sympify(G)
    return sp.sqrt(k * (G - k)) / G


def sigma_bessel(k: Value = k, G: Value = G) -> Expr:
    """Bessel-corrected std (``torch.std``'s default): ``sigma_b = sqrt(k (G - k) / (G (G - 1)))``.

    >>> sigma_bessel(2, 8)
    sqrt(42)/14
    """
    k, G = sp.sympify(k), sp.sympify(G)
    return sp.sqrt(k * (G - k) / (G * (G - 1)))


def centered_norm(k: Value = k, G: Value = G) -> Expr:
    """The design card's "sigma": ``||R - mu|| = sqrt(k (G - k) / G)`` (= ``sqrt(G) * sigma``).

    >>> centered_norm(2, 8)
    sqrt(6)/2
    """
    k, G = sp.sympify(k), sp.sympify(G)
    return sp.sqrt(k * (G - k) / G)


def centered_rewards(k: Value = k, G: Value = G) -> tuple[Expr, Expr]:
    """``R_i - mu`` on a correct and on an incorrect response: ``(1 - mu, -mu) = (1 - k/G, -k/G)``.

    >>> centered_rewards(2, 8)
    (3/4, -1/4)
    """
    mu = mean_reward(k, G)
    return 1 - mu, -mu


def advantage_plus(k: Value = k, G: Value = G) -> Expr:
    """GRPO advantage of a correct response with ``d = sigma``: ``A+ = sqrt((G - k) / k)``.

    >>> advantage_plus(2, 8)
    sqrt(3)
    """
    k, G = sp.sympify(k), sp.sympify(G)
    return sp.sqrt((G - k) / k)


def advantage_minus(k: Value = k, G: Value = G) -> Expr:
    """GRPO advantage of an incorrect response with ``d = sigma``: ``A- = -sqrt(k / (G - k))``.

    >>> advantage_minus(2, 8)
    -sqrt(3)/3
    """
    k, G = sp.sympify(k), sp.sympify(G)
    return -sp.sqrt(k / (G - k))


def rloo_factor(G: Value = G) -> Expr:
    """RLOO's advantage over mean-centering: ``A_rloo = G / (G - 1) * (R_i - mu)``.

    >>> rloo_factor(8)
    8/7
    """
    return sp.sympify(G) / (sp.sympify(G) - 1)


def rloo_advantage(rewards: Sequence[Value], i: int) -> Expr:
    """RLOO's definition for response ``i``: ``R_i - (1 / (G - 1)) sum_{j != i} R_j``.

    ``rewards`` is a concrete list (of symbols or numbers) of length ``G >= 2``.

    >>> a, b, c = sp.symbols("a b c")
    >>> rloo_advantage([a, b, c], 0)
    a - b/2 - c/2
    """
    if len(rewards) < 2:
        raise ValueError(f"rewards has {len(rewards)} element(s); RLOO needs G >= 2 responses")
    others = [sp.sympify(r) for j, r in enumerate(rewards) if j != i]
    return sp.sympify(rewards[i]) - sp.Add(*others) / (len(rewards) - 1)


# --------------------------------------------------------------------------------------
# the identity (docs/spec.md §3-§4)


def divisor(
    *,
    ddof: int = 0,
    eps: Value = 0,
    eps_placement: Placement = "add",
    scale: Scale = "group",
    k: Value = k,
    G: Value = G,
) -> Expr:
    """GRPO's divisor ``d`` under a convention of docs/spec.md §4.

    ``std = sigma`` (``ddof=0``) or ``sigma_bessel`` (``ddof=1``) of the group
    (``scale="group"``) or the symbol ``sigma_batch`` (``scale="batch"``); then
    ``d = std + eps`` (``"add"``) or ``max(std, eps)`` (``"floor"``); ``scale="none"``
    gives ``d = 1`` (Dr. GRPO).

    >>> divisor(ddof=1, eps=eps)
    eps + sqrt(k)*sqrt((G - k)/(G - 1))/sqrt(G)
    >>> divisor(scale="none")
    1
    """
    if ddof not in (0, 1):
        raise ValueError(f"ddof={ddof!r} must be 0 (population std) or 1 (Bessel)")
    if eps_placement not in PLACEMENTS:
        raise ValueError(f"eps_placement={eps_placement!r} must be 'add' or 'floor'")
    if scale == "none":
        return sp.Integer(1)
    if scale == "group":
        std = sigma(k, G) if ddof == 0 else sigma_bessel(k, G)
    elif scale == "batch":
        std = sigma_batch
    else:
        raise ValueError(f"scale={scale!r} must be 'group', 'batch' or 'none'")
    eps = sp.sympify(eps)
    return std + eps if eps_placement == "add" else sp.Max(std, eps)


def identity_constant(
    *,
    ddof: int = 0,
    eps: Value = 0,
    eps_placement: Placement = "add",
    scale: Scale = "group",
    k: Value = k,
    G: Value = G,
) -> Expr:
    """The constant of the identity ``g = (sigma**2 / d) * delta_s`` under a convention.

    ``sigma`` for the paper (``d = sigma``), ``sigma**2`` for Dr. GRPO (``d = 1``),
    ``sqrt((G-1)/G) * sigma`` with Bessel's std, ``sigma**2 / (std + eps)`` with ``eps``.

    >>> identity_constant()
    sqrt(k)*sqrt(G - k)/G
    >>> identity_constant(scale="none", k=2, G=8)
    3/16
    """
    div = divisor(ddof=ddof, eps=eps, eps_placement=eps_placement, scale=scale, k=k, G=G)
    return sp.powsimp(sigma(k, G) ** 2 / div)


def s_plus(k: Value = k, S_plus: Value = S_plus) -> Expr:
    """Mean score of the correct responses: ``s+ = S_plus / k``.

    >>> s_plus()
    S_+/k
    """
    return sp.sympify(S_plus) / k


def s_minus(k: Value = k, G: Value = G, S_minus: Value = S_minus) -> Expr:
    """Mean score of the incorrect responses: ``s- = S_minus / (G - k)``.

    >>> s_minus()
    S_-/(G - k)
    """
    return sp.sympify(S_minus) / (sp.sympify(G) - k)


def delta_s(k: Value = k, G: Value = G, S_plus: Value = S_plus, S_minus: Value = S_minus) -> Expr:
    """The contrastive direction ``delta_s = s+ - s- = S_plus / k - S_minus / (G - k)``.

    >>> delta_s(2, 8, 4, 3)
    3/2
    """
    return s_plus(k, S_plus) - s_minus(k, G, S_minus)


def update(
    k: Value = k,
    G: Value = G,
    d: Value = d,
    S_plus: Value = S_plus,
    S_minus: Value = S_minus,
) -> Expr:
    """The per-prompt update from its definition, ``g = (1/G) sum_i A_i s_i``, for binary rewards.

    With ``A_i = (R_i - mu) / d``, the ``k`` correct responses share ``A = (1 - k/G) / d``
    and contribute ``S_plus``; the ``G - k`` incorrect ones share ``A = -(k/G) / d``:
    ``g = ((1 - k/G) S_plus - (k/G) S_minus) / (G d)``. ``proofs/02`` shows it equals
    ``(sigma**2 / d) * delta_s``.

    >>> update(2, 8, 1, 4, 3)
    9/32
    """
    plus, minus = centered_rewards(k, G)
    return (plus * S_plus + minus * S_minus) / (sp.sympify(G) * d)


def population_mean(x: Sequence[Value]) -> Expr:
    """Mean of a concrete list: ``mean x = (1/n) sum_i x_i``.

    >>> population_mean([1, 2, 6])
    3
    """
    if not x:
        raise ValueError("x is empty; pass at least one value")
    return sp.Add(*[sp.sympify(v) for v in x]) / len(x)


def population_covariance(x: Sequence[Value], y: Sequence[Value]) -> Expr:
    """Population covariance of two concrete lists: ``Cov(x, y) = (1/n) sum_i (x_i - mean x) (y_i - mean y)``.

    ``population_covariance(R, R)`` is ``sigma_R**2``; ``population_covariance(R, s) / d`` is
    the update ``g`` for any real rewards (docs/spec.md §3).

    >>> population_covariance([0, 1], [0, 1])
    1/4
    """
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} values but y has {len(y)}; pass equal lengths")
    mx, my = population_mean(x), population_mean(y)
    return sp.Add(*[(sp.sympify(a) - mx) * (sp.sympify(b) - my) for a, b in zip(x, y, strict=True)]) / len(x)


def least_squares_slope(x: Sequence[Value], y: Sequence[Value]) -> Expr:
    """Least-squares slope of ``y`` on ``x``: ``beta = Cov(x, y) / Var(x)``.

    >>> least_squares_slope([0, 1, 2], [1, 3, 5])
    2
    """
    return population_covariance(x, y) / population_covariance(x, x)


# --------------------------------------------------------------------------------------
# closed forms in p (docs/spec.md §5)


def binomial_pmf(k: Value = k, G: Value = G, p: Value = p) -> Expr:
    """``P(k correct of G) = C(G, k) p**k (1 - p)**(G - k)``.

    >>> binomial_pmf(1, 2, sp.Rational(1, 2))
    1/2
    """
    return sp.binomial(G, k) * sp.sympify(p) ** k * (1 - sp.sympify(p)) ** (sp.sympify(G) - k)


def expected_sigma(G: Value = G, p: Value = p) -> Expr:
    """Exact expected GRPO update (units of ``delta_s``): ``E[sigma] =
    (1/G) sum_{k=1}^{G-1} C(G,k) p^k (1-p)^(G-k) sqrt(k (G-k))``.

    An unevaluated ``Sum`` for symbolic ``G``; the finite sum for an integer ``G``.

    >>> expected_sigma(2)
    p*(1 - p)
    """
    j = sp.Symbol("j", integer=True, positive=True)
    term = binomial_pmf(j, G, p) * sp.sqrt(j * (G - j)) / G
    if sp.sympify(G).is_Integer:
        return sp.Add(*[term.subs(j, i) for i in range(1, int(G))])
    return sp.Sum(term, (j, 1, G - 1))


def expected_sigma_squared(G: Value = G, p: Value = p) -> Expr:
    """Exact expected Dr. GRPO update: ``E[sigma**2] = p (1 - p) (1 - 1/G)``.

    >>> expected_sigma_squared(4, sp.Rational(1, 2))
    3/16
    """
    p = sp.sympify(p)
    return p * (1 - p) * (1 - sp.Integer(1) / G)


def fidelity(G: Value = G, p: Value = p) -> Expr:
    """Gradient fidelity ``phi = E[sigma] / sqrt(p (1 - p))``.

    >>> fidelity(2, sp.Rational(1, 2))
    1/2
    """
    p = sp.sympify(p)
    return expected_sigma(G, p) / sp.sqrt(p * (1 - p))


def attenuation(G: Value = G, p: Value = p) -> Expr:
    """Delta-method (large-G) fidelity: ``phi = 1 - 1 / (8 G p (1 - p)) + O(1/G**2)``.

    >>> attenuation(10, sp.Rational(1, 2))
    19/20
    """
    p = sp.sympify(p)
    return 1 - 1 / (8 * G * p * (1 - p))


def group_size_law(p: Value = p, epsilon: Value = epsilon) -> Expr:
    """The group-size law ``G* = 1 / (8 epsilon p (1 - p))``: where ``attenuation = 1 - epsilon``.

    Real-valued; the integer law is its ceiling.

    >>> group_size_law(sp.Rational(1, 2), sp.Rational(1, 20))
    10
    """
    p = sp.sympify(p)
    return 1 / (8 * epsilon * p * (1 - p))


def difficulty_penalty(p: Value = p) -> Expr:
    """How many times the group-size law's ``G*`` at ``p`` exceeds it at ``p = 1/2``: ``1 / (4 p (1 - p))``.

    >>> difficulty_penalty(sp.Rational(1, 10))
    25/9
    """
    p = sp.sympify(p)
    return 1 / (4 * p * (1 - p))


def difficulty_weight(p: Value = p) -> Expr:
    """GRPO's implicit weight ``w(p) = 1 / sqrt(p (1 - p))`` (= ``d/dp 2 arcsin sqrt(p)``).

    >>> difficulty_weight(sp.Rational(1, 2))
    2
    """
    p = sp.sympify(p)
    return 1 / sp.sqrt(p * (1 - p))


def mass_weight(p: Value = p, method: Method = "grpo") -> Expr:
    """Large-group update size at ``p``: ``E[g] = sqrt(p (1 - p))`` (GRPO) or ``p (1 - p)`` (Dr. GRPO).

    >>> mass_weight(sp.Rational(1, 2)), mass_weight(sp.Rational(1, 2), "dr_grpo")
    (1/2, 1/4)
    """
    p = sp.sympify(p)
    if method == "grpo":
        return sp.sqrt(p * (1 - p))
    if method == "dr_grpo":
        return p * (1 - p)
    raise ValueError(f"method={method!r} must be 'grpo' or 'dr_grpo'")


def arcsine_objective(p: Value = p) -> Expr:
    """GRPO's implicit per-prompt objective ``J(p) = 2 arcsin sqrt(p)``.

    >>> arcsine_objective(sp.Rational(1, 2))
    pi/2
    """
    return 2 * sp.asin(sp.sqrt(p))


def sigmoid(theta: Value = theta) -> Expr:
    """The Bernoulli-logit success probability ``p = 1 / (1 + exp(-theta))``.

    >>> sigmoid(0)
    1/2
    """
    return 1 / (1 + sp.exp(-sp.sympify(theta)))


def bernoulli_logit_score(y: Value, theta: Value = theta) -> Expr:
    """Score ``d/dtheta log pi(y)`` of a Bernoulli-logit prompt, ``pi(1) = sigmoid(theta)``.

    Derived, not stated: the derivative of ``y log p + (1 - y) log(1 - p)``; it
    simplifies to ``y - sigmoid(theta)`` (``proofs/06``).

    >>> sp.simplify(bernoulli_logit_score(1, 0))
    1/2
    """
    q = sigmoid(theta)
    t = sp.Dummy("t", real=True)
    logp = y * sp.log(sigmoid(t)) + (1 - sp.sympify(y)) * sp.log(1 - sigmoid(t))
    return sp.simplify(sp.diff(logp, t).subs(t, theta).subs(sigmoid(theta), q))


def silent_group_rate(p: Value = p, G: Value = G) -> Expr:
    """Probability that all ``G`` responses agree (``sigma = 0``): ``p**G + (1 - p)**G``.

    >>> silent_group_rate(sp.Rational(1, 2), 8)
    1/128
    """
    p = sp.sympify(p)
    return p**G + (1 - p) ** G


def keep_probability(p: Value = p, G: Value = G) -> Expr:
    """DAPO keeps a group iff ``0 < k < G``: ``P(keep) = 1 - p**G - (1 - p)**G``.

    >>> keep_probability(sp.Rational(1, 2), 2)
    1/2
    """
    return 1 - silent_group_rate(p, G)


def expected_draws_per_kept_group(p: Value = p, G: Value = G) -> Expr:
    """Groups DAPO samples per kept group (geometric): ``E[draws] = 1 / (1 - p**G - (1 - p)**G)``.

    >>> expected_draws_per_kept_group(sp.Rational(1, 2), 2)
    2
    """
    return 1 / keep_probability(p, G)


# --------------------------------------------------------------------------------------
# loss aggregation (docs/spec.md §4): the per-response score the identity sees


def aggregation_weight(
    mode: Aggregation,
    *,
    length: Value,
    n_sequences: Value,
    total_tokens: Value,
    horizon: Value,
) -> Expr:
    """Weight ``w_it`` of one unmasked token of a response in the loss ``-sum_it w_it A_i log pi(y_it)``.

    ``length``: the response's token count ``|y_i|``; ``n_sequences``: responses in the
    batch; ``total_tokens``: unmasked tokens in the batch; ``horizon``: the constant
    ``seq-mean-token-sum-norm`` divides by: ``N_seq * C`` in verl 0.9.1 and TRL 1.16.0's
    ``dr_grpo`` (``C`` the maximum completion length; ``sigma_ref.objectives``), ``C`` alone in
    verl 0.4.1 to 0.6.0.

    ===========================  ===============================
    ``token-mean``               ``1 / total_tokens``
    ``seq-mean-token-mean``      ``1 / (n_sequences * length)``
    ``seq-mean-token-sum``       ``1 / n_sequences``
    ``seq-mean-token-sum-norm``  ``1 / horizon``
    ``token-sum``                ``1``
    ===========================  ===============================

    The identity then sees the per-response score ``s_i = G * sum_t w_it grad log pi(y_it)``.

    >>> aggregation_weight("seq-mean-token-mean", length=5, n_sequences=4, total_tokens=17, horizon=8)
    1/20
    """
    one = sp.Integer(1)
    if mode == "token-mean":
        return one / total_tokens
    if mode == "seq-mean-token-mean":
        return one / (sp.sympify(n_sequences) * length)
    if mode == "seq-mean-token-sum":
        return one / n_sequences
    if mode == "seq-mean-token-sum-norm":
        return one / horizon
    if mode == "token-sum":
        return one
    raise ValueError(f"mode={mode!r} is not a loss aggregation; use one of {AGGREGATION_MODES}")
