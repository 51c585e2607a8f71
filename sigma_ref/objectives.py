"""Per-token gradients of GRPO-family losses: aggregation, scale-out, clipping, IS and KL.

A trainer's policy loss is ``L = sum_it w_it * ell_it`` over a padded ``[N, T]`` batch with a
response ``mask``: per-token terms ``ell_it`` (the negated surrogate, an importance-weight
correction, a KL penalty) reduced with *aggregation weights* ``w_it``. Its parameter gradient
is ``grad L = sum_it (dL/dlogp_it) * grad log pi(y_it)``, so the whole update is fixed by one
``[N, T]`` array, ``dL/dlogp_it``: :func:`loss_gradient` states it for a declared
:class:`Objective` at any ratio, :func:`aggregation_weights` states ``w_it``,
:func:`effective_weights` states what a split over micro-batches and data-parallel ranks makes
of them, and :func:`detect_aggregation` reads the mode back from measured weights. At ratio 1
with ``ell_it = -A_i r_it`` the identity's per-response score is
``s_i = G * sum_t w_it grad log pi(y_it)`` (docs/spec.md §4).

Derivations: ``proofs/08_aggregation.py`` (the modes), ``proofs/11_objectives.py`` (clipping,
GSPO, CISPO, importance sampling, KL estimators and the bias theorem), ``proofs/12_scale_out.py``
(micro-batches and ranks). Sources read for the names and formulas: TRL 1.16.0
(``trl/trainer/grpo_trainer.py``, ``_compute_loss``) and verl 0.9.1
(``verl/trainer/ppo/core_algos.py``: ``agg_loss``, ``compute_policy_loss_vanilla``, ``_gspo``,
``_cispo``, ``kl_penalty``).

Everything is computed in torch float64 on the CPU copy of the inputs, vectorised, without
autograd; ties at a clip boundary (a measure-zero set) follow torch's convention that
``clamp`` passes the gradient at the boundary (the clip is active only strictly outside).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import torch

from ._aggregation import (
    _mask,
    _tokens,
    aggregation_weights,
    detect_aggregation,
    effective_weights,
    prompt_mean_effective_weights,
    prompt_mean_weights,
    resolve_declared_aggregation,
)
from .conventions import AGGREGATION_ALIASES, AGGREGATION_MODES, resolve_aggregation

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "AGGREGATION_MODES",
    "AGGREGATION_ALIASES",
    "resolve_aggregation",
    "aggregation_weights",
    "prompt_mean_weights",
    "resolve_declared_aggregation",
    "detect_aggregation",
    "effective_weights",
    "prompt_mean_effective_weights",
    "Objective",
    "loss_gradient",
    "loss_gradient_terms",
    "gradient_terms_by_name",
    "LossInputs",
    "kl_estimate",
    "importance_weights",
]

# --------------------------------------------------------------------------------------
# objectives


Kind = Literal["ppo", "gspo", "gspo-token", "cispo"]
KL = Literal["k1", "k2", "k3", "k3-is"]
Level = Literal["token", "sequence", "geometric"]


@dataclasses.dataclass(frozen=True)
class Objective:
    """A declared policy loss: ``L = sum_it w_it [rho_it * ell_it + kl_coef * k(delta_it)]``.

    ``kind``: ``ppo`` (token ratio, clipped surrogate), ``gspo`` (sequence ratio
    ``s_i = exp(mean_t log r_it)`` clipped per sequence, the gradient flowing through ``s_i``: the GSPO
    paper's sequence form, TRL 1.16.0 ``importance_sampling_level="sequence"``, OpenRLHF's ``gspo``),
    ``gspo-token`` (GSPO-token: ``s_it = sg(s_i) pi_it / sg(pi_it)``, value ``s_i``, gradient per
    token: verl 0.9.1's ``compute_policy_loss_gspo``) or ``cispo`` (``ell = -sg(clip(r)) A log pi``).
    The two GSPO forms agree when importance weights, advantages and ``w_it`` are constant along each
    response, and differ otherwise (``proofs/11_objectives.py`` §2).
    ``eps_low``/``eps_high``: the clip range ``[1 - eps_low, 1 + eps_high]`` (``eps_high`` None:
    ``eps_low``; for CISPO ``eps_low = math.inf`` means no lower bound, TRL's form, whose
    ``epsilon_high=eps_max`` is ``eps_high = eps_max - 1`` here). ``dual_clip``: ``c > 1`` for
    dual-clip PPO (``A < 0``: the loss is capped at ``-c A``). ``kl``/``kl_coef``/``kl_placement``:
    the KL estimator against a reference policy (:func:`kl_estimate`; ``k3-is`` is ``q k3`` with the
    objective's own differentiable ratio ``q``, TRL's ``use_bias_correction_kl=True`` default, whose
    expected gradient is the reverse KL's: declare it to ask whether a loss's KL is unbiased), in the
    ``loss`` (a term of ``L``) or in the ``reward`` (already inside the advantages: no term of ``L``).
    ``tis_cap``/``tis_level``/``tis_mode``: the rollout-vs-training importance weight ``rho``
    (:func:`importance_weights`, per ``token``, ``sequence`` or ``geometric`` mean); None: ``rho = 1``.
    ``aggregation``/``constant``: :func:`aggregation_weights`.

    >>> Objective("ppo", eps_low=0.2, eps_high=0.28).clip_range
    (0.8, 1.28)
    """

    kind: Kind = "ppo"
    eps_low: float = 0.2
    eps_high: float | None = None
    dual_clip: float | None = None
    kl: KL | None = None
    kl_coef: float = 0.0
    kl_placement: Literal["loss", "reward"] = "loss"
    tis_cap: float | None = None
    tis_level: Level = "token"
    tis_mode: Literal["truncate", "mask"] = "truncate"
    aggregation: str = "token-mean"
    constant: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("ppo", "gspo", "gspo-token", "cispo"):
            raise ValueError(f"kind={self.kind!r} must be 'ppo', 'gspo', 'gspo-token' or 'cispo'")
        for name in ("eps_low", "eps_high"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int | float) and v >= 0 and not math.isnan(v)):
                raise ValueError(
                    f"{name}={v!r} must be a number >= 0 (the clip range is [1 - eps_low, 1 + eps_high])"
                )
        if self.eps_high is not None and math.isinf(self.eps_high) and self.kind != "cispo":
            raise ValueError(f"eps_high={self.eps_high!r} must be finite for kind={self.kind!r}")
        if self.dual_clip is not None:
            if self.kind != "ppo":
                raise ValueError(
                    f"dual_clip={self.dual_clip!r} applies to kind='ppo' only, not {self.kind!r}"
                )
            if not (isinstance(self.dual_clip, int | float) and self.dual_clip > 1):
                raise ValueError(
                    f"dual_clip={self.dual_clip!r} must be a number > 1 (verl's clip_ratio_c, e.g. 3.0)"
                )
        if self.kl not in (None, "k1", "k2", "k3", "k3-is"):
            raise ValueError(f"kl={self.kl!r} must be None, 'k1', 'k2', 'k3' or 'k3-is'")
        if self.kl_placement not in ("loss", "reward"):
            raise ValueError(f"kl_placement={self.kl_placement!r} must be 'loss' or 'reward'")
        if not (isinstance(self.kl_coef, int | float) and math.isfinite(self.kl_coef)):
            raise ValueError(f"kl_coef={self.kl_coef!r} must be a finite number")
        if self.kl_coef != 0 and self.kl is None:
            raise ValueError(f"kl_coef={self.kl_coef!r} needs an estimator: set kl='k1', 'k2' or 'k3'")
        if self.tis_cap is not None and not (isinstance(self.tis_cap, int | float) and self.tis_cap > 0):
            raise ValueError(f"tis_cap={self.tis_cap!r} must be a positive number (e.g. 2.0) or None")
        if self.tis_level not in ("token", "sequence", "geometric"):
            raise ValueError(f"tis_level={self.tis_level!r} must be 'token', 'sequence' or 'geometric'")
        if self.kl == "k3-is" and self.kl_placement == "reward":
            raise ValueError(
                "kl='k3-is' weights k3 by the policy's differentiable ratio, a term of the loss; in the "
                "reward the estimator is a constant: declare kl='k3' (or 'k1') with kl_placement='reward'"
            )
        if self.tis_mode not in ("truncate", "mask"):
            raise ValueError(f"tis_mode={self.tis_mode!r} must be 'truncate' or 'mask'")
        resolve_aggregation(self.aggregation)

    @property
    def clip_range(self) -> tuple[float, float]:
        """``(1 - eps_low, 1 + eps_high)``, the ratio interval where the clip is inactive."""
        high = self.eps_low if self.eps_high is None else self.eps_high
        return 1 - self.eps_low, 1 + high


def kl_estimate(
    logp: Any, ref_logp: Any, estimator: KL, *, ratio: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Value and derivative in ``logp`` of a per-token KL estimator, ``delta = logp - ref_logp``.

    Schulman's estimators of ``KL(pi || pi_ref)`` from ``y ~ pi``, with ``r = pi_ref / pi =
    exp(-delta)``: ``k1 = delta = -log r`` (derivative 1), ``k2 = delta**2 / 2`` (derivative
    ``delta``), ``k3 = r - 1 - log r = exp(-delta) - 1 + delta`` (derivative ``1 - r``), and
    ``k3-is = q k3``, k3 weighted by the importance ratio ``q = pi / pi_old = exp(logp - old_logp)``
    (``ratio``, required) that carries its gradient ``dq/dlogp = q``: derivative ``q k3 + q (1 - r) =
    q delta`` (TRL's ``use_bias_correction_kl``, DeepSeek-V3.2). In the loss with samples from
    ``pi_old``, ``k2``'s expected gradient is the reverse KL's on-policy only, ``k3-is``'s at every
    ratio; ``k3``'s is the forward KL's and ``k1``'s is 0 (``proofs/11_objectives.py`` §5).

    >>> value, slope = kl_estimate(torch.tensor([0.0]), torch.tensor([-1.0]), "k3")
    >>> round(value.item(), 4), round(slope.item(), 4)
    (0.3679, 0.6321)
    >>> q = torch.tensor([2.0])
    >>> value, slope = kl_estimate(torch.tensor([0.0]), torch.tensor([-1.0]), "k3-is", ratio=q)
    >>> round(value.item(), 4), round(slope.item(), 4)
    (0.7358, 2.0)
    """
    lp = torch.as_tensor(logp).detach().cpu().to(torch.float64)
    rp = torch.as_tensor(ref_logp).detach().cpu().to(torch.float64)
    if lp.shape != rp.shape:
        raise ValueError(
            f"ref_logp has shape {tuple(rp.shape)} but logp has {tuple(lp.shape)}; pass one shape"
        )
    delta = lp - rp
    if estimator == "k1":
        return delta, torch.ones_like(delta)
    if estimator == "k2":
        return 0.5 * delta**2, delta
    if estimator == "k3":
        r = torch.exp(-delta)
        return r - 1 + delta, 1 - r
    if estimator == "k3-is":
        if ratio is None:
            raise ValueError(
                "estimator='k3-is' needs ratio= (pi / pi_old = exp(logp - old_logp), the importance ratio)"
            )
        q = torch.as_tensor(ratio).detach().cpu().to(torch.float64)
        if q.shape != lp.shape:
            raise ValueError(
                f"ratio has shape {tuple(q.shape)} but logp has {tuple(lp.shape)}; pass one shape"
            )
        return q * (torch.exp(-delta) - 1 + delta), q * delta
    raise ValueError(f"estimator={estimator!r} must be 'k1', 'k2', 'k3' or 'k3-is'")


def importance_weights(
    old_logp: Any,
    rollout_logp: Any,
    mask: Any,
    *,
    cap: float,
    level: Level = "token",
    mode: Literal["truncate", "mask"] = "truncate",
) -> torch.Tensor:
    """Rollout-correction weights ``rho [N, T]`` (constants: no gradient flows through them).

    ``rho_it = pi_old(y_it) / pi_rollout(y_it)`` (``level="token"``) or, for every token of
    row ``i``, the sequence ratio ``prod_t`` of them (``level="sequence"``, TRL 1.16.0's
    ``sequence_*`` modes: ``exp(sum_t mask_it (old - rollout))``) or their geometric mean
    ``(prod_t rho_it)^(1/|y_i|) = exp(sum_t mask_it (old - rollout) / |y_i|)`` (``level="geometric"``,
    verl 0.9.1's ``geo_mean`` loss, a length-independent sequence weight); ``truncate``:
    ``min(rho, cap)`` (TIS); ``mask``: ``rho * 1[rho <= cap]`` (MIS). 0 on masked tokens.

    >>> importance_weights(torch.tensor([[0.0, 0.0]]), torch.tensor([[-1.0, 0.5]]), torch.ones(1, 2), cap=2.0)
    tensor([[2.0000, 0.6065]], dtype=torch.float64)
    >>> old, rollout, mask = torch.zeros(1, 2), torch.tensor([[-1.0, 0.5]]), torch.ones(1, 2)
    >>> importance_weights(old, rollout, mask, cap=2.0, level="geometric")
    tensor([[1.2840, 1.2840]], dtype=torch.float64)
    """
    m = _mask(mask)
    shape = tuple(m.shape)
    diff = (_tokens(old_logp, "old_logp", shape) - _tokens(rollout_logp, "rollout_logp", shape)) * m
    if not (isinstance(cap, int | float) and cap > 0):
        raise ValueError(f"cap={cap!r} must be a positive number (e.g. 2.0)")
    if level == "sequence":
        diff = diff.sum(-1, keepdim=True).expand_as(m)
    elif level == "geometric":
        diff = (diff.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)).expand_as(m)
    elif level != "token":
        raise ValueError(f"level={level!r} must be 'token', 'sequence' or 'geometric'")
    rho = torch.exp(diff)
    if mode == "truncate":
        rho = rho.clamp(max=cap)
    elif mode == "mask":
        rho = torch.where(rho <= cap, rho, torch.zeros_like(rho))
    else:
        raise ValueError(f"mode={mode!r} must be 'truncate' or 'mask'")
    return rho * m


