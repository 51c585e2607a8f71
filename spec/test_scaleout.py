"""Level 5, scale-out (docs/spec.md §7, level 5).

The implementation's advantage function and loss on W real ``torch.distributed`` processes, each
rank's shard cut into M micro-batches with gradients accumulated and averaged over ranks as
DDP does, against the single-process full-batch step and the oracle's prediction
(``sigma_ref.conformance.scaleout``, which also documents the globals a loss may ask for).

These are conformance properties like those of levels 0 to 4: they run when the context carries
level 5's options (``--sigma-ref-world-size W`` and/or ``--sigma-ref-micro-batches M``, ``1,2,3``
for several; ``sigma-ref check --world-size W --micro-batches M``), with ``--sigma-ref-split``,
``--sigma-ref-loss-scale``, ``--sigma-ref-scaleout-timeout``, ``--sigma-ref-backend`` and
``--sigma-ref-rendezvous-host``, and the call shapes ``--sigma-ref-packing`` (packed rows,
``sigma_ref.conformance.packing``) and ``--sigma-ref-advantage-scale``/``-on`` (pre-scaled
advantages, a token-sum loss); otherwise they are skipped with the reason. The implementation,
layout, hooks, loss and declared aggregation are those of levels 0 to 4. Every configuration runs
in one launch of W processes per run (:func:`sigma_ref.conformance.launch.scaleout_report`); each
property below judges its own results, one per configuration.
"""

from __future__ import annotations

from typing import Any

from sigma_ref.conformance.core import Context, Finding, PropertyFailure, conformance_property
from sigma_ref.conformance.inputs import needs_loss
from sigma_ref.conformance.launch import NOT_ASKED, scaleout_results, verdict_of
from sigma_ref.conformance.levels import SCALEOUT_LEVEL
from sigma_ref.conformance.scaleout import ScaleoutResult


def _asked(ctx: Context, p: Any) -> str | None:
    """Why level 5 does not run (not asked for), or None."""
    return NOT_ASKED if ctx.scaleout is None else None


def _asked_with_loss(ctx: Context, p: Any) -> str | None:
    """Why a gradient property of level 5 does not run: not asked for, or no loss to differentiate."""
    return _asked(ctx, p) or needs_loss(ctx, p)


def _results_of(name: str) -> Any:
    """The examples of property ``name``: its results of the run's one launch, as one input."""

    def examples(ctx: Context, p: Any) -> list[tuple[ScaleoutResult, ...]]:
        return [scaleout_results(ctx, name)]

    return examples


def _judge(results: tuple[ScaleoutResult, ...]) -> None:
    """Raise the property's FAIL with every failing configuration (or its NOTE); pass otherwise."""
    __tracebackhide__ = True
    verdict = verdict_of(results)
    if verdict == "pass":
        return
    judged = [r for r in results if r.verdict == verdict]
    shown = "; ".join(f"{r.property}: {r.message}" for r in judged)
    first = judged[0].finding  # the first failing configuration's class and factor, as data
    finding = Finding(
        shown, kind="scaleout", facts=first.facts, bug_class=first.bug_class, factor=first.factor
    )
    raise PropertyFailure(finding, verdict=verdict)


@conformance_property(level=SCALEOUT_LEVEL, examples=_results_of("scaleout_advantages"), applies=_asked)
def test_scaleout_advantages(ctx: Context, results: tuple[ScaleoutResult, ...], p: Any) -> None:
    """The advantages computed on each rank's shard, gathered, equal the full batch's: whole groups per
    rank (any per-group convention), or, with ``--sigma-ref-split split-groups``, every group dealt
    across the ranks (the implementation gathers its group statistics over ``process_group``).
    """
    _judge(results)


@conformance_property(
    level=SCALEOUT_LEVEL, examples=_results_of("scaleout_gradient"), applies=_asked_with_loss
)
def test_scaleout_gradient(ctx: Context, results: tuple[ScaleoutResult, ...], p: Any) -> None:
    """At each (W, M) the accumulated, rank-averaged gradient equals the single-process full-batch
    gradient of the same code; otherwise the failure names the bug class with the measured factor
    (a normaliser per micro-batch, a token count not gathered across ranks, the world size not applied).
    """
    _judge(results)


@conformance_property(
    level=SCALEOUT_LEVEL, examples=_results_of("scaleout_prediction"), applies=_asked_with_loss
)
def test_scaleout_prediction(ctx: Context, results: tuple[ScaleoutResult, ...], p: Any) -> None:
    """The step equals the oracle's ``-sum_it w_it A_i grad log pi(y_it)`` with the declared
    aggregation's weights over the whole batch (global normalisers); without a declaration, a NOTE
    names the mode the full-batch gradient matches.
    """
    _judge(results)
