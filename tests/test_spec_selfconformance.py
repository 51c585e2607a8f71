"""Self-conformance: the oracle passes every property under every preset, and is recognised."""

from __future__ import annotations

import pytest

from sigma_ref import PRESETS
from sigma_ref.conformance import detect_convention, oracle_adapter, reference_for
from sigma_ref.conformance.core import Context, run_suite
from sigma_ref.conformance.losses import make_policy_loss
from sigma_ref.conventions import AGGREGATION_MODES

NAMES = [*PRESETS, "rloo"]


def _run_all(ctx: Context, max_examples: int) -> list[str]:
    """Every FAIL, and every WARN but the singleton rule of a convention that leaves it open."""
    return [
        f"{o.label}: {o.verdict} {o.message}"
        for o in run_suite(ctx, max_examples=max_examples)
        if o.verdict == "FAIL" or (o.verdict == "WARN" and o.name != "singleton_groups")
    ]


@pytest.mark.parametrize("name", NAMES)
def test_oracle_conforms_under_every_preset(name: str) -> None:
    """Index layout, every property (loss included), the preset detected from probes."""
    aggregation = AGGREGATION_MODES[NAMES.index(name) % len(AGGREGATION_MODES)]
    adapter = oracle_adapter(name, layout="index").replace(loss=make_policy_loss(aggregation))
    detection = detect_convention(adapter)
    assert detection.preset == name, detection.summary()
    ctx = Context(adapter, detection.reference, detection)
    assert _run_all(ctx, max_examples=4) == []


@pytest.mark.parametrize("layout", ["contiguous", "grouped"])
@pytest.mark.parametrize("name", ["paper", "trl", "trl_batch", "rloo"])
def test_oracle_conforms_in_every_layout(name: str, layout: str) -> None:
    """The contiguous and grouped layouts, with the convention declared."""
    adapter = oracle_adapter(name, layout=layout)
    assert detect_convention(adapter).preset == name
    ctx = Context(adapter, reference_for(name), None, name)
    assert _run_all(ctx, max_examples=3) == []
