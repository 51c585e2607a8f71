"""How each layout calls the function under test, and the check of the first call.

The layouts (``contiguous``, ``index``, ``grouped``, ``token``, ``keep-mask``, ``sizes``) are
described in :mod:`sigma_ref.conformance.adapter`. Here: the token layout's inputs
(:func:`token_inputs`), the arguments each layout passes and what is read back
(:class:`LayoutCalls`, the calling half of :class:`~.adapter.Adapter`), how values are named in
messages, and :func:`check_call`, which fails fast when the first designed probe does not fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._options import LAYOUTS
from .batch import Batch, array_text

if TYPE_CHECKING:
    from .adapter import Adapter

__all__ = ["LayoutCalls", "CallMismatch", "check_call", "token_inputs", "token_lengths", "TOKEN_T"]

#: Layouts that take ragged batches (groups of different sizes; interleaved ones too, gathered into
#: runs for ``sizes``).
_BY_INDEX: tuple[str, ...] = ("index", "token", "keep-mask", "sizes")
#: The padded response length of the token layout's inputs, and the response lengths the
#: suite gives rows 0, 1, 2, ... (cycled): length 1 and the full length T come first.
TOKEN_T = 6
_TOKEN_LENGTHS = (1, TOKEN_T, 3, 2, 5, 4)


def _describe(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return f"{module}:{name}"


def token_lengths(n: int, T: int = TOKEN_T) -> torch.Tensor:
    """The response lengths the suite gives ``n`` rows: 1, T, 3, 2, 5, 4, 1, T, ... (int64)."""
    cycle = [min(length, T) for length in _TOKEN_LENGTHS]
    return torch.tensor([cycle[i % len(cycle)] for i in range(n)], dtype=torch.int64)


def token_inputs(
    rewards: torch.Tensor, lengths: torch.Tensor | None = None, T: int = TOKEN_T
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(token_level_rewards [N, T], response_mask [N, T])`` for flat ``rewards [N]``.

    Row ``i`` has ``lengths[i]`` valid tokens (default :func:`token_lengths`; 0 gives an
    all-zero mask and no reward); its scalar reward sits on its last valid token, zeros
    elsewhere. Both tensors have the rewards' dtype and device; the token rewards keep the
    rewards' autograd graph.

    >>> tok, mask = token_inputs(torch.tensor([1.0, 2.0]), torch.tensor([1, 3]), T=4)
    >>> tok.tolist(), mask.tolist()
    ([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0]], [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    """
    n = rewards.shape[0]
    lengths = token_lengths(n, T) if lengths is None else lengths.to(torch.int64)
    positions = torch.arange(T, device=rewards.device).unsqueeze(0)
    lengths = lengths.to(rewards.device)
    mask = (positions < lengths.unsqueeze(1)).to(rewards.dtype)
    last = positions == (lengths - 1).unsqueeze(1)  # no token for an empty row
    tok = torch.where(last, rewards.unsqueeze(1), torch.zeros((), dtype=rewards.dtype, device=rewards.device))
    return tok, mask


class CallMismatch(ValueError):  # noqa: N818 (a signature that does not fit, reported as such)
    """The first designed probe could not call the implementation as its layout says."""


def _shape_of(value: Any) -> str:
    """A value's type and shape for messages: ``Tensor[float64, (8,)]``, ``dict{a: ...}``."""
    if isinstance(value, torch.Tensor):
        return f"Tensor[{str(value.dtype).removeprefix('torch.')}, {tuple(value.shape)}]"
    if isinstance(value, np.ndarray):
        return f"ndarray[{value.dtype}, {value.shape}]"
    if isinstance(value, dict):
        items = ", ".join(f"{k!r}: {_shape_of(v)}" for k, v in list(value.items())[:8])
        return "dict{" + items + "}"
    if isinstance(value, list | tuple):
        kinds = sorted({type(v).__name__ for v in value})
        inner = ", ".join(_shape_of(v) for v in value[:4]) if isinstance(value, tuple) else "/".join(kinds)
        return f"{type(value).__name__}[{inner}] (len {len(value)})"
    if isinstance(value, int | float | bool | str):
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__


