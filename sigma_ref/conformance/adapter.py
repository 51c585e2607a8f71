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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .._options import KEEP_METRICS, LAYOUTS, RETURNS
from .._vocabulary import DTYPES
from ..conventions import Convention
from .batch import Batch as Batch
from .batch import array_text as array_text
from .keep import ACCURACY_THRESHOLD as ACCURACY_THRESHOLD
from .keep import detect_keep_metric as detect_keep_metric
from .keep import detect_keep_order
from .layouts import _BY_INDEX, LayoutCalls, _describe
from .layouts import _SIGNATURE_ERRORS as _SIGNATURE_ERRORS
from .layouts import TOKEN_T as TOKEN_T
from .layouts import CallMismatch as CallMismatch
from .layouts import _call_unwrapped as _call_unwrapped
from .layouts import _shape_of as _shape_of
from .layouts import check_call as check_call
from .layouts import token_inputs as token_inputs
from .layouts import token_lengths as token_lengths
from .loading import load_adapter as load_adapter
from .loading import load_object as load_object
from .loading import oracle_adapter as oracle_adapter

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

ALL_DTYPES: tuple[str, ...] = DTYPES
#: The keyword inputs a loss may take beyond ``(logp, old_logp, advantages, mask)``: the reference
#: policy's and the rollout engine's log-probs, per token like ``logp``.
LOSS_EXTRAS: tuple[str, ...] = ("ref_logp", "rollout_logp")
#: ``(field, choices, what None means)`` of the fields that name one of a few choices.
_CHOICES = (
    ("precision", ALL_DTYPES, "detect it"),
    ("loss_precision", ALL_DTYPES, "detect it"),
    ("returns", RETURNS, "not checked"),
)


@dataclasses.dataclass(frozen=True)
class Adapter(LayoutCalls):
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
        for field, choices, when_none in _CHOICES:
            value = getattr(self, field)
            if value is not None and value not in choices:
                raise ValueError(f"Adapter {field}={value!r} must be one of {choices} or None ({when_none})")
        if self.output is not None and not isinstance(self.output, str | int) and not callable(self.output):
            raise TypeError(f"Adapter output={self.output!r} must be a key, an index, a callable or None")
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

    def replace(self, **changes: Any) -> Adapter:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


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
