"""Private: argument checks that raise a ValueError or TypeError naming the argument, the bad value
and the fix (tensors without values, extended precision, non-finite or non-binary rewards,
probabilities, group sizes, epsilon)."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from ._tensors import Array, is_tensor, torch_module

if TYPE_CHECKING:
    from ._layouts import Layout


def check_dense_tensor(value: Any, name: str) -> None:
    """Refuse tensors without values (meta) or in a sparse layout, naming the fix."""
    torch = torch_module()
    if value.is_meta:
        raise ValueError(
            f"{name} is a tensor on the meta device (shape {tuple(value.shape)}, no values); "
            "pass a tensor that holds data, e.g. on 'cpu' or 'cuda'"
        )
    if value.layout != torch.strided:
        raise TypeError(
            f"{name} is a tensor with layout {value.layout}; pass a dense (strided) tensor, "
            f"e.g. {name}.to_dense()"
        )
    if value.is_complex():
        raise TypeError(f"{name} has dtype {value.dtype}; pass real numbers (float, int or bool)")


def check_not_extended(arr: np.ndarray, name: str) -> None:
    """Refuse numpy's extended precision (``longdouble``): the oracle computes in float64, and
    rounding every value of a wider input silently would be a wrong result in its dtype."""
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        raise TypeError(
            f"{name} has dtype {arr.dtype} (extended precision); sigma_ref computes in float64: pass "
            f"{name}.astype(numpy.float64), which rounds each value to the nearest float64"
        )


def check_finite(values: Array, groups: Layout, name: str) -> None:
    """Raise naming the first group that holds a NaN or an infinity."""
    finite = values.isfinite() if is_tensor(values) else np.isfinite(values)
    if not bool(finite.all()):
        bad = ~finite.reshape(-1)
        pos = int(bad.nonzero()[0][0]) if not is_tensor(bad) else int(bad.nonzero()[0, 0])
        value = float(values.reshape(-1)[pos])
        where = groups.describe(groups.group_of(pos))
        raise ValueError(
            f"{name} contains {value} in {where} (flat position {groups.caller_position(pos)}); "
            "every reward must be finite: fix or drop that group before computing advantages"
        )


def check_binary(x: Array, groups: Layout, name: str, hint: str) -> None:
    """Raise unless every value is 0 or 1."""
    bad = ((x != 0) & (x != 1)).reshape(-1)
    if bool(bad.any()):
        pos = int(bad.nonzero()[0][0]) if not is_tensor(bad) else int(bad.nonzero()[0, 0])
        group = groups.group_of(pos)
        raise ValueError(
            f"{name} must be binary (0 or 1) but holds {float(x.reshape(-1)[pos])!r} in "
            f"{groups.describe(group)}; {hint}"
        )


def check_probability(p: np.ndarray, name: str = "p", *, open_interval: bool = False) -> None:
    """Raise unless every entry is in [0, 1] (or (0, 1))."""
    if p.size == 0:
        raise ValueError(f"{name} is empty; pass at least one probability")
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    if bad.any():
        raise ValueError(
            f"{name}={float(p[bad].reshape(-1)[0])!r} is outside [0, 1]; {name} is a success "
            "probability (a pass rate), e.g. 0.25"
        )
    if open_interval:
        edge = (p == 0) | (p == 1)
        if edge.any():
            value = float(p[edge].reshape(-1)[0])
            raise ValueError(
                f"{name}={value!r} has no finite group size: a prompt that always or never "
                "succeeds gives a zero update for every G; pass 0 < p < 1"
            )


def check_group_size(G: np.ndarray, name: str = "G", *, minimum: int = 2) -> None:
    """Raise unless every entry is an integer >= ``minimum``."""
    if G.size == 0:
        raise ValueError(f"{name} is empty")
    bad_int = ~np.isfinite(G) | (G != np.round(G))
    if bad_int.any():
        raise TypeError(f"{name}={float(G[bad_int].reshape(-1)[0])!r} must be an integer group size")
    small = G < minimum
    if small.any():
        raise ValueError(
            f"{name}={int(G[small].reshape(-1)[0])} is too small: a group needs at least "
            f"{minimum} responses for a non-zero reward std; use {name} >= {minimum}"
        )


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """``epsilon`` as a float in (0, 1), or raise."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"{name}={epsilon!r} must be a float in (0, 1), e.g. 0.05")
    value = float(epsilon)
    if not (0 < value < 1):
        raise ValueError(
            f"{name}={value!r} is outside (0, 1); it is the tolerated loss of gradient "
            "fidelity, e.g. 0.05 for 95%"
        )
    return value