def _pick(out: Any, output: str | int | Callable[..., Any]) -> Any:
    """``out[key]``, ``out[i]`` or ``output(out)``."""
    if callable(output):
        return output(out)
    return out[output]


class LayoutCalls:
    """How an :class:`~.adapter.Adapter` calls its functions as its ``layout`` says: the arguments
    (:meth:`layout_args`, through the ``inputs`` hook: :meth:`build_call`), the advantages read back
    (:meth:`pick`, :meth:`call_raw`, :meth:`flat`) and the call as messages print it (:meth:`call_repr`)."""

    advantages: Callable[..., Any]
    layout: str
    inputs: Callable[..., Any] | None
    output: str | int | Callable[..., Any] | None
    name: str

    def layout_args(
        self, batch: Batch, rewards: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> tuple[Any, ...]:
        """The positional arguments the layout passes for ``batch`` (before the ``inputs`` hook)."""
        if self.layout in ("index", "keep-mask"):
            return (rewards, batch.index.copy())
        if self.layout == "token":
            return (*token_inputs(rewards, lengths), batch.index.copy())
        if self.layout == "sizes":
            order, sizes = batch.runs()
            if np.array_equal(order, np.arange(batch.n)):
                return (rewards, sizes)  # already runs: the suite's own tensor (mutation stays visible)
            return (rewards[torch.as_tensor(order, device=rewards.device)], sizes)
        G = batch.group_size
        if G is None:
            raise ValueError(f"layout {self.layout!r} takes contiguous groups of one size; got {batch!r}")
        if self.layout == "contiguous":
            return (rewards, G)
        return (rewards.reshape(-1, G),)

    def build_call(
        self, batch: Batch, rewards: torch.Tensor, args: tuple[Any, ...] | None = None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` of the call: the layout's arguments (``args``, default
        :meth:`layout_args`), through ``inputs`` if given."""
        args = self.layout_args(batch, rewards) if args is None else args
        if self.inputs is None:
            return args, {}
        built = self.inputs(rewards, batch.index.copy(), args)
        if not (isinstance(built, tuple) and len(built) == 2 and isinstance(built[1], dict)):
            raise TypeError(f"Adapter inputs returned {_shape_of(built)}, but should return (args, kwargs)")
        return tuple(built[0]), dict(built[1])

    def pick(self, out: Any) -> Any:
        """The advantages in a raw output: ``output`` applied (token layout: a tuple's first item)."""
        if self.output is not None:
            return _pick(out, self.output)
        if self.layout == "token" and isinstance(out, tuple | list) and out:
            return out[0]
        return out

    def second_output(self, out: Any) -> Any:
        """The ``returns`` of a token-layout output: a tuple's second item or a dict's ``"returns"``."""
        if isinstance(out, tuple | list) and len(out) >= 2:
            return out[1]
        if isinstance(out, dict):
            return out.get("returns")
        return None

    def call_token(
        self, batch: Batch, rewards: torch.Tensor, lengths: torch.Tensor | None = None, fn: Any = None
    ) -> tuple[tuple[Any, ...], Any, Any]:
        """Token layout: ``(layout args, raw output, advantages [N, T])`` for ``lengths``."""
        fn = self.advantages if fn is None else fn
        given = self.layout_args(batch, rewards, lengths)
        args, kwargs = self.build_call(batch, rewards, given)
        raw = fn(*args, **kwargs)
        return given, raw, self.pick(raw)

    def call_raw(self, batch: Batch, rewards: torch.Tensor, fn: Callable[..., Any] | None = None) -> Any:
        """Call ``fn`` (default the advantage function) as the layout says; the advantages as returned.

        Layout ``token``: one value per row, read at the row's last valid token (the
        broadcast over the row is a property of its own); a result that is not ``[N, T]``
        raises :class:`CallMismatch`.
        """
        fn = self.advantages if fn is None else fn
        if self.layout == "token":
            (tok, _, _), _, adv = self.call_token(batch, rewards, fn=fn)
            if not isinstance(adv, torch.Tensor) or tuple(adv.shape) != tuple(tok.shape):
                raise CallMismatch(
                    f"token layout: the advantages are {_shape_of(adv)}, but should be a Tensor of shape "
                    f"[N, T] = {tuple(tok.shape)} like token_level_rewards"
                )
            lengths = token_lengths(batch.n).to(adv.device)
            return adv[torch.arange(batch.n, device=adv.device), lengths - 1]
        args, kwargs = self.build_call(batch, rewards)
        out = self.pick(fn(*args, **kwargs))
        if self.layout == "sizes":
            out = _scatter_back(out, batch)
        return out

    def expected_shape(self, batch: Batch) -> tuple[int, ...]:
        """The output shape the layout promises (token: one value per row, read by :meth:`call_raw`)."""
        if self.layout == "grouped":
            return (batch.n_groups, batch.n // batch.n_groups)
        return (batch.n,)

    def flat(self, out: Any) -> torch.Tensor:
        """A raw output as a flat tensor (raises TypeError if it is not array-like)."""
        if isinstance(out, np.ndarray):
            out = torch.from_numpy(out)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"{self.name} returned {type(out).__name__}, but should return a torch.Tensor")
        return out.reshape(-1)

    def __call__(
        self, batch: Batch, *, dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu"
    ) -> torch.Tensor:
        """Advantages of ``batch`` as a flat ``[N]`` tensor (float64, CPU, detached)."""
        rewards = torch.tensor(batch.rewards, dtype=dtype, device=device)
        return self.flat(self.call_raw(batch, rewards)).detach().to("cpu", torch.float64)

    def call_repr(self, batch: Batch) -> str:
        """How the function was called, for messages: ``fn(rewards=[...], G=4)``."""
        r = array_text(batch.rewards)
        hook = f" via inputs={_describe(self.inputs)}" if self.inputs is not None else ""
        if self.output is not None:
            hook += (
                f", output={self.output!r}"
                if not callable(self.output)
                else f", output={_describe(self.output)}"
            )
        if self.layout in ("index", "keep-mask"):
            idx = array_text(batch.index)
            return f"{self.name}(rewards={r}, index={idx}){hook}"
        if self.layout == "token":
            idx = array_text(batch.index)
            lengths = token_lengths(batch.n).tolist()
            return (
                f"{self.name}(token_level_rewards=[N, {TOKEN_T}] with R={r} on the last valid token of "
                f"lengths {lengths}, response_mask=[N, {TOKEN_T}], index={idx}){hook}"
            )
        if self.layout == "sizes":
            order, sizes = batch.runs()
            if np.array_equal(order, np.arange(batch.n)):
                return f"{self.name}(rewards={r}, group_sizes={sizes}){hook}"
            gathered = array_text(batch.rewards[order])
            return f"{self.name}(rewards={gathered}, group_sizes={sizes}){hook} (gathered from {batch!r})"
        G = batch.group_size
        if self.layout == "contiguous":
            return f"{self.name}(rewards={r}, G={G}){hook}"
        return f"{self.name}(rewards={r}.reshape(-1, {G})){hook}"


def _scatter_back(out: Any, batch: Batch) -> Any:
    """A ``sizes``-layout output for the gathered batch, put back in the batch's order (one value per
    response; anything else is returned as is, for the properties to report)."""
    order, _ = batch.runs()
    if np.array_equal(order, np.arange(batch.n)):
        return out
    if isinstance(out, np.ndarray):
        out = torch.from_numpy(out)
    if not isinstance(out, torch.Tensor) or out.shape[:1] != (batch.n,):
        return out
    back = torch.empty_like(out)
    back[torch.as_tensor(order, device=out.device)] = out
    return back


def _call_unwrapped(fn: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` under the guard (time limit; exits and interrupts become
    :class:`~.guard.ImplementationError`); an ordinary exception is re-raised as itself."""
    from .guard import ImplementationError, call_guarded

    try:
        return call_guarded(fn, *args, what=what, **kwargs)
    except ImplementationError as exc:
        if exc.rejected and isinstance(exc.__cause__, Exception):
            raise exc.__cause__ from None
        raise


#: Errors that mean "called the wrong way" on the first designed probe.
_SIGNATURE_ERRORS = (TypeError, IndexError, KeyError, AttributeError, CallMismatch)


def check_call(adapter: Adapter) -> None:
    """Fail fast: call ``adapter`` on the first designed probe and check what comes back.

    The probe is ``[[1, 0, 0, 0], [0, 3, 1, 0]]`` (two groups of 4; convention detection's
    structure probe and ``output_shape``'s first example). A signature or shape error
    (``TypeError``, ``IndexError``, ``KeyError``, ``AttributeError``, a torch shape error,
    or an output that is not the layout's shape) raises :class:`CallMismatch` saying which
    layout was assumed, what was passed and what came back; other errors are left to the
    properties.

    >>> from sigma_ref.conformance.adapter import Adapter, oracle_adapter
    >>> check_call(oracle_adapter("paper"))
    >>> def by_dict(batch):
    ...     return {"advantages": batch["rewards"] - batch["rewards"].mean()}
    >>> check_call(Adapter(by_dict, "index"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sigma_ref.conformance.layouts.CallMismatch: the first probe did not fit layout 'index' ...
    """
    probe = Batch.grouped([[1.0, 0.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0]])
    rewards = torch.tensor(probe.rewards, dtype=torch.float64)
    fn = adapter.keep_mask if adapter.layout == "keep-mask" else adapter.advantages
    assert fn is not None
    passed = "?"
    raw: Any = None
    try:
        given = adapter.layout_args(probe, rewards)
        args, kwargs = adapter.build_call(probe, rewards, given)
        passed = ", ".join([_shape_of(a) for a in args] + [f"{k}={_shape_of(v)}" for k, v in kwargs.items()])
        raw = _call_unwrapped(fn, *args, what=f"{adapter.name} on the first probe", **kwargs)
        out = adapter.pick(raw)
        if adapter.layout == "token":
            want: tuple[int, ...] = tuple(given[0].shape)
        elif adapter.layout == "keep-mask":
            want = (probe.n,)
        else:
            want = adapter.expected_shape(probe)
        ok = isinstance(out, torch.Tensor | np.ndarray) and (
            tuple(out.shape) == want
            or (adapter.layout == "keep-mask" and tuple(out.shape) == (probe.n_groups,))
        )
        if ok:
            return
        problem = f"the advantages are {_shape_of(out)}, but should be an array of shape {want}"
    except Exception as exc:
        signature = isinstance(exc, _SIGNATURE_ERRORS) or (
            isinstance(exc, RuntimeError) and any(w in str(exc) for w in ("shape", "size", "dimension"))
        )
        if not signature:
            return  # the implementation's own error: the properties report it
        problem = f"raised {type(exc).__name__}: {exc}"
    came_back = "nothing (it raised)" if raw is None else _shape_of(raw)
    hooks = ", ".join(f"{k}={getattr(adapter, k)!r}" for k in ("inputs", "output") if getattr(adapter, k))
    raise CallMismatch(
        f"the first probe did not fit layout {adapter.layout!r} ({_LAYOUT_SIGNATURES[adapter.layout]}"
        f"{'; hooks ' + hooks if hooks else ''}): called {adapter.name}({passed}); {problem}; it returned "
        f"{came_back}. Say how to call it: --layout {'|'.join(LAYOUTS)}, or an Adapter with inputs= "
        "(build the call) and output= (--output KEY|INDEX: where the advantages are in the result)"
    )


_LAYOUT_SIGNATURES = {
    "contiguous": "fn(rewards [N], group_size) -> [N]",
    "index": "fn(rewards [N], index [N]) -> [N]",
    "grouped": "fn(rewards [B, G]) -> [B, G]",
    "token": "fn(token_level_rewards [N, T], response_mask [N, T], index [N]) -> [N, T] "
    "or (advantages, returns)",
    "keep-mask": "fn(rewards [N], index [N]) -> bool [N] or one per group",
}
