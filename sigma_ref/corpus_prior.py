"""What a rollout log says about group sizes it did not sample: estimators for the audit.

A prompt with ``k`` correct of ``n`` logged rollouts, and a statistic of a group of ``G``:
``h(j)`` of its correct count ``j ~ Binomial(G, p)`` (the silent indicator ``[j in {0, G}]``, the
update size ``sqrt(j (G-j)) / G``). Its value for the prompt is ``f(p) = E[h(j)]``, a polynomial of
degree ``G`` in ``p``; the audit wants ``mean_i f(p_i)`` over the corpus.

* ``G <= n`` (:func:`unbiased`): ``E[h(j)]`` with ``j`` hypergeometric, the count in ``G`` of the
  ``n`` rollouts drawn without replacement, is unbiased for ``f(p)`` (its expectation over
  ``k ~ Binomial(n, p)`` is ``f(p)``; ``proofs/10_subsampled``).
* ``G > n``: an estimator's expectation over ``Binomial(n, p)`` is a polynomial of degree ``<= n``,
  so ``f`` of higher degree has no unbiased estimator (the silent rate has degree ``G`` for even
  ``G``, ``G - 1`` for odd: none for ``G >= n + 2``; ``proofs/16_beyond_the_log``), and the log's
  subsets of ``G`` do not exist. The best it offers is
  empirical Bayes (:func:`posterior`): ``Beta(a, b)`` fitted to the corpus's own counts by
  maximum beta-binomial likelihood (:func:`fit_prior`), then the posterior mean of ``f`` given
  ``k``, ``sum_j h(j) C(G, j) B(a + k + j, b + n - k + G - j) / B(a + k, b + n - k)``. Unbiased for
  the corpus mean when the pass rates are drawn from the fitted Beta; otherwise biased by the
  misfit of the Beta (mostly of its tails), which the log cannot measure. Its stated error is the
  posterior standard deviation of the corpus mean (prompts independent given the prior).

Everything runs on the distinct ``(n, k)`` pairs (a log of ``n``-rollout prompts has ``n + 1``),
in log space from one table of ``log(x + i)`` partial sums (no ``lgamma`` per term).

>>> prior = fit_prior(np.array([8, 8, 8, 8]), np.array([0, 2, 5, 8]))
>>> round(prior.a, 2), round(prior.b, 2)
(0.38, 0.41)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

__all__ = [
    "BetaPrior",
    "fit_prior",
    "unbiased",
    "posterior",
    "posterior_root",
    "silent",
    "signal",
    "mixture_quantile",
]

Floats = npt.NDArray[np.float64]
_CELLS = 1 << 22  # cells of one (pairs x terms) matrix: about 32 MB of float64
Statistic = Callable[[Floats, int], Floats]  # h(j) for j = 0..G


def silent(j: Floats, G: int) -> Floats:
    """The silent indicator ``[j in {0, G}]``."""
    out: Floats = ((j == 0) | (j == G)).astype(np.float64)
    return out


def signal(j: Floats, G: int) -> Floats:
    """GRPO's update size ``sigma = sqrt(j (G - j)) / G`` in units of ``delta_s`` (``docs/spec.md`` §5)."""
    out: Floats = np.sqrt(j * (G - j)) / G
    return out


@dataclasses.dataclass(frozen=True)
class BetaPrior:
    """``Beta(a, b)`` fitted to a corpus's counts; ``prompts`` it was fitted to."""

    a: float
    b: float
    prompts: int
    at_bound: bool = False  # the fit stopped at a bound of [1e-3, 1e4]: the log does not pin the prior


def _rising_log(x: Floats, m: int) -> Floats:
    """``L[r, s] = sum_{i < s} log(x_r + i)`` for ``s = 0..m``: log of the rising factorial."""
    steps = np.log(x[:, None] + np.arange(m)[None, :])
    out: Floats = np.concatenate([np.zeros((x.size, 1)), np.cumsum(steps, axis=1)], axis=1)
    return out


