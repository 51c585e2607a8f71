"""How an implementation under test plugs into the conformance suite.

A plain function is enough; its *layout* says how it is called:

* ``contiguous``: ``fn(rewards: Tensor[N], group_size: int) -> Tensor[N]`` (groups are
  consecutive runs of ``group_size``, as in TRL and OpenRLHF);
* ``index``: ``fn(rewards: Tensor[N], index: numpy.ndarray[N]) -> Tensor[N]`` (groups by
  id, ragged and interleaved, as verl's ``uid``);
* ``grouped``: ``fn(rewards: Tensor[B, G]) -> Tensor[B, G]``;
* ``token``: ``fn(token_level_rewards: Tensor[N, T], response_mask: Tensor[N, T], index:
  numpy.ndarray[N]) -> Tensor[N, T]`` or a tuple whose first item is (verl's
  ``compute_grpo_outcome_advantage`` returns ``(advantages, returns)``). The suite builds
  the token inputs itself: varied response lengths (1 to T), the scalar reward on the last
  valid token, zeros elsewhere, the mask 1 on the valid tokens (:func:`token_inputs`); the
  advantage properties read each row's value at its last valid token;
* ``keep-mask``: ``fn(rewards: Tensor[N], index: numpy.ndarray[N]) -> bool[N]`` (or one
  bool per group, in first-seen or sorted id order, detected): a DAPO dynamic-sampling
  filter; the advantage properties do not apply to it;
* ``sizes``: ``fn(rewards: Tensor[N], group_sizes: list[int]) -> Tensor[N]``: groups are
  consecutive runs of the given sizes, which may differ (a group of 5 between groups of 8, as
  trainers with variable group sizes batch them; ``torch.split(rewards, group_sizes)``). The
  suite gives it ragged batches; an interleaved one is gathered into runs (groups in first-seen
  order, stably) before the call and the result scattered back, so the function always sees
  contiguous runs.

Real signatures plug in with two hooks: ``inputs(rewards, index, layout_args) -> (args,
kwargs)`` builds the call (e.g. a dict batch with string prompt ids) and ``output`` picks
the advantages out of what comes back (a key, an index or a callable).

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
from typing import Any

import numpy as np
import torch

from .._options import KEEP_METRICS, LAYOUTS, RETURNS
from .._vocabulary import DTYPES
from ..conventions import Convention

__all__ = [
    "Adapter",
    "Batch",
    "LAYOUTS",
    "CallMismatch",
    "check_call",
    "token_inputs",
    "load_object",
    "load_adapter",
    "oracle_adapter",
]

#: Layouts that take ragged batches (groups of different sizes; interleaved ones too, gathered into
#: runs for ``sizes``).
_BY_INDEX: tuple[str, ...] = ("index", "token", "keep-mask", "sizes")
#: The padded response length of the token layout's inputs, and the response lengths the
#: suite gives rows 0, 1, 2, ... (cycled): length 1 and the full length T come first.
TOKEN_T = 6
_TOKEN_LENGTHS = (1, TOKEN_T, 3, 2, 5, 4)
ALL_DTYPES: tuple[str, ...] = DTYPES
#: The keyword inputs a loss may take beyond ``(logp, old_logp, advantages, mask)``: the reference
#: policy's and the rollout engine's log-probs, per token like ``logp``.
LOSS_EXTRAS: tuple[str, ...] = ("ref_logp", "rollout_logp")


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

    def runs(self) -> tuple[np.ndarray, list[int]]:
        """``(order, sizes)``: the permutation that gathers each group into one contiguous run (groups
        in first-seen order, members in their order) and the runs' sizes. ``order`` is the identity
        when every group already is one run.

        >>> Batch(np.array([1.0, 0.0, 1.0, 0.5, 0.0]), np.array([7, 3, 7, 3, 3])).runs()
        (array([0, 2, 1, 3, 4]), [2, 3])
        """
        _, first, inverse = np.unique(self.index, return_index=True, return_inverse=True)
        rank = np.argsort(np.argsort(first, kind="stable"), kind="stable")[inverse.reshape(-1)]
        order = np.argsort(rank, kind="stable")
        sizes = np.bincount(rank).tolist()
        return order, [int(v) for v in sizes]

    def with_rewards(self, rewards: np.ndarray) -> Batch:
        """The same grouping with other rewards."""
        return Batch(np.asarray(rewards, dtype=np.float64).reshape(-1).copy(), self.index)

    def __repr__(self) -> str:
        G = self.group_size
        r = array_text(self.rewards)
        if G is not None:
            return f"Batch(rewards={r}, G={G})"
        idx = array_text(self.index)
        return f"Batch(rewards={r}, index={idx})"


def array_text(values: np.ndarray) -> str:
    """``values`` on one line for messages: 4 significant digits, long arrays elided with ``...``."""
    return np.array2string(values, precision=4, separator=", ", threshold=24, max_line_width=10**6)


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
    ``dual_clip`` its ``c``, or ``None`` to read them off the gradient. ``objective``: a
    :class:`sigma_ref.objectives.Objective` the loss implements (clip, GSPO, CISPO, importance
    sampling, KL), checked by ``loss_objective``; the loss then also receives ``ref_logp`` and
    ``rollout_logp`` when its signature names them. ``inputs`` / ``output``: the call hooks
    (module doc). ``returns``: layout token, what the returns equal (``"advantages"``, verl's
    outcome estimators), or ``None`` (not checked). ``keep_metric``: what a keep-mask filter
    counts k on, ``"accuracy"`` (``R > 0.5``) or ``"reward"``, or ``None`` to detect it;
    ``keep_order``: how a per-group keep mask is ordered, or ``None`` to detect it. ``keep_band``
    (``(lo, hi)``: keep only groups whose mean metric is inside) and ``keep_min_std`` (keep only
    groups whose metric's std exceeds it): a filter's rules beyond ``0 < k < G``
    (:func:`sigma_ref.filters.filter_keep_mask`), or ``None``. ``loss_precision``: the precision the
    loss computes its gradient in (a float32 ratio inside a float64 loss is ``"float32"``), or ``None``
    to detect it (:mod:`.loss_precision`). ``name``: how reports name it.

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
    objective: Any = None
    inputs: Callable[..., Any] | None = None
    output: str | int | Callable[..., Any] | None = None
    returns: str | None = None
    keep_metric: str | None = None
    keep_order: str | None = None
    keep_band: tuple[float, float] | None = None
    keep_min_std: float | None = None
    loss_precision: str | None = None

    def __post_init__(self) -> None:
        if not callable(self.advantages):
            raise TypeError(f"Adapter advantages={self.advantages!r} must be callable")
        if self.layout not in LAYOUTS:
            raise ValueError(
                f"Adapter layout={self.layout!r} must be one of {LAYOUTS}: how the advantage "
                "function is called (see sigma_ref.conformance.adapter)"
            )
        for field in ("loss", "keep_mask", "inputs"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise TypeError(f"Adapter {field}={value!r} must be callable or None")
        bad = [d for d in self.dtypes if d not in ALL_DTYPES]
        if bad:
            raise ValueError(f"Adapter dtypes has {bad}; choose from {ALL_DTYPES}")
        if self.aggregation is not None:
            from ..objectives import resolve_declared_aggregation

            resolve_declared_aggregation(self.aggregation)  # a clear ValueError for an unknown name
        if self.aggregation_constant is not None:
            _check_constant(self.aggregation, self.aggregation_constant)
        if self.clip is not None and (
            len(self.clip) != 2 or not all(isinstance(e, int | float) and 0 <= e < 1 for e in self.clip)
        ):
            raise ValueError(f"Adapter clip={self.clip!r} must be (eps_low, eps_high), each in [0, 1)")
        if self.precision is not None and self.precision not in ALL_DTYPES:
            raise ValueError(
                f"Adapter precision={self.precision!r} must be one of {ALL_DTYPES} or None (detect it)"
            )
        if self.loss_precision is not None and self.loss_precision not in ALL_DTYPES:
            raise ValueError(
                f"Adapter loss_precision={self.loss_precision!r} must be one of {ALL_DTYPES} or None "
                "(detect it)"
            )
        if self.output is not None and not isinstance(self.output, str | int) and not callable(self.output):
            raise TypeError(f"Adapter output={self.output!r} must be a key, an index, a callable or None")
        if self.returns is not None and self.returns not in RETURNS:
            raise ValueError(
                f"Adapter returns={self.returns!r} must be one of {RETURNS} or None (not checked)"
            )
        if self.keep_metric is not None and self.keep_metric not in KEEP_METRICS:
            raise ValueError(
                f"Adapter keep_metric={self.keep_metric!r} must be 'accuracy', 'reward' or None (detect it)"
            )
        from ..filters import check_band, check_min_std

        object.__setattr__(self, "keep_band", check_band(self.keep_band, name="Adapter keep_band"))
        object.__setattr__(
            self, "keep_min_std", check_min_std(self.keep_min_std, name="Adapter keep_min_std")
        )
        if self.keep_order not in (None, "response", "first-seen", "sorted"):
            raise ValueError(
                f"Adapter keep_order={self.keep_order!r} must be 'response', 'first-seen', 'sorted' or None"
            )
        if self.layout == "keep-mask" and self.keep_mask is None:
            object.__setattr__(self, "keep_mask", self.advantages)
        if self.ragged is None:
            object.__setattr__(self, "ragged", self.layout in _BY_INDEX)
        if self.ragged and self.layout not in _BY_INDEX:
            raise ValueError(
                "Adapter ragged=True needs layout 'index', 'token', 'keep-mask' or 'sizes', not "
                f"{self.layout!r}"
            )
        if not self.name:
            object.__setattr__(self, "name", _describe(self.advantages))
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        object.__setattr__(self, "devices", tuple(self.devices))

    # -- calling -------------------------------------------------------------------
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

    def keep(self, batch: Batch) -> torch.Tensor:
        """The DAPO keep mask of ``batch`` as a flat bool tensor, one per response (needs ``keep_mask``).

        A per-group result is spread over the responses in ``keep_order`` (detected when ``None``).
        """
        if self.keep_mask is None:
            raise TypeError(f"{self.name} has no keep_mask")
        rewards = torch.tensor(batch.rewards, dtype=torch.float64)
        keep = self.flat(self._keep_call(batch, rewards)).to("cpu").bool()
        if keep.shape[0] == batch.n and self.keep_order in (None, "response"):
            return keep
        order = self.keep_order or detect_keep_order(self)
        if order == "response" or keep.shape[0] != batch.n_groups:
            return keep
        ids = list(dict.fromkeys(batch.index.tolist())) if order == "first-seen" else None
        if ids is None:
            ids = np.unique(batch.index).tolist()
        position = {gid: j for j, gid in enumerate(ids)}
        return keep[torch.tensor([position[gid] for gid in batch.index.tolist()])]

    def _keep_call(self, batch: Batch, rewards: torch.Tensor) -> Any:
        assert self.keep_mask is not None
        if self.layout == "token":  # a filter beside a token-level estimator takes flat rewards
            return self.keep_mask(rewards, batch.index.copy())
        return self.call_raw(batch, rewards, self.keep_mask)

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

    def replace(self, **changes: Any) -> Adapter:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


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


def _check_constant(aggregation: str | None, constant: Any) -> None:
    """A declared ``aggregation_constant`` must be a positive number and belong to seq-mean-token-sum-norm."""
    from ..objectives import resolve_declared_aggregation

    if not (isinstance(constant, int | float) and 0 < constant < float("inf")):
        raise ValueError(
            f"Adapter aggregation_constant={constant!r} must be a positive number (e.g. TRL's "
            "max_completion_length)"
        )
    mode = None if aggregation is None else resolve_declared_aggregation(aggregation)
    if mode != "seq-mean-token-sum-norm":
        raise ValueError(
            f"Adapter aggregation_constant={constant!r} is the C of seq-mean-token-sum-norm, but aggregation="
            f"{aggregation!r}: declare aggregation='seq-mean-token-sum-norm' (or TRL's 'dr_grpo'), or drop "
            "the constant"
        )


#: A response is correct (accuracy 1) iff its reward exceeds this, for a filter whose k is counted
#: on the accuracy (``keep_metric="accuracy"``). The suite's shaped probes are the accuracy plus a
#: shaping bonus in [0, 0.5), so ``R > 0.5`` and ``R >= 1`` (correctness plus a format bonus) agree
#: on them.
ACCURACY_THRESHOLD = 0.5

#: The keep-metric probe: shaped rewards (accuracy + a bonus in [0, 0.5)) in three contiguous
#: groups of two (every layout takes it): all right but differing, all wrong but differing, mixed.
#: The reward's rule keeps all three groups, the accuracy's only the last.
_METRIC_PROBE = Batch.grouped([[1.1, 1.0], [0.1, 0.0], [1.25, 0.2]])


def detect_keep_metric(adapter: Adapter) -> str:
    """What a keep-mask filter counts k on: ``accuracy`` (``R > ACCURACY_THRESHOLD``) or ``reward``.

    On :data:`_METRIC_PROBE` the two rules differ in every group but one: a result that is the
    accuracy's rule is ``accuracy``; anything else reads as ``reward`` (the default rule, which
    ``keep_mask_rule`` then checks and reports).
    """
    from ..advantages import dapo_keep_mask

    accuracy = (_METRIC_PROBE.rewards > ACCURACY_THRESHOLD).astype(np.float64)
    want = np.asarray(dapo_keep_mask(accuracy, index=_METRIC_PROBE.index)).astype(bool)
    got = adapter.keep(_METRIC_PROBE).numpy().astype(bool)
    return "accuracy" if got.shape == want.shape and bool((got == want).all()) else "reward"


def detect_keep_order(adapter: Adapter) -> str:
    """How a keep-mask filter orders its result: ``response``, ``first-seen`` or ``sorted``.

    The probe has ids 7, 3, 7, 3, 5, 5 (first-seen order 7, 3, 5; sorted 3, 5, 7) and only
    group 7 live, so the three readings of the result differ. A filter of a contiguous layout
    (``rewards.view(-1, G)``) takes no ids: its groups are positional, so first-seen and sorted are
    one order and no probe is made (interleaved ids would not fit its layout).
    """
    if adapter.layout not in _BY_INDEX:
        return "first-seen"
    probe = Batch(np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), np.array([7, 3, 7, 3, 5, 5]))
    out = adapter.flat(adapter._keep_call(probe, torch.tensor(probe.rewards))).to("cpu").bool().tolist()
    if len(out) == probe.n:
        return "response"
    if out == [True, False, False]:
        return "first-seen"
    if out == [False, False, True]:
        return "sorted"
    return "first-seen"  # unreadable: the keep property reports the values it got


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

    >>> check_call(oracle_adapter("paper"))
    >>> def by_dict(batch):
    ...     return {"advantages": batch["rewards"] - batch["rewards"].mean()}
    >>> check_call(Adapter(by_dict, "index"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sigma_ref.conformance.adapter.CallMismatch: the first probe did not fit layout 'index' ...
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


def load_object(target: str, *, what: str = "--impl") -> Any:
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
        missing = importlib.util.find_spec(module_name) is None
    except Exception:  # a parent package that cannot be imported: the import below says why
        missing = False
    if missing:
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
    output: str | int | None = None,
) -> Adapter:
    """The :class:`Adapter` for ``target``: ``pkg.module:attr``, a function or an Adapter.

    A plain function needs ``layout``; options given here override an Adapter's fields.
    ``output`` (``--output KEY|INDEX``): where the advantages are in the result; a string
    of digits is an index.
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
        adapter = adapter.replace(loss=load_object(loss, what="--loss") if isinstance(loss, str) else loss)
    if convention is not None:
        adapter = adapter.replace(convention=convention)
    if output is not None:
        key = int(output) if isinstance(output, str) and output.lstrip("-").isdigit() else output
        adapter = adapter.replace(output=key)
    return adapter


