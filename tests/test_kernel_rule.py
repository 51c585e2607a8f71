"""The exact-centering rule as documented (issue 24, item 2): the grid is set by the batch's smallest
non-zero ``|R|``, not by any grid the values happen to lie on. The issue's float32 integers satisfy
"integers of one ``2**q`` with ``2 G max|R| <= 2**53 2**q``" (``q = 0``) but not the code's rule, so
they take the float32 way: float64 centering within the module's bound, then float32 output within
one float32 ulp (not always correctly rounded, which only the exact way promises)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from sigma_ref import dr_grpo_advantage
from sigma_ref._kernel import _EXACT_UNITS, _centering, _units


def test_issue_counterexample_takes_the_float32_way() -> None:
    x = np.array([[6544071, 842256448, -1380129758511104]], dtype=np.float32)
    values = x.astype(np.float64)[0]
    assert all(v.is_integer() for v in values) and 2 * 3 * np.abs(values).max() <= 2.0**53
    units = _units(x, True)
    assert units == np.abs(values).max() * 2  # q = -1 from min|R| = 6544071 in [2**22, 2**23)
    assert _centering(units, 3) == "float32" and units > _EXACT_UNITS / 3
    got = dr_grpo_advantage(x)[0]  # float32 in, float32 out
    exact = [Fraction(float(v)) - sum(Fraction(float(w)) for w in values) / 3 for v in values]
    for g, c in zip(got.tolist(), exact, strict=True):  # within one float32 ulp (not always rounded)
        ulp = Fraction(float(np.spacing(np.float32(abs(float(c))))))
        assert abs(Fraction(g) - c) <= ulp, (g, float(c))


def test_rule_admits_the_batch_grid() -> None:
    """Integers whose smallest non-zero value sets a grid fine enough: the exact way."""
    x = np.array([[1.0, 0.0, 3.0, 2.0]], dtype=np.float32)  # min 1: q = -23, U = 3 * 2**23
    assert _centering(_units(x, True), 4) == "exact"
    assert dr_grpo_advantage(x)[0].tolist() == [-0.5, -1.5, 1.5, 0.5]
