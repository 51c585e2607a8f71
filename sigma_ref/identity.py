"""The group-standard-deviation identity ``g = (sigma**2 / d) * (s+ - s-)`` (docs/spec.md §3).

The per-prompt update of any group-relative method is ``g = (1/G) sum_i A_i s_i``
(:func:`policy_gradient`). For binary rewards and ``A_i = (R_i - mu) / d`` it equals
``(sigma**2 / d) * delta_s`` exactly, in any dimension (:func:`decompose`); for real
rewards it equals ``Cov(R, s) / d = (sigma_R**2 / d) * beta`` with ``beta`` the
least-squares slope of the scores on the rewards (:func:`decompose_continuous`).

Scores are ``[..., G, d]`` next to rewards ``[..., G]`` (or ``[N, d]`` next to a flat
``[N]`` with ``index=``); scores shaped exactly like the rewards are scalar scores
(``d = 1``, no trailing axis in the results).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from . import _layouts, _public_names, _roundtrip, _validate
from ._kernel import _sqrt, _statistics, _times_pow2
from ._layouts import Groups
from ._tensors import Array
from .conventions import PAPER, Convention, get_convention

__all__ = _public_names(__name__)


def _scores_like(scores: Any, values: torch.Tensor, groups: Groups, name: str) -> tuple[torch.Tensor, bool]:
    """Flat ``[N, d]`` scores aligned with the flat rewards; ``True`` if scalar scores."""
    s, _ = _roundtrip.as_float64(scores, "scores", library="torch")
    s = s.to(values.device)
    shape = tuple(values.shape)
    scalar = tuple(s.shape) == shape
    if not scalar and tuple(s.shape[:-1]) != shape:
        raise ValueError(
            f"scores has shape {tuple(s.shape)} but {name} has shape {shape}; pass scores "
            f"shaped {(*shape, 'd')} (one d-vector per response) or {shape} (scalar scores)"
        )
    if scalar:
        s = s.unsqueeze(-1)
    if groups.ids is None:
        s = torch.movedim(s, groups.dim, -2).reshape(-1, s.shape[-1])
    if not bool(torch.isfinite(s).all()):
        pos = int(torch.nonzero(~torch.isfinite(s))[0, 0])
        raise ValueError(
            f"scores contains a NaN or infinity for the response at flat position {pos} "
            f"({groups.describe(int(groups.inverse[pos]))}); scores must be finite"
        )
    return s, scalar


def _finite_or_raise(groups: Groups, **results: torch.Tensor) -> None:
    """A ValueError naming the result and the first group where it is not finite (inputs are
    finite, so an infinity or NaN here is a result beyond float64, never returned silently)."""
    for name, value in results.items():
        bad = ~torch.isfinite(value)
        if bad.dim() > 1:
            bad = bad.any(dim=-1)
        if bool(bad.any()):
            group = groups.first_group(bad)
            raise ValueError(
                f"the {name} of {groups.describe(group)} does not fit in float64 (|value| > 1.8e308); "
                "rescale the scores (the identity is linear in them) or the rewards"
            )


def _fits(backend: Any, groups: Groups, scalar: bool, **results: torch.Tensor) -> dict[str, Any]:
    """The per-group ``results`` in the caller's dtype; a ValueError where one does not fit in
    it (a float32 caller's update beyond 3.4e38 is an error, not ``inf``)."""
    out = {}
    for name, value in results.items():
        with np.errstate(over="ignore"):  # an overflow of the cast is reported below
            cast = backend.out(_finish(value, groups, scalar))
        finite = cast.isfinite() if isinstance(cast, torch.Tensor) else np.isfinite(cast)
        if not bool(finite.all()):
            raise ValueError(
                f"the {name} does not fit in the caller's dtype {backend.dtype} (it does in float64); "
                "pass float64 inputs, or rescale the scores"
            )
        out[name] = cast
    return out


def _finish(value: torch.Tensor, groups: Groups, scalar: bool) -> torch.Tensor:
    value = _layouts.per_group(value, groups)
    return value.squeeze(-1) if scalar else value


def policy_gradient(advantages: Array, scores: Array, *, index: Any = None, dim: int = -1) -> Array:
    """Per-group update ``g = (1/G) sum_i A_i s_i``.

    ``advantages`` ``[..., G]`` (groups along ``dim``) with ``scores`` ``[..., G, d]``
    gives ``[..., d]``; a flat ``[N]`` with ``index=`` and ``[N, d]`` scores gives
    ``[n_groups, d]`` in sorted order of the group ids.

    >>> import numpy as np
    >>> policy_gradient(np.array([1.0, -1.0]), np.array([[2.0], [0.0]]))
    array([1.])
    """
    a, backend = _roundtrip.as_float64(advantages, "advantages", library="torch")
    flat, groups = _layouts.layout(a, index, dim, "advantages")
    _validate.check_finite(flat, groups, "advantages")
    s, scalar = _scores_like(scores, a, groups, "advantages")
    g = groups.mean(flat.unsqueeze(-1) * s)
    _finite_or_raise(groups, update=g)
    return _fits(backend, groups, scalar, update=g)["update"]


@dataclasses.dataclass(frozen=True)
class Decomposition:
    """Per-group terms of the identity ``g = constant * delta_s`` for binary rewards.

    ``k``: correct responses; ``G``: group size; ``sigma``: population std
    ``sqrt(k (G - k)) / G``; ``divisor``: ``d`` under ``convention``; ``s_plus`` /
    ``s_minus``: mean score of the correct / incorrect responses (NaN where the side is
    empty); ``delta_s``: ``s_plus - s_minus`` (0 in silent groups); ``constant``:
    ``sigma**2 / d`` (0 in silent groups); ``prediction``: ``constant * delta_s``, the
    update ``policy_gradient(grpo_advantage(R, convention), S)`` must equal.
    ``group_ids`` are the sorted ids for the index layout (``None`` otherwise).
    """

    k: Array
    G: Array
    sigma: Array
    divisor: Array
    s_plus: Array
    s_minus: Array
    delta_s: Array
    constant: Array
    prediction: Array
    convention: Convention
    group_ids: np.ndarray | None


def decompose(
    rewards: Array,
    scores: Array,
    *,
    convention: Convention | str = PAPER,
    index: Any = None,
    dim: int = -1,
) -> Decomposition:
    """Split each group's update into ``sigma``, ``s+``, ``s-`` and the identity's prediction.

    ``prediction = (sigma**2 / d) * (s+ - s-)``: ``sigma * delta_s`` for the paper's
    GRPO, ``sigma**2 * delta_s`` for Dr. GRPO, ``sqrt((G-1)/G) * sigma * delta_s`` with
    Bessel's std, 0 for a silent group. Singleton groups follow ``convention.singleton``
    (``unit_std`` predicts ``R * s / d``). Rewards must be binary.

    >>> import numpy as np
    >>> out = decompose(np.array([1.0, 0.0, 0.0, 0.0]), np.array([[3.0], [1.0], [0.0], [-1.0]]))
    >>> float(out.sigma), out.delta_s.tolist(), out.prediction.tolist()
    (0.4330127018922193, [3.0], [1.299038105676658])
    """
    conv = get_convention(convention)
    x, backend = _roundtrip.as_float64(rewards, "rewards", library="torch")
    flat, groups = _layouts.layout(x, index, dim, "rewards")
    _validate.check_finite(flat, groups, "rewards")
    _validate.check_binary(
        flat,
        groups,
        "rewards",
        "for real-valued rewards use sigma_ref.decompose_continuous (g = Cov(R, s) / d)",
    )
    s, scalar = _scores_like(scores, x, groups, "rewards")
    stats = _statistics(flat, groups, conv)
    k = groups.sum(flat)
    n = groups.sizes
    plus = groups.sum(flat.unsqueeze(-1) * s)
    minus = groups.sum((1 - flat).unsqueeze(-1) * s)
    s_plus = plus / k.unsqueeze(-1)  # NaN where k = 0: the mean of no responses
    s_minus = minus / (n - k).unsqueeze(-1)
    silent, singleton, sigma = stats.kernel.silent, stats.kernel.singleton, stats.sigma
    live = (~silent).unsqueeze(-1)
    delta = torch.where(live, s_plus - s_minus, torch.zeros_like(s_plus))
    d = stats.divisor
    constant = torch.where(silent, torch.zeros_like(d), sigma**2 / torch.where(d > 0, d, 1))
    prediction = constant.unsqueeze(-1) * delta
    if conv.singleton == "unit_std":  # A = R / d there: the update is R * s / d
        prediction = torch.where(singleton.unsqueeze(-1), plus / d.unsqueeze(-1), prediction)
    _finite_or_raise(
        groups,
        **{
            "s+": torch.where(k.unsqueeze(-1) > 0, s_plus, 0),
            "s-": torch.where((n > k).unsqueeze(-1), s_minus, 0),
        },
        delta_s=delta,
        prediction=prediction,
    )
    per = _layouts.per_group
    return Decomposition(
        k=backend.out(per(k, groups), "int64"),
        G=backend.out(per(n, groups), "int64"),
        sigma=backend.out(per(sigma, groups), "float64"),
        divisor=backend.out(per(d, groups), "float64"),
        s_plus=backend.out(_finish(s_plus, groups, scalar)),
        s_minus=backend.out(_finish(s_minus, groups, scalar)),
        delta_s=backend.out(_finish(delta, groups, scalar)),
        constant=backend.out(per(constant, groups), "float64"),
        prediction=_fits(backend, groups, scalar, prediction=prediction)["prediction"],
        convention=conv,
        group_ids=groups.ids,
    )


@dataclasses.dataclass(frozen=True)
class ContinuousDecomposition:
    """Per-group terms of ``g = Cov(R, s) / d = (sigma_R**2 / d) * beta`` for real rewards.

    ``sigma``: population std of the rewards; ``covariance``: ``(1/G) sum (R_i - mu)
    (s_i - s_mean)``; ``slope``: ``beta = covariance / sigma**2`` (NaN in silent groups);
    ``divisor``: ``d``; ``prediction``: ``covariance / d``.
    """

    G: Array
    sigma: Array
    divisor: Array
    covariance: Array
    slope: Array
    prediction: Array
    convention: Convention
    group_ids: np.ndarray | None


def decompose_continuous(
    rewards: Array,
    scores: Array,
    *,
    convention: Convention | str = PAPER,
    index: Any = None,
    dim: int = -1,
) -> ContinuousDecomposition:
    """The identity for real-valued rewards: ``g = Cov(R, s) / d = (sigma_R**2 / d) * beta``.

    ``beta`` is the least-squares slope of the scores on the rewards; for binary rewards
    ``beta = s+ - s-`` and this reduces to :func:`decompose`.

    >>> import numpy as np
    >>> out = decompose_continuous(np.array([0.0, 0.5, 1.0]), np.array([1.0, 2.0, 3.0]))
    >>> out.slope.tolist(), round(float(out.prediction), 6)
    (2.0, 0.816497)
    """
    conv = get_convention(convention)
    x, backend = _roundtrip.as_float64(rewards, "rewards", library="torch")
    flat, groups = _layouts.layout(x, index, dim, "rewards")
    _validate.check_finite(flat, groups, "rewards")
    s, scalar = _scores_like(scores, x, groups, "rewards")
    stats = _statistics(flat, groups, conv)
    kern = stats.kernel
    # in each group's units 2**e (sigma_u = sigma / 2**e in [2**-60, 1] unless silent): with
    # z = (R - mu) / sigma (|z| <= sqrt(G - 1)) and zs = mean(z s) = Cov(R, s) / sigma, the
    # slope zs / sigma and the prediction zs * sigma / d never square sigma, so no spread of
    # the rewards under- or overflows them (proofs/15_hostile_numerics)
    sigma_u = _sqrt(kern.squares / kern.size)
    live = sigma_u > 0
    one = torch.ones_like(sigma_u)
    z = kern.centered / groups.expand(torch.where(live, sigma_u, one))
    zs = groups.mean(z.unsqueeze(-1) * s)
    e = kern.exponent.unsqueeze(-1)
    cov = _times_pow2(zs * sigma_u.unsqueeze(-1), e)
    slope_u = zs / torch.where(live, sigma_u, one).unsqueeze(-1)
    slope = torch.where(live.unsqueeze(-1), _times_pow2(slope_u, -e), torch.full_like(cov, float("nan")))
    sigma = stats.sigma
    d = stats.divisor.unsqueeze(-1)
    ratio = sigma_u / torch.where(stats.den > 0, stats.den, 1.0)  # sigma / d = ratio * 2**-shift
    if stats.shift is not None:
        ratio = _times_pow2(ratio, -stats.shift)
    prediction = torch.where(d > 0, zs * ratio.unsqueeze(-1), torch.zeros_like(cov))
    if conv.singleton == "unit_std":  # A = R / d there: the update is R * s / d
        single = groups.sum(flat.unsqueeze(-1) * s) / d
        prediction = torch.where(kern.singleton.unsqueeze(-1), single, prediction)
    _finite_or_raise(
        groups, prediction=prediction, covariance=cov, slope=torch.where(live.unsqueeze(-1), slope, 0)
    )
    per = _layouts.per_group
    return ContinuousDecomposition(
        G=backend.out(per(groups.sizes, groups), "int64"),
        sigma=backend.out(per(sigma, groups), "float64"),
        divisor=backend.out(per(stats.divisor, groups), "float64"),
        slope=backend.out(_finish(slope, groups, scalar)),
        **_fits(backend, groups, scalar, covariance=cov, prediction=prediction),
        convention=conv,
        group_ids=groups.ids,
    )
