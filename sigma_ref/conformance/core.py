"""The conformance machinery: findings, the context, properties, their registry and the one runner.

A property is written once, in ``spec/test_<level>.py`` (shipped as ``sigma_ref.spec``), as a
function decorated with :func:`conformance_property`: its docstring is the statement, its body
checks one input and raises :class:`PropertyFailure` (a structured :class:`Finding`). The
decorator registers the :class:`Property` in :data:`PROPERTIES` and returns the pytest test.
:func:`load_properties` imports the five spec modules, which fills the registry for
``sigma-ref check``, the matrix, the gallery and self-conformance.

:func:`run_property` runs the designed inputs, then hypothesis (which shrinks a failing input to
the smallest it finds), and raises :class:`PropertyFailure` with ``actual=..., but should be ...
[impl(...)]`` and the likely cause; :class:`NotApplicable` says why a property does not apply.
:func:`evaluate` classifies one run into an :class:`Outcome`; :func:`run_suite` runs them all.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from .._compare import Mismatch, find_mismatch
from .adapter import ALL_DTYPES, Adapter, Batch
from .detect import Detection
from .diagnose import diagnose_mismatch
from .findings import FINDING_KINDS, Finding
from .guard import ImplementationError, bounded_shrink, call_guarded
from .levels import LEVELS, SCALEOUT_LEVEL, SUITE_LEVELS, VERDICTS, Verdict
from .precision import advantage_tolerance, coarser
from .reference import Reference, as_numpy

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .launch import ScaleoutOptions

__all__ = [
    "Context",
    "Property",
    "Finding",
    "FINDING_KINDS",
    "Mismatch",
    "PropertyFailure",
    "NotApplicable",
    "Outcome",
    "PROPERTIES",
    "LEVELS",
    "VERDICTS",
    "DTYPES",
    "conformance_property",
    "load_properties",
    "run_property",
    "RunOptions",
    "evaluate",
    "run_suite",
    "get_property",
    "guarded",
    "layout_reason",
    "OUTCOME_KEY",
]

#: Seconds hypothesis may shrink a failure after finding it (its own limit is 300 s).
SHRINK_BUDGET_S = 15.0
#: The floating dtypes a property can be parametrized over, by name.
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in ALL_DTYPES}


class PropertyFailure(AssertionError):  # noqa: N818 (a failed property, like AssertionError)
    """An implementation breaks a property; ``finding`` says how, and the likely cause."""

    def __init__(self, finding: Finding | str, verdict: Verdict | None = None) -> None:
        if isinstance(finding, str):
            finding = Finding(finding)
        if verdict is not None:
            finding = dataclasses.replace(finding, verdict=verdict)
        self.finding = finding
        super().__init__(finding.render())

    @property
    def verdict(self) -> Verdict:
        """FAIL, WARN or NOTE."""
        return self.finding.verdict


class NotApplicable(Exception):  # noqa: N818 (a skip reason, not an error)
    """A property does not apply to this implementation (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Context:
    """The implementation under test, what it should compute, and what was detected.

    ``precision``: the working precision the implementation's statistics are judged at
    (declared on the adapter, else detected; :mod:`.precision`). ``strict``: WARN counts
    as FAIL. ``scaleout``: level 5's options (:class:`~.launch.ScaleoutOptions`), ``None`` when level 5
    was not asked for. ``memo``: results a run computes once and its properties share (level 5's
    launch of processes, :func:`~.launch.scaleout_report`).
    """

    adapter: Adapter
    reference: Reference
    detection: Detection | None = None
    declared: str | None = None
    precision: str = "float64"
    strict: bool = False
    scaleout: ScaleoutOptions | None = None
    memo: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def call(
        self,
        batch: Batch,
        *,
        dtype: torch.dtype = torch.float64,
        device: str = "cpu",
        rewards: torch.Tensor | None = None,
    ) -> Any:
        """The raw output for ``batch``; an exception from the implementation fails."""
        if rewards is None:
            rewards = torch.tensor(batch.rewards, dtype=dtype, device=device)
        return guarded(self.adapter.call_raw, batch, rewards, what=lambda: self.adapter.call_repr(batch))

    def flat(self, batch: Batch, **kw: Any) -> np.ndarray:
        """Advantages of ``batch`` as flat float64 numpy (shape checked)."""
        out = self.call(batch, **kw)
        shape = self.adapter.expected_shape(batch)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
            got = tuple(out.shape) if hasattr(out, "shape") else type(out).__name__
            del out  # the failure's traceback (kept by hypothesis) must not hold a huge result
            raise PropertyFailure(
                Finding(
                    f"out.shape={got}, but should be {shape}",
                    self.adapter.call_repr(batch),
                    kind="shape",
                    facts={"shape": list(got) if isinstance(got, tuple) else got, "expected": list(shape)},
                )
            )
        return out.detach().to("cpu", torch.float64).numpy().reshape(-1)

    def expected(self, batch: Batch) -> np.ndarray:
        """The oracle's advantages for ``batch`` under the reference."""
        return as_numpy(self.reference.advantages(batch.rewards, batch.index))

    def tolerance(
        self, batch: Batch, expected: np.ndarray | None = None, *, dtype: torch.dtype = torch.float64
    ) -> np.ndarray:
        """Per-element tolerance at the working precision for input ``dtype`` (:mod:`.precision`).

        The working precision is the coarsest of the implementation's (declared or
        detected), the input dtype's and float32's: a deviation below float32's rounding
        never changes training, so it is never a FAIL (a float64 path that mixes in one
        float32 step, e.g. a Bessel factor from int counts, stays conformant). Groups a
        spread filter's threshold makes ambiguous get an infinite tolerance.
        """
        exp = self.expected(batch) if expected is None else expected
        group, d, _ = self.reference.statistics(batch.rewards, batch.index)
        work = coarser(coarser(self.precision, _dtype_name(dtype)), "float32")
        tol = advantage_tolerance(batch.rewards, group, d, exp, precision=work, out_dtype=dtype)
        return np.where(self.reference.ambiguous(batch.rewards, batch.index), np.inf, tol)

    def fail(
        self,
        what: str,
        batch: Batch,
        actual: np.ndarray | None = None,
        cause: str | None = None,
        *,
        kind: str,
        confirmed: bool = True,
        verdict: Verdict = "FAIL",
        mismatch: Mismatch | None = None,
        facts: dict[str, Any] | None = None,
    ) -> None:
        """Raise :class:`PropertyFailure` with the call and a cause.

        A ``cause`` given by the property is the property's own finding (confirmed by the
        property's own designed input, e.g. ``rewards`` changed in place); otherwise the
        known deviations are tried on ``actual`` and the winner is re-checked on a second
        designed probe before it is printed as confirmed. ``kind``, ``mismatch`` and ``facts``:
        the :class:`Finding`'s data.
        """
        if cause is None and actual is not None:
            cause, confirmed = diagnose_mismatch(self, batch, actual)
        raise PropertyFailure(
            Finding(
                what,
                self.adapter.call_repr(batch),
                self.reference.name,
                cause,
                confirmed=bool(cause) and confirmed,
                verdict=verdict,
                kind=kind,
                facts=facts or {},
                mismatch=mismatch,
            )
        )

    def fail_nonzero(
        self,
        bad: np.ndarray,
        values: np.ndarray,
        what: Callable[[int], str],
        batch: Batch,
        actual: np.ndarray | None = None,
        *,
        at: str = "index",
        facts: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        """Fail (kind ``value``) at the first entry ``j`` that ``bad`` marks, where ``values`` should be
        0: ``what(j)`` says so; the facts name the entry ``at`` (``index``, ``group``), with its actual
        value and the expected 0, after ``facts``. ``actual`` and ``options``: as :meth:`fail`."""
        if bad.any():
            j = int(np.argmax(bad))
            self.fail(
                what(j),
                batch,
                actual,
                kind="value",
                facts={**(facts or {}), at: j, "actual": float(values[j]), "expected": 0.0},
                **options,
            )

    def compare(
        self,
        what: str,
        batch: Batch,
        actual: np.ndarray,
        expected: np.ndarray,
        dtype: torch.dtype = torch.float64,
        *,
        tolerance: np.ndarray | None = None,
        noun: str = "advantages",
    ) -> None:
        """Fail unless ``|actual - expected| <= tolerance`` (default :meth:`tolerance`); the
        failure's :class:`Mismatch` counts ``noun``."""
        tol = self.tolerance(batch, expected, dtype=dtype) if tolerance is None else tolerance
        found = find_mismatch(actual, expected, rtol=0.0, atol=tol, noun=noun)
        if found is not None:
            self.fail(f"{what}: {found.render()}", batch, actual, kind="mismatch", mismatch=found)


def _dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in DTYPES.items()}.get(dtype, "float64")


@dataclasses.dataclass(frozen=True)
class Property:
    """One property of docs/spec.md §7: ``test_<name>`` in ``spec/test_<level>.py``."""

    name: str
    level: str
    statement: str
    check: Callable[[Context, Any, Any], None]
    examples: Callable[[Context, Any], Sequence[Any]] = lambda ctx, p: ()
    strategy: Callable[[Context, Any], st.SearchStrategy[Any]] | None = None
    applies: Callable[[Context, Any], str | None] = lambda ctx, p: None
    params: Callable[[Adapter], Sequence[Any]] = lambda adapter: (None,)
    required: Callable[[Context], bool] = lambda ctx: True
    cost: int = 1  # examples per run = the profile's max_examples // cost
    #: called once every input passed; raises a NOTE (a fact about a conformant implementation)
    conclude: Callable[[Context, Any], None] | None = None

    @property
    def test_name(self) -> str:
        """The spec test's name."""
        return f"test_{self.name}"


#: Every property, in the suite's order (filled by :func:`load_properties`).
PROPERTIES: dict[str, Property] = {}

#: The spec modules, one per level (level 5's is ``test_scaleout``), imported in this order by
#: :func:`load_properties`.
SPEC_MODULES: tuple[str, ...] = (*(f"test_{level}" for level in LEVELS), "test_scaleout")

#: The call-shape properties (layouts token and keep-mask) come after the advantage properties of
#: all five levels, in this order: the matrix, the kill tables and the "first failing property"
#: follow the registry's order, which predates their move into the level modules.
CALL_SHAPE_PROPERTIES: tuple[str, ...] = (
    "token_reward_position",
    "token_broadcast",
    "token_returns",
    "rejected_rows_ignored",
    "nan_rows_confined",
    "keep_mask_rule",
)


def register(prop: Property) -> Property:
    """Add ``prop`` to :data:`PROPERTIES` (again, in place, when its module is executed a second time,
    e.g. ``importlib.reload``; a clone's ``spec.test_x`` is the module ``sigma_ref.spec.test_x``, see
    ``spec/__init__.py``)."""
    old = PROPERTIES.get(prop.name)
    if old is not None and (old.level, _source(old.check)) != (prop.level, _source(prop.check)):
        raise ValueError(
            f"property {prop.name!r} is defined twice: in {_source(old.check)} and {_source(prop.check)}; "
            "rename one"
        )
    PROPERTIES[prop.name] = prop
    return prop


def _source(fn: Callable[..., Any]) -> str:
    """``file.py:qualname`` of a check (the same for the two imports of one spec module)."""
    return f"{os.path.basename(fn.__code__.co_filename)}:{fn.__qualname__}"


_LOADED: list[bool] = [False]


def load_properties() -> dict[str, Property]:
    """Import the spec modules (``sigma_ref.spec``, else a clone's ``spec``), which registers every
    property in the suite's order; the registry :data:`PROPERTIES` is returned."""
    if not _LOADED[0]:
        package = "sigma_ref.spec" if importlib.util.find_spec("sigma_ref.spec") is not None else "spec"
        for module in SPEC_MODULES:
            importlib.import_module(f"{package}.{module}")

        # level by level, each module's properties as defined (whichever module was imported first),
        # then the call-shape properties, then level 5's
        def rank(prop: Property) -> tuple[int, int]:
            if prop.name in CALL_SHAPE_PROPERTIES:
                return (len(LEVELS), CALL_SHAPE_PROPERTIES.index(prop.name))
            if prop.level == SCALEOUT_LEVEL:
                return (len(LEVELS) + 1, 0)
            return (LEVELS.index(prop.level), 0)

        ordered = sorted(PROPERTIES.values(), key=rank)  # stable: definition order within a module
        PROPERTIES.clear()
        PROPERTIES.update((prop.name, prop) for prop in ordered)
        _LOADED[0] = True
    return PROPERTIES


def conformance_property(
    *,
    level: str,
    examples: Callable[[Context, Any], Sequence[Any]] | None = None,
    strategy: Callable[[Context, Any], st.SearchStrategy[Any]] | None = None,
    applies: Callable[[Context, Any], str | None] | None = None,
    params: Callable[[Adapter], Sequence[Any]] | None = None,
    required: Callable[[Context], bool] | None = None,
    cost: int = 1,
    conclude: Callable[[Context, Any], None] | None = None,
) -> Callable[[Callable[[Context, Any, Any], None]], Callable[..., None]]:
    """Make ``test_<name>(ctx, example, param)`` a property of ``level`` and its pytest test.

    The function checks one input (``example``, from ``examples(ctx, param)`` first, then from
    ``strategy(ctx, param)``) and raises :class:`PropertyFailure`; its docstring is the property's
    statement. ``applies(ctx, param)`` gives the reason it does not apply (``None`` if it does);
    ``params(adapter)`` the values it is parametrized over (the ``param`` fixture); ``required(ctx)``
    whether a FAIL counts as one (else a WARN); ``cost`` divides the examples per run;
    ``conclude(ctx, param)`` runs once every input passed and may raise a NOTE (a property whose
    designed and generated inputs must all pass before it states a fact).

    The returned test takes the ``sigma_ctx``, ``sigma_seed`` (and ``param``) fixtures of
    ``spec/conftest.py`` and runs the property through :func:`evaluate`: a skip when it does not
    apply, a pytest failure on FAIL, a pass on WARN and NOTE. The :class:`Outcome` rides on the
    test's report (``user_properties``, :data:`OUTCOME_KEY`), where the plugin's summary reads it in
    the main process, with or without pytest-xdist.
    """
    if level not in SUITE_LEVELS:
        raise ValueError(f"level={level!r} is not a level; choose one of {', '.join(SUITE_LEVELS)}")

    def decorate(check: Callable[[Context, Any, Any], None]) -> Callable[..., None]:
        if not check.__name__.startswith("test_") or not check.__doc__:
            raise ValueError(f"{check.__name__}: a property is a documented function named test_<name>")
        kw: dict[str, Any] = {"cost": cost, "conclude": conclude}
        for key, value in (("examples", examples), ("applies", applies), ("params", params)):
            if value is not None:
                kw[key] = value
        if required is not None:
            kw["required"] = required
        statement = " ".join(check.__doc__.split())
        prop = register(
            Property(check.__name__.removeprefix("test_"), level, statement, check, strategy=strategy, **kw)
        )
        return _pytest_test(prop, parametrized=params is not None)

    return decorate


def _pytest_test(prop: Property, *, parametrized: bool) -> Callable[..., None]:
    """The pytest function of ``prop``: fixtures in, one :func:`evaluate`, the verdict out."""

    def with_param(sigma_ctx: Context, sigma_seed: int | None, param: Any, request: Any) -> None:
        __tracebackhide__ = True
        _run_in_pytest(prop, sigma_ctx, param, sigma_seed, request.node)

    def without_param(sigma_ctx: Context, sigma_seed: int | None, request: Any) -> None:
        __tracebackhide__ = True
        _run_in_pytest(prop, sigma_ctx, None, sigma_seed, request.node)

    test: Callable[..., None] = with_param if parametrized else without_param
    test.__name__ = test.__qualname__ = prop.test_name
    test.__doc__ = prop.check.__doc__
    test.__module__ = prop.check.__module__
    test.place_as = prop.check  # type: ignore[attr-defined]  # pytest reports the check's file and line
    test.sigma_property = prop  # type: ignore[attr-defined]
    return test


#: The key of a spec test's outcome in its pytest report's ``user_properties`` (a plain dict,
#: :meth:`Outcome.to_dict`, which pytest-xdist carries from the workers to the main process).
OUTCOME_KEY = "sigma_ref_outcome"


def _run_in_pytest(prop: Property, ctx: Context, param: Any, seed: int | None, node: Any) -> None:
    """Run ``prop`` inside a pytest test: skip, fail on FAIL, pass on WARN and NOTE.

    The outcome (with its class) is attached to the test item (``node.user_properties``), from which
    pytest copies it onto the test's report.
    """
    import pytest

    __tracebackhide__ = True
    outcome = evaluate(prop, ctx, param, seed=seed)
    node.user_properties.append((OUTCOME_KEY, outcome.to_dict()))
    from sigma_ref.pytest_plugin import route_text

    message = route_text(node.config, outcome.message)  # the flags of the route in use
    if outcome.verdict == "skip":  # reported at the property's own line in spec/ (its place_as)
        raise pytest.skip.Exception(f"not applicable: {message}", _use_item_location=True)
    if outcome.verdict == "FAIL":
        msg = message
        if seed is not None:
            msg += f"\nreproduce with --hypothesis-seed={seed}"
        pytest.fail(msg, pytrace=False)


def get_property(name: str) -> Property:
    """The property called ``name`` (with or without the ``test_`` prefix)."""
    key = name.removeprefix("test_")
    try:
        return load_properties()[key]
    except KeyError:
        raise ValueError(f"no property {name!r}; choose one of {sorted(PROPERTIES)}") from None


def guarded(fn: Callable[..., Any], *args: Any, what: Any, refusal_ok: bool = False, **kwargs: Any) -> Any:
    """Call the implementation through :func:`~sigma_ref.conformance.guard.call_guarded` (time
    limit, warnings off): any failure is a :class:`PropertyFailure` naming the call.

    ``refusal_ok``: an ordinary exception is a legitimate answer (returns ``None``); exiting, an
    interrupt or a hang still fail.
    """
    try:
        return call_guarded(fn, *args, what=what, **kwargs)
    except ImplementationError as exc:
        if refusal_ok and exc.rejected:
            return None
        raise PropertyFailure(Finding(exc.detail, exc.what, kind="raised", facts=raised_facts(exc))) from exc


def raised_facts(exc: ImplementationError) -> dict[str, Any]:
    """The facts of a failed call: ``how`` (``raised``, ``exit``, ``interrupt``, ``timeout``) and, for an
    exception, its type's name (``exception``)."""
    facts: dict[str, Any] = {"how": exc.kind}
    if exc.kind == "raised" and exc.__cause__ is not None:
        facts["exception"] = type(exc.__cause__).__name__
    return facts


#: The properties a keep-mask filter is checked by (the rest need advantages).
_KEEP_MASK_PROPERTIES = ("keep_mask_rule", "dapo_keep_mask")


def layout_reason(prop: Property, ctx: Context) -> str | None:
    """Why ``prop`` does not apply to the adapter's layout (``None`` if it does).

    A ``keep-mask`` adapter is a filter: it returns which responses to keep, not
    advantages, so only the keep-mask properties apply.
    """
    if ctx.adapter.layout == "keep-mask" and prop.name not in _KEEP_MASK_PROPERTIES:
        return "layout 'keep-mask' is a dynamic-sampling filter: it returns a keep mask, not advantages"
    return None


class RunOptions(TypedDict, total=False):
    """The keyword options of one property run (:func:`run_property`, :func:`evaluate`), each optional.

    ``max_examples`` (default ``None``: the active hypothesis profile's) overrides the number of
    generated inputs, ``0`` runs the designed inputs only; ``examples`` (default ``True``) runs the
    designed inputs first; ``shrink`` (default ``True``) shrinks a failing input, ``False`` skips it
    (fast triage); ``seed`` (default ``None``) fixes hypothesis' random stream (and turns
    derandomization off).

    >>> options: RunOptions = {"max_examples": 10, "shrink": False}
    >>> options.get("seed") is None
    True
    """

    max_examples: int | None
    examples: bool
    shrink: bool
    seed: int | None


def _check_run_options(caller: str, options: RunOptions) -> None:
    unknown = sorted(set(options) - set(RunOptions.__annotations__))
    if unknown:
        raise TypeError(
            f"{caller}() got unknown options {unknown}; its options are {list(RunOptions.__annotations__)}"
        )


def run_property(
    prop: Property | str, ctx: Context, param: Any = None, **options: Unpack[RunOptions]
) -> None:
    """Check ``prop`` on its designed inputs, then on hypothesis-generated ones (``options``:
    :class:`RunOptions`).

    Raises :class:`PropertyFailure` on the first (hypothesis: smallest) failing input,
    :class:`NotApplicable` if the property does not apply; when every input passed, the
    property's ``conclude`` may raise its NOTE.
    """
    __tracebackhide__ = True
    _check_run_options("run_property", options)
    prop = get_property(prop) if isinstance(prop, str) else prop
    reason = prop.applies(ctx, param) or layout_reason(prop, ctx)
    if reason:
        raise NotApplicable(reason)
    if options.get("examples", True):
        for ex in prop.examples(ctx, param):
            prop.check(ctx, ex, param)
    if prop.strategy is not None and options.get("max_examples") != 0:
        _run_generated(prop, ctx, param, options)
    if prop.conclude is not None:
        prop.conclude(ctx, param)


def _run_generated(prop: Property, ctx: Context, param: Any, options: RunOptions) -> None:
    """The hypothesis half of :func:`run_property`: ``prop.strategy``'s inputs, shrunk on failure."""
    __tracebackhide__ = True
    assert prop.strategy is not None
    max_examples, seed = options.get("max_examples"), options.get("seed")
    strategy = prop.strategy(ctx, param)
    kw: dict[str, Any] = {
        "deadline": None,  # a verdict never depends on the machine's load
        "database": None,
        "suppress_health_check": list(HealthCheck),
        "report_multiple_bugs": False,  # one failure, the smallest, as PropertyFailure
    }
    if max_examples is not None:
        kw["max_examples"] = max_examples
    elif prop.cost > 1:
        kw["max_examples"] = max(1, settings().max_examples // prop.cost)
    if not options.get("shrink", True):
        kw["phases"] = [Phase.explicit, Phase.reuse, Phase.generate]
    else:  # no explain phase: it re-runs the failure to name "lines only failing runs reach" (the guard's)
        kw["phases"] = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
    if seed is not None:
        kw["derandomize"] = False  # an explicit seed picks the random stream
    body = bounded_shrink(lambda example: prop.check(ctx, example, param), SHRINK_BUDGET_S)

    @settings(**kw)
    @given(strategy)
    def _property(example: Any) -> None:
        body(example)

    _property.__qualname__ = _property.__name__ = prop.test_name
    test = hypothesis_seed(seed)(_property) if seed is not None else _property
    test()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One property's result in a run: ``verdict`` is ``pass``, ``FAIL``, ``WARN``, ``NOTE`` or ``skip``.

    ``message`` is the rendered :class:`Finding` (with hypothesis's falsifying example), or
    the reason a property does not apply.
    """

    name: str
    level: str
    param: str | None
    verdict: Verdict
    message: str = ""
    finding: Finding | None = None

    @property
    def label(self) -> str:
        """``test_name[param]``."""
        return f"test_{self.name}" + (f"[{self.param}]" if self.param else "")

    def to_dict(self) -> dict[str, Any]:
        """The outcome as plain data (JSON, and what pytest-xdist carries between processes).

        >>> o = Outcome("shape", "contract", None, "FAIL", "m", Finding("out.shape=(2,)"))
        >>> Outcome.from_dict(o.to_dict()) == o
        True
        """
        finding = None if self.finding is None else self.finding.to_dict()
        return {**dataclasses.asdict(dataclasses.replace(self, finding=None)), "finding": finding}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Outcome:
        """The :class:`Outcome` of :meth:`to_dict`'s data."""
        finding = data.get("finding")
        return Outcome(**{**data, "finding": Finding.from_dict(finding) if finding is not None else None})


def evaluate(prop: Property | str, ctx: Context, param: Any = None, **options: Unpack[RunOptions]) -> Outcome:
    """Run one property (:func:`run_property`, the same ``options``) and classify the result (the one
    runner of the suite).

    A :class:`PropertyFailure` keeps its finding's class, except that a FAIL of a property
    that is not required under the convention (``Property.required``) is a WARN, and with
    ``ctx.strict`` every WARN is a FAIL. :class:`NotApplicable` is ``skip``.
    """
    _check_run_options("evaluate", options)
    prop = get_property(prop) if isinstance(prop, str) else prop
    label = None if param is None else str(param)
    try:
        run_property(prop, ctx, param, **options)
    except NotApplicable as exc:
        return Outcome(prop.name, prop.level, label, "skip", str(exc))
    except Exception as raised:  # a PropertyFailure, or hypothesis's group around one (Flaky: nondeterminism)
        failure = _first_failure(raised)
        if not isinstance(failure, PropertyFailure):  # the suite's own error: say so, never a verdict
            text = f"the suite could not evaluate this property: {type(failure).__name__}: {failure}"
            return Outcome(prop.name, prop.level, label, "NOTE", text)
        verdict = failure.verdict
        if verdict == "FAIL" and not prop.required(ctx):
            verdict = "WARN"
        if verdict == "WARN" and ctx.strict:
            verdict = "FAIL"
        notes = _user_notes(getattr(failure, "__notes__", []))
        message = "\n".join([failure.finding.render(), *notes])
        return Outcome(prop.name, prop.level, label, verdict, message, failure.finding)
    return Outcome(prop.name, prop.level, label, "pass")


def _user_notes(notes: Sequence[str]) -> list[str]:
    """Hypothesis' notes on a failure without its boilerplate: the falsifying example stays; the
    "Failing test case ... @reproduce_failure(...)" lines, the "Explanation" and the source lines it
    lists (sigma_ref's own, never the user's code) go; the seed and the profile reproduce a failure."""
    kept: list[str] = []
    for note in notes:
        lines = note.splitlines()
        if not note.strip() or any(
            x in note for x in ("@reproduce_failure", "Failing test case", "You can reproduce this example")
        ):
            continue
        if lines and lines[0].startswith("Explanation:"):
            continue
        kept.append(note)
    return kept


def _first_failure(exc: BaseException) -> BaseException:
    """The first :class:`PropertyFailure` inside an exception group (hypothesis reports an
    implementation whose result changes between two calls as a ``FlakyFailure`` group)."""
    if isinstance(exc, PropertyFailure):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _first_failure(inner)
        if isinstance(found, PropertyFailure):
            return found
    return exc


def run_suite(
    ctx: Context,
    *,
    max_examples: int | None = None,
    shrink: bool = True,
    seed: int | None = None,
    names: Sequence[str] | None = None,
) -> list[Outcome]:
    """Every property (or those in ``names``) on ``ctx``, each parameter once: the outcomes."""
    return [
        evaluate(prop, ctx, param, max_examples=max_examples, shrink=shrink, seed=seed)
        for prop in load_properties().values()
        if names is None or prop.name in names
        for param in prop.params(ctx.adapter)
    ]
