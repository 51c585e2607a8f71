"""The suite on JAX code: a bridge that lets the torch-speaking suite call JAX functions.

The properties (``spec/``) build their inputs as torch tensors and differentiate losses with
torch's autograd. A JAX implementation plugs in through one hook per framework
(:func:`on_framework`): its advantage function (and keep mask) receives every torch tensor of
the call as a jax array of the same dtype and values, and what it returns comes back as torch
tensors; its loss is a ``torch.autograd.Function`` whose forward runs the JAX loss and takes its
gradient with ``jax.value_and_grad`` (``jax.grad`` with the value), and whose backward hands that
gradient to torch. So levels 0 to 4 run unchanged on JAX code, with JAX computing every value
and every derivative the verdicts read.

* Detection (:func:`detect_framework`): a function that names its framework
  (``__sigma_ref_framework__``, set by this bridge and by torch glue around a bridged loss such as
  :func:`~.scaleout.spmd_loss`) is taken at its word; a ``jax.jit`` function, or a function whose
  code (or, when its code names no array library, whose module) refers to
  ``jax``/``jax.numpy``/``flax`` and not to ``torch``, is JAX; anything else is torch.
  ``--framework jax|torch`` overrides it.
* Precision: calls run under ``jax.enable_x64(True)``, so float64 probes stay float64 (jax
  without x64 would silently compute them in float32); bfloat16, float16 and float32 probes keep
  their dtype. Conversions are exact both ways (bfloat16 travels as float32, which holds it).
* Devices: the JAX side runs on jax's default device, the torch side on the CPU
  (``devices=("cpu",)``: the ``cuda_device`` property is skipped).
* Index arrays (numpy ``[N]`` group ids) are passed as they are: jax functions accept numpy.
* Speed: a loss runs as ``jax.jit(jax.value_and_grad(loss))``, compiled once per input shape (eager
  jax compiles every operation for every new shape, ten times slower on the suite's varied
  batches); a loss that cannot be traced (Python control flow on values) runs eagerly instead.
  Tracing and compiling do not count against the per-call time limit (seconds on a loaded
  machine: a verdict must not depend on the load); running the compiled loss does. Advantage
  functions run eagerly, as written.
* Level 5 (``sigma-ref check --world-size W --micro-batches M``) runs JAX code too: each
  ``torch.distributed`` rank imports the implementation, puts it behind this bridge and calls it
  on its shard, micro-batch by micro-batch, exactly as it calls torch code; the ranks' gradients
  (``jax.value_and_grad``'s, handed to torch) are averaged as DDP averages them. That models a
  loss written per device (``pmap``/``shard_map`` with the global counts passed in). A JAX SPMD
  trainer (``jax.sharding``: tunix, MaxText) computes one loss on the global micro-batch instead;
  :func:`~.scaleout.spmd_loss` gives a loss that form (``spec/adapters/tunix.py``'s ``AT_SCALE``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from .adapter import Adapter

__all__ = ["FRAMEWORKS", "detect_framework", "on_framework", "jax_function", "jax_loss"]

#: The frameworks the suite can test: torch natively, jax through the bridge.
FRAMEWORKS: tuple[str, ...] = ("torch", "jax")
_JAX_PACKAGES = frozenset({"jax", "jaxlib", "flax", "optax", "tunix"})


def _package(value: Any) -> str | None:
    """The top-level package a module, function or class comes from."""
    if isinstance(value, types.ModuleType):
        name = value.__name__
    else:
        name = getattr(value, "__module__", None) or ""
    return name.partition(".")[0] or None


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _libraries(values: Any) -> set[str]:
    found = set()
    for value in values:
        package = _package(value) if isinstance(value, types.ModuleType) or callable(value) else None
        if package in _JAX_PACKAGES:
            found.add("jax")
        elif package == "torch":
            found.add("torch")
    return found


def detect_framework(fn: Any) -> str:
    """``"jax"`` or ``"torch"``: the framework a function is written in (module doc).

    >>> import jax.numpy as jnp
    >>> def adv(rewards, group_size):
    ...     r = rewards.reshape(-1, group_size)
    ...     return (r - jnp.mean(r, axis=1, keepdims=True)).reshape(-1)
    >>> detect_framework(adv), detect_framework(torch.mean)
    ('jax', 'torch')
    """
    declared = getattr(fn, "__sigma_ref_framework__", None)  # the bridge's wrappers, spmd_loss's
    if declared in FRAMEWORKS:
        return str(declared)
    if _package(type(fn)) in ("jax", "jaxlib"):  # jax.jit's wrapper
        return "jax"
    target = inspect.unwrap(getattr(fn, "__func__", fn))
    target = getattr(target, "__wrapped__", target)
    code = getattr(target, "__code__", None)
    scope = getattr(target, "__globals__", None)
    if code is not None and scope is not None:
        closure = [c.cell_contents for c in (getattr(target, "__closure__", None) or ()) if _filled(c)]
        used = _libraries([scope[n] for n in _code_names(code) if n in scope] + closure)
        if used:
            return "jax" if used == {"jax"} else "torch"
    module = sys.modules.get(getattr(target, "__module__", None) or "")
    if module is not None and _libraries(vars(module).values()) == {"jax"}:
        return "jax"
    return "torch"


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _jax() -> Any:
    try:
        import jax
    except ImportError:
        raise ValueError(
            "--framework jax needs jax: pip install 'sigma-ref[jax]' (or pip install 'jax[cpu]')"
        ) from None
    return jax


@contextlib.contextmanager
def _x64() -> Iterator[None]:
    with _jax().enable_x64(True):
        yield


def to_jax(value: torch.Tensor) -> Any:
    """A torch tensor as a jax array of the same dtype and values (exact)."""
    import jax.numpy as jnp

    t = value.detach().to("cpu")
    if t.dtype == torch.bfloat16:
        return jnp.asarray(t.to(torch.float32).numpy(), dtype=jnp.bfloat16)  # float32 holds bfloat16
    return jnp.asarray(t.numpy())


def to_torch(value: Any) -> torch.Tensor:
    """A jax array (or anything numpy reads) as a CPU torch tensor of the same dtype and values."""
    arr = np.asarray(value)
    if arr.dtype.kind == "V" and arr.dtype.name == "bfloat16":
        return torch.from_numpy(arr.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(arr, copy=True))


def _is_jax_array(value: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(value, jax.Array)


def _map(value: Any, leaf: Callable[[Any], Any], kind: Callable[[Any], bool]) -> Any:
    """``value`` with every leaf ``kind`` accepts replaced by ``leaf(it)``, through tuples, lists, dicts."""
    if kind(value):
        return leaf(value)
    if isinstance(value, dict):
        return type(value)((k, _map(v, leaf, kind)) for k, v in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(_map(v, leaf, kind) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(_map(v, leaf, kind) for v in value)
    return value


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def jax_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a JAX function) callable with torch tensors: they go in as jax arrays, the jax arrays
    it returns (also inside tuples, lists and dicts) come back as torch tensors.

    >>> import jax.numpy as jnp
    >>> f = jax_function(lambda r, G: r - jnp.repeat(jnp.mean(r.reshape(-1, G), 1), G))
    >>> f(torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64), 4)
    tensor([ 0.7500, -0.2500, -0.2500, -0.2500], dtype=torch.float64)
    """

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _x64():
            a = _map(args, to_jax, _is_tensor)
            kw = _map(kwargs, to_jax, _is_tensor)
            return _map(fn(*a, **kw), to_torch, _is_jax_array)

    call.__sigma_ref_framework__ = "jax"  # type: ignore[attr-defined]
    return call


