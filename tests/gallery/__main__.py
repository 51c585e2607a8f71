"""``python -m tests.gallery --markdown``: the kill tables of the galleries, for the README.

One row per deliberately wrong implementation: what its author meant, the verdict and the
property the suite catches it with, and the suite's words (the cause a probe confirmed,
else the message). No count of failing properties: for a nondeterministic implementation it
varies from run to run while its verdict does not. The trainer gallery (``trainers_wrong``) gets a
second table (``--trainers``), and the correct trainer code a count of CONFORMANT runs with nothing
declared. ``--shapes``: the call shapes of issue 10 (``trainers_token`` and ``shapes``: the token
layout, the dict and tuple hooks, ``(loss, metrics)`` in every aggregation mode, keep masks), correct
code run with nothing declared and again with its declarations, wrong code with its intent
declared, and the aggregation each correct loss is detected as. ``--objectives``: the loss gallery
(``losses``), each loss under its declared objective, checked by ``loss_objective``. ``--normalisers``:
level 5's gallery (``normalisers``), the normaliser patterns trainers ship, each wrong and correct loss
on W = 2 real ranks with M = 1, 2, 3 micro-batches (one launch), with the class and factor named.
"""

from __future__ import annotations

import argparse

from sigma_ref.conformance import Adapter
from sigma_ref.conformance.core import Outcome, evaluate, run_suite
from sigma_ref.conformance.matrix import describe_aggregation, describe_objective
from sigma_ref.conformance.session import build_context
from sigma_ref.objectives import resolve_aggregation

from . import (
    case_adapter,
    caught_by,
    losses,
    normalisers,
    shapes,
    trainers_correct,
    trainers_token,
    trainers_wrong,
    wrong,
    wrong_context,
)
from . import correct as correct_gallery

_LAYOUTS = ("contiguous", "index", "grouped")


def _words(outcome: Outcome) -> str:
    """The confirmed cause when a probe confirmed one, else the message's first sentence."""
    finding = outcome.finding
    if finding is not None and finding.cause and finding.confirmed:
        text = finding.cause
    else:
        text = outcome.message.split("\n", 1)[0]
    return " ".join(text.split()).replace("|", "/")


def _what(outcome: Outcome) -> str:
    """The finding's ``what`` (without the call, the reference and a cause), else the message's first
    sentence."""
    if outcome.finding is None:
        return _words(outcome)
    return " ".join(outcome.finding.what.split()).replace("|", "/")


def kill_table() -> str:
    """The hand-written gallery's kill table as markdown (the cause is the suite's own message)."""
    rows, killed, cases = [], 0, [c for c in wrong.WRONG if c.verdict == "FAIL"]
    for case in wrong.WRONG:
        ctx = wrong_context(case)
        outcomes = run_suite(ctx, max_examples=2, shrink=False, seed=0)
        fails = [o for o in outcomes if o.verdict == "FAIL"]
        hit = [o for o in outcomes if o.verdict == case.verdict and o.name == case.breaks]
        if case.verdict == "FAIL" and fails:
            killed += 1
        shown = hit[0] if hit else (fails[0] if fails else None)
        words = _words(shown) if shown else "NOT CAUGHT"
        label = shown.label if shown else "-"
        rows.append(f"| `{case.name}` | {case.intended} | {case.verdict} | `{label}` | {words} |")
    head = [
        f"Kill rate: {killed}/{len(cases)} deliberately wrong implementations FAIL; "
        f"{len(wrong.WRONG) - len(cases)} hygiene cases get their WARN.",
        "",
        "| wrong implementation | meant | verdict | caught by | what the suite says |",
        "| --- | --- | --- | --- | --- |",
    ]
    return "\n".join(head + rows)


def _trainer_outcomes(case, *, declare: bool) -> list[Outcome]:  # type: ignore[no-untyped-def]
    """The suite's outcomes on a gallery case, its claims declared or not (:func:`case_adapter`)."""
    return run_suite(build_context(case_adapter(case, declare=declare)), max_examples=2, shrink=False, seed=0)