class LossInputs(TypedDict, total=False):
    """The optional per-token inputs of :func:`loss_gradient_terms` and :func:`loss_gradient`:
    ``ref_logp`` (the reference policy's log-probs, for a KL in the loss), ``rollout_logp`` (the
    rollout engine's, for ``tis_cap``) and ``rho`` (importance weights used as given), each ``[N, T]``."""

    ref_logp: Any
    rollout_logp: Any
    rho: Any


def loss_gradient_terms(
    objective: Objective,
    logp: Any,
    old_logp: Any,
    advantages: Any,
    mask: Any,
    *,
    ref_logp: Any = None,
    rollout_logp: Any = None,
    rho: Any = None,
) -> dict[str, torch.Tensor]:
    """``dL/dlogp_it [N, T]`` by term, ``{"policy": ..., "kl": ...}``; the sum is :func:`loss_gradient`.

    A suite names the term that differs by comparing each with the measured gradient. With
    ``r_it = exp(logp_it - old_logp_it)``, weights ``w_it`` (:func:`aggregation_weights`), ``rho_it``
    (:func:`importance_weights`, 1 without ``tis_cap``) and ``[lo, hi]`` the clip range:

    * ``ppo`` (``ell = -max(min(r A, clip(r, lo, hi) A), c A if A < 0)``):
      ``-w rho A r`` where the clip is inactive for the sign of A (``A > 0``: ``r <= hi``;
      ``A < 0``: ``r >= lo``, and with dual clip also ``r <= c``), else 0;
    * ``gspo`` (``s_i = exp(sum_t mask_it log r_it / |y_i|)``, ``ell_it = -min(s_i A_it,
      clip(s_i) A_it)``, ``s_i`` broadcast over the row, its gradient through ``s_i``: the sequence
      form): ``-(mask_it / |y_i|) sum_t' w_it' rho_it' A_it' s_i [s_i inside for the sign of A_it']``;
    * ``gspo-token`` (``s_it = sg(s_i) pi_it / sg(pi_it)``, value ``s_i``, ``ds_it/dlogp_it = s_i``):
      ``-w_it rho_it A_it s_i`` where ``s_i`` is inside for the sign of ``A_it``, else 0. The two
      forms agree when ``w_it rho_it A_it`` is constant along each response (then the row sum is
      ``|y_i|`` times each term), e.g. scalar advantages, no rollout weights and any mode here;
      they differ when importance weights or advantages vary along a response;
    * ``cispo`` (``ell = -sg(clip(r, lo, hi)) A log pi``): ``-w rho clip(r, lo, hi) A``;
    * KL in the loss adds ``kl_coef * w * dk/dlogp`` (:func:`kl_estimate`); ``k3-is`` weights k3 by
      the objective's own ratio ``q`` (``r_it``; GSPO's ``s_i``): ``kl_coef w q delta`` for a ratio
      per token (``ppo``, ``cispo``, ``gspo-token``), and for ``gspo``, whose ``s_i`` moves with the
      whole row, ``kl_coef [w_it s_i (1 - exp(-delta_it)) + (mask_it / |y_i|) sum_t' w_it' s_i
      k3_it']``; in the reward it adds nothing here (it is inside ``advantages``).

    ``advantages``: ``[N]`` (one per response) or ``[N, T]`` (token-level). ``rho``: ``[N, T]``
    importance weights used as given instead of ``tis_cap``'s (constants: e.g. the weights a
    wrong implementation computes, to say what its gradient is). Unclamped: verl also
    clamps log-ratios to ``[-20, 20]`` (GSPO's to ``<= 10``) and k3 to ``[-10, 10]``, where its
    gradient is 0; inputs inside those ranges agree.

    >>> obj = Objective("ppo", eps_low=0.2)
    >>> logp = torch.log(torch.tensor([[1.1, 1.5]]))
    >>> terms = loss_gradient_terms(obj, logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    >>> terms["policy"], terms["kl"]
    (tensor([[-0.5500, -0.0000]], dtype=torch.float64), tensor([[0., 0.]], dtype=torch.float64))
    """
    if not isinstance(objective, Objective):
        raise TypeError(f"objective={objective!r} must be a sigma_ref.objectives.Objective")
    m, lp, olp, adv = _token_inputs(logp, old_logp, advantages, mask)
    w = aggregation_weights(m, objective.aggregation, constant=objective.constant)
    rho = _rollout_weights(objective, m, olp, rollout_logp, rho)
    log_ratio = (lp - olp) * m
    grad = _policy_gradient(objective, m, log_ratio, adv, w, rho)
    return {"policy": grad * m, "kl": _kl_gradient(objective, m, lp, log_ratio, w, ref_logp)}


