"""Level 5, scale-out (docs/spec.md §7, level 5).

The implementation's advantage function and loss on W real ``torch.distributed`` processes, each
rank's shard cut into M micro-batches with gradients accumulated and averaged over ranks as
DDP does, against the single-process full-batch step and the oracle's prediction
(``sigma_ref.conformance.scaleout``, which also documents the globals a loss may ask for).

It runs when ``--sigma-ref-world-size W`` or ``--sigma-ref-micro-batches M`` (``1,2,3`` for
several) is given (``sigma-ref check --world-size W --micro-batches M``), with
``--sigma-ref-split``, ``--sigma-ref-loss-scale``, ``--sigma-ref-scaleout-timeout`` and
``--sigma-ref-backend``; the implementation, layout, loss and declared aggregation are those of
levels 0 to 4 (``--sigma-ref-impl``, ``--sigma-ref-layout``, ``--sigma-ref-loss``,
``--sigma-ref-aggregation``, ``--sigma-ref-aggregation-constant``). All configurations run in one
launch of W processes; each test below reports the results of its property.
"""

from __future__ import annotations

import pytest

from sigma_ref.conformance.core import Outcome, record_outcome
from sigma_ref.conformance.levels import SCALEOUT_LEVEL
from sigma_ref.conformance.scaleout import ScaleoutReport, ScaleoutResult
from sigma_ref.pytest_plugin import record_scaleout, scaleout_report


def _check(config: pytest.Config, prefix: str) -> None:
    """Fail with every FAIL of the property ``prefix``; record its verdict for the summary."""
    __tracebackhide__ = True
    report: ScaleoutReport | Exception | None = scaleout_report(config)
    if isinstance(report, Exception):
        message = f"level 5 could not start: {report}"
        record_outcome(Outcome(prefix, SCALEOUT_LEVEL, None, "FAIL", message))
        pytest.fail(message, pytrace=False)
    if report is None:
        pytest.skip(
            "not applicable: level 5 runs with --sigma-ref-world-size W and/or --sigma-ref-micro-batches M "
            "(sigma-ref check --world-size W --micro-batches M)"
        )
    results: list[ScaleoutResult] = [r for r in report.results if r.property.split("[", 1)[0] == prefix]
    if not results:
        pytest.skip(f"not applicable: this configuration runs no {prefix} check")
    verdict = record_scaleout(config, prefix, results)
    if verdict == "FAIL":
        pytest.fail("\n".join(r.line() for r in results if r.verdict == "FAIL"), pytrace=False)


@pytest.mark.sigma_property("scaleout_advantages", SCALEOUT_LEVEL, True)
def test_scaleout_advantages(pytestconfig: pytest.Config) -> None:
    """The advantages computed on each rank's shard, gathered, equal the full batch's: whole groups per
    rank (any per-group convention), or, with ``--sigma-ref-split split-groups``, every group dealt
    across the ranks (the implementation gathers its group statistics over ``process_group``).
    """
    _check(pytestconfig, "scaleout_advantages")


@pytest.mark.sigma_property("scaleout_gradient", SCALEOUT_LEVEL, True)
def test_scaleout_gradient(pytestconfig: pytest.Config) -> None:
    """At each (W, M) the accumulated, rank-averaged gradient equals the single-process full-batch
    gradient of the same code; otherwise the failure names the bug class with the measured factor
    (a normaliser per micro-batch, a token count not gathered across ranks, the world size not applied).
    """
    _check(pytestconfig, "scaleout_gradient")


@pytest.mark.sigma_property("scaleout_prediction", SCALEOUT_LEVEL, True)
def test_scaleout_prediction(pytestconfig: pytest.Config) -> None:
    """The step equals the oracle's ``-sum_it w_it A_i grad log pi(y_it)`` with the declared
    aggregation's weights over the whole batch (global normalisers); without a declaration, a NOTE
    names the mode the full-batch gradient matches.
    """
    _check(pytestconfig, "scaleout_prediction")