def _pairs(n: npt.ArrayLike, k: npt.ArrayLike) -> tuple[Floats, Floats, Floats, npt.NDArray[np.intp]]:
    n_arr = np.asarray(n, dtype=np.float64).reshape(-1)
    k_arr = np.asarray(k, dtype=np.float64).reshape(-1)
    if n_arr.shape != k_arr.shape or n_arr.size == 0:
        raise ValueError(f"n and k need one entry per prompt each; got {n_arr.size} and {k_arr.size}")
    if (
        (n_arr < 1).any()
        or (k_arr < 0).any()
        or (k_arr > n_arr).any()
        or (n_arr % 1).any()
        or (k_arr % 1).any()
    ):
        raise ValueError("need integers 1 <= n and 0 <= k <= n for every prompt (k correct of n rollouts)")
    width = int(k_arr.max()) + 1  # one int64 key per pair: a 1-D unique (an axis=1 unique sorts rows)
    keys, inverse, counts = np.unique(
        n_arr.astype(np.int64) * width + k_arr.astype(np.int64), return_inverse=True, return_counts=True
    )
    n_d = (keys // width).astype(np.float64)
    k_d = (keys % width).astype(np.float64)
    return n_d, k_d, counts.astype(np.float64), np.asarray(inverse).reshape(-1)


def _log_likelihood(a: float, b: float, n: Floats, k: Floats, counts: Floats) -> float:
    """Beta-binomial log likelihood (without the ``C(n, k)`` constant) of the distinct pairs."""
    top = int(n.max())
    ra = _rising_log(np.array([a]), top)[0]
    rb = _rising_log(np.array([b]), top)[0]
    rab = _rising_log(np.array([a + b]), top)[0]
    ni, ki = n.astype(np.intp), k.astype(np.intp)
    return float((counts * (ra[ki] + rb[ni - ki] - rab[ni])).sum())


def fit_prior(n: npt.ArrayLike, k: npt.ArrayLike) -> BetaPrior:
    """``Beta(a, b)`` maximising the beta-binomial likelihood of ``k`` correct of ``n`` per prompt.

    Started at the method of moments, refined on shrinking ``9 x 9`` grids in ``(log a, log b)``
    (12 rounds, each a quarter of the last span): deterministic, no optimiser dependency. ``a``
    and ``b`` are kept in ``[1e-3, 1e4]``; ``at_bound`` says the fit stopped at a bound (a single
    prompt, or a corpus of all-correct or all-wrong prompts, has its maximum at the boundary, so
    the log does not pin the prior and the model's numbers reflect the bounds).
    """
    n_d, k_d, counts, _ = _pairs(n, k)
    p = k_d / n_d
    mean = float((counts * p).sum() / counts.sum())
    var = float((counts * (p - mean) ** 2).sum() / counts.sum())
    mean = min(max(mean, 1e-3), 1 - 1e-3)
    spread = max(mean * (1 - mean) / max(var, 1e-9) - 1, 0.1)
    center = np.log([mean * spread, (1 - mean) * spread])
    span = 3.0
    best = (center[0], center[1])
    for _ in range(12):
        grid = np.linspace(-span, span, 9)
        scores = [
            (_log_likelihood(math.exp(x), math.exp(y), n_d, k_d, counts), x, y)
            for x in np.clip(best[0] + grid, math.log(1e-3), math.log(1e4))
            for y in np.clip(best[1] + grid, math.log(1e-3), math.log(1e4))
        ]
        _, bx, by = max(scores)
        best = (bx, by)
        span /= 4
    bounds = (math.log(1e-3), math.log(1e4))
    at_bound = any(min(abs(v - edge) for edge in bounds) < 1e-9 for v in best)
    return BetaPrior(math.exp(best[0]), math.exp(best[1]), int(counts.sum()), at_bound)


def _log_factorials(m: int) -> Floats:
    out: Floats = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, m + 1)))])
    return out


