"""Private: torch without importing it (``import sigma_ref`` and numpy callers never load torch).

The oracle computes in float64 in the caller's own array library; :data:`Array` names a value
that is a ``numpy.ndarray`` or a ``torch.Tensor``.
"""

from __future__ import annotations

import sys
from typing import Any

Array = Any  # numpy.ndarray | torch.Tensor


def torch_module() -> Any:
    """The torch module, imported on first use (``import sigma_ref`` does not load it)."""
    import torch

    return torch


def is_tensor(value: Any) -> bool:
    """``isinstance(value, torch.Tensor)`` without importing torch (no torch, no tensor)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)
