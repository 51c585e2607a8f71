"""Assertions for GRPO-family advantage code, in the style of ``torch.testing``.

:func:`assert_advantages_close` compares advantages computed by any code with the
oracle's (``sigma_ref.grpo_advantage`` under a convention, or ``rloo_advantage``) and,
when they differ, says how many elements differ, where the worst one is, and the likely
cause in words.

Default tolerances, by the dtype of ``actual`` (``|actual - expected| <= atol + rtol *
|expected|``; ``u`` is the unit roundoff of the dtype):

========= ========= ========= ==============================================================
dtype     rtol      atol      why
========= ========= ========= ==============================================================
float64   1e-7      1e-7      far above float64 round-off of a mean and a std over
                              G <= 10^5 terms (~G u = 1e-11), far below any convention
                              difference on rewards with std >= 0.01 (ddof: >= 1/(2G))
float32   3e-5      3e-5      ~250 u (u = 6e-8): two reductions over G <= 4096 with
                              float32 accumulation, plus the final division
float16   2e-3      2e-3      4 u (u = 4.9e-4): the output rounding plus a few roundings
                              of mean and std if computed in half precision
bfloat16  1.6e-2    1.6e-2    4 u (u = 3.9e-3), same reasoning
========= ========= ========= ==============================================================

The expected values are computed in float64 from the rewards *as given* (already in the
low-precision dtype), so quantisation of the inputs is not charged to the implementation.

See Also: ``torch.testing.assert_close``, ``numpy.testing.assert_allclose``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._compare import find_mismatch
from .conformance.diagnose import likely_cause
from .conformance.reference import Reference, as_numpy, reference_for
from .conventions import Convention

__all__ = ["assert_advantages_close", "default_tolerance", "TOLERANCES"]

#: ``dtype -> (rtol, atol)``, see the module docstring for the reasoning.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (3e-5, 3e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def default_tolerance(dtype: Any) -> tuple[float, float]:
    """``(rtol, atol)`` for a torch or numpy dtype (float64's for anything else).

    >>> default_tolerance(torch.bfloat16)
    (0.016, 0.016)
    """
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        dtype = {"float32": torch.float32, "float16": torch.float16}.get(np.dtype(dtype).name, torch.float64)
    return TOLERANCES.get(dtype, TOLERANCES[torch.float64])


def _flat64(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy().reshape(-1)
    try:
        return np.asarray(x, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise TypeError(f"{name}={x!r} must be a torch tensor or a numpy array of numbers") from None


def assert_advantages_close(
    actual: Any,
    rewards: Any,
    *,
    convention: Convention | str | Reference,
    rtol: float | None = None,
    atol: float | None = None,
    index: Any = None,
    context: str | None = None,
) -> None:
    """Assert ``actual`` equals the oracle's advantages of ``rewards`` under ``convention``.

    ``rewards`` is ``[B, G]`` (one group per row) or flat ``[N]`` with ``index`` (one group
    id per reward). ``convention`` is a preset name, a :class:`~sigma_ref.Convention`, or
    ``"rloo"``. ``rtol`` and ``atol`` must be given together or not at all; by default
    they come from the dtype of ``actual`` (module table). ``context`` (e.g. the call that
    produced ``actual``) is appended to the message in brackets.

    >>> import torch
    >>> r = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    >>> assert_advantages_close(torch.tensor([[1.7320508, -0.5773503, -0.5773503, -0.5773503]]), r,
    ...                         convention="paper")
    >>> assert_advantages_close(r - r.mean(), r, convention="paper")
    Traceback (most recent call last):
    ...
    AssertionError: 4 / 4 advantages mismatched (100.0%); greatest difference 0.982 (relative 0.567)
    at index 0: actual=0.75, but should be 1.7320508 (rtol=3e-05, atol=3e-05). Possible cause (from
    this input alone): advantages are R - mean, not divided by the std: declare scale='none' (Dr.
    GRPO) or divide by the group std
    """
    __tracebackhide__ = True
    if (rtol is None) != (atol is None):
        raise ValueError(
            f"rtol={rtol!r} and atol={atol!r}: give both or neither (neither uses the dtype's defaults)"
        )
    ref = reference_for(convention)
    r = _flat64(rewards, "rewards")
    if index is None:
        shape = tuple(np.shape(rewards)) if not isinstance(rewards, torch.Tensor) else tuple(rewards.shape)
        if len(shape) == 0:
            raise ValueError("rewards is a scalar; pass [B, G] rewards or flat rewards with index=")
        G = shape[-1]
        idx = np.repeat(np.arange(r.size // G), G)
    else:
        idx = np.asarray(index.detach().cpu().numpy() if isinstance(index, torch.Tensor) else index).reshape(
            -1
        )
    a = _flat64(actual, "actual")
    ctx = f" [{context}]" if context else ""
    actual_shape = tuple(actual.shape) if hasattr(actual, "shape") else np.shape(actual)
    rewards_shape = tuple(rewards.shape) if hasattr(rewards, "shape") else np.shape(rewards)
    if tuple(actual_shape) != tuple(rewards_shape):
        raise AssertionError(f"actual.shape={tuple(actual_shape)}, but should be {tuple(rewards_shape)}{ctx}")
    expected = as_numpy(ref.advantages(r, idx))
    if rtol is None:
        rtol, atol = default_tolerance(actual.dtype if hasattr(actual, "dtype") else np.float64)
    assert atol is not None
    found = find_mismatch(a, expected, rtol=rtol, atol=atol, noun="advantages")
    if found is None:
        return
    msg = found.render() + ctx
    cause = likely_cause(a, r, idx, ref)
    if cause:
        msg += f". Possible cause (from this input alone): {cause}"
    raise AssertionError(msg)