def unbiased(n: npt.ArrayLike, k: npt.ArrayLike, G: int, h: Statistic) -> Floats:
    """Per prompt, the unbiased estimate of ``E[h(j)]``, ``j ~ Binomial(G, p)``, for ``G <= n``:
    ``sum_j h(j) C(k, j) C(n-k, G-j) / C(n, G)`` (``nan`` where ``n < G``).

    >>> unbiased([4, 8], [2, 4], 2, silent).round(6)  # (1 + 1)/6 and (6 + 6)/28
    array([0.333333, 0.428571])
    """
    n_d, k_d, _, inverse = _pairs(n, k)
    j = np.arange(G + 1, dtype=np.float64)
    lf = _log_factorials(int(n_d.max()) + 1)
    ni, ki, ji = n_d.astype(np.intp)[:, None], k_d.astype(np.intp)[:, None], j.astype(np.intp)[None, :]
    ok = (ji <= ki) & (G - ji <= ni - ki) & (ni >= G)
    kj = np.where(ok, ki - ji, 0)
    rest = np.where(ok, ni - ki - (G - ji), 0)
    log_w = (
        lf[ki]
        - lf[np.where(ok, ji, 0)]
        - lf[kj]
        + lf[np.maximum(ni - ki, 0)]
        - lf[np.where(ok, G - ji, 0)]
        - lf[rest]
        - (lf[ni] - lf[G] - lf[np.maximum(ni - G, 0)])
    )
    weights = np.where(ok, np.exp(log_w), 0.0)
    values = (weights * h(j, G)[None, :]).sum(axis=1)
    values = np.where(n_d >= G, values, np.nan)
    out: Floats = values[inverse]
    return out


def _beta_moments(alpha: Floats, beta: Floats, m: int) -> Floats:
    """``log E[p**s (1-p)**(m-s)]`` for ``p ~ Beta(alpha, beta)``, ``s = 0..m`` (rows: pairs)."""
    ra = _rising_log(alpha, m)
    rb = _rising_log(beta, m)[:, ::-1]
    rab = _rising_log(alpha + beta, m)[:, -1:]
    out: Floats = ra + rb - rab
    return out