@dataclasses.dataclass
class _Call:
    """One call of a JAX loss: the function, the call's leaves and which tensors are differentiated."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    slots: list[tuple[str | int, Any]]  # where each tensor sits: (position or keyword, tensor)
    diff: list[int]  # indices into slots of the tensors torch wants a gradient for
    aux: Any = None
    tuple_out: bool = False
    grads: tuple[Any, ...] = ()

    def run(self, values: list[Any]) -> tuple[Any, Any]:
        args, kwargs = list(self.args), dict(self.kwargs)
        for (where, _), v in zip(self.slots, values, strict=True):
            if isinstance(where, int):
                args[where] = v
            else:
                kwargs[where] = v
        out = self.fn(*args, **kwargs)
        if isinstance(out, tuple | list) and out:
            self.tuple_out = True
            return out[0], out[1:]
        return out, None


def _static_key(value: Any) -> Any:
    """A hashable stand-in for a non-tensor argument (the compiled loss is reused only for equal ones)."""
    if value is None or isinstance(value, bool | int | float | str):
        return (type(value).__name__, value)
    if isinstance(value, np.ndarray):
        return ("ndarray", value.shape, value.dtype.str, value.tobytes())
    return ("object", id(value))  # kept alive by the cache entry, so the id is not reused


#: Compiled losses by call structure: ``jax.jit`` of the loss and its ``value_and_grad``, so a new
#: shape costs one XLA compilation, not one per operation. ``None``: the loss cannot be traced
#: (Python control flow on values); it then runs eagerly.
_COMPILED: dict[Any, tuple[Any, dict[str, bool], tuple[Any, ...]] | None] = {}


def _compiled(call: _Call) -> tuple[Any, dict[str, bool]] | None:
    jax = _jax()
    statics = [a for a in (*call.args, *call.kwargs.values()) if not _is_tensor(a)]
    key = (
        call.fn,
        len(call.args),
        tuple(sorted(call.kwargs)),
        tuple(where for where, _ in call.slots),
        tuple(call.diff),
        tuple(_static_key(v) for v in statics),
    )
    if key in _COMPILED:
        entry = _COMPILED[key]
        return None if entry is None else (entry[0], entry[1])
    info = {"tuple_out": False}

    def whole(values: tuple[Any, ...]) -> Any:
        def partial(*diff_values: Any) -> tuple[Any, Any]:
            full = list(values)
            for k, v in zip(call.diff, diff_values, strict=True):
                full[k] = v
            value, aux = call.run(full)
            info["tuple_out"] = call.tuple_out
            return jax.numpy.reshape(value, ()), aux

        argnums = tuple(range(len(call.diff)))
        return jax.value_and_grad(partial, argnums=argnums, has_aux=True)(*(values[k] for k in call.diff))

    _COMPILED[key] = (_Precompiled(jax.jit(whole)), info, tuple(statics))
    return _COMPILED[key][0], info  # type: ignore[index]


class _Precompiled:
    """A ``jax.jit`` function whose tracing and XLA compilation for each new input signature run
    outside the suite's per-call clock (:func:`~.guard.unclocked`): JAX's work, seconds on a loaded
    machine, which must not turn into a verdict; running the compiled loss is timed. (A loss whose
    Python never finishes tracing is then caught by ``sigma-ref check``'s limit on the whole run,
    not by the per-call one.)"""

    def __init__(self, jitted: Any) -> None:
        self.jitted = jitted
        self.executables: dict[Any, Any] = {}

    def __call__(self, values: tuple[Any, ...]) -> Any:
        from .guard import unclocked

        signature = tuple((v.shape, str(v.dtype)) for v in values)
        executable = self.executables.get(signature)
        if executable is None:
            with unclocked():
                executable = self.jitted.lower(values).compile()
            self.executables[signature] = executable
        return executable(values)


class _JaxLoss(torch.autograd.Function):
    """The JAX loss's value forward; its ``jax.value_and_grad`` gradient backward."""

    @staticmethod
    def forward(ctx: Any, call: _Call, *tensors: torch.Tensor) -> torch.Tensor:
        jax = _jax()
        with _x64():
            values = [to_jax(t) for t in tensors]
            compiled = _compiled(call) if call.diff else None
            done = False
            if compiled is not None:
                fn, info = compiled
                try:
                    (value, aux), grads = fn(tuple(values))
                    call.tuple_out = info["tuple_out"]
                    call.grads = tuple(grads)
                    done = True
                except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
                    _COMPILED[next(k for k, v in _COMPILED.items() if v is not None and v[0] is fn)] = None
            if not done and call.diff:

                def partial(*diff_values: Any) -> tuple[Any, Any]:
                    full = list(values)
                    for k, v in zip(call.diff, diff_values, strict=True):
                        full[k] = v
                    value, aux = call.run(full)
                    return jax.numpy.reshape(value, ()), aux

                argnums = tuple(range(len(call.diff)))
                (value, aux), grads = jax.value_and_grad(partial, argnums=argnums, has_aux=True)(
                    *(values[k] for k in call.diff)
                )
                call.grads = tuple(grads)
            elif not done:
                value, aux = call.run(values)
            call.aux = aux
        ctx.call = call
        ctx.dtypes = [t.dtype for t in tensors]
        return to_torch(value)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> Any:
        call: _Call = ctx.call
        out: list[torch.Tensor | None] = [None] * len(ctx.dtypes)
        for k, g in zip(call.diff, call.grads, strict=True):
            out[k] = to_torch(g).to(ctx.dtypes[k]) * grad_output
        return (None, *out)