def _token_inputs(
    logp: Any, old_logp: Any, advantages: Any, mask: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(mask, logp, old_logp, advantages)`` as float64 ``[N, T]`` (advantages ``[N]`` broadcast
    over each row), finite on every unmasked token (else ``ValueError``)."""
    m = _mask(mask)
    shape = tuple(m.shape)
    lp = _tokens(logp, "logp", shape)
    olp = _tokens(old_logp, "old_logp", shape)
    adv = torch.as_tensor(advantages).detach().cpu().to(torch.float64)
    if tuple(adv.shape) == (shape[0],):
        adv = adv[:, None].expand(shape)
    elif tuple(adv.shape) != shape:
        raise ValueError(
            f"advantages has shape {tuple(adv.shape)}; pass [N] = ({shape[0]},) or [N, T] = {shape} like mask"
        )
    for name, x in (("logp", lp), ("old_logp", olp), ("advantages", adv)):
        if not bool(torch.isfinite(x[m.bool()]).all()):
            raise ValueError(f"{name} contains a NaN or infinity on an unmasked token; pass finite values")
    return m, lp, olp, adv


def _rollout_weights(
    objective: Objective, m: torch.Tensor, olp: torch.Tensor, rollout_logp: Any, rho: Any
) -> torch.Tensor:
    """``rho [N, T]``: the given weights (checked), else ``tis_cap``'s (:func:`importance_weights`),
    else the mask."""
    if rho is not None:
        given = _tokens(rho, "rho", tuple(m.shape)) * m
        if not bool(torch.isfinite(given).all()) or bool((given < 0).any()):
            raise ValueError("rho contains a negative, NaN or infinite weight; pass finite weights >= 0")
        return given
    if objective.tis_cap is None:
        return m
    if rollout_logp is None:
        raise ValueError(f"tis_cap={objective.tis_cap} needs rollout_logp= (the rollout engine's log-probs)")
    return importance_weights(
        olp, rollout_logp, m, cap=objective.tis_cap, level=objective.tis_level, mode=objective.tis_mode
    )


def _sequence_ratio(log_ratio: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, |y|)`` per row ``[N, 1]``: GSPO's ``s_i = exp(sum_t mask_it log r_it / |y_i|)``, the length."""
    length = m.sum(-1, keepdim=True).clamp(min=1)
    return torch.exp(log_ratio.sum(-1, keepdim=True) / length), length


def _policy_gradient(
    objective: Objective,
    m: torch.Tensor,
    log_ratio: torch.Tensor,
    adv: torch.Tensor,
    w: torch.Tensor,
    rho: torch.Tensor,
) -> torch.Tensor:
    """The policy term's ``dL/dlogp_it`` (before masking) for the objective's kind (formulas:
    :func:`loss_gradient_terms`)."""
    lo, hi = objective.clip_range
    if objective.kind == "ppo":
        r = torch.exp(log_ratio)
        inside = torch.where(adv > 0, r <= hi, r >= lo)
        if objective.dual_clip is not None:
            inside = inside & ~((adv < 0) & (r > objective.dual_clip))
        return -w * rho * adv * r * inside
    if objective.kind == "cispo":
        r = torch.exp(log_ratio)
        return -w * rho * r.clamp(min=lo, max=hi) * adv
    s, length = _sequence_ratio(log_ratio, m)
    inside = torch.where(adv > 0, s <= hi, s >= lo)
    if objective.kind == "gspo":  # through s_i: ds_i/dlogp_it = s_i mask_it / |y_i|
        row = (w * rho * adv * s * inside).sum(-1, keepdim=True)
        return -(m / length) * row
    return -w * rho * adv * s * inside  # GSPO-token: ds_it/dlogp_it = s_i, no cross-token term


def _kl_gradient(
    objective: Objective,
    m: torch.Tensor,
    lp: torch.Tensor,
    log_ratio: torch.Tensor,
    w: torch.Tensor,
    ref_logp: Any,
) -> torch.Tensor:
    """The KL term's ``dL/dlogp_it`` (masked): 0 unless the KL is in the loss with a non-zero
    coefficient; ``k3-is`` weights k3 by the objective's own ratio (:func:`loss_gradient_terms`)."""
    kl = objective.kl
    if kl is None or objective.kl_placement != "loss" or objective.kl_coef == 0:
        return torch.zeros_like(m)
    if ref_logp is None:
        raise ValueError(f"kl={kl!r} in the loss needs ref_logp= (the reference policy's log-probs)")
    ref = _tokens(ref_logp, "ref_logp", tuple(m.shape))
    if kl == "k3-is" and objective.kind == "gspo":
        # q = s_i carries the gradient of the whole row: d/dlogp_it sum_t' w s_i k3_it' =
        # w_it s_i (1 - exp(-delta_it)) + (mask_it / |y_i|) sum_t' w_it' s_i k3_it'
        s, length = _sequence_ratio(log_ratio, m)
        q = s.expand_as(m)
        value, _ = kl_estimate(lp, ref, "k3-is", ratio=q)
        _, own = kl_estimate(lp, ref, "k3")
        return objective.kl_coef * (w * q * own + (m / length) * (w * value * m).sum(-1, keepdim=True)) * m
    if kl == "k3-is":  # a per-token ratio q_it with dq_it/dlogp_it = q_it
        # GSPO-token: value s_i, gradient per token
        q = (
            _sequence_ratio(log_ratio, m)[0].expand_as(m)
            if objective.kind == "gspo-token"
            else torch.exp(log_ratio)
        )
        _, slope = kl_estimate(lp, ref, "k3-is", ratio=q)
    else:
        _, slope = kl_estimate(lp, ref, kl)
    return objective.kl_coef * w * slope * m


def gradient_terms_by_name(
    objective: Objective, x: Mapping[str, Any], rho: Any = None
) -> dict[str, torch.Tensor]:
    """:func:`loss_gradient_terms` of the inputs ``x`` by name (``logp``, ``old_logp``, ``advantages``,
    ``mask``, ``ref_logp``, ``rollout_logp``; the last two may be ``None``), as the conformance
    vectors and the suite hold them, with importance weights ``rho`` used as given."""
    return loss_gradient_terms(
        objective,
        x["logp"],
        x["old_logp"],
        x["advantages"],
        x["mask"],
        ref_logp=x["ref_logp"],
        rollout_logp=x["rollout_logp"],
        rho=rho,
    )


def loss_gradient(
    objective: Objective, logp: Any, old_logp: Any, advantages: Any, mask: Any, **inputs: Unpack[LossInputs]
) -> torch.Tensor:
    """``dL/dlogp_it [N, T]``: the gradient of the declared loss in each token's log-probability.

    The sum of :func:`loss_gradient_terms`, with the same inputs (``ref_logp``, ``rollout_logp``,
    ``rho``: :class:`LossInputs`); its docstring states each objective's formula:
    ``grad_theta L = sum_it dL/dlogp_it * grad log pi(y_it)``, and torch autograd of a correct
    implementation with ``logp`` as a leaf returns exactly this array. PPO with
    ``r = exp(logp - old_logp)``, ``A > 0`` and token-mean: ``-A r / N_tok`` inside the clip,
    0 above ``1 + eps_high``.

    >>> obj = Objective("ppo", eps_low=0.2)
    >>> logp = torch.log(torch.tensor([[1.1, 1.5]]))
    >>> loss_gradient(obj, logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    tensor([[-0.5500, -0.0000]], dtype=torch.float64)
    """
    terms = loss_gradient_terms(objective, logp, old_logp, advantages, mask, **inputs)
    return terms["policy"] + terms["kl"]
