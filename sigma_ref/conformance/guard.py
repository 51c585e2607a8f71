"""Run the code under test so that nothing it does can break the suite.

Every call of the implementation (advantage function, loss, keep mask, detection
probes) goes through :func:`call_guarded`. It runs the call under a wall-clock limit
(``SIGALRM`` via :func:`signal.setitimer`, main thread only; elsewhere the call runs
without a limit) with the implementation's warnings silenced, and turns *everything* the
call can throw, including ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` and
the time limit, into one :class:`ImplementationError` whose message says what happened:

>>> def bad(rewards, G):
...     raise SystemExit(3)
>>> try:
...     call_guarded(bad, [1.0, 0.0], 2, what="adv(rewards=[1., 0.], G=2)")
... except ImplementationError as exc:
...     print(exc.kind, "|", exc)
exit | called sys.exit(3) during adv(rewards=[1., 0.], G=2)

What the guard cannot catch, a process can: ``os._exit``, a segfault or an abort end
the process, so ``sigma-ref check`` runs the suite in a child process and reports the
property that was running when it died.

:func:`bounded_shrink` caps the time hypothesis spends shrinking a failing example
(its own shrink budget is 300 s).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import pickle
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from .._options import seconds as timeout_option

__all__ = [
    "ImplementationError",
    "call_guarded",
    "set_timeout",
    "get_timeout",
    "timeout_option",
    "bounded_shrink",
    "unclocked",
]

T = TypeVar("T")

#: Default per-call limit in seconds (``--sigma-ref-timeout`` / ``sigma-ref check --timeout``).
DEFAULT_TIMEOUT = 10.0
KINDS: tuple[str, ...] = ("raised", "exit", "interrupt", "timeout")

_timeout = DEFAULT_TIMEOUT
_depth = 0  # nesting: an inner guarded call runs under the outer call's limit
_armed = False  # the alarm raises only while a guarded call runs
_fired = False  # the alarm went off during the current call
_user_interrupt = False  # a real Ctrl-C (SIGINT) arrived, not a KeyboardInterrupt raised by the code


class ImplementationError(Exception):
    """The implementation under test failed in a call: it raised, exited, was interrupted or hung.

    ``kind``: ``"raised"`` (an exception; a legitimate way to refuse an input), ``"exit"``
    (``sys.exit``), ``"interrupt"`` (``KeyboardInterrupt``) or ``"timeout"``. ``detail``:
    what happened, in words; ``what``: the call (``adv(rewards=[...], G=4)``).
    The original exception is ``__cause__``.

    >>> print(ImplementationError("timeout", "did not return within 10 s", "adv(rewards=[1.], G=1)"))
    adv(rewards=[1.], G=1) did not return within 10 s
    """

    def __init__(self, kind: str, detail: str, what: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"ImplementationError kind={kind!r} must be one of {KINDS}")
        self.kind, self.detail, self.what = kind, detail, what
        text = f"{what} {detail}" if kind == "timeout" else f"{detail} during {what}"
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kind, self.detail, self.what))

    @property
    def rejected(self) -> bool:
        """Whether the implementation refused the input with an ordinary exception (kind ``raised``)."""
        return self.kind == "raised"


class _Timeout(BaseException):  # BaseException: the implementation's ``except Exception`` cannot eat it
    pass


def set_timeout(seconds: float | None) -> None:
    """Set the per-call limit of :func:`call_guarded` (``None`` or 0: no limit).

    >>> set_timeout(5); get_timeout()
    5.0
    >>> set_timeout(DEFAULT_TIMEOUT)
    """
    global _timeout
    if seconds is None:
        seconds = 0.0
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise ValueError(f"timeout={seconds!r} must be a number of seconds >= 0 (0: no limit)")
    _timeout = float(seconds)


def get_timeout() -> float:
    """The per-call limit in seconds (0: none)."""
    return _timeout


_previous_alarm: Any = signal.SIG_DFL  # the SIGALRM handler before ours (called when no guarded call runs)
_alarm_installed = False
_pending = False  # an ITIMER_REAL alarm is set
_alarm_at = 0.0  # when it goes off (time.monotonic())
_deadline = 0.0  # time.monotonic() by which the running call must return
_limit = 0.0  # its limit, for the re-fire interval
_swallowed = 0  # alarms past the deadline in the running call (more than one: it catches them)
_paused = False  # inside unclocked(): the running call's clock is stopped
#: Called (with the message) when a call swallows ``STUBBORN`` alarms in a row; set by the pytest
#: plugin under ``sigma-ref check``, where it records the verdict and ends the child process.
_last_resort: Callable[[str], None] | None = None
STUBBORN = 3
#: After this many timeouts of one callable, later calls of it fail at once (a hang costs each
#: property the whole limit otherwise).
MAX_HANGS = 2
#: (id of the bound object or function, id of the function) -> (timeouts, the callable, kept alive so
#: that its id is not reused)
_hangs: dict[tuple[int, int], tuple[int, Any]] = {}


def _on_alarm(signum: int, frame: Any) -> None:
    """The alarm: raise in the running call if it is past its deadline, else re-arm for the rest.

    The timer is set lazily (a call re-arms it only when none is pending), so most calls cost
    no system call; a call that catches the exception is interrupted again every second.
    """
    global _fired, _pending, _alarm_at
    _pending = False
    if not _armed:
        if callable(_previous_alarm):
            _previous_alarm(signum, frame)
        return
    now = time.monotonic()
    left = _deadline - now
    _pending = True
    if _paused:  # a compiler at work for the call (unclocked): look again in a second
        _alarm_at = now + 1.0
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        return
    if left > 0:
        _alarm_at = _deadline
        signal.setitimer(signal.ITIMER_REAL, left)
        return
    global _swallowed
    _fired = True
    _swallowed += 1
    if _swallowed > STUBBORN and _last_resort is not None:
        _last_resort(
            f"did not return within {_seconds(_limit)} and caught the {STUBBORN} interruptions sent to it"
        )
    _alarm_at = now + min(_limit, 1.0)
    signal.setitimer(signal.ITIMER_REAL, min(_limit, 1.0))
    raise _Timeout


@contextlib.contextmanager
def unclocked() -> Iterator[None]:
    """Time spent inside does not count against the running guarded call's limit.

    For work a compiler does on the implementation's behalf, not the implementation's own run
    time: JAX tracing and XLA compiling a loss for a new input shape take seconds on a busy machine
    (``sigma_ref.conformance.frameworks``), and a verdict must not depend on the machine's load.
    The deadline moves by the time spent; outside a guarded call this does nothing.

    >>> def compile_then_run():
    ...     with unclocked():
    ...         time.sleep(0.2)  # past the limit, but not counted
    ...     return "ran"
    >>> call_guarded(compile_then_run, timeout=0.1)
    'ran'
    """
    global _paused, _deadline
    if not _armed or _paused:
        yield
        return
    _paused = True
    start = time.monotonic()
    try:
        yield
    finally:
        _deadline += time.monotonic() - start
        _paused = False


def _on_sigint(signum: int, frame: Any) -> None:
    global _user_interrupt
    _user_interrupt = True
    raise KeyboardInterrupt


def _install() -> None:
    """Install the SIGALRM and SIGINT handlers once (``signal.signal`` costs ~12 us a call)."""
    global _previous_alarm, _alarm_installed
    _previous_alarm = signal.signal(signal.SIGALRM, _on_alarm)
    _alarm_installed = True
    atexit.register(_cancel)  # a pending alarm after Python resets the handlers would kill the process
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)  # tells a real Ctrl-C from a raised KeyboardInterrupt


def _cancel() -> None:
    """Cancel the pending alarm (after a timeout, and at exit)."""
    global _pending
    _pending = False
    signal.setitimer(signal.ITIMER_REAL, 0)


def _seconds(limit: float) -> str:
    return f"{limit:g} s"


def _describe(exc: BaseException, limit: float, what: str) -> ImplementationError:
    if isinstance(exc, _Timeout):
        return ImplementationError("timeout", f"did not return within {_seconds(limit)}", what)
    if isinstance(exc, SystemExit):
        code = "" if exc.code is None else repr(exc.code)
        return ImplementationError("exit", f"called sys.exit({code})", what)
    if isinstance(exc, KeyboardInterrupt):
        return ImplementationError("interrupt", "raised KeyboardInterrupt", what)
    text = str(exc)
    return ImplementationError("raised", f"raised {type(exc).__name__}" + (f": {text}" if text else ""), what)


_IGNORE_ALL = [("ignore", None, Warning, None, 0)]
#: CPython's private hook that tells the warnings module its filter list changed; ``_Silenced``
#: (which needs it) is used only where Python has it.
_HAS_FILTERS_MUTATED = hasattr(warnings, "_filters_mutated")
_filters_mutated: Callable[[], None] = getattr(warnings, "_filters_mutated", lambda: None)


class _Silenced:
    """``warnings.catch_warnings()`` + ``simplefilter("ignore")`` at a sixth of the cost (~1 us)."""

    __slots__ = ("saved",)

    def __enter__(self) -> None:
        self.saved = warnings.filters
        warnings.filters = _IGNORE_ALL
        _filters_mutated()

    def __exit__(self, *exc: Any) -> None:
        warnings.filters = self.saved
        _filters_mutated()


class _CatchAll:
    """The documented way, for a Python without the private ``warnings._filters_mutated``."""

    __slots__ = ("cm",)

    def __enter__(self) -> None:
        self.cm = warnings.catch_warnings()
        self.cm.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc: Any) -> None:
        self.cm.__exit__(*exc)


_Silence = _Silenced if _HAS_FILTERS_MUTATED else _CatchAll
_NO_CAP = contextlib.nullcontext()


#: The most characters the implementation may print (``sys.stdout`` and ``sys.stderr`` together)
#: in one call, and in the whole process; the rest is dropped, with one note each time. A
#: print of megabytes per call would otherwise pile up in pytest's captured output.
CALL_OUTPUT_CAP = 1 << 13
TOTAL_OUTPUT_CAP = 1 << 20
_printed = [0, 0]  # characters let through: in the current call, in the process


class _Capped:
    """A stream that passes at most the caps' characters on to ``target`` (``sys.stdout`` / ``stderr``)."""

    __slots__ = ("target",)

    def __init__(self, target: Any) -> None:
        self.target = target

    def write(self, text: str) -> int:
        room = min(CALL_OUTPUT_CAP - _printed[0], TOTAL_OUTPUT_CAP - _printed[1])
        if room > 0:
            part = text[:room]
            _printed[0] += len(part)
            _printed[1] += len(part)
            self.target.write(part)
            if len(part) < len(text):
                self.target.write(
                    f"\n[sigma-ref: the implementation printed more than {CALL_OUTPUT_CAP:,} characters in a "
                    f"call (at most {TOTAL_OUTPUT_CAP:,} in a run are kept); the rest is dropped]\n"
                )
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


