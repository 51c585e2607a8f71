"""Calling the implementation as the suite does: the Adapter of a target, the keywords its functions
declare, and the advantages of a shard."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import torch

from ..adapter import LOSS_EXTRAS, Adapter, Batch, load_adapter
from ..packing import PACKING_INPUTS
from .keywords import ADVANTAGE_GLOBALS, GLOBALS

# ---------------------------------------------------------------------------
# calling the implementation


#: An advantage function or a loss under test: called with tensors; what it returns is checked.
_Fn: TypeAlias = "Callable[..., object]"


def _declared(
    fn: _Fn, n_positional: int, vocabulary: Sequence[str], what: str, *, strict: bool = True
) -> list[str]:
    """The vocabulary names ``fn`` declares; an unknown required parameter raises TypeError (unless
    not ``strict``: an ``inputs`` hook builds the call, so the positional inputs are unknown)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []
    wanted: list[str] = []
    rest = params[n_positional:] if strict else params
    for p in rest:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in vocabulary:
            wanted.append(p.name)
        elif strict and p.default is p.empty:
            raise TypeError(
                f"{what} has a required parameter {p.name!r} the harness cannot fill; the scale-out "
                f"check passes only these by keyword: {', '.join(vocabulary)} (give {p.name!r} a default)"
            )
    return wanted


#: The positional inputs each layout passes (the advantage function's globals come after them).
_POSITIONAL: dict[str, int] = {
    "contiguous": 2,
    "index": 2,
    "grouped": 1,
    "token": 3,
    "keep-mask": 2,
    "sizes": 2,
}
#: What the harness can pass a loss by keyword: the globals and the objective inputs.
_LOSS_VOCABULARY: tuple[str, ...] = (*GLOBALS, *LOSS_EXTRAS, *PACKING_INPUTS)


def _resolve(
    impl: str, layout: str | None, loss: str | None, output: str | int | None = None, framework: str = "auto"
) -> tuple[Adapter, _Fn | None]:
    """The Adapter of ``impl`` (:func:`~.adapter.load_adapter`, as the suite builds it) and the loss
    (``loss``, else the Adapter's; None: the advantages alone are checked). ``framework``: JAX code
    goes behind the bridge (:func:`~.frameworks.on_framework`), as at levels 0 to 4."""
    from ..frameworks import on_framework

    adapter = on_framework(load_adapter(impl, layout=layout, loss=loss, output=output), framework)
    if adapter.layout == "keep-mask":
        raise ValueError(
            "layout 'keep-mask' is a dynamic-sampling filter: level 5 checks advantages and a loss, "
            "which a keep mask does not compute"
        )
    return adapter, adapter.loss


def _advantage_globals(adapter: Adapter) -> list[str]:
    """The :data:`ADVANTAGE_GLOBALS` the advantage function takes (a required unknown one raises)."""
    return _declared(
        adapter.advantages,
        _POSITIONAL[adapter.layout],
        ADVANTAGE_GLOBALS,
        "the advantage function",
        strict=adapter.inputs is None,
    )


def _call_advantages(
    adapter: Adapter, rewards: torch.Tensor, index: npt.NDArray[np.int64], kw: Mapping[str, object]
) -> torch.Tensor:
    """The advantages of a shard, one per response, called as the suite calls them (the layout, the
    ``inputs``/``output`` hooks; layout token read at each row's last valid token)."""
    if kw:
        adapter = adapter.replace(advantages=functools.partial(adapter.advantages, **kw))
    batch = Batch(rewards.detach().cpu().numpy(), np.asarray(index).copy())
    out = adapter.call_raw(batch, rewards)
    if isinstance(out, np.ndarray):
        out = torch.from_numpy(out)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the advantage function returned {type(out).__name__}, but should return a Tensor")
    return out.detach().reshape(-1).to(torch.float64)