def trainer_table() -> str:
    """The trainer gallery: correct code run undeclared, wrong code with its intent declared."""
    correct = [c for c in trainers_correct.CASES if c.layout in _LAYOUTS]
    conformant = sum(
        not any(o.verdict == "FAIL" for o in _trainer_outcomes(c, declare=False)) for c in correct
    )
    rows, caught, confirmed, hygiene = [], 0, 0, 0
    cases = [c for c in trainers_wrong.CASES if c.layout in _LAYOUTS]
    for case in cases:
        outcomes = _trainer_outcomes(case, declare=True)
        fails = [o for o in outcomes if o.verdict == "FAIL"]
        sure = [o for o in fails if o.finding is not None and o.finding.confirmed]
        warns = [o for o in outcomes if o.verdict == "WARN"]
        if case.verdict == "WARN":  # hygiene: its WARN, confirmed, and no FAIL
            hit = caught_by(case, outcomes)
            hygiene += bool(hit)
            shown = (hit or fails or [None])[0]
        else:
            caught += bool(fails)
            confirmed += bool(sure)
            # the row shows the property the bug is known to break when it FAILs there (stable even
            # for a random implementation, whose other failures vary from run to run)
            named = [o for o in sure if o.name in case.breaks]
            shown = (named or sure or fails or warns or [None])[0]
        verdict = "FAIL" if fails else ("WARN" if warns else "pass")
        words = _words(shown) if shown is not None else "NOT CAUGHT"
        label = shown.label if shown is not None else "-"
        rows.append(f"| `{case.name}` | {case.convention or '-'} | {verdict} | `{label}` | {words[:220]} |")
    n_wrong = sum(c.verdict == "FAIL" for c in cases)
    head = [
        f"Trainer gallery: {conformant}/{len(correct)} correct implementations CONFORMANT with nothing "
        f"declared; {caught}/{n_wrong} wrong ones NOT CONFORMANT, {confirmed} of them with a cause a "
        f"probe confirmed; {hygiene}/{len(cases) - n_wrong} hygiene cases get their WARN (and no FAIL).",
        "",
        "| wrong trainer code | meant | verdict | caught by | what the suite says |",
        "| --- | --- | --- | --- | --- |",
    ]
    return "\n".join(head + rows)


#: The call-shape gallery: token layout, dict and tuple hooks, losses, keep masks.
SHAPE_CASES = [*trainers_token.CASES, *shapes.CASES]


def _claims(case) -> str:  # type: ignore[no-untyped-def]
    """What a shape case declares, in the table's words: convention, aggregation, returns, keep metric."""
    parts = [case.convention] if case.convention and case.shape != "keep-mask" else []
    if case.aggregation:
        mode = resolve_aggregation(case.aggregation)
        parts.append(mode + (f", C = {case.aggregation_constant:g}" if case.aggregation_constant else ""))
    if case.returns and case.shape == "token":
        parts.append(f"returns = {case.returns}")
    if case.keep_metric:
        parts.append(f"keep metric {case.keep_metric}")
    return "; ".join(parts) or "-"


def _aggregation_note(outcomes: list[Outcome]) -> str:
    """What loss_aggregation measured (its finding's facts): the detected mode, or the declared one with
    ``[declared, measured]``; else its NOTE's message, or its verdict and words."""
    for o in outcomes:
        if o.name != "loss_aggregation":
            continue
        found = o.finding
        if o.verdict == "NOTE" and found is not None and found.kind == "aggregation":
            mode = describe_aggregation(found.facts)
            return mode if found.facts["how"] == "detected" else f"{mode} [declared, measured]"
        return o.message if o.verdict == "NOTE" else f"{o.verdict}: {_words(o)}"
    return "-"


