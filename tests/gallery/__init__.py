"""A gallery of GRPO-family implementations the conformance suite is judged by.

``correct.py``: hand-written implementations in every preset convention (and RLOO), in the
style of the trainers they model. ``wrong.py``: realistic bugs, each with the convention
its author intended, the property it breaks and the words the suite should say.
:func:`kill_matrix` runs every required property on every wrong implementation.
"""

from __future__ import annotations

from sigma_ref.conformance import Adapter, detect_convention, reference_for
from sigma_ref.conformance.core import Context, run_suite


def wrong_context(case) -> Context:  # type: ignore[no-untyped-def]
    """The context of a wrong implementation, judged against the convention its author meant."""
    adapter = Adapter(case.fn, case.layout, loss=case.loss, keep_mask=case.keep_mask, name=case.name)
    det = detect_convention(adapter)
    return Context(adapter, reference_for(case.intended), det, case.intended, precision=det.precision)


def failing_properties(ctx: Context, *, max_examples: int = 5) -> dict[str, str]:
    """``label -> message`` of every property whose verdict is FAIL (fast: no shrinking)."""
    outcomes = run_suite(ctx, max_examples=max_examples, shrink=False)
    return {o.label: o.message for o in outcomes if o.verdict == "FAIL"}


def kill_matrix(cases, *, max_examples: int = 5) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """``case name -> properties whose verdict is FAIL`` for every wrong implementation."""
    return {
        case.name: sorted(failing_properties(wrong_context(case), max_examples=max_examples))
        for case in cases
    }
