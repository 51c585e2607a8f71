"""``fidelity`` at subnormal and tiny ``p`` (issue 24, item 5): it was 13-29% off at ``p = 5e-324``
(``E[g]`` is subnormal there and had lost its digits); it is now within ``1e-13`` relative of the
50-digit sum at every ``p`` down to ``5e-324``, on both sides of the switch to the one-term form."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from sigma_ref import fidelity
from sigma_ref.difficulty import _TINY_P
from tests.helpers import assert_close, windowed_expected_sigma

P = [5e-324, 1e-322, 1e-320, 1e-310, 1e-300, _TINY_P * 1.5, _TINY_P / 1.5, 1e-100]


@pytest.mark.parametrize("G", [2, 3, 8, 17, 1000, 10**9])
def test_fidelity_at_tiny_p_mpmath(G: int) -> None:
    exact = []
    for p in P:
        with mpmath.workdps(50):
            mp_p = mpmath.mpf(p)
            exact.append(
                float(windowed_expected_sigma(p, G, dps=50, cutoff=1e-45) / mpmath.sqrt(mp_p * (1 - mp_p)))
            )
    assert_close(fidelity(np.array(P), G), np.array(exact), rtol=1e-13, what=f"fidelity at tiny p, G={G}")