def shapes_table() -> str:
    """The call-shape gallery: correct code undeclared and declared, wrong code with its intent declared."""
    correct = [c for c in SHAPE_CASES if c.correct]
    bare = {c.name: _trainer_outcomes(c, declare=False) for c in correct}
    declared = {c.name: _trainer_outcomes(c, declare=True) for c in correct}
    ok_bare = sum(not any(o.verdict == "FAIL" for o in bare[c.name]) for c in correct)
    ok_declared = sum(not any(o.verdict == "FAIL" for o in declared[c.name]) for c in correct)
    rows, caught, hygiene = [], 0, 0
    cases = [c for c in SHAPE_CASES if not c.correct]
    for case in cases:
        outcomes = _trainer_outcomes(case, declare=True)
        hit = caught_by(case, outcomes)
        caught += bool(hit) and case.verdict == "FAIL"
        hygiene += bool(hit) and case.verdict == "WARN"
        shown = (hit or [o for o in outcomes if o.verdict == case.verdict] or [None])[0]
        verdict = shown.verdict if shown is not None else "pass"
        words = _words(shown)[:220] if shown is not None else "NOT CAUGHT"
        label = shown.label if shown is not None else "-"
        rows.append(f"| `{case.name}` | {case.shape} | {_claims(case)} | {verdict} | `{label}` | {words} |")
    n_wrong = sum(c.verdict == "FAIL" for c in cases)
    head = [
        f"Shapes gallery: {ok_bare}/{len(correct)} correct implementations CONFORMANT with nothing "
        f"declared, {ok_declared}/{len(correct)} with their declarations; {caught}/{n_wrong} wrong ones "
        f"FAIL the property they break with a cause a probe confirmed; {hygiene}/{len(cases) - n_wrong} "
        "hygiene cases get their WARN (and no FAIL).",
        "",
        "| wrong code | shape | declared | verdict | caught by | what the suite says |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    loss_cases = [c for c in correct if c.loss is not None]
    agg = [
        "",
        "| correct loss | declared | detected with nothing declared | with the declaration |",
        "| --- | --- | --- | --- |",
    ]
    for c in loss_cases:
        agg.append(
            f"| `{c.name}` | {_claims(c)} | {_aggregation_note(bare[c.name])} | "
            f"{_aggregation_note(declared[c.name])} |"
        )
    return "\n".join(head + rows + agg)


def objective_outcome(case: losses.LossCase, *, max_examples: int = 10) -> Outcome:
    """``loss_objective`` on a gallery loss under its declared objective (derandomized by seed 0)."""
    adapter = Adapter(
        correct_gallery.post_contiguous,
        "contiguous",
        loss=case.fn,
        convention="post",
        name=case.name,
        objective=case.declared,
    )
    return evaluate("loss_objective", build_context(adapter), max_examples=max_examples, shrink=False, seed=0)


def _meant(case: losses.LossCase) -> str:
    obj = case.declared
    return f"{describe_objective(obj)}, {resolve_aggregation(obj.aggregation)}"


def objective_table(*, max_examples: int = 10) -> str:
    """The loss gallery: each correct loss matches its declared objective (a NOTE), each wrong one FAILs
    ``loss_objective``, with the term a probe confirmed where it did."""
    rows, matched, caught, confirmed = [], 0, 0, 0
    correct = [c for c in losses.LOSSES if c.correct]
    for case in correct:
        matched += objective_outcome(case, max_examples=max_examples).verdict == "NOTE"
    wrong_cases = [c for c in losses.LOSSES if not c.correct]
    for case in wrong_cases:
        outcome = objective_outcome(case, max_examples=max_examples)
        caught += outcome.verdict == "FAIL"
        sure = outcome.finding is not None and outcome.finding.confirmed
        confirmed += outcome.verdict == "FAIL" and sure
        words = _words(outcome) if sure else "term not identified: " + _what(outcome)
        rows.append(f"| `{case.name}` | {_meant(case)} | {case.breaks} | {outcome.verdict} | {words[:220]} |")
    head = [
        f"Loss gallery: {matched}/{len(correct)} correct losses match their declared objective (designed "
        f"probe and {max_examples} generated inputs); {caught}/{len(wrong_cases)} wrong ones FAIL "
        f"`test_loss_objective`, {confirmed} of them with the term a probe confirmed.",
        "",
        "| wrong loss | meant | term | verdict | what the suite says |",
        "| --- | --- | --- | --- | --- |",
    ]
    return "\n".join(head + rows)


#: The level-5 kill table's configuration (tests/test_normalisers.py runs W = 1, 2, 4).
NORMALISER_W, NORMALISER_M = 2, (1, 2, 3)


def _declared_options(entry: normalisers.Entry) -> str:
    """An entry's declarations as the CLI spells them: the aggregation, then its level-5 options."""
    words = [entry.aggregation]
    for key, value in entry.options.items():
        flag = "--" + key.replace("_", "-")
        words.append(flag if value is True else f"{flag} {value}")
    return ", ".join(words)


def normaliser_table() -> str:
    """Level 5's gallery: each wrong normaliser FAILs ``scaleout_gradient`` with its class and factor,
    each correct one passes, at W = 2 and M = 1, 2, 3 (one launch of every entry)."""
    from sigma_ref.conformance.scaleout import ScaleoutJob, run_scaleout_many

    entries = normalisers.CORRECT + normalisers.WRONG
    advantages = "sigma_ref.conformance.scaleout:oracle_advantages"
    jobs = [ScaleoutJob(advantages, e.loss, micro_batches=NORMALISER_M, **e.kwargs()) for e in entries]
    reports = dict(
        zip((e.name for e in entries), run_scaleout_many(jobs, world_size=NORMALISER_W), strict=True)
    )
    passed = sum(reports[e.name].passed for e in normalisers.CORRECT)
    rows, caught, named = [], 0, 0
    pattern_of = {e.name: p for p, (wrong, _) in normalisers.PATTERNS.items() for e in wrong}
    for entry in normalisers.WRONG:
        report = reports[entry.name]
        fails = [r for r in report.results if r.verdict == "FAIL"]
        caught += bool(fails)
        expect = entry.expect_at_ranks or entry.expect
        hit = [r for r in fails if expect in r.message]
        named += bool(hit)
        shown = (hit or fails or [None])[0]
        words = " ".join(shown.message.split()).replace("|", "/")[:200] if shown is not None else "NOT CAUGHT"
        label = shown.property if shown is not None else "-"
        verdict = "FAIL" if fails else "pass"
        rows.append(
            f"| `{entry.name}` | {pattern_of[entry.name]} | {_declared_options(entry)} | {verdict} | "
            f"`{label}` | {expect if hit else '-'} | {words} |"
        )
    m = ", ".join(map(str, NORMALISER_M))
    head = [
        f"Level-5 gallery (W = {NORMALISER_W} ranks, M = {m} micro-batches, uneven splits): "
        f"{passed}/{len(normalisers.CORRECT)} correct losses pass; {caught}/{len(normalisers.WRONG)} wrong "
        f"ones FAIL, {named} of them with their class named.",
        "",
        "| wrong loss | pattern | declared | verdict | first FAIL | class named | what the suite says |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    return "\n".join(head + rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the kill tables as markdown")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--trainers", action="store_true", help="only the trainer gallery's table")
    which.add_argument("--shapes", action="store_true", help="only the call-shape gallery's tables")
    which.add_argument(
        "--objectives", action="store_true", help="only the loss gallery's table (loss_objective)"
    )
    which.add_argument(
        "--normalisers", action="store_true", help="only level 5's gallery (real ranks, W = 2, M = 1, 2, 3)"
    )
    args = parser.parse_args()
    if args.objectives:
        print(objective_table())
    elif args.normalisers:
        print(normaliser_table())
    elif args.shapes:
        print(shapes_table())
    else:
        print(trainer_table() if args.trainers else kill_table())


if __name__ == "__main__":
    main()