class _CapOutput:
    """Route the implementation's ``sys.stdout`` and ``sys.stderr`` through :class:`_Capped`."""

    __slots__ = ("saved",)

    def __enter__(self) -> None:
        self.saved = (sys.stdout, sys.stderr)
        _printed[0] = 0
        if sys.stdout is not None:
            sys.stdout = _Capped(sys.stdout)
        if sys.stderr is not None:
            sys.stderr = _Capped(sys.stderr)

    def __exit__(self, *exc: Any) -> None:
        sys.stdout, sys.stderr = self.saved


def lingering_threads() -> list[str]:
    """Names of the threads besides the main one that Python would wait for at exit (the
    implementation's leftovers: ``check`` and ``detect`` name them in a WARN and exit without
    waiting)."""
    main = threading.main_thread()
    return [t.name for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def _call_name(fn: Callable[..., Any], what: str | Callable[[], str] | None) -> str:
    """How messages name a call: ``what`` (called when it is a function), else ``fn``'s name."""
    if callable(what):
        return what()
    return what or str(getattr(fn, "__qualname__", repr(fn)))


def call_guarded(
    fn: Callable[..., T],
    /,
    *args: Any,
    timeout: float | None = None,
    what: str | Callable[[], str] | None = None,
    **kw: Any,
) -> T:
    """``fn(*args, **kw)`` under a wall-clock limit; any failure becomes :class:`ImplementationError`.

    ``timeout``: seconds (default: :func:`get_timeout`, 10 s; 0: none). The limit needs
    the main thread (``SIGALRM``); in other threads, and inside another guarded call, the
    call runs without its own limit. ``what``: the call in words for the message, a
    string or a function that builds it (called only on failure, so an expensive
    description costs nothing on success). Warnings raised by ``fn`` are silenced. A
    real Ctrl-C still stops the run (it is re-raised, not converted).

    An implementation that swallows the time-limit exception is interrupted again every
    second, and one that returns after its limit counts as hung.

    >>> call_guarded(sum, [1, 2, 3])
    6
    >>> import time
    >>> try:
    ...     call_guarded(time.sleep, 5, timeout=0.05, what="nap(5)")
    ... except ImplementationError as exc:
    ...     print(exc)
    nap(5) did not return within 0.05 s
    """
    global _depth, _armed, _fired, _pending, _deadline, _limit, _alarm_at, _swallowed
    limit = _timeout if timeout is None else float(timeout)
    if _hangs and _hangs.get(_key(fn), (0,))[0] >= MAX_HANGS:
        text = _call_name(fn, what)
        detail = f"was not called: it did not return within {_seconds(limit)} in {MAX_HANGS} earlier calls"
        raise ImplementationError("timeout", detail, text)
    armed = limit > 0 and _depth == 0 and threading.current_thread() is threading.main_thread()
    _depth += 1
    try:
        with _Silence(), _CapOutput() if _depth == 1 else _NO_CAP:
            if not armed:
                return fn(*args, **kw)
            if not _alarm_installed:
                _install()
            _fired = False
            _swallowed = 0
            _limit = limit
            _deadline = time.monotonic() + limit
            _armed = True
            if not _pending or _deadline < _alarm_at:
                _pending = True
                _alarm_at = _deadline
                signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                out = fn(*args, **kw)
            finally:
                _armed = False  # first: an alarm from here on does nothing
            if _fired:  # it caught the alarm and went on
                raise _Timeout
            return out
    except BaseException as exc:
        _armed = False
        if armed and (isinstance(exc, _Timeout) or _fired):
            _cancel()  # no re-fire once the call is over
            _hangs[_key(fn)] = (_hangs.get(_key(fn), (0,))[0] + 1, fn)
        if isinstance(exc, ImplementationError) or (isinstance(exc, KeyboardInterrupt) and _user_interrupt):
            raise  # an inner guarded call's verdict, or a real Ctrl-C
        text = _call_name(fn, what)
        raise _describe(exc, limit, text) from exc
    finally:
        _depth -= 1


def _key(fn: Any) -> tuple[int, int]:
    """Identify a callable across calls (a bound method is a new object each time)."""
    return (id(getattr(fn, "__self__", fn)), id(getattr(fn, "__func__", fn)))


def _hung(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an exception it was raised from is a timeout of the implementation."""
    for _ in range(8):
        if exc is None:
            return False
        if isinstance(exc, ImplementationError) and exc.kind == "timeout":
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _example_key(example: Any) -> Any:
    try:
        return pickle.dumps(example, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return repr(example)


def bounded_shrink(
    check: Callable[..., Any], budget_s: float = 15.0, *, clock: Callable[[], float] = time.monotonic
) -> Callable[..., Any]:
    """Wrap a hypothesis test body so that shrinking ends ``budget_s`` seconds after the first failure.

    An example that failed once fails again with the same exception without calling ``check``,
    so hypothesis' replay of the smallest example is reliable even for a nondeterministic
    implementation. Until the budget is spent other examples run ``check`` as usual (a failure
    that is a timeout of the implementation spends the budget at once: each shrink step would
    cost the whole limit). After it, an example fails only if it failed before
    (the same exception is raised again, so the final replay of the smallest example found so
    far still fails); every example not seen before passes without calling ``check``, so
    hypothesis' shrinker finds nothing smaller and stops at once. Examples are compared by
    their pickle (their ``repr`` if they cannot be pickled). Hypothesis' own control flow
    (``assume``, ...) is passed through. Without this, shrinking a failure of a slow
    implementation can take hypothesis' whole internal budget of 300 s.

    >>> t = [0.0]
    >>> def check(x):
    ...     if x > 2:
    ...         raise AssertionError(x)
    >>> body = bounded_shrink(check, 10.0, clock=lambda: t[0])
    >>> body(5)
    Traceback (most recent call last):
    AssertionError: 5
    >>> t[0] = 11.0  # the budget is spent: 3 is new, so it passes; 5 still fails
    >>> body(3) is None
    True
    """
    from hypothesis.errors import HypothesisException

    failures: dict[Any, Exception] = {}
    first: list[float] = []

    def bounded(example: Any, *args: Any, **kw: Any) -> Any:
        __tracebackhide__ = True
        if first:
            exc = failures.get(_example_key(example))
            if exc is not None:  # failed before: fail the same way (a replay never turns flaky)
                raise exc
            if clock() - first[0] > budget_s:
                return None
        try:
            return check(example, *args, **kw)
        except HypothesisException:
            raise
        except Exception as exc:
            failures[_example_key(example)] = exc
            if not first:
                first.append(-math.inf if _hung(exc) else clock())  # a hang: no shrinking at all
            raise

    return bounded
