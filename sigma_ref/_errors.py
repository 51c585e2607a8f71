"""Private: how a value is shown in an error message (short, the same for numpy and torch)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._tensors import is_tensor, torch_module

_MAX_SHOWN = 8


def short(value: Any) -> str:
    """A short repr of a value for error messages."""
    if is_tensor(value):
        if value.is_meta or value.layout != torch_module().strided:
            return f"tensor(shape={tuple(value.shape)}, device={value.device}, layout={value.layout})"
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)
        body = ", ".join(f"{v:g}" if isinstance(v, float) else repr(v) for v in flat[:_MAX_SHOWN].tolist())
        more = ", ..." if flat.size > _MAX_SHOWN else ""
        return f"array(shape={tuple(value.shape)}, [{body}{more}])"
    return repr(value)
