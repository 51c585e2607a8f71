"""A gallery of GRPO-family implementations the conformance suite is judged by.

``correct.py``: hand-written implementations in every preset convention (and RLOO), in the
style of the trainers they model. ``wrong.py``: realistic bugs, each with the convention
its author intended, the property it breaks and the words the suite should say.
:func:`kill_matrix` runs every required property on every wrong implementation.
"""

from __future__ import annotations

from sigma_ref.conformance import Adapter, detect_convention, reference_for
from sigma_ref.conformance.properties import PROPERTIES, Context, NotApplicable, PropertyFailure, run_property


def wrong_context(case) -> Context:  # type: ignore[no-untyped-def]
    """The context of a wrong implementation, judged against the convention its author meant."""
    adapter = Adapter(case.fn, case.layout, loss=case.loss, keep_mask=case.keep_mask, name=case.name)
    return Context(adapter, reference_for(case.intended), detect_convention(adapter), case.intended)


def failing_properties(ctx: Context, *, max_examples: int = 5) -> dict[str, str]:
    """``label -> message`` of every required property that fails (fast: no shrinking)."""
    fails = {}
    for name, prop in PROPERTIES.items():
        if not prop.required(ctx):
            continue
        for param in prop.params(ctx.adapter):
            label = f"test_{name}" + (f"[{param}]" if param else "")
            try:
                run_property(prop, ctx, param, max_examples=max_examples, shrink=False)
            except NotApplicable:
                pass
            except PropertyFailure as exc:
                fails[label] = str(exc)
    return fails


def kill_matrix(cases, *, max_examples: int = 5) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """``case name -> failing required properties`` for every wrong implementation."""
    return {
        case.name: sorted(failing_properties(wrong_context(case), max_examples=max_examples))
        for case in cases
    }
