"""Loading the implementation under test: ``pkg.module:attr`` targets, and the oracle as an adapter."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._options import LAYOUTS
from ..conventions import Convention
from .layouts import _BY_INDEX, _describe

if TYPE_CHECKING:
    from .adapter import Adapter

__all__ = ["load_object", "load_adapter", "oracle_adapter"]


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
    from .adapter import Adapter

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

    >>> from sigma_ref.conformance.batch import Batch
    >>> a = oracle_adapter("trl", layout="contiguous")
    >>> a(Batch.grouped([[1.0, 0.0]])).round(decimals=5).tolist()
    [0.70701, -0.70701]
    """
    from .adapter import Adapter
    from .reference import reference_for

    ref = reference_for(convention)

    def compute(rewards: torch.Tensor, index: Any) -> torch.Tensor:
        out = ref.advantages(rewards, index)
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
