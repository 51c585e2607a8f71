"""Working precision and the tolerances derived from it (docs/spec.md, "Tolerances").

An implementation is judged at the precision it computes in, not at float64's. For
advantages ``A = (R - b) / d`` (baseline ``b``, divisor ``d`` of the convention) computed
by a numerically stable algorithm (two-pass or compensated statistics, pairwise or
cascaded summation, as ``torch.mean``/``torch.std`` do) in a working precision with unit
roundoff ``u``:

* rounding the rewards to the working precision moves each ``R_i`` by ``<= u |R_i|``;
* the group mean errs by ``<= (1 + log2 G) u max|R|`` (pairwise summation), so each
  centered value ``R_i - b`` errs by ``<= (2 + log2 G) u max|R|``;
* ``d`` is a std (plus eps) of those centered values; its absolute error is bounded by the
  same ``(2 + log2 G) u max|R|`` plus ``O(u) d``, so its relative error is ``<= (2 + log2 G)
  u kappa`` with ``kappa = max_g |R| / d``;
* the quotient adds ``u |A|``; casting the result to the output dtype adds ``u_out |A|``.

Altogether ``|A_i - A*_i| <= c (2 + log2 G) u kappa_g (1 + |A*_i|) + u_out |A*_i|``,
with ``kappa_g = max(1, max_{i in g} |R_i| / d_g)`` the condition number of the group's
statistics for this input. The constant ``c = SAFETY = 8`` covers the small integer
factors dropped above (a few roundings in the variance, the square root, the division)
and sequential rather than pairwise summation for ``G <= 64``; it is far below what
cancellation costs: a one-pass variance ``E[x^2] - E[x]^2`` errs by ``u kappa^2``, which
exceeds the bound as soon as ``kappa > 8 (2 + log2 G) (1 + |A|)``, e.g. on ``5 + 1e-3 u``
rewards (``kappa ~ 1e4``) in float32. A wrong convention (ddof, eps, baseline) changes
``A`` by a relative ``1/(2G)`` or more, far above the bound at float32 or better.

A group with ``(2 + log2 G) u kappa_g >= 1`` is not resolved at the working precision (its
spread is below the rounding of its rewards, e.g. ``1e4 + 1e-3 u`` in float32): the bound on
``d`` reaches ``d`` itself, the first-order analysis fails, and its tolerance is infinite.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

__all__ = [
    "PRECISIONS",
    "SAFETY",
    "COUNT_EPS_RTOL",
    "unit_roundoff",
    "advantage_tolerance",
    "objective_tolerance",
    "precision_from_residual",
    "coarser",
]

#: Working precisions, finest first, with their unit roundoff ``u = 2**-p``.
PRECISIONS: dict[str, float] = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
}
#: ``c`` of the module doc: the safety factor over the first-order rounding bound.
SAFETY = 8.0
#: The relative change of a loss weight by a regulariser added to a count, ``1 / (n + eps)`` with
#: ``n >= 1`` and ``eps <= 1e-6`` (verl and OpenRLHF divide by ``mask.sum(-1) + 1e-8``): not an error
#: at any working precision. Every aggregation or objective bug the loss properties catch changes a
#: weight by a relative ``1 / T`` or more.
COUNT_EPS_RTOL = 1e-6
_TORCH = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def unit_roundoff(dtype: Any) -> float:
    """``u`` of a precision name, torch dtype or numpy dtype (float64's for anything else).

    >>> unit_roundoff("float32") == 2.0**-24, unit_roundoff(torch.bfloat16) == 2.0**-8
    (True, True)
    """
    if isinstance(dtype, str):
        return PRECISIONS.get(dtype, PRECISIONS["float64"])
    for name, td in _TORCH.items():
        if dtype == td:
            return PRECISIONS[name]
    try:
        return PRECISIONS.get(np.dtype(dtype).name, PRECISIONS["float64"])
    except TypeError:
        return PRECISIONS["float64"]


def coarser(a: str, b: str) -> str:
    """The coarser of two precision names (the larger unit roundoff).

    >>> coarser("float64", "float32"), coarser("bfloat16", "float16")
    ('float32', 'bfloat16')
    """
    return a if PRECISIONS[a] >= PRECISIONS[b] else b


def advantage_tolerance(
    rewards: npt.NDArray[np.float64],
    group: npt.NDArray[np.intp],
    divisor: npt.NDArray[np.float64],
    expected: npt.NDArray[np.float64],
    *,
    precision: str,
    out_dtype: Any = torch.float64,
) -> npt.NDArray[np.float64]:
    """Per-element tolerance ``c (2 + log2 G) u kappa_g (1 + |A*|) + u_out |A*|`` (module doc).

    ``rewards`` (the rewards as the implementation received them), ``group`` (group number
    ``0..B-1`` of each element), ``divisor`` (``d`` of each element's group, 0 for silent
    groups) and ``expected`` (the oracle's advantages) are flat float64 arrays.

    >>> r = np.array([5.0, 5.01, 5.0, 5.02]); g = np.zeros(4, dtype=int)
    >>> d = np.full(4, np.std(r)); a = (r - r.mean()) / d
    >>> bool(advantage_tolerance(r, g, d, a, precision="float32").max() < 0.05)
    True
    """
    u = PRECISIONS[precision]
    n_groups = int(group.max()) + 1 if group.size else 0
    sizes = np.bincount(group, minlength=n_groups).astype(np.float64)
    top = np.zeros(n_groups)
    np.maximum.at(top, group, np.abs(rewards))
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(divisor > 0, top[group] / np.where(divisor > 0, divisor, 1.0), 1.0)
    kappa = np.maximum(kappa, 1.0)
    log_g = np.log2(np.maximum(sizes[group], 1.0))
    mag = np.abs(expected)
    tol = SAFETY * (2.0 + log_g) * u * kappa * (1.0 + mag) + unit_roundoff(out_dtype) * mag
    # (2 + log2 G) u kappa >= 1: d's error bound reaches d itself (the spread is below the rounding of
    # the rewards at this precision), the first-order bound no longer holds, and no answer is wrong
    return np.where((2.0 + log_g) * u * kappa >= 1.0, np.inf, tol)


def objective_tolerance(
    objective: Any, x: dict[str, torch.Tensor], terms: dict[str, torch.Tensor], u: float
) -> torch.Tensor:
    """Per-token tolerance on ``dL/dlogp`` of a loss computed at unit roundoff ``u``.

    ``(rho_r + COUNT_EPS_RTOL) s_it + rho_r max s``, with ``rho_r = SAFETY (2 + log2 N T) u kappa``,
    ``kappa = 1 + max_i sum_t mask_it (|logp| + |old_logp| + |ref_logp| + |rollout_logp|)`` (a ratio
    ``exp(a - b)`` errs by a relative ``u (|a| + |b|)``, a sequence ratio or weight by the sum over its
    row) and ``s_it = |policy_it| + |kl_it|`` the size of each token's terms (``terms``, from
    :func:`sigma_ref.objectives.loss_gradient_terms`), plus, for a KL term in the loss, its slope's
    sensitivity ``|beta| w_it (1 + exp(ref_logp - logp))`` (for the importance-weighted ``k3-is``,
    plus ``q (k3 + 2 |delta| + 1)``, ``q`` the token ratio or GSPO's sequence ratio). ``x`` holds
    ``[N, T]`` float64 tensors ``logp``, ``old_logp``, ``ref_logp``, ``rollout_logp`` and ``mask``;
    ``objective`` is an :class:`~sigma_ref.objectives.Objective`.

    >>> from sigma_ref.objectives import Objective, loss_gradient_terms
    >>> z = torch.zeros(1, 2, dtype=torch.float64)
    >>> x = dict(logp=z, old_logp=z, ref_logp=z, rollout_logp=z, mask=torch.ones(1, 2, dtype=torch.float64))
    >>> t = loss_gradient_terms(Objective(), z, z, torch.tensor([1.0]), x["mask"])
    >>> bool((objective_tolerance(Objective(), x, t, 2.0**-24) < 1e-4).all())
    True
    """
    from sigma_ref.objectives import aggregation_weights

    m = x["mask"]
    size = sum(x[k].abs() for k in ("logp", "old_logp", "ref_logp", "rollout_logp")) * m
    rounding = SAFETY * (2 + math.log2(m.numel())) * u * (1.0 + float(size.sum(-1).max()))
    scale = terms["policy"].abs() + terms["kl"].abs()
    if objective.kl is not None and objective.kl_placement == "loss" and objective.kl_coef != 0:
        w = aggregation_weights(m, objective.aggregation, constant=objective.constant)
        slope = 1 + torch.exp(x["ref_logp"] - x["logp"])
        if objective.kl == "k3-is":  # q (k3 + |delta| + 1), q the token ratio or (GSPO) the sequence ratio
            log_q = (x["logp"] - x["old_logp"]) * m
            if objective.kind in ("gspo", "gspo-token"):
                log_q = (log_q.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)).expand_as(m)
            delta = x["logp"] - x["ref_logp"]
            slope = slope + torch.exp(log_q) * (torch.exp(-delta) + 2 * delta.abs() + 1)
        scale = scale + abs(objective.kl_coef) * w * slope * m
    return (rounding + COUNT_EPS_RTOL) * scale + rounding * float(scale.max())


def precision_from_residual(residual: float) -> str:
    """The working precision a relative rounding residual points to: float64 or float32.

    ``residual`` is ``max |c - d a| / max |c|`` of a well-conditioned probe (``c = R - mu``
    from the oracle, ``a`` the implementation's advantages, ``d`` their least-squares
    divisor): rounding noise only, whatever the convention. Within ``64 u`` of float64
    means float64; anything coarser is judged as float32, the coarsest precision a trainer
    computes float64 rewards' statistics in (half-precision inputs are judged at their own
    dtype's precision by :func:`advantage_tolerance`'s caller).

    >>> precision_from_residual(3e-17), precision_from_residual(2e-8), precision_from_residual(1e-3)
    ('float64', 'float32', 'float32')
    """
    if math.isfinite(residual) and residual <= 64 * PRECISIONS["float64"]:
        return "float64"
    return "float32"