def posterior(
    n: npt.ArrayLike, k: npt.ArrayLike, G: int, h: Statistic, prior: BetaPrior, *, sd: bool = True
) -> tuple[Floats, float]:
    """Empirical-Bayes estimate of ``E[h(j)]`` per prompt and the posterior sd of their mean.

    With ``alpha = a + k``, ``beta = b + n - k``: ``E[f | k] = sum_j h(j) C(G, j) E[p^j q^(G-j)]``,
    and ``E[f**2 | k] = sum_s c_s E[p^s q^(2G-s)]`` with ``c = (h C(G, .)) * (h C(G, .))`` (a
    convolution: ``f**2`` is the expectation over two independent groups). The sd of the corpus
    mean is ``sqrt(sum_i Var(f_i | k_i)) / prompts`` (``nan`` with ``sd=False``, which skips it).

    >>> est, sd = posterior([4], [2], 2, silent, BetaPrior(1.0, 1.0, 1))  # Beta(3, 3): E[p^2 + q^2]
    >>> round(float(est[0]), 6)
    0.571429
    """
    n_d, k_d, counts, inverse = _pairs(n, k)
    alpha, beta = prior.a + k_d, prior.b + n_d - k_d
    j = np.arange(G + 1, dtype=np.float64)
    lf = _log_factorials(2 * G)
    log_comb = lf[G] - lf[: G + 1] - lf[G::-1]
    center = float(log_comb.max())
    hj = h(j, G)
    rows = max(1, _CELLS // (2 * G + 1))  # pairs per chunk: the matrices stay under _CELLS cells
    first = np.concatenate(
        [
            (
                hj[None, :]
                * np.exp(log_comb[None, :] + _beta_moments(alpha[i : i + rows], beta[i : i + rows], G))
            ).sum(axis=1)
            for i in range(0, alpha.size, rows)
        ]
    )
    if not sd:
        return first[inverse], math.nan
    scaled = hj * np.exp(log_comb - center)
    c = np.convolve(scaled, scaled)
    with np.errstate(divide="ignore"):
        log_c = np.log(np.maximum(c, 0.0))
    second = np.concatenate(
        [
            np.exp(
                log_c[None, :] + 2 * center + _beta_moments(alpha[i : i + rows], beta[i : i + rows], 2 * G)
            ).sum(axis=1)
            for i in range(0, alpha.size, rows)
        ]
    )
    variance = np.maximum(second - first**2, 0.0)
    spread = math.sqrt(float((counts * variance).sum())) / float(counts.sum())
    out: Floats = first[inverse]
    return out, spread


def mixture_quantile(
    n: npt.ArrayLike, k: npt.ArrayLike, prior: BetaPrior, shares: npt.ArrayLike
) -> tuple[Floats, Floats, Floats]:
    """Quantiles of ``m = min(p, 1-p)`` under the mixture of the prompts' posteriors.

    The corpus's distribution of true pass rates is estimated by the mean over prompts of
    ``Beta(a + k, b + n - k)`` (the mixture equals the prior in expectation when the prior is
    right). Its density is tabulated on 6,001 points of ``u = logit p`` in ``[-70, 70]`` and
    integrated by the trapezoid rule; the mass beyond (``p`` or ``1-p`` below ``4e-31``) counts as
    ``m -> 0``. Returns ``(m_q, grid_m, mass)``: ``m_q[i]`` with ``P(m <= m_q) = shares[i]``, and
    the tabulated ``m`` values with their masses (for other functionals).
    """
    n_d, k_d, counts, _ = _pairs(n, k)
    alpha, beta = prior.a + k_d, prior.b + n_d - k_d
    u = np.linspace(-70.0, 70.0, 6001)
    log_p, log_q = -np.logaddexp(0.0, -u), -np.logaddexp(0.0, u)
    log_beta = np.array(
        [math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y) for x, y in zip(alpha, beta, strict=True)]
    )
    density = np.zeros(u.size)
    for start in range(0, alpha.size, 256):
        rows = slice(start, start + 256)
        log_pdf = alpha[rows, None] * log_p + beta[rows, None] * log_q - log_beta[rows, None]
        density += (counts[rows, None] * np.exp(log_pdf)).sum(axis=0)
    density /= counts.sum()
    du = u[1] - u[0]
    mass = np.r_[density[0] / 2, (density[1:-1]), density[-1] / 2] * du
    left_out = max(0.0, 1.0 - float(mass.sum()))
    p_grid = np.exp(log_p)
    m = np.minimum(p_grid, np.exp(log_q))
    order = np.argsort(m, kind="stable")
    cumulative = left_out + np.cumsum(mass[order])
    q = np.asarray(shares, dtype=np.float64).reshape(-1)
    idx = np.minimum(np.searchsorted(cumulative, q), m.size - 1)
    m_q: Floats = np.where(q <= left_out, 0.0, m[order][idx])
    return m_q, m, mass


def posterior_root(n: npt.ArrayLike, k: npt.ArrayLike, prior: BetaPrior) -> Floats:
    """Per prompt ``E[sqrt(p (1-p)) | k] = B(alpha + 1/2, beta + 1/2) / B(alpha, beta)``: the large-G
    update size (``mass_weight``) under the posterior ``Beta(a + k, b + n - k)``.

    >>> round(float(posterior_root([2], [1], BetaPrior(1.0, 1.0, 1))[0]), 6)  # Beta(2, 2): 9 pi / 64
    0.441786
    """
    n_d, k_d, _, inverse = _pairs(n, k)
    alpha, beta = prior.a + k_d, prior.b + n_d - k_d
    log_ratio = [
        math.lgamma(x + 0.5)
        + math.lgamma(y + 0.5)
        - math.lgamma(x + y + 1)
        - math.lgamma(x)
        - math.lgamma(y)
        + math.lgamma(x + y)
        for x, y in zip(alpha, beta, strict=True)
    ]
    out: Floats = np.exp(np.array(log_ratio))[inverse]
    return out
