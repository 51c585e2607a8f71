"""The working precision of a loss: declared, or measured by a linearity probe (docs/spec.md, "Tolerances").

A loss may compute its ratio, or its whole surrogate, in float32 and still return float64 (a float32
policy's log-probs, the loss cast back to the advantages' dtype): its output dtype says nothing about
the rounding its gradient carries. The gradient properties judge a loss at its *working* precision,
as the advantage properties judge the statistics (:mod:`.precision`).

**The probe.** At ratio 1 every GRPO-family surrogate's gradient is linear in the advantages:
``dL/dlogp_it = -w_it A_i`` (+ a KL term that does not depend on ``A``). With ``g(A)`` the measured
gradient, the relative residual

    ``res = max_it |(g(a) - g(0)) - a_i (g(1) - g(0))| / max_it |g(a) - g(0)|``

for advantages ``a_i`` that no float32 represents (``1 + pi (i + 1) / 10``; rational ones such as
``(2i + 1) / 3`` can meet a weight ``1 / N_tok`` whose float32 mantissa they divide, and then
``fl32(a w) = a fl32(w)`` exactly) is exact-arithmetic 0, a few
float64 roundings (``res <= 64 u_64``) for a float64 loss, and the rounding of ``a_i w_it`` to the
working precision otherwise: about ``u`` (float32 ``6e-8``, bfloat16 ``4e-3``): a float32 cast anywhere
on the gradient's path rounds every ``a_i w_it``. The probe needs no convention, aggregation or
objective: the linear part is each one's own.

A residual is rounding, not a bug, when the gradient's entries are numbers of the precision it points
to (a cast on the gradient's path leaves every entry representable in that dtype): a residual above
float32's whose entries are not bfloat16 or float16 numbers is a gradient not linear in the advantages,
judged at float64 (the properties name that bug).

**The verdict it feeds.** ``float64`` and ``float32`` are working precisions a trainer computes a loss
in; the loss is judged at the detected one. A residual above float32's (``res > 64 u_32``) means the
gradient is computed in bfloat16 or float16, whose 8 or 11 bits move every token's gradient by up to
``2**-9`` and put ratios near a clip bound on its wrong side: the loss is judged at float32 (as the
advantage checks judge statistics coarser than float32) and a failure names this precision as its
cause, confirmed by this probe. A declared ``Adapter(loss_precision=...)`` replaces the measurement.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import TYPE_CHECKING, Any

import torch

from .precision import PRECISIONS

if TYPE_CHECKING:
    from .core import Context

__all__ = ["LossPrecision", "loss_precision", "precision_from_loss_residual", "precision_cause"]

#: A residual within this many units of a precision's roundoff is that precision's rounding.
_UNITS = 64.0


@dataclasses.dataclass(frozen=True)
class LossPrecision:
    """The precision a loss is judged at (``judged``: float64 or float32), what the probe saw
    (``measured``: float64, float32 or ``coarser than float32``), its ``residual`` (NaN when declared
    or not measurable) and whether it was ``declared``."""

    judged: str
    measured: str
    residual: float
    declared: bool = False

    def describe(self) -> str:
        """One line for reports.

        >>> LossPrecision("float32", "float32", 6e-8).describe()
        'loss working precision: float32 [detected: relative residual 6e-08 of its gradient, linear in A]'
        """
        if self.declared:
            return f"loss working precision: {self.judged} [declared]"
        if math.isnan(self.residual):
            return f"loss working precision: {self.judged} [not measurable: assumed]"
        return (
            f"loss working precision: {self.measured} [detected: relative residual {self.residual:.2g} of "
            "its gradient, linear in A]"
        )


def precision_from_loss_residual(residual: float) -> str:
    """``float64``, ``float32`` or ``coarser than float32`` for a probe residual (module doc).

    >>> [precision_from_loss_residual(r) for r in (2e-16, 5e-8, 2e-3)]
    ['float64', 'float32', 'coarser than float32']
    """
    if residual <= _UNITS * PRECISIONS["float64"]:
        return "float64"
    if residual <= _UNITS * PRECISIONS["float32"]:
        return "float32"
    return "coarser than float32"


_CACHE: weakref.WeakKeyDictionary[Any, LossPrecision] = weakref.WeakKeyDictionary()


def loss_precision(ctx: Context) -> LossPrecision:
    """The loss's working precision: declared (``Adapter.loss_precision``), else measured by the probe
    (module doc) once per loss object. A half precision declared is judged at float32 at finest."""
    declared = getattr(ctx.adapter, "loss_precision", None)
    if declared is not None:
        judged = "float64" if declared == "float64" else "float32"
        return LossPrecision(judged, declared, math.nan, declared=True)
    loss = ctx.adapter.loss
    try:
        return _CACHE[loss]
    except (KeyError, TypeError):
        pass
    found = _measure(ctx)
    try:
        _CACHE[loss] = found
    except TypeError:  # not weakly referenceable: measured again next time
        pass
    return found


def _measure(ctx: Context) -> LossPrecision:
    """Run the linearity probe on the loss (module doc)."""
    from .adapter import Batch
    from .core import PropertyFailure
    from .inputs import Policy, call_loss

    n = 6
    batch = Batch.grouped([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    pol = Policy.make(n, 20261204)
    logp = pol.logp().detach()
    a = 1.0 + math.pi * (torch.arange(n, dtype=torch.float64) + 1.0) / 10.0

    def gradient(adv: torch.Tensor) -> torch.Tensor:
        leaf = logp.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(call_loss(ctx, leaf, adv, pol.mask, batch), leaf, allow_unused=True)
        return torch.zeros_like(leaf) if g is None else g.detach().to(torch.float64)

    try:
        g0 = gradient(torch.zeros(n, dtype=torch.float64))
        g1 = gradient(torch.ones(n, dtype=torch.float64)) - g0
        ga = gradient(a) - g0
    except (PropertyFailure, RuntimeError, ValueError, TypeError):  # the properties report a broken loss
        return LossPrecision("float64", "float64", math.nan)
    scale = float(ga.abs().max())
    if not math.isfinite(scale) or scale == 0:
        return LossPrecision("float64", "float64", math.nan)
    residual = float((ga - a[:, None] * g1).abs().max()) / scale
    if not math.isfinite(residual):
        return LossPrecision("float64", "float64", math.nan)
    measured = precision_from_loss_residual(residual)
    if measured == "coarser than float32" and not (_holds(ga, torch.bfloat16) or _holds(ga, torch.float16)):
        # not a rounding: the gradient is not linear in A (a property names that bug); float64's tolerance
        measured = "float64"
    return LossPrecision("float64" if measured == "float64" else "float32", measured, residual)


def _holds(g: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether every entry of ``g`` is a number of ``dtype`` (the signature of a gradient computed in it)."""
    return bool((g.to(dtype).to(torch.float64) == g).all())


def precision_cause(ctx: Context) -> str | None:
    """The confirmed cause of a gradient failure when the probe measured a precision coarser than
    float32 (None otherwise)."""
    found = loss_precision(ctx)
    if found.declared or found.measured != "coarser than float32":
        return None
    return (
        f"the loss computes its gradient in a precision coarser than float32 (bfloat16 or float16): at "
        f"ratio 1 its gradient, linear in the advantages, carries a relative rounding residual of "
        f"{found.residual:.2g} on advantages no float32 represents (float32's is below "
        f"{_UNITS * PRECISIONS['float32']:.1g}); compute the log-probs and the ratio in float32 at least"
    )