def oracle_adapter(convention: Convention | str, *, layout: str = "index") -> Adapter:
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
            out = rloo_advantage(rewards, index=index)
        else:
            out = grpo_advantage(rewards, convention=ref.convention, index=index)
        assert isinstance(out, torch.Tensor)  # torch in, torch out
        return out

    if layout == "index":
        fn: Callable[..., Any] = compute
    elif layout == "contiguous":

        def fn(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
            return compute(rewards.reshape(-1, group_size), None).reshape(-1)

    elif layout == "token":

        def fn(tok: torch.Tensor, mask: torch.Tensor, index: Any) -> tuple[torch.Tensor, torch.Tensor]:
            # the row sum is the scalar; rejected rows (mask all 0) stay out of the groups
            live = mask.sum(-1) > 0
            out = torch.zeros(tok.shape[0], dtype=tok.dtype, device=tok.device)
            if live.any():
                kept = np.asarray(index)[live.cpu().numpy()]
                out[live] = torch.as_tensor(
                    compute(tok[live].sum(-1), kept), dtype=tok.dtype, device=tok.device
                )
            adv = out.unsqueeze(-1) * mask
            return adv, adv

    elif layout == "keep-mask":
        from ..advantages import dapo_keep_mask

        def fn(rewards: torch.Tensor, index: Any) -> torch.Tensor:
            return torch.as_tensor(dapo_keep_mask(rewards, index=index))

    elif layout == "grouped":

        def fn(rewards: torch.Tensor) -> torch.Tensor:
            return compute(rewards, None)

    elif layout == "sizes":

        def fn(rewards: torch.Tensor, group_sizes: list[int]) -> torch.Tensor:
            ids = np.repeat(np.arange(len(group_sizes)), group_sizes)
            return compute(rewards, ids)

    else:
        raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")
    ragged = layout in _BY_INDEX
    returns = "advantages" if layout == "token" else None
    return Adapter(fn, layout, name=f"sigma_ref[{ref.name}]", ragged=ragged, returns=returns)