def jax_loss(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a JAX loss) callable with torch tensors and differentiable by torch's autograd: the
    gradient with respect to every tensor that requires one is ``jax.value_and_grad``'s. A loss that
    returns ``(loss, aux)`` gives ``(loss, aux)`` back, the aux's jax arrays as torch tensors.

    >>> import jax.numpy as jnp
    >>> loss = jax_loss(lambda logp, old, adv, mask: -jnp.sum(jnp.exp(logp - old) * adv[:, None] * mask))
    >>> logp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    >>> value = loss(logp, logp.detach(), torch.tensor([2.0], dtype=torch.float64), torch.ones(1, 2))
    >>> value.backward(); logp.grad
    tensor([[-2., -2.]], dtype=torch.float64)
    """

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        slots: list[tuple[str | int, Any]] = [(i, a) for i, a in enumerate(args) if _is_tensor(a)]
        slots += [(k, v) for k, v in kwargs.items() if _is_tensor(v)]
        diff = [i for i, (_, t) in enumerate(slots) if t.requires_grad and t.is_floating_point()]
        record = _Call(fn, args, kwargs, slots, diff)
        value = _JaxLoss.apply(record, *(t for _, t in slots))  # type: ignore[no-untyped-call]
        if record.tuple_out:
            return (value, *_map(record.aux, to_torch, _is_jax_array))
        return value

    call.__sigma_ref_framework__ = "jax"  # type: ignore[attr-defined]
    return call


def on_framework(adapter: Adapter, framework: str = "auto") -> Adapter:
    """``adapter`` as the suite calls it: its JAX functions behind the bridge, torch ones unchanged.

    ``framework``: ``"auto"`` (each of the advantage function, keep mask and loss detected on its
    own, :func:`detect_framework`), ``"torch"`` (none bridged) or ``"jax"`` (all bridged).
    """
    if framework not in ("auto", *FRAMEWORKS):
        raise ValueError(
            f"--framework {framework!r} must be 'auto' (detect it), 'torch' or 'jax': the array "
            "library the implementation is written in"
        )
    if framework == "torch":
        return adapter

    def bridged(fn: Callable[..., Any] | None, wrap: Callable[..., Any]) -> Callable[..., Any] | None:
        if fn is None or getattr(fn, "__sigma_ref_framework__", None) in FRAMEWORKS:
            return fn  # bridged already, or torch glue around a bridged function
        if framework == "auto" and detect_framework(fn) != "jax":
            return fn
        _jax()  # a clear error when jax is missing
        wrapped: Callable[..., Any] = wrap(fn)
        return wrapped

    advantages = bridged(adapter.advantages, jax_function)
    keep = adapter.keep_mask
    keep = advantages if keep is adapter.advantages else bridged(keep, jax_function)
    loss = bridged(adapter.loss, jax_loss)
    if advantages is adapter.advantages and keep is adapter.keep_mask and loss is adapter.loss:
        return adapter
    devices = adapter.devices
    if advantages is not adapter.advantages or keep is not adapter.keep_mask:
        devices = tuple(d for d in devices if d == "cpu")
    return adapter.replace(advantages=advantages, keep_mask=keep, loss=loss, devices=devices)
