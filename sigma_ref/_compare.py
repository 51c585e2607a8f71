"""Comparison of advantages with a tolerance, and the message that says how they differ.

Private: :mod:`sigma_ref.testing` (the public assertions) and :mod:`sigma_ref.conformance`
(the suite) both use it, so neither imports the other for it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mismatch_message"]


def mismatch_message(
    actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float | np.ndarray
) -> tuple[str, np.ndarray] | None:
    """``None`` if close, else a message naming counts and the worst index, and the mask.

    ``atol`` may be one number or one tolerance per element (the conformance suite's
    working-precision bound); the message then states the tolerance at the worst index.
    """
    with np.errstate(invalid="ignore"):
        ok = np.abs(actual - expected) <= atol + rtol * np.abs(expected)
    ok &= np.isfinite(actual) | (actual == expected)
    if ok.all():
        return None
    bad = ~ok
    diff = np.where(np.isfinite(actual), np.abs(actual - expected), np.inf)
    worst = int(np.argmax(np.where(bad, diff, -1.0)))
    n_bad = int(bad.sum())
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = diff[worst] / abs(expected[worst]) if expected[worst] != 0 else np.inf
    if np.ndim(atol) > 0:
        bound = f"tolerance {np.asarray(atol)[worst] + rtol * abs(expected[worst]):.2g} there"
    else:
        bound = f"rtol={rtol:g}, atol={atol:g}"
    msg = (
        f"{n_bad} / {actual.size} advantages mismatched ({100 * n_bad / actual.size:.1f}%); "
        f"greatest difference {diff[worst]:.3g} (relative {rel:.3g}) at index {worst}: "
        f"actual={actual[worst]:.8g}, but should be {expected[worst]:.8g} ({bound})"
    )
    return msg, bad
