"""How an implementation under test plugs into the conformance suite.

A plain function is enough; its *layout* says how it is called:

* ``contiguous``: ``fn(rewards: Tensor[N], group_size: int) -> Tensor[N]`` (groups are
  consecutive runs of ``group_size``, as in TRL and OpenRLHF);
* ``index``: ``fn(rewards: Tensor[N], index: numpy.ndarray[N]) -> Tensor[N]`` (groups by
  id, ragged and interleaved, as verl's ``uid``);
* ``grouped``: ``fn(rewards: Tensor[B, G]) -> Tensor[B, G]``.

An :class:`Adapter` wraps such a function together with an optional loss
``loss(logp, old_logp, advantages, mask) -> scalar Tensor`` (per-token tensors
``[N, T]``, advantages ``[N]``), an optional DAPO keep mask (same call as the
advantages, returns booleans), a declared convention and the capabilities the suite may
rely on (dtypes, devices, ragged groups). ``--impl pkg.module:attr`` may name either a
plain function (then ``--layout`` is required) or an :class:`Adapter` instance.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch

from ..conventions import Convention

__all__ = ["Adapter", "Batch", "LAYOUTS", "load_object", "load_adapter", "oracle_adapter"]

Layout = Literal["contiguous", "index", "grouped"]
LAYOUTS: tuple[str, ...] = ("contiguous", "index", "grouped")
ALL_DTYPES: tuple[str, ...] = ("float64", "float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class Batch:
    """A batch of groups as the suite generates it: flat rewards and one group id each.

    ``rewards``: float64 ``[N]``; ``index``: int64 ``[N]`` group ids. ``group_size`` is
    the common size when every group has the same size and groups are contiguous runs in
    increasing id order (the only batches the ``contiguous`` and ``grouped`` layouts can
    take), else ``None``.
    """

    rewards: np.ndarray
    index: np.ndarray

    @staticmethod
    def grouped(rewards: Any) -> Batch:
        """A ``[B, G]`` array as a batch of B contiguous groups of G."""
        r = np.asarray(rewards, dtype=np.float64)
        if r.ndim != 2 or r.size == 0:
            raise ValueError(f"rewards has shape {r.shape}; pass a non-empty [B, G] array")
        index = np.repeat(np.arange(r.shape[0]), r.shape[1])
        return Batch(r.reshape(-1).copy(), index)

    @property
    def n(self) -> int:
        """Number of rewards."""
        return int(self.rewards.shape[0])

    @property
    def group_size(self) -> int | None:
        """The common group size of a contiguous, equal-sized batch, else ``None``."""
        ids, counts = np.unique(self.index, return_counts=True)
        if not (counts == counts[0]).all():
            return None
        G = int(counts[0])
        expected = np.repeat(np.arange(len(ids)), G)
        rank = np.searchsorted(ids, self.index)
        if not np.array_equal(rank, expected):
            return None
        return G

    @property
    def n_groups(self) -> int:
        """Number of groups."""
        return int(np.unique(self.index).shape[0])

    def with_rewards(self, rewards: np.ndarray) -> Batch:
        """The same grouping with other rewards."""
        return Batch(np.asarray(rewards, dtype=np.float64).reshape(-1).copy(), self.index)

    def __repr__(self) -> str:
        G = self.group_size
        r = np.array2string(self.rewards, precision=4, separator=", ", threshold=24)
        if G is not None:
            return f"Batch(rewards={r}, G={G})"
        idx = np.array2string(self.index, separator=", ", threshold=24)
        return f"Batch(rewards={r}, index={idx})"


def _describe(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return f"{module}:{name}"


@dataclasses.dataclass(frozen=True)
class Adapter:
    """An implementation under test: its advantage function, layout and capabilities.

    ``advantages``: the advantage function, called as its ``layout`` says (module doc).
    ``loss``: ``loss(logp, old_logp, advantages, mask) -> scalar`` or ``None`` (then the
    gradient checks are skipped with the reason). ``keep_mask``: a DAPO dynamic-sampling
    filter called like ``advantages`` that returns booleans (keep the response), or
    ``None``. ``convention``: the declared convention (a preset name, a
    :class:`~sigma_ref.Convention`, or ``"rloo"``), or ``None`` to detect it from probes.
    ``dtypes`` / ``devices``: what the implementation supports (the numerics checks skip
    the rest); ``ragged``: whether groups of different sizes may be mixed (``index``
    layout only). ``precision``: the precision its statistics are computed in
    (``float64``, ``float32``, ...), or ``None`` to detect it. ``aggregation`` (and
    ``aggregation_constant``, the ``C`` of seq-mean-token-sum-norm): the loss's declared
    aggregation, a verl mode name or a TRL ``loss_type`` (``sigma_ref.objectives``), or
    ``None`` to detect it. ``clip``: the declared ``(eps_low, eps_high)`` of a PPO loss and
    ``dual_clip`` its ``c``, or ``None`` to read them off the gradient. ``name``: how reports
    name it.

    >>> import torch
    >>> def adv(rewards, group_size):
    ...     r = rewards.view(-1, group_size)
    ...     return ((r - r.mean(1, keepdim=True)) / r.std(1, unbiased=False, keepdim=True)).view(-1)
    >>> a = Adapter(adv, "contiguous")
    >>> a(Batch.grouped([[1.0, 0.0, 0.0, 0.0]])).round(decimals=4).tolist()
    [1.7321, -0.5774, -0.5774, -0.5774]
    """

    advantages: Callable[..., Any]
    layout: str
    loss: Callable[..., Any] | None = None
    keep_mask: Callable[..., Any] | None = None
    convention: Convention | str | None = None
    dtypes: Sequence[str] = ALL_DTYPES
    devices: Sequence[str] = ("cpu", "cuda")
    ragged: bool | None = None
    name: str = ""
    precision: str | None = None
    aggregation: str | None = None
    aggregation_constant: float | None = None
    clip: tuple[float, float] | None = None
    dual_clip: float | None = None

    def __post_init__(self) -> None:
        if not callable(self.advantages):
            raise TypeError(f"Adapter advantages={self.advantages!r} must be callable")
        if self.layout not in LAYOUTS:
            raise ValueError(
                f"Adapter layout={self.layout!r} must be one of {LAYOUTS}: how the advantage "
                "function is called (see sigma_ref.conformance.adapter)"
            )
        for field in ("loss", "keep_mask"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise TypeError(f"Adapter {field}={value!r} must be callable or None")
        bad = [d for d in self.dtypes if d not in ALL_DTYPES]
        if bad:
            raise ValueError(f"Adapter dtypes has {bad}; choose from {ALL_DTYPES}")
        if self.aggregation is not None:
            from ..objectives import resolve_aggregation

            resolve_aggregation(self.aggregation)  # a clear ValueError for an unknown name
        if self.clip is not None and (
            len(self.clip) != 2 or not all(isinstance(e, int | float) and 0 <= e < 1 for e in self.clip)
        ):
            raise ValueError(f"Adapter clip={self.clip!r} must be (eps_low, eps_high), each in [0, 1)")
        if self.precision is not None and self.precision not in ALL_DTYPES:
            raise ValueError(
                f"Adapter precision={self.precision!r} must be one of {ALL_DTYPES} or None (detect it)"
            )
        if self.ragged is None:
            object.__setattr__(self, "ragged", self.layout == "index")
        if self.ragged and self.layout != "index":
            raise ValueError(f"Adapter ragged=True needs layout='index', not {self.layout!r}")
        if not self.name:
            object.__setattr__(self, "name", _describe(self.advantages))
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        object.__setattr__(self, "devices", tuple(self.devices))

    # -- calling -------------------------------------------------------------------
    def accepts(self, batch: Batch) -> bool:
        """Whether this layout can take ``batch`` (contiguous equal groups, or ragged)."""
        return self.layout == "index" or batch.group_size is not None

    def call_raw(self, batch: Batch, rewards: torch.Tensor, fn: Callable[..., Any] | None = None) -> Any:
        """Call ``fn`` (default the advantage function) as the layout says; raw output."""
        fn = self.advantages if fn is None else fn
        if self.layout == "index":
            return fn(rewards, batch.index.copy())
        G = batch.group_size
        if G is None:
            raise ValueError(f"layout {self.layout!r} takes contiguous groups of one size; got {batch!r}")
        if self.layout == "contiguous":
            return fn(rewards, G)
        return fn(rewards.reshape(-1, G))

    def expected_shape(self, batch: Batch) -> tuple[int, ...]:
        """The output shape the layout promises."""
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

    def keep(self, batch: Batch) -> torch.Tensor:
        """The DAPO keep mask of ``batch`` as a flat bool tensor (needs ``keep_mask``)."""
        if self.keep_mask is None:
            raise TypeError(f"{self.name} has no keep_mask")
        rewards = torch.tensor(batch.rewards, dtype=torch.float64)
        return self.flat(self.call_raw(batch, rewards, self.keep_mask)).to("cpu").bool()

    def call_repr(self, batch: Batch) -> str:
        """How the function was called, for messages: ``fn(rewards=[...], G=4)``."""
        r = np.array2string(batch.rewards, precision=4, separator=", ", threshold=24)
        if self.layout == "index":
            idx = np.array2string(batch.index, separator=", ", threshold=24)
            return f"{self.name}(rewards={r}, index={idx})"
        G = batch.group_size
        if self.layout == "contiguous":
            return f"{self.name}(rewards={r}, G={G})"
        return f"{self.name}(rewards={r}.reshape(-1, {G}))"

    def replace(self, **changes: Any) -> Adapter:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


def load_object(target: str, what: str = "--impl") -> Any:
    """Import ``pkg.module:attr`` (``attr`` may be dotted) and return the object.

    A malformed target or a missing module or attribute is a usage error (``ValueError``
    naming the fix). Anything the module itself does while it is imported (raises, calls
    ``sys.exit``, hangs past the time limit) is the implementation's failure: a ``ValueError``
    whose ``__cause__`` is the :class:`~sigma_ref.conformance.guard.ImplementationError`.
    """
    from .guard import ImplementationError, call_guarded

    if not isinstance(target, str) or ":" not in target:
        raise ValueError(
            f"{what}={target!r} must look like 'pkg.module:attr', e.g. 'my_trainer.grpo:compute_advantages'"
        )
    module_name, _, attr = target.partition(":")
    try:
        found = importlib.util.find_spec(module_name)
    except Exception:  # a parent package that cannot be imported: the import below says why
        found = True
    if found is None:
        raise ValueError(
            f"{what}={target!r}: cannot import {module_name!r} (no module named {module_name!r})"
        )
    try:
        obj: Any = call_guarded(importlib.import_module, module_name, what=f"import {module_name}")
    except ImplementationError as exc:
        original = exc.__cause__
        if (
            isinstance(original, ModuleNotFoundError)
            and original.name
            and module_name.startswith(original.name)
        ):
            raise ValueError(f"{what}={target!r}: cannot import {module_name!r} ({original})") from None
        raise ValueError(f"{what} {target!r}: importing {module_name!r} {exc.detail}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{what}={target!r}: {module_name!r} has no attribute {attr!r}") from None
    return obj


def load_adapter(
    target: str | Any,
    *,
    layout: str | None = None,
    loss: str | Callable[..., Any] | None = None,
    convention: Convention | str | None = None,
) -> Adapter:
    """The :class:`Adapter` for ``target``: ``pkg.module:attr``, a function or an Adapter.

    A plain function needs ``layout``; options given here override an Adapter's fields.
    """
    obj = load_object(target) if isinstance(target, str) else target
    if isinstance(obj, Adapter):
        adapter = obj
        if layout is not None and layout != adapter.layout:
            raise ValueError(
                f"--layout {layout} given, but {adapter.name} is an Adapter with layout "
                f"{adapter.layout!r}; drop --layout"
            )
    elif callable(obj):
        if layout is None:
            raise ValueError(
                f"{_describe(obj)} is a plain function: say how to call it with --layout "
                f"(one of {', '.join(LAYOUTS)})"
            )
        name = target if isinstance(target, str) else ""
        adapter = Adapter(obj, layout, name=name)
    else:
        raise TypeError(f"--impl {target!r} is a {type(obj).__name__}; name a function or an Adapter")
    if loss is not None:
        adapter = adapter.replace(loss=load_object(loss, "--loss") if isinstance(loss, str) else loss)
    if convention is not None:
        adapter = adapter.replace(convention=convention)
    return adapter


def oracle_adapter(convention: Convention | str = "paper", layout: str = "index") -> Adapter:
    """The oracle itself as an implementation under test (the suite's default).

    ``convention`` is a preset name, a :class:`~sigma_ref.Convention`, or ``"rloo"``.
    It declares no convention, so the suite detects it like any other code.

    >>> a = oracle_adapter("trl", layout="contiguous")
    >>> a(Batch.grouped([[1.0, 0.0]])).round(decimals=5).tolist()
    [0.70701, -0.70701]
    """
    from ..advantages import grpo_advantage, rloo_advantage
    from .reference import reference_for

    ref = reference_for(convention)

    def compute(rewards: torch.Tensor, index: Any) -> torch.Tensor:
        if ref.convention is None:
            return rloo_advantage(rewards, index=index)
        return grpo_advantage(rewards, convention=ref.convention, index=index)

    if layout == "index":
        fn: Callable[..., Any] = compute
    elif layout == "contiguous":

        def fn(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
            return compute(rewards.reshape(-1, group_size), None).reshape(-1)

    else:

        def fn(rewards: torch.Tensor) -> torch.Tensor:
            return compute(rewards, None)

    return Adapter(fn, layout, name=f"sigma_ref[{ref.name}]", ragged=layout == "index")
