"""The suite's properties as plain functions (SPEC section 7, levels 0-4).

Each :class:`Property` has a name (the spec test is ``test_<name>``), a level, a
docstring-like statement with its formula, a ``check`` of one input, designed inputs
(``examples``) and a hypothesis ``strategy``. :func:`run_property` runs the designed
inputs, then hypothesis (which shrinks a failing input to the smallest it finds), and
raises :class:`PropertyFailure` with ``actual=..., but should be ... [impl(...)]`` and
the likely cause; :class:`NotApplicable` says why a property does not apply.

The pytest modules in ``spec/`` and the project's gallery tests both call
:func:`run_property`, so a property is written once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from .. import strategies as sst
from .._compare import mismatch_message
from ..advantages import dapo_keep_mask
from ..identity import decompose, policy_gradient
from ..objectives import (
    AGGREGATION_MODES,
    Objective,
    aggregation_weights,
    detect_aggregation,
    loss_gradient,
    loss_gradient_terms,
    resolve_aggregation,
)
from .adapter import Adapter, Batch, array_text
from .detect import Detection
from .diagnose import diagnose_mismatch
from .guard import ImplementationError, bounded_shrink, call_guarded
from .precision import PRECISIONS, SAFETY, advantage_tolerance, coarser, unit_roundoff
from .reference import Reference, as_numpy

__all__ = [
    "Context",
    "Property",
    "Finding",
    "PropertyFailure",
    "NotApplicable",
    "Outcome",
    "PROPERTIES",
    "LEVELS",
    "VERDICTS",
    "run_property",
    "evaluate",
    "run_suite",
    "get_property",
]

LEVELS: tuple[str, ...] = ("contract", "algebra", "identity", "silent", "numerics")
#: Seconds hypothesis may shrink a failure after finding it (its own limit is 300 s).
SHRINK_BUDGET_S = 15.0
_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


#: Verdict classes (docs/spec.md): FAIL, the claimed algorithm is computed wrong; WARN,
#: hygiene that does not change training; NOTE, a fact of the convention.
VERDICTS: tuple[str, ...] = ("FAIL", "WARN", "NOTE")


@dataclasses.dataclass(frozen=True)
class Finding:
    """A structured failure record: what differs, where, and why (when a probe confirmed it).

    ``verdict``: FAIL, WARN or NOTE. ``what``: ``actual=..., but should be ...``.
    ``call``: the call that produced it. ``reference``: the convention it was judged
    against. ``cause``: the likely cause in words, ``confirmed`` when a second, designed
    probe reproduced it; an unconfirmed mismatch says so instead of guessing.
    """

    what: str
    call: str = ""
    reference: str | None = None
    cause: str | None = None
    confirmed: bool = False
    verdict: str = "FAIL"

    def render(self) -> str:
        """One paragraph: ``what [call] (expected under ref). Likely cause: ...``."""
        msg = self.what
        if self.call:
            msg += f" [{self.call}]"
        if self.reference:
            msg += f" (expected under {self.reference})"
        if self.cause and self.confirmed:
            msg += f". Likely cause (confirmed by a probe): {self.cause}"
        elif self.cause:
            msg += f". Possible cause (not confirmed by a probe): {self.cause}"
        elif "mismatched" in self.what:
            msg += ". Cause not identified: no known deviation reproduces these values"
        return msg


class PropertyFailure(AssertionError):  # noqa: N818 (a failed property, like AssertionError)
    """An implementation breaks a property; ``finding`` says how, and the likely cause."""

    def __init__(self, finding: Finding | str, verdict: str | None = None) -> None:
        if isinstance(finding, str):
            finding = Finding(finding)
        if verdict is not None:
            finding = dataclasses.replace(finding, verdict=verdict)
        self.finding = finding
        super().__init__(finding.render())

    @property
    def verdict(self) -> str:
        """FAIL, WARN or NOTE."""
        return self.finding.verdict


class NotApplicable(Exception):  # noqa: N818 (a skip reason, not an error)
    """A property does not apply to this implementation (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Context:
    """The implementation under test, what it should compute, and what was detected.

    ``precision``: the working precision the implementation's statistics are judged at
    (declared on the adapter, else detected; :mod:`.precision`). ``strict``: WARN counts
    as FAIL.
    """

    adapter: Adapter
    reference: Reference
    detection: Detection | None = None
    declared: str | None = None
    precision: str = "float64"
    strict: bool = False

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
        return _guarded(self.adapter.call_raw, batch, rewards, what=lambda: self.adapter.call_repr(batch))

    def flat(self, batch: Batch, **kw: Any) -> np.ndarray:
        """Advantages of ``batch`` as flat float64 numpy (shape checked)."""
        out = self.call(batch, **kw)
        shape = self.adapter.expected_shape(batch)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
            got = tuple(out.shape) if hasattr(out, "shape") else type(out).__name__
            raise PropertyFailure(
                Finding(f"out.shape={got}, but should be {shape}", self.adapter.call_repr(batch))
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
        confirmed: bool = True,
        verdict: str = "FAIL",
    ) -> None:
        """Raise :class:`PropertyFailure` with the call and a cause.

        A ``cause`` given by the property is the property's own finding (confirmed by the
        property's own designed input, e.g. ``rewards`` changed in place); otherwise the
        known deviations are tried on ``actual`` and the winner is re-checked on a second
        designed probe before it is printed as confirmed.
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
            )
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
    ) -> None:
        """Fail unless ``|actual - expected| <= tolerance`` (default :meth:`tolerance`)."""
        tol = self.tolerance(batch, expected, dtype=dtype) if tolerance is None else tolerance
        found = mismatch_message(actual, expected, 0.0, tol)
        if found is not None:
            self.fail(f"{what}: {found[0]}", batch, actual)


def _dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in _DTYPES.items()}.get(dtype, "float64")


@dataclasses.dataclass(frozen=True)
class Property:
    """One property of SPEC section 7: ``test_<name>`` in ``spec/test_<level>.py``."""

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

    @property
    def test_name(self) -> str:
        """The spec test's name."""
        return f"test_{self.name}"


PROPERTIES: dict[str, Property] = {}


def _register(prop: Property) -> Property:
    PROPERTIES[prop.name] = prop
    return prop


def get_property(name: str) -> Property:
    """The property called ``name`` (with or without the ``test_`` prefix)."""
    key = name.removeprefix("test_")
    try:
        return PROPERTIES[key]
    except KeyError:
        raise ValueError(f"no property {name!r}; choose one of {sorted(PROPERTIES)}") from None


def _guarded(fn: Callable[..., Any], *args: Any, what: Any, refusal_ok: bool = False, **kwargs: Any) -> Any:
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
        raise PropertyFailure(Finding(exc.detail, exc.what)) from exc


def run_property(
    prop: Property | str,
    ctx: Context,
    param: Any = None,
    *,
    max_examples: int | None = None,
    examples: bool = True,
    shrink: bool = True,
    seed: int | None = None,
) -> None:
    """Check ``prop`` on its designed inputs, then on hypothesis-generated ones.

    Raises :class:`PropertyFailure` on the first (hypothesis: smallest) failing input,
    :class:`NotApplicable` if the property does not apply. ``max_examples`` overrides
    the active hypothesis profile; ``shrink=False`` skips shrinking (fast triage);
    ``seed`` fixes hypothesis' random stream (and turns derandomization off).
    """
    __tracebackhide__ = True
    prop = get_property(prop) if isinstance(prop, str) else prop
    reason = prop.applies(ctx, param) or layout_reason(prop, ctx)
    if reason:
        raise NotApplicable(reason)
    if examples:
        for ex in prop.examples(ctx, param):
            prop.check(ctx, ex, param)
    if prop.strategy is None or max_examples == 0:
        return
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
        kw["max_examples"] = max(1, settings.default.max_examples // prop.cost)
    if not shrink:
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
    verdict: str
    message: str = ""
    finding: Finding | None = None

    @property
    def label(self) -> str:
        """``test_name[param]``."""
        return f"test_{self.name}" + (f"[{self.param}]" if self.param else "")


def evaluate(
    prop: Property | str,
    ctx: Context,
    param: Any = None,
    *,
    max_examples: int | None = None,
    examples: bool = True,
    shrink: bool = True,
    seed: int | None = None,
) -> Outcome:
    """Run one property and classify the result (the one runner of the suite).

    A :class:`PropertyFailure` keeps its finding's class, except that a FAIL of a property
    that is not required under the convention (``Property.required``) is a WARN, and with
    ``ctx.strict`` every WARN is a FAIL. :class:`NotApplicable` is ``skip``.
    """
    prop = get_property(prop) if isinstance(prop, str) else prop
    label = None if param is None else str(param)
    try:
        run_property(prop, ctx, param, max_examples=max_examples, examples=examples, shrink=shrink, seed=seed)
    except NotApplicable as exc:
        return Outcome(prop.name, prop.level, label, "skip", str(exc))
    except Exception as raised:  # a PropertyFailure, or hypothesis's group around one (Flaky: nondeterminism)
        exc = _first_failure(raised)
        if not isinstance(exc, PropertyFailure):  # the suite's own error: say so, never a verdict
            text = f"the suite could not evaluate this property: {type(exc).__name__}: {exc}"
            return Outcome(prop.name, prop.level, label, "NOTE", text)
        verdict = exc.verdict
        if verdict == "FAIL" and not prop.required(ctx):
            verdict = "WARN"
        if verdict == "WARN" and ctx.strict:
            verdict = "FAIL"
        notes = [n for n in getattr(exc, "__notes__", []) if n.strip()]
        message = "\n".join([exc.finding.render(), *notes])
        return Outcome(prop.name, prop.level, label, verdict, message, exc.finding)
    return Outcome(prop.name, prop.level, label, "pass")


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
        for prop in PROPERTIES.values()
        if names is None or prop.name in names
        for param in prop.params(ctx.adapter)
    ]


# ---------------------------------------------------------------------------------
# inputs
def _batches(
    ctx: Context,
    *,
    binary: bool = False,
    silent: str = "sometimes",
    min_groups: int = 1,
    max_groups: int = 4,
    min_size: int = 2,
    max_size: int = 8,
    values: str = "mixed",
) -> st.SearchStrategy[Batch]:
    """Batches the adapter can take: ragged and interleaved for the index layout (integer or
    uuid-like string ids); dyadic, continuous and ill-conditioned rewards (``values``)."""
    kw = dict(
        binary=binary,
        silent=silent,
        min_groups=min_groups,
        max_groups=max_groups,
        min_size=min_size,
        max_size=max_size,
        values=values,
    )
    if ctx.adapter.ragged:
        return st.one_of(
            sst.ragged_batches(**kw).map(lambda ri: Batch(*ri)),  # type: ignore[arg-type]
            sst.ragged_batches(ids="str", **kw).map(lambda ri: Batch(*ri)),  # type: ignore[arg-type]
        )
    return sst.reward_groups(**kw).map(Batch.grouped)  # type: ignore[arg-type]


_LIVE = [
    Batch.grouped([[1.0, 0.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0]]),
    Batch.grouped([[0.5, 2.0, -1.0], [1.0, 1.0, 0.0], [0.25, 0.0, 4.0]]),
]
_BINARY = [Batch.grouped([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])]
#: Ill-conditioned groups: near-equal rewards with an offset (a one-pass variance in float32 errs
#: by 1.5% on the first; a stable float32 computation by ~1e-5)
_ILL = [Batch.grouped([[5.0, 5.01, 5.0, 5.02], [10000.3, 10000.1, 10000.7, 10000.2]])]
_WITH_SILENT = [Batch.grouped([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])]


def _live(ctx: Context, p: Any) -> list[Batch]:
    return list(_LIVE)


def _seeded(batches: st.SearchStrategy[Batch]) -> st.SearchStrategy[tuple[Batch, int]]:
    return st.tuples(batches, st.integers(0, 2**32 - 1))


def _groups_of(batch: Batch) -> np.ndarray:
    return np.unique(batch.index, return_inverse=True)[1].reshape(-1)


# ---------------------------------------------------------------------------------
# level 0: contract
def _check_shape(ctx: Context, batch: Batch, p: Any) -> None:
    out = ctx.call(batch)
    shape = ctx.adapter.expected_shape(batch)
    if not isinstance(out, torch.Tensor):
        ctx.fail(
            f"type(out)={type(out).__name__}, but should be torch.Tensor",
            batch,
            cause="return a torch.Tensor like the rewards",
        )
    if tuple(out.shape) != shape:
        cause = None
        if out.numel() < batch.n:
            cause = (
                f"{batch.n - out.numel()} advantages are missing: a group was dropped (often the last one)"
            )
        ctx.fail(f"out.shape={tuple(out.shape)}, but should be {shape}", batch, cause=cause)


_register(
    Property(
        "output_shape",
        "contract",
        "out.shape == rewards.shape for the layout: [N] (contiguous, index) or [B, G] (grouped).",
        _check_shape,
        _live,
        lambda ctx, p: _batches(ctx),
    )
)


def _check_dtype(ctx: Context, batch: Batch, dtype_name: str) -> None:
    dtype = _DTYPES[dtype_name]
    out = ctx.call(batch, dtype=dtype)
    got = getattr(out, "dtype", None)
    if got != dtype:
        floating = isinstance(got, torch.dtype) and got.is_floating_point
        ctx.fail(
            f"out.dtype={got}, but should be {dtype}",
            batch,
            cause=f"the result is cast to another dtype; return advantages.to(rewards.dtype) ({dtype})"
            + (
                "; the values are judged at the precision computed in, so training is unaffected"
                if floating
                else ""
            ),
            verdict="WARN" if floating else "FAIL",
        )


def _dtype_params(adapter: Adapter) -> Sequence[Any]:
    return adapter.dtypes


_register(
    Property(
        "output_dtype",
        "contract",
        "out.dtype == rewards.dtype for every floating dtype the implementation declares.",
        _check_dtype,
        lambda ctx, p: _LIVE[:1],
        None,
        params=_dtype_params,
    )
)


def _check_device(ctx: Context, batch: Batch, p: Any) -> None:
    out = ctx.call(batch)
    if getattr(out, "device", None) != torch.device("cpu"):
        ctx.fail(
            f"out.device={getattr(out, 'device', None)}, but should be cpu",
            batch,
            cause="the result moves to another device; keep it on rewards.device",
            verdict="WARN",
        )


_register(
    Property(
        "output_device",
        "contract",
        "out.device == rewards.device (CPU here; CUDA in numerics).",
        _check_device,
        lambda ctx, p: _LIVE[:1],
    )
)


def _check_no_mutation(ctx: Context, batch: Batch, p: Any) -> None:
    rewards = torch.tensor(batch.rewards, dtype=torch.float64)
    before = rewards.clone()
    index_before = batch.index.copy()
    probe = Batch(batch.rewards, batch.index.copy())
    ctx.call(probe, rewards=rewards)
    if not torch.equal(rewards, before):
        changed = int(torch.nonzero(rewards != before)[0, 0])
        ctx.fail(
            f"rewards[{changed}]={float(rewards[changed]):g} after the call, but should be "
            f"{float(before[changed]):g} (unchanged)",
            batch,
            cause="the implementation modifies rewards in place (e.g. rewards.sub_(mean)); work on a copy",
        )
    if not np.array_equal(probe.index, index_before):
        ctx.fail(
            "index changed during the call, but should be unchanged",
            batch,
            cause="the implementation modifies the group index in place",
        )


_register(
    Property(
        "input_not_mutated",
        "contract",
        "rewards (and index) are equal before and after the call.",
        _check_no_mutation,
        _live,
        lambda ctx, p: _batches(ctx),
    )
)


def _check_deterministic(ctx: Context, batch: Batch, p: Any) -> None:
    a = ctx.flat(batch)
    b = ctx.flat(batch)
    if not np.array_equal(a, b, equal_nan=True):
        i = int(np.argmax(a != b))
        ctx.fail(
            f"second call gave actual={b[i]:.17g}, but should be {a[i]:.17g} (the first call's) at index {i}",
            batch,
            cause="the result depends on randomness or state (e.g. noise added to break ties)",
        )


_register(
    Property(
        "deterministic",
        "contract",
        "Two calls on equal rewards give bitwise equal advantages.",
        _check_deterministic,
        _live,
        lambda ctx, p: _batches(ctx),
    )
)


def _check_finite(ctx: Context, batch: Batch, p: Any) -> None:
    a = ctx.flat(batch)
    if not np.isfinite(a).all():
        i = int(np.argmax(~np.isfinite(a)))
        ctx.fail(f"out[{i}]={a[i]}, but should be finite", batch, a)


_register(
    Property(
        "finite_output",
        "contract",
        "Finite rewards give finite advantages, silent groups included.",
        _check_finite,
        lambda ctx, p: _LIVE + _WITH_SILENT,
        lambda ctx, p: _batches(ctx),
    )
)


def _check_detached(ctx: Context, batch: Batch, p: Any) -> None:
    rewards = torch.tensor(batch.rewards, dtype=torch.float64, requires_grad=True)
    out = ctx.call(batch, rewards=rewards)
    if getattr(out, "requires_grad", False):
        ctx.fail(
            "out.requires_grad=True, but should be False for rewards that require grad",
            batch,
            cause="gradient flows into the advantages: compute them under torch.no_grad() or "
            ".detach() them, so the policy loss treats them as constants (hygiene: a trainer that "
            "calls it under no_grad or on rewards without grad is unaffected)",
            verdict="WARN",
        )


_register(
    Property(
        "output_detached",
        "contract",
        "Advantages are constants of the update: out.requires_grad is False even when rewards require grad.",
        _check_detached,
        lambda ctx, p: _LIVE[:1],
    )
)


def _check_malformed(ctx: Context, batch: Batch, p: Any) -> None:
    rewards = batch.rewards.copy()
    rewards[0] = math.nan
    bad = batch.with_rewards(rewards)
    out = _guarded(ctx.adapter, bad, what=lambda: ctx.adapter.call_repr(bad), refusal_ok=True)
    if out is None:
        return  # a clear failure
    a = out.numpy()
    g = _groups_of(bad)
    spread = ~np.isfinite(a) & (g != g[0])
    if spread.any():
        ctx.fail(
            "a NaN reward in the first group made other groups' advantages NaN, but should raise "
            "or stay within its group",
            bad,
            cause="a NaN in one group contaminates the batch statistics",
        )


_register(
    Property(
        "rejects_malformed",
        "contract",
        "A NaN reward raises, or at least stays confined to its own group (advisory).",
        _check_malformed,
        lambda ctx, p: _LIVE,
        required=lambda ctx: False,
    )
)


# ---------------------------------------------------------------------------------
# level 1: algebra
def _check_values(ctx: Context, batch: Batch, p: Any) -> None:
    a = ctx.flat(batch)
    ctx.compare("advantages", batch, a, ctx.expected(batch))


_register(
    Property(
        "advantage_values",
        "algebra",
        "A == oracle(R) under the convention: (R - mu) / d per group (d = 1 for Dr. GRPO; "
        "RLOO: G/(G-1) (R - mu)).",
        _check_values,
        lambda ctx, p: _LIVE + _WITH_SILENT + _ILL,
        lambda ctx, p: _batches(ctx),
    )
)


def _check_centering(ctx: Context, batch: Batch, p: Any) -> None:
    a = ctx.flat(batch)
    g = _groups_of(batch)
    sums = np.bincount(g, a)
    slack = np.bincount(g, ctx.tolerance(batch))
    bad = np.abs(sums) > slack
    if bad.any():
        j = int(np.argmax(bad))
        ctx.fail(f"sum of advantages in group {j}: actual={sums[j]:.6g}, but should be 0", batch, a)


_register(
    Property(
        "group_centering",
        "algebra",
        "Zero mean within each group: sum_{i in g} A_i = 0.",
        _check_centering,
        _live,
        lambda ctx, p: _batches(ctx, silent="never"),
    )
)


def _permute_within(batch: Batch, rng: np.random.Generator) -> np.ndarray:
    """A permutation of positions that maps each group's positions onto themselves."""
    perm = np.arange(batch.n)
    for gid in np.unique(batch.index):  # test input preparation, a few groups
        pos = np.nonzero(batch.index == gid)[0]
        perm[pos] = pos[rng.permutation(pos.size)]
    return perm


def _check_permutation(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    batch, s = ex
    perm = _permute_within(batch, np.random.default_rng(s))
    a = ctx.flat(batch)
    moved = batch.with_rewards(batch.rewards[perm])
    b = ctx.flat(moved)
    tol = ctx.tolerance(moved) + ctx.tolerance(batch)[perm]
    ctx.compare("advantages of permuted rewards A(pi R) vs pi A(R)", moved, b, a[perm], tolerance=tol)


_register(
    Property(
        "permutation_equivariance",
        "algebra",
        "Permuting responses within a group permutes their advantages: A(pi R) = pi A(R).",
        _check_permutation,
        lambda ctx, p: [(b, 0) for b in _LIVE],
        lambda ctx, p: _seeded(_batches(ctx)),
    )
)


def _check_independence(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    batch, s = ex
    rng = np.random.default_rng(s)
    g = _groups_of(batch)
    j = int(rng.integers(g.max() + 1))
    rewards = batch.rewards.copy()
    member = g == j
    rewards[member] = rng.integers(-8, 9, member.sum()) / 4
    changed = batch.with_rewards(rewards)
    a, b = ctx.flat(batch), ctx.flat(changed)
    others = ~member
    tol = (ctx.tolerance(batch) + ctx.tolerance(changed))[others]
    found = mismatch_message(b[others], a[others], 0.0, tol)
    if found:
        ctx.fail(
            f"changing the rewards of group {j} changed other groups' advantages: {found[0]}", changed, b
        )


def _group_scale(ctx: Context, p: Any) -> str | None:
    conv = ctx.reference.convention
    if conv is not None and conv.scale == "batch":
        return "the convention divides by one std over the batch (scale='batch'): groups share it"
    return None


_register(
    Property(
        "group_independence",
        "algebra",
        "Each group's advantages depend only on its own rewards: A_g(R) = A_g(R_g).",
        _check_independence,
        lambda ctx, p: [(_LIVE[1], 1), (_LIVE[1], 2)],
        lambda ctx, p: _seeded(_batches(ctx, min_groups=2)),
        applies=_group_scale,
    )
)


def _check_shift(ctx: Context, ex: tuple[Batch, float], p: Any) -> None:
    batch, c = ex
    a = ctx.flat(batch)
    shifted = batch.with_rewards(batch.rewards + c)
    b = ctx.flat(shifted)
    tol = ctx.tolerance(shifted) + ctx.tolerance(batch)
    ctx.compare(f"advantages of R + {c:g} vs advantages of R", shifted, b, a, tolerance=tol)


_register(
    Property(
        "shift_invariance",
        "algebra",
        "A reward shift changes nothing: A(R + c) = A(R).",
        _check_shift,
        lambda ctx, p: [(_LIVE[0], 3.0), (_LIVE[1], -1.5)],
        lambda ctx, p: st.tuples(_batches(ctx), st.integers(-40, 40).map(lambda i: i / 4)),
    )
)


def _check_scale(ctx: Context, ex: tuple[Batch, float], p: Any) -> None:
    batch, lam = ex
    a = ctx.flat(batch)
    scaled = batch.with_rewards(batch.rewards * lam)
    b = ctx.flat(scaled)
    tol = ctx.tolerance(scaled) + ctx.tolerance(batch) * (1.0 if ctx.reference.scale_invariant else lam)
    if ctx.reference.scale_invariant:
        _, _, std = ctx.reference.statistics(batch.rewards, batch.index)
        live = std[std > 0]
        # d = std + eps: the relative change of A is at most eps / (lambda std)
        slack = 4 * ctx.reference.eps / (min(lam, 1.0) * live.min()) if live.size else 0.0
        ctx.compare(
            f"advantages of {lam:g} R vs advantages of R (GRPO divides by the std: invariant)",
            scaled,
            b,
            a,
            tolerance=tol + slack * np.abs(a),
        )
    else:
        ctx.compare(
            f"advantages of {lam:g} R vs {lam:g} times advantages of R (no division: equivariant)",
            scaled,
            b,
            lam * a,
            tolerance=tol,
        )


_register(
    Property(
        "scale_behaviour",
        "algebra",
        "GRPO is invariant to a positive reward scale, A(lambda R) = A(R); Dr. GRPO and RLOO are "
        "equivariant, A(lambda R) = lambda A(R).",
        _check_scale,
        lambda ctx, p: [(_LIVE[0], 4.0), (_LIVE[1], 0.5)],
        lambda ctx, p: st.tuples(_batches(ctx, silent="never"), st.sampled_from([0.25, 0.5, 2.0, 3.0, 8.0])),
    )
)


def _check_two_valued(ctx: Context, batch: Batch, p: Any) -> None:
    a = ctx.flat(batch)
    e = ctx.expected(batch)
    g = _groups_of(batch)
    slack = np.zeros(g.max() + 1)
    np.maximum.at(slack, g, 2 * ctx.tolerance(batch, e))
    for side, name in ((batch.rewards == 1, "A+"), (batch.rewards == 0, "A-")):
        lo = np.full(g.max() + 1, np.inf)
        hi = np.full(g.max() + 1, -np.inf)
        np.minimum.at(lo, g[side], a[side])
        np.maximum.at(hi, g[side], a[side])
        seen = np.isfinite(hi - lo)
        spread = (hi - lo)[seen]
        if (spread > slack[seen]).any():
            ctx.fail(
                f"{name} takes {spread.max():.3g} different values within a group, but should be one value",
                batch,
                a,
            )
    ctx.compare(
        "two-valued advantages (A+ = sqrt((G-k)/k) sigma/d, A- = -sqrt(k/(G-k)) sigma/d)", batch, a, e
    )


_register(
    Property(
        "binary_two_valued",
        "algebra",
        "Binary rewards give two values per group: A+ on correct, A- on incorrect responses; with "
        "d = sigma, A+ = sqrt((G-k)/k) and A- = -sqrt(k/(G-k)).",
        _check_two_valued,
        lambda ctx, p: list(_BINARY),
        lambda ctx, p: _batches(ctx, binary=True, silent="never"),
    )
)


def _index_only(ctx: Context, p: Any) -> str | None:
    if not ctx.adapter.ragged:
        return f"layout {ctx.adapter.layout!r} takes contiguous groups of one size"
    return None


_INTERLEAVED = [
    Batch(np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 2.0]), np.array([7, 3, 7, 3, 7, 11, 11])),
    # uuid-like ids whose sorted order (a, c, e) is neither the first-seen order (e, a, c) nor
    # its reverse: a result returned in sorted-id order is caught
    Batch(
        np.array([0.25, 1.0, 3.0, 0.0, 0.5, 2.0, 1.0, 0.0]),
        np.array(["e7f1", "a09c", "c3d2", "e7f1", "a09c", "c3d2", "e7f1", "a09c"], dtype=object),
    ),
]


_register(
    Property(
        "interleaved_groups",
        "algebra",
        "Groups given by an index are found wherever their responses are: ragged, interleaved, any ids.",
        _check_values,
        lambda ctx, p: list(_INTERLEAVED),
        lambda ctx, p: st.one_of(
            sst.ragged_batches(interleaved=True, min_groups=2).map(lambda ri: Batch(*ri)),
            sst.ragged_batches(interleaved=True, min_groups=2, ids="str", values="mixed").map(
                lambda ri: Batch(*ri)
            ),
        ),
        applies=_index_only,
    )
)


def _check_partial(ctx: Context, ex: tuple[np.ndarray, int], p: Any) -> None:
    rewards, G = ex
    n = rewards.shape[0]
    call = f"{ctx.adapter.name}(rewards={array_text(rewards)}, G={G})"
    out = _guarded(
        ctx.adapter.advantages, torch.tensor(rewards, dtype=torch.float64), G, what=call, refusal_ok=True
    )
    if out is None:
        return  # refused: a clear error is one of the two right answers
    batch = Batch(rewards, np.arange(n) // G)  # the remainder is a group of its own
    flat = out.reshape(-1) if isinstance(out, torch.Tensor) else None
    if flat is None or flat.shape[0] != n:
        got = tuple(out.shape) if hasattr(out, "shape") else type(out).__name__
        raise PropertyFailure(
            Finding(
                f"N = {n} rewards with G = {G} (a trailing partial group of {n % G}) gave out.shape={got}, "
                f"but should raise or return {n} advantages with the remainder as its own group",
                call,
                cause=f"the last {n % G} responses are dropped or mixed into another group",
                confirmed=True,
            )
        )
    a = flat.detach().to("cpu", torch.float64).numpy()
    expected = ctx.expected(batch)
    found = mismatch_message(a, expected, 0.0, ctx.tolerance(batch, expected))
    if found is not None:
        raise PropertyFailure(
            Finding(
                f"N = {n} rewards with G = {G}: a trailing partial group of {n % G} was neither refused nor "
                f"treated as its own group: {found[0]}",
                call,
                ctx.reference.name,
                cause="the code accepts N not divisible by G and computes the last group from missing "
                "or padded entries; raise (e.g. rewards.view(-1, G)) or group the remainder on its own",
                confirmed=True,
            )
        )


def _partial_examples(ctx: Context, p: Any) -> list[tuple[np.ndarray, int]]:
    return [
        (np.array([1.0, 0.0, 0.0, 0.0, 0.0, 3.0, 1.0, 0.0, 1.0, 0.0]), 4),
        (np.array([0.5, 2.0, -1.0, 1.0, 0.25, 0.0, 4.0, 1.0]), 3),
    ]


def _partial_strategy(ctx: Context, p: Any) -> st.SearchStrategy[tuple[np.ndarray, int]]:
    def build(r: np.ndarray, extra: int) -> tuple[np.ndarray, int]:
        G = r.shape[1]
        tail = np.arange(extra, dtype=np.float64) % 2  # a live remainder: 0, 1, 0, ...
        return np.concatenate([r.reshape(-1), tail]), G

    groups = sst.reward_groups(min_size=3, max_size=8, silent="never", values="mixed")
    return groups.flatmap(lambda r: st.integers(2, r.shape[1] - 1).map(lambda e: build(r, e)))


_register(
    Property(
        "partial_trailing_group",
        "algebra",
        "With N rewards not a multiple of G, a contiguous implementation raises, or treats the trailing "
        "N mod G responses as a group of their own; it never returns values computed from missing or "
        "padded entries.",
        _check_partial,
        _partial_examples,
        _partial_strategy,
        applies=lambda ctx, p: (
            None
            if ctx.adapter.layout == "contiguous"
            else f"layout {ctx.adapter.layout!r} has no group size to misalign"
        ),
    )
)


# ---------------------------------------------------------------------------------
# level 2: the identity
def _prediction(ctx: Context, batch: Batch, scores: np.ndarray) -> np.ndarray:
    """The oracle's per-group update: (sigma^2/d) delta_s (RLOO: (1/G) sum A_i s_i)."""
    ref = ctx.reference
    if ref.convention is None:
        return as_numpy(policy_gradient(ctx.expected(batch), scores, index=batch.index))
    return as_numpy(decompose(batch.rewards, scores, convention=ref.convention, index=batch.index).prediction)


def _check_identity(ctx: Context, ex: tuple[Batch, np.ndarray], p: Any) -> None:
    batch, scores = ex
    a = ctx.flat(batch)
    if not np.isfinite(a).all():
        ctx.fail("the update is undefined: advantages hold NaN or infinity", batch, a)
    g = as_numpy(policy_gradient(a, scores, index=batch.index))
    pred = _prediction(ctx, batch, scores)
    # |g - pred| <= (1/G) sum_i tol_i |s_i|: the advantages' tolerance carried through the sum
    tol = as_numpy(policy_gradient(ctx.tolerance(batch), np.abs(scores), index=batch.index))
    found = mismatch_message(g.reshape(-1), pred.reshape(-1), 0.0, tol.reshape(-1) + 1e-300)
    if found:
        ctx.fail(f"update g = (1/G) sum A_i s_i vs (sigma^2/d)(s+ - s-): {found[0]}", batch, a)


def _binary_with_scores(ctx: Context, p: Any) -> st.SearchStrategy[tuple[Batch, np.ndarray]]:
    return _batches(ctx, binary=True).flatmap(
        lambda b: st.tuples(st.just(b), sst.score_vectors(n=b.n, dim=3))
    )


_register(
    Property(
        "advantage_identity",
        "identity",
        "With the implementation's advantages, g = (1/G) sum_i A_i s_i = (sigma^2/d)(s+ - s-) per group "
        "for binary rewards and any scores s_i in R^3.",
        _check_identity,
        lambda ctx, p: [(b, np.arange(3.0 * b.n).reshape(b.n, 3) % 5 - 2) for b in _BINARY + _WITH_SILENT],
        _binary_with_scores,
    )
)


def _check_detected(ctx: Context, ex: Any, p: Any) -> None:
    det = ctx.detection
    if det is None:
        return
    facts = [f"detected convention: {det.summary()}", f"working precision: {ctx.precision}"]
    if ctx.declared is not None and det.preset != ctx.declared:
        facts.append(f"declared {ctx.declared!r}, judged against it")
    if det.notes:
        facts.append("probes: " + "; ".join(det.notes))
    raise PropertyFailure(Finding("; ".join(facts)), verdict="NOTE")


_register(
    Property(
        "convention_detected",
        "identity",
        "Probing with designed rewards identifies the convention (ddof, eps and placement, scale, "
        "singleton and silent groups, a spread filter) and the working precision: a NOTE, never a failure.",
        _check_detected,
        lambda ctx, p: [None],
        applies=lambda ctx, p: None if ctx.detection is not None else "convention detection was not run",
        required=lambda ctx: False,
    )
)


# the tiny policy: logits = x_it @ W over a vocabulary of 6, tokens y_it, lengths L_i
_V, _F, _T = 6, 4, 5


@dataclasses.dataclass
class _Policy:
    W: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor

    @staticmethod
    def make(n: int, seed: int) -> _Policy:
        gen = torch.Generator().manual_seed(seed)
        W = torch.randn(_F, _V, generator=gen, dtype=torch.float64).requires_grad_(True)
        x = torch.randn(n, _T, _F, generator=gen, dtype=torch.float64)
        y = torch.randint(0, _V, (n, _T), generator=gen)
        lengths = torch.randint(2, _T + 1, (n,), generator=gen)
        mask = (torch.arange(_T).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
        return _Policy(W, x, y, mask)

    def logp(self) -> torch.Tensor:
        logits = self.x @ self.W
        return torch.log_softmax(logits, -1).gather(-1, self.y.unsqueeze(-1)).squeeze(-1)


def _loss(
    ctx: Context,
    logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    batch: Batch,
    old_logp: torch.Tensor | None = None,
) -> torch.Tensor:
    """The implementation's loss (ratio 1 unless ``old_logp`` is given); ``(loss, metrics)`` accepted."""
    assert ctx.adapter.loss is not None
    where = "at ratio 1" if old_logp is None else "at ratio != 1"
    old = logp.detach() if old_logp is None else old_logp
    out = _guarded(ctx.adapter.loss, logp, old, adv, mask, what=lambda: f"loss {where} on {batch!r}")
    if isinstance(out, tuple | list) and out:
        out = out[0]  # (loss, metrics), as many trainers return
    if not isinstance(out, torch.Tensor) or out.numel() != 1:
        raise PropertyFailure(
            f"loss returned {type(out).__name__} {getattr(out, 'shape', '')}, but should be a scalar Tensor"
        )
    return out.reshape(())


def _needs_loss(ctx: Context, p: Any) -> str | None:
    return None if ctx.adapter.loss is not None else "no loss given (--loss pkg.module:loss enables it)"


def _token_weights(ctx: Context, pol: _Policy, batch: Batch, adv: torch.Tensor) -> torch.Tensor:
    """``dL/dlogp_it`` at ratio 1 for advantages ``adv``."""
    leaf = pol.logp().detach().requires_grad_(True)
    loss = _loss(ctx, leaf, adv, pol.mask, batch)
    (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
    return torch.zeros_like(leaf) if grad is None else grad


def _check_loss_identity(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    batch, s = ex
    pol = _Policy.make(batch.n, s)
    a = torch.from_numpy(ctx.flat(batch))
    ones = torch.ones(batch.n, dtype=torch.float64)
    w = -_token_weights(ctx, pol, batch, ones)  # aggregation weights w_it
    if not w.any():
        ctx.fail(
            "the loss gradient at ratio 1 is 0 for every token, but should be the policy gradient",
            batch,
            cause="the loss has no gradient at ratio 1 (is logp detached inside the loss?)",
        )
    logp = pol.logp()
    g_idx = torch.from_numpy(_groups_of(batch))
    sizes = torch.bincount(g_idx).to(torch.float64)[g_idx]
    # scores s_i = G * grad sum_t w_it logp_it (SPEC section 4), one batched backward
    per_response = (w * logp).sum(-1)
    (jac,) = torch.autograd.grad(
        per_response,
        pol.W,
        grad_outputs=torch.eye(batch.n, dtype=torch.float64),
        retain_graph=True,
        is_grads_batched=True,
    )
    scores = jac.reshape(batch.n, -1) * sizes.unsqueeze(1)
    actual = []
    for j in range(int(g_idx.max()) + 1):  # one backward per group of a small test batch
        masked = torch.where(g_idx == j, a, torch.zeros_like(a))
        loss = _loss(ctx, logp, masked, pol.mask, batch)
        (grad,) = torch.autograd.grad(loss, pol.W, retain_graph=True, allow_unused=True)
        actual.append(-(torch.zeros_like(pol.W) if grad is None else grad).reshape(-1))
    got = torch.stack(actual).numpy()
    sc = scores.detach().numpy()
    pred = _prediction(ctx, batch, sc).reshape(got.shape)
    own = as_numpy(policy_gradient(a.numpy(), sc, index=batch.index)).reshape(got.shape)
    # the advantages' working-precision tolerance carried through (1/G) sum_i A_i s_i, plus the
    # loss's own rounding (its working precision over the n T terms of the sum)
    u_loss = _loss_unit(ctx, pol, batch)
    carried = as_numpy(policy_gradient(ctx.tolerance(batch), np.abs(sc), index=batch.index))
    terms = as_numpy(policy_gradient(np.abs(a.numpy()), np.abs(sc), index=batch.index))
    tol = carried + SAFETY * (2 + math.log2(pol.mask.numel())) * u_loss * terms
    found = mismatch_message(got.reshape(-1), pred.reshape(-1), 0.0, tol.reshape(-1) + 1e-300)
    if found:
        loss_tol = (SAFETY * (2 + math.log2(pol.mask.numel())) * u_loss * terms).reshape(-1) + 1e-300
        if not np.any(got):
            cause = "the loss has no gradient at ratio 1 (is logp detached inside the loss?)"
        elif mismatch_message(got.reshape(-1), own.reshape(-1), 0.0, loss_tol) is None:
            cause = (
                "the loss is a correct weighted policy gradient of the advantages it is given; the "
                "advantages themselves differ from the convention (see test_advantage_values)"
            )
        else:
            cause = (
                "the loss's gradient for one group's advantages is not (1/G) sum_i A_i s_i with the "
                "loss's own per-token weights: it is not linear in the advantages, or it mixes groups"
            )
        ctx.fail(f"per-group gradient -dL/dtheta vs (sigma^2/d)(s+ - s-): {found[0]}", batch, cause=cause)


def _loss_unit(ctx: Context, pol: _Policy, batch: Batch) -> float:
    """The unit roundoff of the loss's working precision: its output dtype's (float64's at best)."""
    leaf = pol.logp().detach()
    out = _loss(ctx, leaf, torch.ones(batch.n, dtype=torch.float64), pol.mask, batch)
    return max(unit_roundoff(out.dtype), unit_roundoff(ctx.precision) if out.dtype != torch.float64 else 0.0)


_register(
    Property(
        "loss_gradient_identity",
        "identity",
        "At ratio 1 on a small softmax policy, the gradient of the implementation's loss per group, "
        "-dL_g/dtheta, equals (sigma^2/d)(s+ - s-) with s_i = G sum_t w_it grad log pi(y_it) and w_it "
        "the loss's own aggregation weights.",
        _check_loss_identity,
        lambda ctx, p: [(_BINARY[0], 0), (_WITH_SILENT[0], 1)],
        lambda ctx, p: _seeded(_batches(ctx, binary=True, max_groups=3, max_size=5)),
        applies=_needs_loss,
        cost=3,
    )
)


def _check_policy_gradient(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    batch, s = ex
    pol = _Policy.make(batch.n, s)
    ones = torch.ones(batch.n, dtype=torch.float64)
    w = -_token_weights(ctx, pol, batch, ones)
    live = pol.mask > 0
    if not w.any():
        ctx.fail(
            "dL/dlogp = 0 at ratio 1 for advantage 1, but should be < 0 on every response token",
            batch,
            cause="the loss has no gradient at ratio 1 (is logp detached inside the loss?)",
        )
    u_loss = _loss_unit(ctx, pol, batch)
    floor = SAFETY * (2 + math.log2(pol.mask.numel())) * u_loss * float(w.abs().max())
    if (w[live] < -floor).any() or not (w[live] > 0).any():
        ctx.fail(
            f"loss weights at ratio 1 dL/dlogp = {(-w[0]).tolist()} for advantage 1, but should be <= 0 "
            "(minimising the loss must raise log pi of responses with positive advantage)",
            batch,
            cause="the loss has the wrong sign: return -mean(ratio * A), not +mean(ratio * A)",
        )
    adv = torch.linspace(-1.5, 2.0, batch.n, dtype=torch.float64)
    w_adv = -_token_weights(ctx, pol, batch, adv)
    expected = w * adv.unsqueeze(1)
    if not torch.allclose(w_adv, expected, rtol=SAFETY * u_loss, atol=floor * float(adv.abs().max())):
        ctx.fail(
            "dL/dlogp_it at ratio 1 is not -w_it A_i with weights w independent of the advantages",
            batch,
            cause="the loss re-normalises or clips the advantages at ratio 1",
        )


_register(
    Property(
        "loss_is_policy_gradient",
        "identity",
        "At ratio 1 the loss gradient is a weighted policy gradient: dL/dlogp_it = -w_it A_i with "
        "w_it >= 0 not depending on A.",
        _check_policy_gradient,
        lambda ctx, p: [(_BINARY[0], 0)],
        lambda ctx, p: _seeded(_batches(ctx, binary=True, max_groups=3, max_size=5)),
        applies=_needs_loss,
        cost=3,
    )
)


def _check_padding(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    batch, s = ex
    pol = _Policy.make(batch.n, s)
    adv = torch.linspace(-1.0, 1.5, batch.n, dtype=torch.float64)
    grad = _token_weights(ctx, pol, batch, adv)
    pad = pol.mask == 0
    if pad.any() and (grad[pad] != 0).any():
        i, t = (int(v) for v in torch.nonzero(pad & (grad != 0))[0])
        ctx.fail(
            f"dL/dlogp[{i}, {t}]={float(grad[i, t]):.4g} at a padding token (mask=0), but should be 0",
            batch,
            cause="the loss averages over padding tokens: multiply by the mask before reducing",
        )


_register(
    Property(
        "loss_ignores_padding",
        "identity",
        "Padding tokens (mask = 0) get no gradient: dL/dlogp_it = 0 where mask_it = 0.",
        _check_padding,
        lambda ctx, p: [(_BINARY[0], 0)],
        applies=_needs_loss,
    )
)


def _agg_policy(n: int, seed: int) -> _Policy:
    """A policy whose responses have lengths 1, T and in between (and no empty row)."""
    pol = _Policy.make(n, seed)
    lengths = torch.tensor([1, _T, *[2 + (i % (_T - 1)) for i in range(max(0, n - 2))]][:n])
    pol.mask = (torch.arange(_T).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    return pol


def _check_aggregation(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    batch, s = ex
    pol = _agg_policy(batch.n, s)
    w = -_token_weights(ctx, pol, batch, torch.ones(batch.n, dtype=torch.float64))
    # modes differ by factors of at least 1 + 1/T on responses of different lengths; 1e-6 absorbs
    # float32 losses and the n_i + 1e-8 that verl and OpenRLHF add to each sequence's length
    rtol = 1e-6
    try:
        found = detect_aggregation(w, pol.mask, rtol=rtol)
    except ValueError:
        found = None
    lengths = pol.mask.sum(-1).int().tolist()
    seen = "unrecognised weights" if found is None else found[0] + (f", C = {found[1]:g}" if found[1] else "")
    declared = ctx.adapter.aggregation
    if declared is None:
        raise PropertyFailure(
            Finding(f"aggregation: {seen} [detected from dL/dlogp at ratio 1, lengths {lengths}, T = {_T}]"),
            verdict="NOTE",
        )
    expected = aggregation_weights(pol.mask, declared, constant=ctx.adapter.aggregation_constant)
    if torch.allclose(w, expected, rtol=rtol, atol=rtol * float(expected.abs().max())):
        raise PropertyFailure(
            Finding(f"aggregation: {resolve_aggregation(declared)} [declared, measured]"), "NOTE"
        )
    i = int(torch.argmax((w - expected).abs().sum(-1)))
    cause = f"the loss applies {seen} weights"
    on = pol.mask > 0
    if found is None and resolve_aggregation(declared) == "token-mean":
        # a token-mean whose normaliser differs between parts of the batch: per-micro-batch counts
        per_row = [sorted({round(float(v), 12) for v in w[r][on[r]]}) for r in range(batch.n)]
        if all(len(v) == 1 for v in per_row) and len({v[0] for v in per_row}) == 2:
            cut = next(r for r in range(1, batch.n) if per_row[r] != per_row[r - 1])
            if all(per_row[r] == per_row[0] for r in range(cut)) and all(
                per_row[r] == per_row[cut] for r in range(cut, batch.n)
            ):
                n1, n2 = int(on[:cut].sum()), int(on[cut:].sum())
                w1, w2 = per_row[0][0], per_row[cut][0]
                cause = (
                    f"rows 0-{cut - 1} get weight {w1:.4g} and rows {cut}-{batch.n - 1} {w2:.4g}: each part "
                    f"of the batch is divided by its own token count ({n1} and {n2}) and the parts "
                    f"averaged, a normaliser taken per micro-batch instead of over all {n1 + n2} tokens"
                )
                found = ("per-micro-batch token-mean", None)
    if found is not None and found[0] == "seq-mean-token-sum-norm" and found[1] == _T:
        if resolve_aggregation(declared) == "seq-mean-token-mean":
            cause = (
                f"each sequence is averaged over the padded length T = {_T} instead of its own length "
                "(divide by mask.sum(-1), not by mask.shape[-1])"
            )
    raise PropertyFailure(
        Finding(
            f"per-token loss weights w[{i}] = {[round(float(v), 6) for v in w[i]]} (length {lengths[i]}), "
            f"but should be {[round(float(v), 6) for v in expected[i]]} under the declared aggregation "
            f"{resolve_aggregation(declared)}",
            f"loss(logp, old_logp=logp, advantages=1, mask) on lengths {lengths}, T = {_T}",
            cause=cause,
            confirmed=found is not None,
        )
    )


_register(
    Property(
        "loss_aggregation",
        "identity",
        "The per-token weights w_it = -dL/dlogp_it / A_i at ratio 1 are a known aggregation (token-mean, "
        "seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm, token-sum), measured on "
        "responses of lengths 1 to T; a declared aggregation must match them.",
        _check_aggregation,
        lambda ctx, p: [(_BINARY[0], 0)],
        applies=_needs_loss,
    )
)


#: Ratios r = exp(logp - old_logp) on a grid over every clip range in use, placed half-way
#: between round bounds (0.505, 0.515, ..., 1.595, then 1.65, 1.75, ..., 3.95), so a bound
#: such as 1.28 or a dual clip of 3 falls strictly between two grid points.
_RATIOS = torch.cat(
    [
        0.505 + 0.01 * torch.arange(110, dtype=torch.float64),
        1.65 + 0.1 * torch.arange(24, dtype=torch.float64),
    ]
)


def _clip_probe(n_tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logp, old_logp, advantages, mask)``: one token per ratio, rows of +1 and -1 advantages."""
    r = _RATIOS
    logp = torch.zeros(2, r.numel(), dtype=torch.float64)
    old = -torch.log(r).repeat(2, 1)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    return logp, old, adv, torch.ones_like(logp)


def _bound(active: torch.Tensor, r: torch.Tensor, upper: bool) -> float | None:
    """The clip bound a 0/1 pattern over the ratio grid shows (``None`` if the clip never acts)."""
    if bool(active.all()):
        return None
    if upper:  # active below the bound
        lo = float(r[active].max()) if bool(active.any()) else float(r.min())
        hi = float(r[~active & (r > lo)].min()) if bool((~active & (r > lo)).any()) else lo
    else:
        hi = float(r[active].min()) if bool(active.any()) else float(r.max())
        lo = float(r[~active & (r < hi)].max()) if bool((~active & (r < hi)).any()) else hi
    return round((lo + hi) / 2, 2)


def _check_clip(ctx: Context, ex: Any, p: Any) -> None:
    logp, old, adv, mask = _clip_probe(_RATIOS.numel())
    leaf = logp.clone().requires_grad_(True)
    batch = Batch.grouped([[1.0, 0.0]])
    out = _loss(ctx, leaf, adv, mask, batch, old_logp=old)
    (grad,) = torch.autograd.grad(out, leaf, allow_unused=True)
    g = torch.zeros_like(leaf) if grad is None else grad.detach()
    # the aggregation weight of each token, measured at ratio 1: w_it = -dL/dlogp_it / A_i
    leaf1 = logp.clone().requires_grad_(True)
    (g1,) = torch.autograd.grad(_loss(ctx, leaf1, adv, mask, batch), leaf1, allow_unused=True)
    w = -(torch.zeros_like(leaf1) if g1 is None else g1.detach()) / adv.unsqueeze(1)
    if not bool((w > 0).all()):
        row = 0 if not bool((w[0] > 0).all()) else 1
        raise PropertyFailure(
            Finding(
                f"at ratio 1 the loss gives {'A > 0' if row == 0 else 'A < 0'} tokens dL/dlogp = "
                f"{float(-w[row].min() * adv[row]):.3g}, but should be -w A with w > 0",
                "loss(logp=0, old_logp=0, advantages=[+1, -1], mask=1)",
                cause="a clip or cap acts at ratio 1 for this sign of the advantage (e.g. a dual clip "
                "applied to A > 0, where it belongs to A < 0 only)",
                confirmed=True,
            )
        )
    r = _RATIOS
    scale = float(w.abs().max()) * float(r.max())
    zero = g.abs() <= 1e-9 * scale
    declared = ctx.adapter.clip
    high = _bound(~zero[0], r, upper=True)
    low = _bound(~zero[1, r < 1.5], r[r < 1.5], upper=False)
    dual = _bound(~zero[1, r > 1.5], r[r > 1.5], upper=True)
    if declared is None and (
        (high is not None and high < 1) or (low is not None and low > 1) or (dual or 2) <= 1
    ):
        raise PropertyFailure(
            Finding(
                f"the loss's gradient at ratios 0.5 to 4 is not a PPO clip (zero above {high} for A > 0, "
                f"below {low} for A < 0): another objective; declare it (Adapter(objective=...)) to check it"
            ),
            verdict="NOTE",
        )
    if declared is not None:
        eps_low, eps_high = declared
        obj = Objective(
            "ppo",
            eps_low=eps_low,
            eps_high=eps_high,
            dual_clip=ctx.adapter.dual_clip,
            aggregation="token-sum",
        )
        how = "declared"
    else:
        eps_low = 0.2 if low is None else round(1 - low, 2)
        eps_high = 0.2 if high is None else round(high - 1, 2)
        obj = Objective(
            "ppo",
            eps_low=eps_low if low is not None else 10.0,
            eps_high=eps_high if high is not None else 10.0,
            dual_clip=dual,
            aggregation="token-sum",
        )
        how = "detected"
    pred = loss_gradient(obj, logp, old, adv, mask) * w
    u_loss = unit_roundoff(out.dtype)
    tol = SAFETY * (2 + math.log2(mask.numel())) * max(u_loss, PRECISIONS["float64"]) * scale + 1e-12 * scale
    bad = (g - pred).abs() > tol + SAFETY * u_loss * pred.abs()
    summary = (
        f"clip range [{1 - eps_low if low is not None or declared else '-inf'}, "
        f"{1 + eps_high if high is not None or declared else 'inf'}]"
        + (f", dual clip {obj.dual_clip:g}" if obj.dual_clip else "")
    )
    if not bool(bad.any()):
        raise PropertyFailure(Finding(f"PPO surrogate at ratios 0.5 to 4: {summary} [{how}]"), verdict="NOTE")
    row, t = (int(v) for v in torch.nonzero(bad)[0])
    sign = "A > 0" if row == 0 else "A < 0"
    if declared is None:  # not PPO's clipped surrogate, and nothing was declared: a fact, not a verdict
        raise PropertyFailure(
            Finding(
                f"at ratio {float(r[t]):.3g} with {sign} dL/dlogp = {float(g[row, t]):.6g}, where a PPO clip "
                f"{summary} would give {float(pred[row, t]):.6g}: the loss is another objective (CISPO, a "
                "soft gate, importance weights); declare it (--clip, or Adapter(objective=...)) to check it"
            ),
            verdict="NOTE",
        )
    cause = None
    if declared is not None and (high, low) != (None, None):
        got = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
        cause = f"the loss clips at {got} (read off its gradient), not at the declared range"
    raise PropertyFailure(
        Finding(
            f"dL/dlogp at ratio {float(r[t]):.3g} with {sign}: actual={float(g[row, t]):.6g}, but should be "
            f"{float(pred[row, t]):.6g} under the {how} {summary} (gradient -w A r inside the trust region, "
            f"0 where the clip is active for that sign of A); measured bounds: upper "
            f"{high if high is not None else 'none'} for A > 0, lower {low if low is not None else 'none'} "
            f"and dual {dual if dual is not None else 'none'} for A < 0",
            "loss(logp=0, old_logp=-log r, advantages=[+1, -1], mask=1) with r on a grid from 0.5 to 4",
            cause=cause,
        )
    )


_register(
    Property(
        "loss_clipped_surrogate",
        "identity",
        "At ratios r != 1 the loss gradient is the clipped surrogate's: dL/dlogp_it = -w_it A_i r_it inside "
        "[1 - eps_low, 1 + eps_high] and 0 where the clip is active for the sign of A_i (dual clip: 0 for "
        "A < 0 beyond c), with the clip range declared or read off the gradient.",
        _check_clip,
        lambda ctx, p: [None],
        applies=_needs_loss,
    )
)


def _objective_probe() -> dict[str, torch.Tensor]:
    """Designed inputs of :func:`_check_objective`: six responses of lengths 1 to 6, ratios on both
    sides of every clip range (0.55 to 3.5), rollout-vs-training weights from 0.3 to 3 (a cap of
    2 truncates some), a reference policy off by up to +-1 nat, advantages of both signs."""
    gen = torch.Generator().manual_seed(20261202)
    n, t = 6, 6
    # per row: A > 0 rows see ratios on both sides of 1 + eps_high (1.25 lies between 1.2 and 1.28),
    # A < 0 rows on both sides of 1 - eps_low and of a dual clip of 3
    rows = [
        [0.75, 1.05, 1.25, 1.35, 1.5, 2.2],
        [0.55, 0.75, 0.85, 1.15, 3.5, 1.0],
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        [0.65, 0.85, 0.95, 1.25, 2.2, 3.5],
        [1.15, 1.25, 0.55, 1.0, 1.0, 1.0],
        [0.95, 1.05, 1.5, 0.65, 1.0, 1.0],
    ]
    lengths = torch.tensor([6, 5, 1, 6, 3, 4])
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    logp = -0.1 - 2.5 * torch.rand(n, t, generator=gen, dtype=torch.float64)
    old = logp - torch.log(torch.tensor(rows, dtype=torch.float64))
    rho = torch.exp(torch.linspace(math.log(0.3), math.log(3.0), n * t, dtype=torch.float64)).reshape(n, t)
    rollout = old - torch.log(rho)
    ref = logp + (2 * torch.rand(n, t, generator=gen, dtype=torch.float64) - 1)
    adv = torch.tensor([1.3, -0.7, 0.4, -1.1, 2.0, -0.2], dtype=torch.float64)
    return {
        "logp": logp,
        "old_logp": old,
        "rollout_logp": rollout,
        "ref_logp": ref,
        "advantages": adv,
        "mask": mask,
    }


def _objective_alternatives(obj: Objective) -> list[tuple[str, Objective, float]]:
    """``(what the code computes instead, objective, sign of its KL term)`` for the bugs trainers ship."""
    alt: list[tuple[str, Objective, float]] = []

    def rep(o: Objective, **changes: Any) -> Objective:
        try:
            return dataclasses.replace(o, **changes)
        except ValueError:  # not a valid objective (e.g. a dual clip on GSPO): never matches
            return o

    if obj.kl is not None and obj.kl_coef != 0:
        if obj.kl_placement == "loss":
            alt.append(("the KL term's gradient has the wrong sign (the KL is maximised)", obj, -1.0))
            alt.append(
                ("the KL term has no gradient (missing or detached)", rep(obj, kl=None, kl_coef=0.0), 1.0)
            )
        for est in ("k1", "k2", "k3"):
            if est != obj.kl or obj.kl_placement == "reward":
                where = (
                    "in the loss"
                    if obj.kl_placement == "loss"
                    else "in the loss, though it was declared in the reward"
                )
                alt.append(
                    (
                        f"the KL term is the {est} estimator {where}",
                        rep(obj, kl=est, kl_placement="loss"),
                        1.0,
                    )
                )
    for mode in AGGREGATION_MODES:
        if resolve_aggregation(obj.aggregation) != mode:
            what = f"the loss aggregates with {mode}, not {resolve_aggregation(obj.aggregation)}"
            if obj.kind == "gspo" and mode in ("token-mean", "token-sum"):
                what = (
                    f"the sequence ratio is broadcast over tokens and reduced with {mode}: each sequence is "
                    "weighted by its length"
                )
            alt.append((what, rep(obj, aggregation=mode, constant=None), 1.0))
    if obj.eps_high is not None and obj.eps_high != obj.eps_low and obj.kind != "cispo":
        alt.append(
            (
                "the clip is symmetric at 1 +- eps_low, not [1 - eps_low, 1 + eps_high]",
                rep(obj, eps_high=obj.eps_low),
                1.0,
            )
        )
    if obj.kind == "cispo":
        alt.append(
            (
                "CISPO clips from below too (a PPO-style [1 - eps_low, 1 + eps_high])",
                rep(obj, eps_low=0.2),
                1.0,
            )
        )
        alt.append(
            (
                "the ratio is clipped by PPO's surrogate, not CISPO's stop-gradient weight",
                rep(obj, kind="ppo"),
                1.0,
            )
        )
    if obj.kind == "ppo":
        alt.append(("the sequence-level (GSPO) ratio is used", rep(obj, kind="gspo"), 1.0))
    if obj.kind == "gspo":
        alt.append(("token-level ratios are used, not the sequence ratio", rep(obj, kind="ppo"), 1.0))
    if obj.tis_cap is not None:
        alt.append(("no rollout-vs-training importance correction", rep(obj, tis_cap=None), 1.0))
        other = "sequence" if obj.tis_level == "token" else "token"
        alt.append((f"the importance weight is taken per {other}", rep(obj, tis_level=other), 1.0))
    return alt


def _check_objective(ctx: Context, ex: Any, p: Any) -> None:
    obj = ctx.adapter.objective
    assert obj is not None and ctx.adapter.loss is not None
    x = _objective_probe()
    leaf = x["logp"].clone().requires_grad_(True)
    accepted = _keyword_inputs(ctx.adapter.loss)
    extra = {k: x[k] for k in ("ref_logp", "rollout_logp") if k in accepted}
    named = "".join(", " + k for k in extra)
    call = f"loss(logp, old_logp, advantages, mask{named}) on 6 responses of lengths 1-6"
    out = _guarded(ctx.adapter.loss, leaf, x["old_logp"], x["advantages"], x["mask"], what=call, **extra)
    if isinstance(out, tuple | list) and out:
        out = out[0]
    (grad,) = torch.autograd.grad(out.reshape(()), leaf, allow_unused=True)
    g = torch.zeros_like(leaf) if grad is None else grad.detach()

    def predict(o: Objective, kl_sign: float = 1.0) -> torch.Tensor:
        terms = loss_gradient_terms(
            o,
            x["logp"],
            x["old_logp"],
            x["advantages"],
            x["mask"],
            ref_logp=x["ref_logp"],
            rollout_logp=x["rollout_logp"],
        )
        return terms["policy"] + kl_sign * terms["kl"]

    def close(pred: torch.Tensor) -> bool:
        scale = float(pred.abs().max()) or 1.0
        tol = 1e-6 * scale + SAFETY * unit_roundoff(out.dtype) * pred.abs()
        return bool(((g - pred).abs() <= tol).all())

    pred = predict(obj)
    if close(pred):
        raise PropertyFailure(
            Finding(f"objective: {obj} [declared, matches the loss's gradient]"), verdict="NOTE"
        )
    cause = next(
        (
            what
            for what, o, sign in _objective_alternatives(obj)
            if (o != obj or sign < 0) and close(predict(o, sign))
        ),
        None,
    )
    i, t = (int(v) for v in torch.nonzero((g - pred).abs() == (g - pred).abs().max())[0])
    terms = loss_gradient_terms(
        obj,
        x["logp"],
        x["old_logp"],
        x["advantages"],
        x["mask"],
        ref_logp=x["ref_logp"],
        rollout_logp=x["rollout_logp"],
    )
    raise PropertyFailure(
        Finding(
            f"dL/dlogp[{i}, {t}] = {float(g[i, t]):.6g}, but should be {float(pred[i, t]):.6g} under the "
            f"declared objective (policy term {float(terms['policy'][i, t]):.6g}, KL term "
            f"{float(terms['kl'][i, t]):.6g}; ratio {float(torch.exp(x['logp'] - x['old_logp'])[i, t]):.3g}, "
            f"A = {float(x['advantages'][i]):.3g})",
            call,
            cause=cause,
            confirmed=cause is not None,
        )
    )


def _keyword_inputs(fn: Any) -> set[str]:
    """The parameter names of ``fn`` (all of them if it takes ``**kwargs``)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return {"ref_logp", "rollout_logp"}
    return {p.name for p in params}


_register(
    Property(
        "loss_objective",
        "identity",
        "With a declared objective (PPO, dual clip, GSPO, CISPO; truncated importance sampling; a k1/k2/k3 "
        "KL term in the loss or in the reward), dL/dlogp_it equals the oracle's per-token gradient "
        "(sigma_ref.objectives.loss_gradient) at ratios inside and outside every clip range; a mismatch "
        "names the term that differs.",
        _check_objective,
        lambda ctx, p: [None],
        applies=lambda ctx, p: (
            _needs_loss(ctx, p)
            or (
                None
                if ctx.adapter.objective is not None
                else "no objective declared (Adapter(objective=...))"
            )
        ),
    )
)


# ---------------------------------------------------------------------------------
# level 3: silent groups and DAPO
def _check_silent_zero(ctx: Context, batch: Batch, p: Any) -> None:
    a = ctx.flat(batch)
    keep = as_numpy(dapo_keep_mask(batch.rewards, index=batch.index)).astype(bool)
    silent = ~keep & (np.bincount(_groups_of(batch))[_groups_of(batch)] > 1)
    bad = silent & ~(np.abs(a) <= np.maximum(1e-7, ctx.tolerance(batch)))
    if bad.any():
        i = int(np.argmax(bad))
        ctx.fail(
            f"out[{i}]={a[i]} in a silent group (all rewards {batch.rewards[i]:g}), but should be 0", batch, a
        )


_register(
    Property(
        "silent_group_zero",
        "silent",
        "A silent group (all rewards equal, k = 0 or k = G) gets A = 0 exactly, never NaN.",
        _check_silent_zero,
        lambda ctx, p: list(_WITH_SILENT),
        lambda ctx, p: _batches(ctx, silent="always").flatmap(
            lambda b: _batches(ctx).map(lambda live: _concat(b, live))
        ),
    )
)


#: Largest |A| a silent group of non-dyadic rewards may get: live advantages are at least
#: 1/sqrt(G-1) in size, so 1e-2 leaves a factor > 10 below any update the group could give,
#: while a float32 mean that is one ulp off divided by std + eps (eps >= 1e-6) stays far below it.
_SILENT_NOISE = 1e-2


def _check_non_dyadic_silent(ctx: Context, batch: Batch, p: Any) -> None:
    a = ctx.flat(batch)
    keep = as_numpy(dapo_keep_mask(batch.rewards, index=batch.index)).astype(bool)
    bad = ~keep & (np.abs(a) > _SILENT_NOISE)
    if bad.any():
        i = int(np.argmax(bad))
        # the targeted probe: the same batch with the silent groups' rewards made dyadic (exact means)
        dyadic = np.where(keep, batch.rewards, np.round(batch.rewards * 4) / 4)
        b = ctx.flat(batch.with_rewards(dyadic))
        confirmed = bool(np.all(np.abs(b[~keep]) <= _SILENT_NOISE))
        ctx.fail(
            f"out[{i}]={a[i]:.6g} in a silent group (all rewards {batch.rewards[i]:.17g}), but should be 0 "
            f"(|A| <= {_SILENT_NOISE:g})",
            batch,
            a if not confirmed else None,
            cause="the group's mean of equal non-dyadic rewards is not exactly the reward, so R - mean is "
            "a rounding residue ~1e-17 and a 'std > 0' guard divides it by a std of the same size "
            "(the same groups with dyadic rewards give 0); test silence with max == min (or torch.std, "
            "which is exact here), or add an eps"
            if confirmed
            else None,
        )


_register(
    Property(
        "non_dyadic_silent_group",
        "silent",
        "A silent group of rewards that are not exact binary fractions (0.1, 0.3, 1/3, 0.7) still gets "
        "|A| <= 1e-2, never an O(1) advantage from a rounding residue divided by a tiny std (a WARN for "
        "code computing in float32, where an eps below the rewards' rounding cannot guard it).",
        _check_non_dyadic_silent,
        required=lambda ctx: ctx.precision == "float64",
        examples=lambda ctx, p: [
            Batch.grouped([[0.1] * 6, [0.3] * 6, [0.7] * 6, [1 / 3] * 6, [0.9, 0.2, 0.4, 0.1, 0.6, 0.3]]),
            Batch.grouped([[0.1] * 3, [0.7] * 3, [0.2, 0.9, 0.4]]),
        ],
    )
)


def _concat(a: Batch, b: Batch) -> Batch:
    """Two batches side by side (ids of ``b`` shifted past ``a``'s)."""
    if a.group_size is not None and a.group_size == b.group_size:
        return Batch.grouped(np.concatenate([a.rewards, b.rewards]).reshape(-1, a.group_size))
    if a.group_size is not None and b.group_size is not None:
        return a  # contiguous layouts need one G: keep the silent batch alone
    if a.index.dtype.kind in "iu" and b.index.dtype.kind in "iu":
        shifted = b.index + a.index.max() + 1
    else:  # ids of any kind: make b's distinct from a's
        shifted = np.array([f"b{x}" for x in b.index.tolist()], dtype=object)
        a = Batch(a.rewards, np.array([f"a{x}" for x in a.index.tolist()], dtype=object))
    return Batch(np.concatenate([a.rewards, b.rewards]), np.concatenate([a.index, shifted]))


def _check_all_silent(ctx: Context, batch: Batch, p: Any) -> None:
    a = ctx.flat(batch)
    ok = np.abs(a) <= np.maximum(1e-7, ctx.tolerance(batch))
    if not ok.all():
        i = int(np.argmax(~ok))
        ctx.fail(
            f"out[{i}]={a[i]} in an all-silent batch, but should be 0",
            batch,
            a,
            cause="with every group silent the batch std is 0 too: 0/0 needs eps or a guard"
            if not np.isfinite(a[i])
            else None,
        )


_register(
    Property(
        "all_silent_batch",
        "silent",
        "A batch of only silent groups gets A = 0 everywhere (the batch std is 0 too).",
        _check_all_silent,
        lambda ctx, p: [Batch.grouped([[1.0] * 4, [0.0] * 4]), Batch.grouped([[0.5] * 3])],
        lambda ctx, p: _batches(ctx, silent="always"),
    )
)


def _check_silent_update(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    batch, s = ex
    pol = _Policy.make(batch.n, s)
    a = torch.from_numpy(ctx.flat(batch))
    loss = _loss(ctx, pol.logp(), a, pol.mask, batch)
    (grad,) = torch.autograd.grad(loss, pol.W, allow_unused=True)
    if grad is not None and not (torch.isfinite(grad).all() and (grad.abs() <= 1e-12).all()):
        ctx.fail(
            f"update of an all-silent batch: actual max |grad|={float(grad.abs().max())}, but should be 0",
            batch,
            a.numpy(),
        )


_register(
    Property(
        "silent_zero_update",
        "silent",
        "Silent groups give a zero update: g = 1{0<k<G} sigma delta_s = 0, finite, through the loss.",
        _check_silent_update,
        lambda ctx, p: [(Batch.grouped([[1.0] * 4, [0.0] * 4]), 0)],
        applies=_needs_loss,
    )
)


def _check_keep(ctx: Context, batch: Batch, p: Any) -> None:
    want = as_numpy(dapo_keep_mask(batch.rewards, index=batch.index)).astype(bool)
    if ctx.adapter.keep_mask is not None:
        got = _guarded(ctx.adapter.keep, batch, what=lambda: f"keep_mask on {batch!r}").numpy().astype(bool)
        what = "keep_mask"
    else:
        a = ctx.flat(batch)
        g = _groups_of(batch)
        got = (np.bincount(g, np.abs(a)) > np.bincount(g, np.maximum(1e-7, ctx.tolerance(batch))))[g]
        what = "groups with a non-zero advantage"
    if got.shape != want.shape or not np.array_equal(got, want):
        i = int(np.argmax(got != want)) if got.shape == want.shape else 0
        ctx.fail(
            f"{what}[{i}]={bool(got[i]) if got.shape == want.shape else got.shape}, but should be "
            f"{bool(want[i])} (keep iff 0 < k < G)",
            batch,
            cause="the filter drops only all-wrong (k = 0) or only all-right (k = G) groups"
            if what == "keep_mask"
            else None,
        )


_register(
    Property(
        "dapo_keep_mask",
        "silent",
        "DAPO's dynamic sampling keeps a group iff 0 < k < G (sigma > 0): the implementation's keep mask "
        "(or its set of groups with non-zero advantages) equals dapo_keep_mask(R).",
        _check_keep,
        # a silent group of non-dyadic rewards too: np.std([0.1] * 3) is 1.4e-17, not 0, so a
        # `std > 0` filter keeps it
        lambda ctx, p: (
            [*_WITH_SILENT, *_BINARY]
            + (
                [Batch.grouped([[0.1, 0.1, 0.1], [0.3, 0.7, 0.3]])]
                if ctx.adapter.keep_mask is not None
                else []
            )
        ),
        lambda ctx, p: _batches(ctx, binary=True),
    )
)


def _check_singleton(ctx: Context, batch: Batch, p: Any) -> None:
    ref = ctx.reference
    if ref.singleton == "error":
        got = _guarded(ctx.adapter, batch, what=lambda: ctx.adapter.call_repr(batch), refusal_ok=True)
        if got is None:
            return
        out = got.numpy()
        single = np.bincount(_groups_of(batch))[_groups_of(batch)] == 1
        ctx.fail(
            f"groups of one response got {out[single].tolist()}, but should raise (no baseline) "
            f"under {ref.name}",
            batch,
            cause="singleton groups are not rejected; declare a convention "
            "with singleton='zero' or 'unit_std', or raise",
        )
    a = ctx.flat(batch)
    ctx.compare(f"advantages of groups of one ({ref.singleton})", batch, a, ctx.expected(batch))


def _singleton_examples(ctx: Context, p: Any) -> list[Batch]:
    if ctx.adapter.ragged:
        return [Batch(np.array([0.7, 1.0, 0.0, 0.2]), np.array([5, 1, 1, 9]))]
    return [Batch.grouped([[0.7], [0.2], [1.0]])]


_register(
    Property(
        "singleton_groups",
        "silent",
        "A group of one response follows the convention: error (raise), zero (A = 0) or unit_std "
        "(A = R / (1 + eps)); never NaN. Advisory where the convention says error.",
        _check_singleton,
        _singleton_examples,
        required=lambda ctx: ctx.reference.singleton != "error",
    )
)


# ---------------------------------------------------------------------------------
# level 4: numerics
def _check_dtype_accuracy(ctx: Context, batch: Batch, dtype_name: str) -> None:
    dtype = _DTYPES[dtype_name]
    rounded = batch.with_rewards(torch.tensor(batch.rewards).to(dtype).double().numpy())
    out = ctx.call(rounded, dtype=dtype)
    try:
        a = ctx.adapter.flat(out).detach().to("cpu", torch.float64).numpy()
    except TypeError as exc:
        ctx.fail(str(exc), rounded)
    expected = ctx.expected(rounded)
    found = mismatch_message(a, expected, 0.0, ctx.tolerance(rounded, expected, dtype=dtype))
    if found is None:
        return
    cause, confirmed = diagnose_mismatch(ctx, rounded, a)
    if cause is None and dtype != torch.float64:
        try:  # the targeted probe: the same rewards in float64
            wide = ctx.flat(rounded, dtype=torch.float64)
        except PropertyFailure:
            wide = None
        if (
            wide is not None
            and mismatch_message(wide, expected, 0.0, ctx.tolerance(rounded, expected)) is None
        ):
            cause, confirmed = (
                f"correct in float64 but not in {dtype_name}: the statistics lose range or precision "
                f"in {dtype_name} (e.g. squares of 1024 exceed float16's 65504, or E[x^2] - E[x]^2 "
                "cancels); compute them in float32 or float64 and cast back",
                True,
            )
    work = coarser(ctx.precision, dtype_name)
    ctx.fail(
        f"{dtype_name} advantages (working precision {work}, tolerance from its unit roundoff and each "
        f"group's condition number): {found[0]}",
        rounded,
        cause=cause,
        confirmed=confirmed,
    )


def _dtype_supported(ctx: Context, dtype_name: str) -> str | None:
    if dtype_name not in ctx.adapter.dtypes:
        return f"{ctx.adapter.name} does not declare {dtype_name}"
    return None


_register(
    Property(
        "dtype_accuracy",
        "numerics",
        "In each declared dtype, |A - oracle(R)| <= c (2 + log2 G) u kappa_g (1 + |A|) + u_out |A| with u "
        "the unit roundoff of the working precision (the coarser of the input dtype and the precision the "
        "implementation computes in) and kappa_g = max|R| / d the group's condition number.",
        _check_dtype_accuracy,
        lambda ctx, p: _LIVE,
        # half precision: dyadic rewards, exact in the dtype, so that rounding never turns a
        # live group silent; float32/float64: continuous and ill-conditioned groups too
        lambda ctx, p: _batches(
            ctx, silent="never", max_size=16, values="mixed" if p in ("float64", "float32") else "dyadic"
        ),
        applies=_dtype_supported,
        params=lambda adapter: tuple(d for d in _DTYPES if d in adapter.dtypes),
    )
)


def _large_groups(ctx: Context, p: Any) -> list[tuple[Batch, str]]:
    G = 4096
    rows = np.zeros((4, G))
    rows[0, :1] = 1
    rows[1, :7] = 1
    rows[2, : G // 2] = 1
    rows[3, : G - 1] = 1
    real = (np.arange(2 * G) % 37 / 4.0 - 4.0).reshape(2, G)
    dtypes = [d for d in ("float64", "float32") if d in ctx.adapter.dtypes]
    return [(Batch.grouped(r), d) for r in (rows, real) for d in dtypes]


def _check_large(ctx: Context, ex: tuple[Batch, str], p: Any) -> None:
    batch, dtype_name = ex
    _check_dtype_accuracy(ctx, batch, dtype_name)


_register(
    Property(
        "large_group",
        "numerics",
        "G = 4096 (k = 1, 7, G/2, G-1, and real rewards) in float64 and float32 stays within the "
        "dtype's tolerance: A+ = sqrt((G-k)/k) reaches 64.",
        _check_large,
        _large_groups,
    )
)


def _half_range(ctx: Context, p: Any) -> list[tuple[Batch, str]]:
    batch = Batch.grouped(
        np.array(
            [
                [1024.0, 512.0, 0.0, -256.0, 768.0, 1024.0, 8.0, 0.0],
                [-1024.0, 1024.0, -1024.0, 256.0, -1024.0, 0.0, 1024.0, -1024.0],
            ]
        )
    )
    return [(batch, d) for d in ("float16", "bfloat16") if d in ctx.adapter.dtypes]


def _check_half(ctx: Context, ex: tuple[Batch, str], p: Any) -> None:
    batch, dtype_name = ex
    out = ctx.call(batch, dtype=_DTYPES[dtype_name])
    a = ctx.adapter.flat(out).detach().to("cpu", torch.float64).numpy()
    if not np.isfinite(a).all():
        ctx.fail(
            f"{dtype_name} advantages hold {a[~np.isfinite(a)][0]} for rewards of magnitude 1024, "
            "but should be finite",
            batch,
            cause="the variance overflows in half precision (squares of 1024 exceed float16's 65504): "
            "compute the statistics in float32 and cast back",
        )
    if ((a == 0) & (ctx.expected(batch) != 0)).all():
        ctx.fail(
            f"{dtype_name} advantages: actual=0 everywhere for rewards of magnitude 1024, but should be "
            f"{ctx.expected(batch)[:2].round(4).tolist()}, ...",
            batch,
            cause="the variance overflows in half precision (squares of 1024 exceed float16's 65504) "
            "and the inf/NaN std is masked to 0: compute the statistics in float32 and cast back",
        )
    _check_dtype_accuracy(ctx, batch, dtype_name)


_register(
    Property(
        "half_precision_range",
        "numerics",
        "float16 and bfloat16 rewards of magnitude up to 1024 (squares beyond float16's range) give finite "
        "advantages within the dtype's tolerance.",
        _check_half,
        _half_range,
        applies=lambda ctx, p: (
            None if {"float16", "bfloat16"} & set(ctx.adapter.dtypes) else "no half dtype declared"
        ),
    )
)


def _check_half_silent(ctx: Context, ex: tuple[Batch, str], p: Any) -> None:
    batch, dtype_name = ex
    out = ctx.call(batch, dtype=_DTYPES[dtype_name])
    a = ctx.adapter.flat(out).detach().to("cpu", torch.float64).numpy()
    silent = ~as_numpy(dapo_keep_mask(batch.rewards, index=batch.index)).astype(bool)
    bad = silent & ~(np.abs(a) <= 1e-3)
    if bad.any():
        i = int(np.argmax(bad))
        eps = ctx.reference.eps
        ctx.fail(
            f"{dtype_name} advantages: out[{i}]={a[i]} in a silent group, but should be 0",
            batch,
            cause=f"std = 0 and the eps ({eps:g}) is below {dtype_name}'s smallest subnormal, so it "
            "rounds to 0 and the division is 0/0; guard silent groups explicitly or compute in float32"
            if 0 < eps < 6e-8 and dtype_name == "float16"
            else "silent groups are not guarded in this dtype",
            confirmed=0 < eps < 6e-8 and dtype_name == "float16",
        )


_register(
    Property(
        "half_precision_silent",
        "numerics",
        "Silent groups stay 0 in float16 and bfloat16 too (an eps below float16's smallest subnormal, "
        "6e-8, rounds to 0 and gives 0/0): a WARN, as trainers feed float32 rewards.",
        _check_half_silent,
        lambda ctx, p: [
            (Batch.grouped([[1.0] * 4, [0.0] * 4, [1.0, 0.0, 0.0, 0.0]]), d)
            for d in ("float16", "bfloat16")
            if d in ctx.adapter.dtypes
        ],
        required=lambda ctx: False,
        applies=lambda ctx, p: (
            None if {"float16", "bfloat16"} & set(ctx.adapter.dtypes) else "no half dtype declared"
        ),
    )
)


def _check_large_batch(ctx: Context, batch: Batch, p: Any) -> None:
    _check_values(ctx, batch, p)


def _large_batch(ctx: Context, p: Any) -> list[Batch]:
    rng = np.random.default_rng(0)
    return [
        Batch.grouped(rng.integers(0, 2, (512, 8)).astype(np.float64)),
        Batch.grouped(rng.integers(-20, 21, (300, 5)) / 4.0),
    ]


_register(
    Property(
        "large_batch",
        "numerics",
        "A batch of 512 groups matches the oracle group for group (no group dropped or mixed).",
        _check_large_batch,
        _large_batch,
    )
)


def _check_cuda(ctx: Context, batch: Batch, p: Any) -> None:
    out = ctx.call(batch, device="cuda")
    if getattr(out, "device", torch.device("cpu")).type != "cuda":
        ctx.fail(
            f"out.device={getattr(out, 'device', None)}, but should be cuda",
            batch,
            cause="the result moves to the CPU; keep it on rewards.device",
        )
    a = out.detach().to("cpu", torch.float64).numpy().reshape(-1)
    ctx.compare("advantages on CUDA", batch, a, ctx.expected(batch))


def _cuda_applies(ctx: Context, p: Any) -> str | None:
    if "cuda" not in ctx.adapter.devices:
        return f"{ctx.adapter.name} does not declare cuda"
    if not torch.cuda.is_available():
        return "no CUDA device: torch.cuda.is_available() is False"
    return None


_register(
    Property(
        "cuda_device",
        "numerics",
        "On a CUDA tensor the advantages stay on the device and equal the oracle's (float64 tolerance).",
        _check_cuda,
        lambda ctx, p: _LIVE + _large_batch(ctx, p)[:1],
        applies=_cuda_applies,
    )
)


# the call-shape properties (layouts token and keep-mask) register themselves on import
from .token_properties import layout_reason  # noqa: E402
