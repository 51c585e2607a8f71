"""Closed forms in the success probability ``p`` (docs/spec.md §5).

With ``k ~ Binomial(G, p)`` correct responses in a group of ``G``:

=========================================== ==================================================
``silent_group_rate(p, G)``                 ``p**G + (1 - p)**G``
``expected_gradient(p, G)``                 ``E[g] = (1/G) sum_k C(G,k) p^k (1-p)^(G-k) sqrt(k(G-k))``
``expected_gradient(.., method="dr_grpo")`` ``E[sigma**2] = p (1 - p) (1 - 1/G)``
``fidelity(p, G)``                          ``E[g] / sqrt(p (1 - p))``, in [0, 1], increasing in G
``attenuation(p, G)``                       ``1 - 1 / (8 G p (1 - p))``, the large-G expansion of fidelity
``min_group_size(p, *, epsilon)``           ``ceil(1 / (8 epsilon p (1 - p)))`` (the group-size law)
``exact_group_size(p, *, epsilon)``         least ``G`` with ``fidelity(p, G) >= 1 - epsilon``
``difficulty_weight(p)``                    ``1 / sqrt(p (1 - p)) = d/dp 2 arcsin sqrt(p)``
``mass_weight(p, *, G, method)``            ``sqrt(p (1 - p))`` (GRPO) or ``p (1 - p)`` (Dr. GRPO)
``arcsine_objective(p)``                    ``2 arcsin sqrt(p)``
=========================================== ==================================================

Evaluation and precision: ``E[sqrt(k (G-k))]`` is summed over ``p <= 1/2`` only (the sum is
symmetric in ``p <-> 1 - p``, and ``1 - p`` is exact for ``p >= 1/2``) and only over a window
of ``k`` around the mode whose left-out share is below ``1e-17`` by a Chernoff bound in Bennett's
form on the exact term ratios (``_window``; derived in ``proofs/04_expectations.py``): about
``2 sqrt(2 L) sd`` terms with ``L = log(1e17) + 1.5 log G``, so ``O(sqrt(G p (1-p)) + log G)``
per ``p``. The window is cut into runs of at most 128 terms; each run starts from the pmf by
Loader's saddle-point form (``stirlerr`` and ``bd0``, as R's ``dbinom``; no term overflows or
loses digits at any ``G``) and walks by the exact ratio ``(G-k)/(k+1) * p/(1-p)``, vectorised
over every run at once. The result is accurate to about ``1e-13`` relative (a few ``1e-15``
typically; measured, not proved) for every ``G`` up to ``2**40`` and ``p`` up to an ulp from 0
or 1 wherever it is a normal float (above ``2.2e-308``); a subnormal ``E[g]`` (``p`` below about
``1e-300 / G``) carries the absolute error of subnormal rounding, up to ``2**-1075``.
``fidelity`` takes its one-term limit ``sqrt((G-1) p)`` below ``p = 2**-600``, so it keeps
``1e-13`` relative at every ``p`` down to ``5e-324`` (tested against exact rationals and
50-digit mpmath sums in ``tests/``).

All functions take a number, a sequence, a numpy array or a torch tensor for ``p``
(and ``G``), broadcast them, and return the same kind (Python scalars for scalars).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from . import _public_names, _roundtrip, _validate
from ._binomial_sums import _MAX_G, _SEGMENT, _TAIL, _deficit, _expected_root, _one_minus_pow, _window
from ._vocabulary import METHODS, Method

__all__ = _public_names(__name__)


def _p_and_G(p: Any, G: Any) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], _roundtrip.Returner]:
    p_arr, back = _roundtrip.numeric(p, "p")
    _validate.check_probability(p_arr)
    G_arr, _ = _roundtrip.numeric(G, "G")
    _validate.check_group_size(G_arr)
    if (G_arr > _MAX_G).any():
        raise ValueError(f"G={float(G_arr.max()):g} is above the supported maximum 2**40")
    try:
        pb, Gb = np.broadcast_arrays(p_arr, G_arr)
    except ValueError:
        raise ValueError(f"p shape {p_arr.shape} and G shape {G_arr.shape} do not broadcast") from None
    return pb.reshape(-1), Gb.reshape(-1), pb.shape, back


def _check_method(method: Any) -> Method:
    if method not in METHODS:
        raise ValueError(f"method={method!r} must be one of {METHODS}")
    checked: Method = method
    return checked


def silent_group_rate(p: Any, G: Any) -> Any:
    """Probability that a group of ``G`` is silent (all wrong or all right): ``p**G + (1-p)**G``.

    A silent group has ``sigma = 0`` and gives a zero update; DAPO drops it. Accurate to
    a few ulps for every ``G`` (``1 - p`` is not rounded before the power).

    >>> round(silent_group_rate(0.05, 8), 4)
    0.6634
    """
    pf, Gf, shape, back = _p_and_G(p, G)
    return back((pf**Gf + _one_minus_pow(pf, Gf)).reshape(shape))


def _expected(pf: np.ndarray, Gf: np.ndarray, method: str) -> np.ndarray:
    if method == "dr_grpo":
        out: np.ndarray = pf * (1 - pf) * (1 - 1 / Gf)
    else:
        out = _expected_root(pf, Gf) / Gf
    return out


def expected_gradient(p: Any, G: Any, *, method: Method = "grpo") -> Any:
    """Exact expected per-prompt update, in units of ``delta_s``, for ``k ~ Bin(G, p)``.

    ``method="grpo"``: ``E[sigma] = (1/G) sum_{k=1}^{G-1} C(G,k) p^k (1-p)^(G-k) sqrt(k (G-k))``;
    ``method="dr_grpo"``: ``E[sigma**2] = p (1 - p) (1 - 1/G)``. As ``G`` grows, the GRPO value
    tends to ``sqrt(p (1 - p))``.

    >>> round(expected_gradient(0.5, 2), 6)  # k=1 w.p. 1/2, sigma=1/2
    0.25
    >>> expected_gradient(0.5, 4, method="dr_grpo")
    0.1875
    """
    method = _check_method(method)
    pf, Gf, shape, back = _p_and_G(p, G)
    return back(_expected(pf, Gf, method).reshape(shape))


_TINY_P = 2.0**-600  # below it fidelity is the k = 1 term, sqrt((G-1) p), to within 3 G p < 2**-558


def _fidelity(pf: np.ndarray, Gf: np.ndarray) -> np.ndarray:
    """``E[sqrt(k (G-k))] / (G sqrt(p (1-p)))``; below ``_TINY_P`` (where ``E[...]`` is subnormal and
    has lost digits) the one-term form ``sqrt((G-1) p) (1-p)**(G-3/2)``: the terms ``k >= 2`` and the
    power of ``1-p`` change it by less than ``3 G p`` relative (``proofs/04_expectations.py``), and
    ``p 2**600`` is exact, so ``sqrt((G-1) (p 2**600)) 2**-300`` is within an ulp and a half."""
    root = np.sqrt(pf * (1 - pf))
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = np.where(root > 0, _expected_root(pf, Gf) / Gf / np.where(root > 0, root, 1), 0.0)
    tiny = (pf > 0) & (pf < _TINY_P)
    if tiny.any():
        out[tiny] = np.sqrt((Gf[tiny] - 1) * (pf[tiny] * 2.0**600)) * 2.0**-300
    return out


def fidelity(p: Any, G: Any) -> Any:
    """Gradient fidelity ``phi = E[g] / sqrt(p (1 - p))``: the share of the large-G update kept.

    In ``[0, 1]`` (Jensen), increasing in ``G``; 0 at ``p in {0, 1}``.

    >>> round(fidelity(0.5, 8), 4)
    0.9278
    """
    pf, Gf, shape, back = _p_and_G(p, G)
    return back(_fidelity(pf, Gf).reshape(shape))


def attenuation(p: Any, G: Any) -> Any:
    """Delta-method approximation of the fidelity: ``1 - 1 / (8 G p (1 - p))``.

    Accurate to ``O(1/G**2)`` for ``G p (1 - p)`` large; it understates the fidelity
    loss near ``p in {0, 1}`` and goes negative (``-inf`` at the edges) where the
    expansion is meaningless.

    >>> attenuation(0.5, 10)
    0.95
    """
    pf, Gf, shape, back = _p_and_G(p, G)
    with np.errstate(divide="ignore"):
        return back((1 - 1 / (8 * Gf * pf * (1 - pf))).reshape(shape))


def min_group_size(p: Any, *, epsilon: float = 0.05) -> Any:
    """The group-size law in closed form: ``G* = ceil(1 / (8 epsilon p (1 - p)))``.

    The ``G`` at which :func:`attenuation` reaches ``1 - epsilon`` (the seed post's
    ``min_group_size``). It understates the need near ``p in {0, 1}``; see
    :func:`exact_group_size`.

    >>> min_group_size(0.5), min_group_size(0.03)
    (10, 86)
    """
    eps = _validate.check_epsilon(epsilon)
    p_arr, back = _roundtrip.numeric(p, "p")
    _validate.check_probability(p_arr, open_interval=True)
    with np.errstate(over="ignore"):
        size = np.ceil(1 / (8 * eps * p_arr * (1 - p_arr)))
    too_big = ~(size < 2.0**63)  # would wrap around in int64
    if too_big.any():
        i = np.flatnonzero(too_big.reshape(-1))[0]
        raise ValueError(
            f"p={float(p_arr.reshape(-1)[i])!r} needs G = {float(size.reshape(-1)[i]):.3g} at "
            f"epsilon={eps!r}, beyond a 64-bit integer; no finite training budget reaches it"
        )
    return back(size, integer=True)


_SURE = 1e-12  # 1 - fl(phi) is within 1e-13 phi + 2**-53 of 1 - phi: a margin ten times that decides


def _shortfall(p: np.ndarray, G: np.ndarray, eps: float) -> np.ndarray:
    """``1 - phi(p, G)``, good enough to compare with ``eps`` and to aim the next step: ``1 - fl(phi)``
    (cheaper) where ``eps >= 1e-6`` and it is farther than ``_SURE`` from ``eps``, else ``_deficit``."""
    if eps < 1e-6:
        return _deficit(p, G)
    short = 1.0 - _fidelity(p, G)
    unsure = np.flatnonzero(np.abs(short - eps) <= _SURE)
    if unsure.size:
        short[unsure] = _deficit(p[unsure], G[unsure])
    return short


#: ``_deficit`` is within ``1e-13`` relative of ``1 - phi`` (measured: ``tests/``); a deficit within
#: ``_TIE`` (a thousand times that) of ``epsilon`` is a near-tie, decided by ``_short_certified``.
_TIE = 1e-10
#: Interval sums longer than this many terms (about 10 s) are not attempted: the float decision stands.
_TIE_TERMS = 1 << 17
_TIE_PRECISIONS = (128, 256, 512, 1024)  # bits: each round doubles until the interval excludes epsilon


def _short_certified(p: float, G: int, eps: float) -> bool | None:
    """Is ``1 - phi(p, G) > eps``? Decided in interval arithmetic (``mpmath.iv``), ``0 < p <= 1/2``.

    ``phi = S / (G sqrt(p q))`` with ``S = sum_k t_k sqrt(k (G-k))`` and ``t_k`` the binomial pmf,
    ``q = 1 - p`` exact. ``S`` is summed over a window ``[lo, hi]`` (every term for ``G <= 256``,
    else ``_window`` widened by two terms a side, with ``L`` raised by ``prec log 2``, so that the
    share of ``S`` left out is below ``_TAIL 2**-prec / 2``, ``proofs/04_expectations.py``): the
    anchor ``t_lo`` from ``loggamma`` and logs, then the exact ratio, every operation an interval
    that contains its exact value. The left-out share widens the interval's upper end. If the
    interval for ``1 - phi`` lies on one side of ``eps`` that side is the answer; otherwise the
    precision doubles (128 to 1024 bits). ``None`` when the window has more than ``_TIE_TERMS``
    terms; ``False`` (reached) when ``1 - phi`` and ``eps`` agree to 1024 bits (a tie, which
    ``>=`` counts as reached).

    >>> _short_certified(0.5, 2, 0.5), _short_certified(0.5, 2, 0.49)  # phi(1/2, 2) = 1/2
    (False, True)
    """
    from mpmath import iv

    if G <= 2 * _SEGMENT:
        lo, hi = 1, G - 1
    else:
        arrays = (np.array([p]), np.array([1.0 - p]), np.array([float(G)]))
        lo_a, hi_a = _window(*arrays, np.array([_TIE_PRECISIONS[-1] * math.log(2)]))
        lo, hi = max(1, int(lo_a[0]) - 2), min(G - 1, int(hi_a[0]) + 2)
    if hi - lo + 1 > _TIE_TERMS:
        return None
    saved = iv.prec
    try:
        for prec in _TIE_PRECISIONS:
            iv.prec = prec + 32
            mp_p = iv.mpf(p)
            mp_q = 1 - mp_p
            log_anchor = (
                iv.loggamma(G + 1)
                - iv.loggamma(lo + 1)
                - iv.loggamma(G - lo + 1)
                + lo * iv.log(mp_p)
                + (G - lo) * iv.log(mp_q)
            )
            term = iv.exp(log_anchor)
            odds = mp_p / mp_q
            total = term * iv.sqrt(iv.mpf(lo * (G - lo)))
            for k in range(lo, hi):
                term = term * odds * (G - k) / (k + 1)
                total += term * iv.sqrt(iv.mpf((k + 1) * (G - k - 1)))
            outside = 0 if (lo, hi) == (1, G - 1) else iv.mpf(_TAIL) * iv.mpf(2) ** (-prec)
            total_range = iv.mpf([total.a, (total / (1 - outside)).b])  # S <= S_window / (1 - share)
            short = 1 - total_range / (G * iv.sqrt(mp_p * mp_q))
            if short.a > eps:
                return True
            if short.b <= eps:
                return False
        return False
    finally:
        iv.prec = saved


def exact_group_size(p: Any, *, epsilon: float = 0.05) -> Any:
    """Least ``G >= 2`` with ``fidelity(p, G) >= 1 - epsilon``.

    Decided on the deficit ``1 - phi(G) <= epsilon``, computed with relative precision however small
    (``_deficit``) where ``epsilon < 1e-6`` or ``1 - fl(phi)`` is within ``1e-12`` of ``epsilon``,
    so the answer is the least ``G`` even where float64 ``phi`` is flat over many ``G``
    (``epsilon = 1e-12``). ``1 - phi = 1/(2G) + (a nonnegative sum)`` gives the analytic lower
    end: every ``G <= 1/(2 epsilon)`` falls short. ``1 / (1 - phi(G))`` is nearly linear in ``G``
    (``8 G p (1-p) + O(1)``), so a secant on it, started at the expansion's second order and kept
    inside a bracket, lands on the answer in a step or two; bisection takes over after twelve
    rounds. All prompts at once, each distinct ``min(p, 1 - p)`` once (the fidelity is symmetric).

    Near-ties are decided exactly: where the float deficit is within ``_TIE = 1e-10`` relative of
    ``epsilon`` (a thousand times its measured ``1e-13`` error), ``_short_certified`` sums the deficit
    in interval arithmetic (128 to 1024 bits) until the interval excludes ``epsilon``; a deficit
    equal to ``epsilon`` to 1024 bits counts as reached. Limit: an interval sum of more than
    ``_TIE_TERMS`` terms (``G p (1-p)`` above about ``10**6``) is not attempted, and there the float
    deficit decides (right wherever the tie is farther than ``1e-13`` relative).

    >>> exact_group_size(0.5), exact_group_size(0.03)
    (11, 113)
    """
    eps = _validate.check_epsilon(epsilon)
    p_arr, back = _roundtrip.numeric(p, "p")
    _validate.check_probability(p_arr, open_interval=True)
    pf = p_arr.reshape(-1)
    half, inverse = np.unique(np.minimum(pf, 1.0 - pf), return_inverse=True)
    # 1 - phi(G) >= 1/(2G) > eps for every G < 1/(2 eps), and at G = 1/(2 eps) (an integer) too
    floor = math.floor(Fraction(1, 2) / Fraction(eps))
    lo = np.full_like(half, float(max(1, min(floor, _MAX_G))))  # phi(lo) < 1 - eps: known short
    hi = np.full_like(half, np.inf)
    g_last, psi_last = np.full_like(half, np.nan), np.full_like(half, np.nan)
    var = half * (1 - half)
    # start: 1 - phi = y + b y**2 + O(y**3), y = 1/(8 G p q), b = (7 - 16 p q)/2 (proofs/04), solved for y
    y = 2 * eps / (1 + np.sqrt(1 + 2 * (7 - 16 * var) * eps))
    cand = np.minimum(np.maximum(lo + 1, np.ceil(1 / (8 * var * y))), _MAX_G)
    active = np.arange(half.size)
    if (lo >= _MAX_G).any():
        cand[:] = _MAX_G + 1  # no group size within reach: reported below
    for round_ in range(200):
        g = cand[active]
        if (g > _MAX_G).any():
            i = np.flatnonzero(inverse == active[np.argmax(g > _MAX_G)])[0]
            raise ValueError(
                f"epsilon={eps!r} needs a group above 2**40 for p={float(pf[i])!r}; "
                "use a larger epsilon or drop prompts that (almost) never or always succeed"
            )
        short = _shortfall(half[active], g, eps)
        ok = short <= eps
        for i in np.flatnonzero(np.abs(short - eps) <= _TIE * eps).tolist():  # near-ties: decide exactly
            verdict = _short_certified(float(half[active[i]]), int(g[i]), eps)
            if verdict is not None:
                ok[i] = not verdict
        hi[active] = np.where(ok, g, hi[active])
        lo[active] = np.where(ok, lo[active], g)
        psi = 1 / short
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = (psi - psi_last[active]) / (g - g_last[active])
            law = 8 * var[active]  # d/dG of 1 / (1 - attenuation)
            estimate = g + (1 / eps - psi) / np.where(slope > 0, slope, law)
        g_last[active], psi_last[active] = g, psi
        done = hi[active] - lo[active] <= 1
        active, estimate = active[~done], estimate[~done]
        if active.size == 0:
            break
        below, above = lo[active], hi[active]
        if round_ < 12:
            raw = np.ceil(np.nan_to_num(estimate, nan=0.0, posinf=0.0))
            step = np.where(raw >= above, above - 1, np.where(raw <= below, below + 1, raw))
            step = np.where(np.isinf(above) & (raw <= below), 2 * below, step)  # no upper end yet
        else:
            step = np.where(np.isinf(above), 2 * below, np.floor((below + above) / 2))
        # a step past 2**40 with no upper end yet: try 2**40 itself once, then report
        cand[active] = np.where(step > _MAX_G, np.where(below < _MAX_G, _MAX_G, _MAX_G + 1), step)
    sizes = np.maximum(hi, 2.0)[inverse]
    return back(sizes.reshape(p_arr.shape), integer=True)


def difficulty_weight(p: Any) -> Any:
    """GRPO's implicit per-prompt weight ``w(p) = 1 / sqrt(p (1 - p)) = d/dp 2 arcsin sqrt(p)``.

    Dividing by ``sigma`` multiplies Dr. GRPO's update by this; infinite at the edges.

    >>> difficulty_weight(0.5)
    2.0
    """
    p_arr, back = _roundtrip.numeric(p, "p")
    _validate.check_probability(p_arr)
    with np.errstate(divide="ignore"):
        return back(1 / np.sqrt(p_arr * (1 - p_arr)))


def mass_weight(p: Any, *, G: Any = None, method: Method = "grpo") -> Any:
    """Expected update size a prompt of success rate ``p`` receives.

    Large-group limit (``G=None``): ``sqrt(p (1 - p))`` for GRPO (``method="grpo"``),
    ``p (1 - p)`` for Dr. GRPO (``method="dr_grpo"``). With ``G`` given: the exact
    :func:`expected_gradient`.

    >>> mass_weight(0.5), mass_weight(0.5, method="dr_grpo")
    (0.5, 0.25)
    """
    method = _check_method(method)
    if G is not None:
        return expected_gradient(p, G, method=method)
    p_arr, back = _roundtrip.numeric(p, "p")
    _validate.check_probability(p_arr)
    var = p_arr * (1 - p_arr)
    return back(np.sqrt(var) if method == "grpo" else var)


def mass_share(p: Any, mask: Any, *, G: Any = None, method: Method = "grpo") -> float:
    """Share of a corpus's total update mass that falls on the prompts where ``mask`` is True.

    ``share = sum(m[mask]) / sum(m)`` with ``m = mass_weight(p, G=G, method=method)`` (``method``
    ``"grpo"`` or ``"dr_grpo"``; ``G=None`` for the large-group limit).

    >>> round(mass_share([0.05, 0.5], [True, False]), 4)
    0.3036
    """
    weights = np.asarray(_roundtrip.numeric(mass_weight(p, method=method, G=G), "p")[0], dtype=np.float64)
    weights = weights.reshape(-1)
    if isinstance(mask, (str, bytes)):
        raise TypeError(f"mask={mask!r} must be an array of booleans, one per prompt")
    m = np.asarray(mask.detach().cpu().numpy() if hasattr(mask, "detach") else mask)
    if m.dtype.kind != "b":
        raise TypeError(f"mask has dtype {m.dtype}; pass booleans, one per prompt")
    m = m.reshape(-1)
    if m.shape != weights.shape:
        raise ValueError(f"mask has {m.size} entries but p has {weights.size}; pass one per prompt")
    total = weights.sum()
    if total == 0:
        raise ValueError("every prompt has zero update mass (p in {0, 1}); the share is undefined")
    return float(weights[m].sum() / total)


def arcsine_objective(p: Any) -> Any:
    """GRPO's implicit objective per prompt, ``2 arcsin sqrt(p)``, whose p-derivative is
    :func:`difficulty_weight`.

    Above ``p = 1/2`` it is evaluated as ``pi - 2 arcsin sqrt(1 - p)`` (``1 - p`` is exact
    there), which keeps full precision near ``p = 1`` where ``arcsin`` is ill-conditioned.

    >>> round(arcsine_objective(0.5), 6)  # pi / 2
    1.570796
    """
    p_arr, back = _roundtrip.numeric(p, "p")
    _validate.check_probability(p_arr)
    upper = p_arr > 0.5
    low = 2 * np.arcsin(np.sqrt(np.where(upper, 0.0, p_arr)))
    high = np.pi - 2 * np.arcsin(np.sqrt(np.where(upper, 1.0 - p_arr, 0.0)))
    return back(np.where(upper, high, low))
