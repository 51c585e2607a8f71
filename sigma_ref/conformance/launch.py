"""Level 5's launch for the suite: one launch of W processes per run, shared by its properties.

The level-5 properties (``spec/test_scaleout.py``) are ordinary conformance properties: each reads
its results from :func:`scaleout_results`, which starts the W ranks once per :class:`~.core.Context`
(:func:`~.scaleout.run_scaleout` with every configuration the options ask for) and keeps the
report in the context's memo. The options live on the context (:class:`ScaleoutOptions`, set by
the pytest plugin from ``--sigma-ref-world-size`` and the other level-5 options), so the one runner
(:func:`~.core.run_suite`) runs level 5 like every other level, from pytest, ``sigma-ref check``
and any caller that builds a context with them.

>>> opts = ScaleoutOptions(impl="pkg.mod:adv", layout="index", world_size=2, micro_batches=(2, 3))
>>> opts.describe()
'W=2, M=2,3, whole-groups'
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .._options import ADVANTAGE_SCALE_SCOPES, ADVANTAGE_SCALES, PACKINGS
from .._vocabulary import VERDICTS
from .levels import Verdict
from .scaleout import (
    LOSS_SCALES,
    RENDEZVOUS_HOST,
    SPLITS,
    CallShape,
    ScaleoutJob,
    ScaleoutReport,
    ScaleoutResult,
)

if TYPE_CHECKING:
    from .core import Context

__all__ = [
    "ScaleoutOptions",
    "scaleout_report",
    "scaleout_results",
    "NOT_ASKED",
    "LEVEL5_ONLY",
    "check_options",
]

#: Why level 5 is skipped when no option asks for it.
NOT_ASKED = "level 5 runs real torch.distributed processes only when asked: --world-size W --micro-batches M"

#: Why an option of level 5's call shape is a usage error without level 5 (``{option}``: the option).
LEVEL5_ONLY = (
    "{option} is an option of level 5, which runs only with --world-size W (and --micro-batches M): add "
    "them, e.g. --world-size 2 --micro-batches 1,2,3, or drop {option}"
)

#: The oracle the suite tests by default, as the ranks import it (the token-mean reference loss).
_ORACLE_ADVANTAGES = "sigma_ref.conformance.scaleout:oracle_advantages"
_ORACLE_LOSS = "sigma_ref.conformance.scaleout:oracle_loss"


@dataclasses.dataclass(frozen=True)
class ScaleoutOptions(CallShape):
    """What level 5 runs: the targets the ranks import and the options of ``--world-size`` & co.

    ``impl``/``loss``: as given to the suite (``None``: the oracle, or the Adapter's own);
    ``world_size`` W; ``micro_batches``: every M checked; ``backend``, ``rendezvous_host``; and the
    call shape's options (:class:`~.scaleout.CallShape`), :func:`~.scaleout.run_scaleout`'s.
    """

    impl: str | None = None
    loss: str | None = None
    world_size: int = 1
    micro_batches: tuple[int, ...] = (1,)
    backend: str = "auto"
    rendezvous_host: str = RENDEZVOUS_HOST

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split={self.split!r} must be one of {SPLITS}")
        if self.loss_scale not in LOSS_SCALES:
            raise ValueError(f"loss_scale={self.loss_scale!r} must be one of {LOSS_SCALES}")
        for name, value, allowed in (
            ("packing", self.packing, PACKINGS),
            ("advantage_scale", self.advantage_scale, ADVANTAGE_SCALES),
            ("advantage_scale_on", self.advantage_scale_on, ADVANTAGE_SCALE_SCOPES),
        ):
            if value not in allowed:
                raise ValueError(f"{name}={value!r} must be one of {allowed}")

    def describe(self) -> str:
        """``W=2, M=2,3, whole-groups``."""
        return f"W={self.world_size}, M={','.join(map(str, self.micro_batches))}, {self.split}"

    def job(
        self,
        impl: str,
        loss: str | None,
        *,
        layout: str | None,
        aggregation: str | None,
        aggregation_constant: float | None,
        loss_precision: str,
    ) -> ScaleoutJob:
        """The :class:`~.scaleout.ScaleoutJob` these options ask for, on the targets the ranks import
        and the declarations of the implementation under test (every option of the same name)."""
        shared = {f.name for f in dataclasses.fields(ScaleoutJob)} & {
            f.name for f in dataclasses.fields(self)
        }
        return ScaleoutJob(
            impl,
            loss,
            **{
                **{name: getattr(self, name) for name in shared},
                "layout": layout,
                "aggregation": aggregation,
                "aggregation_constant": aggregation_constant,
                "loss_precision": loss_precision,
            },
        )


def check_options(opts: ScaleoutOptions, loss: Any) -> None:
    """Usage errors of level 5's options against the loss under test, before anything runs: a
    ``packing`` the loss cannot take (it takes neither ``position_ids=`` nor ``cu_seqlens=``), an
    ``advantage_scale`` without a loss."""
    import inspect

    from .packing import check_packing

    if opts.packing != "none":
        try:
            params = None if loss is None else list(inspect.signature(loss).parameters)
        except (TypeError, ValueError):
            params = []
        check_packing(opts.packing, params)
    if opts.advantage_scale != "none" and loss is None:
        raise ValueError(
            f"--advantage-scale {opts.advantage_scale} scales the advantages a loss gets: give the loss "
            "(--loss PKG.MODULE:ATTR), or drop --advantage-scale"
        )
    if opts.advantage_scaler is not None:
        if loss is None:
            raise ValueError(
                f"--advantage-scaler {opts.advantage_scaler} scales the advantages a loss gets: give the "
                "loss (--loss PKG.MODULE:ATTR), or drop --advantage-scaler"
            )
        if opts.advantage_scale != "none":
            raise ValueError(
                f"--advantage-scaler {opts.advantage_scaler} and --advantage-scale {opts.advantage_scale} "
                "both scale the advantages: give one (the trainer's own function, or the count it divides by)"
            )


def scaleout_report(ctx: Context) -> ScaleoutReport:
    """The level-5 report of ``ctx`` (``ctx.scaleout`` must be set): run once, then kept in its memo.

    Options that do not fit the implementation (a ``ValueError`` or ``TypeError`` of
    :func:`~.scaleout.run_scaleout`, raised before any process starts) are a FAIL of every level-5
    property, with the reason: level 5 was asked for and cannot run.
    """
    from ..objectives import resolve_declared_aggregation
    from .core import Finding, PropertyFailure
    from .scaleout import run_scaleout_many

    opts = ctx.scaleout
    if opts is None:
        raise ValueError("the context has no scale-out options (ScaleoutOptions): level 5 was not asked for")
    memo = ctx.memo
    if "scaleout" not in memo:
        adapter = ctx.adapter
        aggregation = (
            None if adapter.aggregation is None else resolve_declared_aggregation(adapter.aggregation)
        )
        impl, loss, layout = opts.impl, opts.loss, opts.layout
        if impl is None:  # the oracle, with its token-mean reference loss (as at levels 0-4)
            impl, layout = _ORACLE_ADVANTAGES, "index"
            if loss is None:
                loss, aggregation = _ORACLE_LOSS, aggregation or "token-mean"
        try:
            job = opts.job(
                impl,
                loss,
                layout=layout,
                aggregation=aggregation,
                aggregation_constant=adapter.aggregation_constant,
                loss_precision=_loss_precision(ctx),
            )
            (memo["scaleout"],) = run_scaleout_many(
                [job], world_size=opts.world_size, backend=opts.backend, rendezvous_host=opts.rendezvous_host
            )
        except (ValueError, TypeError) as exc:
            memo["scaleout"] = PropertyFailure(
                Finding(f"level 5 could not start: {exc}", opts.describe(), kind="scaleout")
            )
    found = memo["scaleout"]
    if isinstance(found, PropertyFailure):
        raise PropertyFailure(found.finding)
    assert isinstance(found, ScaleoutReport)
    return found


def _loss_precision(ctx: Context) -> str:
    """The working precision level 5 judges the loss's gradients at: the one levels 0 to 4 judge it
    at (:func:`~.loss_precision.loss_precision`: declared, or measured by the linearity probe)."""
    from .loss_precision import loss_precision

    if ctx.adapter.loss is None:
        return "float64"
    return loss_precision(ctx).judged


def scaleout_results(ctx: Context, name: str) -> tuple[ScaleoutResult, ...]:
    """The results of the level-5 property ``name`` (e.g. ``scaleout_gradient``, one per configuration).

    A launch that failed (``scaleout[...]``: a rank raised or hung) belongs to every property, and
    the aggregation NOTE (``scaleout_aggregation``: none declared) to ``scaleout_prediction``.
    """
    owner = {"scaleout": None, "scaleout_aggregation": "scaleout_prediction"}
    out = []
    for result in scaleout_report(ctx).results:
        base = owner.get(result.name, result.name) or name
        if base == name:
            out.append(result)
    return tuple(out)


def verdict_of(results: tuple[ScaleoutResult, ...]) -> Verdict:
    """FAIL if one result fails, else WARN, else NOTE if one is one, else pass."""
    verdicts = {r.verdict for r in results}
    return next((v for v in VERDICTS if v in verdicts), "pass")  # VERDICTS: most severe first
