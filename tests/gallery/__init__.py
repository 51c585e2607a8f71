"""A gallery of GRPO-family implementations the conformance suite is judged by.

``correct.py``: hand-written implementations in every preset convention (and RLOO), in the
style of the trainers they model. ``wrong.py``: realistic bugs, each with the convention
its author intended, the property it breaks and the words the suite should say.
:func:`kill_matrix` runs every required property on every wrong implementation.
"""

from __future__ import annotations

from sigma_ref.conformance import Adapter, detect_convention, reference_for
from sigma_ref.conformance.core import Context, Outcome, run_suite


def case_adapter(case, *, declare: bool) -> Adapter:  # type: ignore[no-untyped-def]
    """The :class:`Adapter` of a trainer-style :class:`~.cases.Case`: how to call it always (layout,
    loss, filter, the ``inputs`` / ``output`` hooks, dtypes), and, with ``declare``, what it claims:
    its convention, the loss's aggregation (and constant), the token layout's returns and the
    filter's keep metric. Layout ``dict`` is ``index`` through the hooks; a ``keep-mask`` case is
    its filter."""
    layout = "index" if case.layout == "dict" else case.layout
    kw = dict(name=case.name, dtypes=case.dtypes, loss=case.loss, inputs=case.inputs, output=case.output)
    fn = case.fn
    if layout == "keep-mask":
        fn = case.keep_mask or case.fn
    else:
        kw["keep_mask"] = case.keep_mask
    if declare:
        kw |= dict(
            convention=case.convention,
            aggregation=case.aggregation,
            aggregation_constant=case.aggregation_constant,
            returns=case.returns,
            keep_metric=case.keep_metric,
        )
    return Adapter(fn, layout, **kw)


def caught_by(case, outcomes: list[Outcome]) -> list[Outcome]:  # type: ignore[no-untyped-def]
    """The outcomes that catch a wrong (or hygiene) case as its record says: a property it
    ``breaks`` with the case's ``verdict``, a cause a probe confirmed, the ``cause_words`` in the
    message; a hygiene (WARN) case must also have no FAIL. Empty when the suite misses it."""
    if case.verdict == "WARN" and any(o.verdict == "FAIL" for o in outcomes):
        return []
    return [
        o
        for o in outcomes
        if o.name in case.breaks
        and o.verdict == case.verdict
        and o.finding is not None
        and o.finding.confirmed
        and all(w in o.message for w in case.cause_words)
    ]


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
