"""The oracle at the edges of float64 (issue 8, item 8), checked against 60-digit arithmetic.

Every case is a finite input on which the former oracle was silently wrong (zeros, NaN,
``inf``, a non-zero-sum centering) or refused with a raw error. The reference is mpmath
at 60 digits on the exact float64 inputs; the oracle must agree to a few units in the
last place relative to the group's largest advantage, or raise a named ValueError.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sigma_ref import (
    PRESETS,
    Convention,
    dapo_keep_mask,
    dr_grpo_advantage,
    group_sigma,
    group_statistics,
    grpo_advantage,
    rloo_advantage,
)


def exact_advantages(rewards, *, ddof: int = 0, eps: float = 0.0, scale: str = "group", rloo: bool = False):
    """Per-row advantages at 60 digits: GRPO ``(R - mu) / (std_ddof + eps)``, Dr. GRPO
    (``scale="none"``) or RLOO, on the exact values of the float64 rewards."""
    out = []
    with mpmath.workdps(60):
        for row in np.atleast_2d(rewards):
            r = [mpmath.mpf(float(v)) for v in row]
            n = len(r)
            mu = mpmath.fsum(r) / n
            c = [v - mu for v in r]
            if rloo:
                out.append([float(v * n / (n - 1)) for v in c])
                continue
            if scale == "none":
                out.append([float(v) for v in c])
                continue
            d = mpmath.sqrt(mpmath.fsum(v * v for v in c) / (n - ddof)) + eps
            out.append([float(v / d) if d > 0 else 0.0 for v in c])
    return np.array(out)


def assert_ulps(actual, expected, ulps: float = 8) -> None:
    """``|actual - expected| <= ulps * 2**-52 * max|expected|`` per row (the stated bound)."""
    actual = np.atleast_2d(np.asarray(actual, dtype=np.float64))
    expected = np.atleast_2d(expected)
    assert np.isfinite(actual).all(), actual
    scale = np.abs(expected).max(axis=-1, keepdims=True)
    err = np.abs(actual - expected)
    bound = ulps * 2.0**-52 * np.maximum(scale, np.finfo(float).tiny)
    assert (err <= bound).all(), (
        f"actual={actual.tolist()}, but should be {expected.tolist()} (err {err.max():.3g})"
    )


EDGE_ROWS = [
    pytest.param([1e308, 0, 0, 0], id="huge-one"),
    pytest.param([1e308, 1e308, 0, 0], id="huge-two"),
    pytest.param([1e-200, 0, 0, 0], id="tiny"),
    pytest.param([5e-324, 0, 0, 0], id="subnormal"),
    pytest.param([1.7e308, -1.7e308, 1e308, 0], id="huge-both-signs"),
    pytest.param([1e16, 1e16 + 2, 1e16, 1e16], id="cancellation-1e16"),
    pytest.param([5.0, 5.01, 5.0, 5.02], id="near-equal-5"),
    pytest.param([1e4 + 0.123, 1e4 + 0.987, 1e4 + 0.5, 1e4 + 0.25, 1e4], id="offset-1e4"),
    pytest.param([1e300, 1e-300, -1e-300, 0], id="wide-range"),
]


@pytest.mark.parametrize("row", EDGE_ROWS)
@pytest.mark.parametrize("name", ["paper", "post", "trl", "verl", "openrlhf"])
def test_grpo_at_the_edges(row: list[float], name: str) -> None:
    """GRPO under every group-scaled preset matches 60-digit arithmetic (numpy and torch)."""
    conv = PRESETS[name]
    expected = exact_advantages([row], ddof=conv.ddof, eps=conv.eps)
    assert_ulps(grpo_advantage(np.array([row]), convention=conv), expected)
    assert_ulps(grpo_advantage(torch.tensor([row], dtype=torch.float64), convention=conv).numpy(), expected)


@pytest.mark.parametrize("row", EDGE_ROWS)
def test_rloo_and_dr_grpo_at_the_edges(row: list[float]) -> None:
    """Dr. GRPO and RLOO are right wherever the exact result fits in float64, and raise a
    named ValueError (never return inf) where it does not."""
    for fn, kw in ((dr_grpo_advantage, {"scale": "none"}), (rloo_advantage, {"rloo": True})):
        with mpmath.workdps(60):
            expected = exact_advantages([row], **kw)
        if np.isfinite(expected).all():
            assert_ulps(fn(np.array([row])), expected)
        else:
            with pytest.raises(ValueError, match="do not fit in float64"):
                fn(np.array([row]))


def test_centered_values_sum_to_zero() -> None:
    """``[1e16, 1e16 + 2, 1e16, 1e16]``: the centering is exact (``[-0.5, 1.5, -0.5, -0.5]``),
    not ``[0, 2, 0, 0]``."""
    row = np.array([[1e16, 1e16 + 2, 1e16, 1e16]])
    assert dr_grpo_advantage(row).tolist() == [[-0.5, 1.5, -0.5, -0.5]]
    assert float(grpo_advantage(row).sum()) == pytest.approx(0, abs=1e-15)
    assert rloo_advantage(row).tolist() == [[-2 / 3, 2.0, -2 / 3, -2 / 3]]


def test_offset_groups_relative_accuracy() -> None:
    """``c + u * spread`` groups (offset c up to 1e4, spread down to 1e-3): 1e-15 relative to
    the group's largest advantage, against exact rational arithmetic."""
    rng = np.random.default_rng(11)
    for offset, spread in ((5.0, 1e-2), (5.0, 1e-3), (1e4, 1.0), (1e4, 1e-3), (-3e3, 0.5)):
        rows = offset + spread * rng.random((20, 8))
        got = grpo_advantage(rows)
        for r, a in zip(rows, got, strict=True):
            exact = [Fraction(float(v)) for v in r]
            mu = sum(exact) / len(exact)
            var = sum((v - mu) ** 2 for v in exact) / len(exact)
            sigma = math.sqrt(var)  # float sqrt of the exact variance: <= 0.5 ulp
            want = np.array([float(v - mu) / sigma for v in exact])
            assert np.abs(a - want).max() <= 1e-15 * np.abs(want).max()


def test_group_sigma_closed_form_does_not_overflow() -> None:
    """``group_sigma(5e199, 1e200)`` is ``0.5`` (the product ``k (G - k)`` overflowed)."""
    assert group_sigma(5e199, 1e200) == 0.5
    assert group_sigma(5e199, 1e200, ddof=1) == pytest.approx(0.5, rel=1e-15)
    assert group_sigma(np.array([1.0, 3.0]), 4.0).tolist() == [math.sqrt(3) / 4, math.sqrt(3) / 4]


def test_group_statistics_at_the_edges() -> None:
    """Statistics of huge and tiny groups are exact; one that does not fit raises."""
    stats = group_statistics(np.array([[1e308, 0, 0, 0], [1e-200, 0, 0, 0]]))
    assert stats.mean.tolist() == [2.5e307, 2.5e-201]
    assert stats.sigma == pytest.approx([1e308 * math.sqrt(3) / 4, 1e-200 * math.sqrt(3) / 4], rel=1e-15)
    with pytest.raises(ValueError, match=r"divisor d of group at batch position \(0,\) does not fit"):
        group_statistics(np.array([[1.7e308, -1.7e308]]), convention="trl")
    # the advantages still exist: d overflows, (R - mu) / d does not
    got = grpo_advantage(np.array([[1.7e308, -1.7e308]]), convention="trl")
    assert got[0].tolist() == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5)], rel=1e-15)


def test_silent_detection_is_exact() -> None:
    """A group is silent iff min == max: one ulp of difference is not silent, at any scale."""
    for base in (1.0, 1e308, 1e-300, 5e-324, 1e16):
        nxt = np.nextafter(base, np.inf)
        if base < 1e300:  # k = 3 * 1e308 does not fit in float64: group_statistics says so
            assert not group_statistics(np.array([[base, base, nxt]])).silent[0]
            assert group_statistics(np.array([[base, base, base]])).silent[0]
        else:
            with pytest.raises(ValueError, match="k = sum"):
                group_statistics(np.array([[base, base, base]]))
        assert dapo_keep_mask(np.array([[base, nxt]])).all()
        assert (grpo_advantage(np.array([[base] * 3])) == 0).all()


# ---------------------------------------------------------------------------
# refusals: each a named error


@pytest.mark.parametrize(
    ("index", "error", "words"),
    [
        pytest.param([0, None, 0, None], ValueError, ["index[1] is None"], id="none-id"),
        pytest.param([0.0, math.nan, 0.0, math.nan], ValueError, ["index[1] is NaN"], id="nan-float-id"),
        pytest.param(
            ["a", math.nan, "a", math.nan], ValueError, ["index[1]", "not equal to itself"], id="nan-mixed"
        ),
        pytest.param([{"a": 1}, {"a": 1}, 2, 2], TypeError, ["index[0]", "dict", "hashable"], id="dict-id"),
        pytest.param(torch.tensor([0.0, math.nan, 0.0, 1.0]), ValueError, ["NaN"], id="nan-tensor-id"),
    ],
)
def test_bad_ids_are_refused(index, error, words) -> None:
    with pytest.raises(error) as info:
        grpo_advantage(np.array([1.0, 0.0, 0.0, 1.0]), index=index)
    for word in words:
        assert word in str(info.value)


def test_ids_are_grouped_by_equality_not_by_their_string() -> None:
    """``[1, '1', 1, '1', 1]`` is two groups (numpy's ``asarray`` would make it one)."""
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    got = grpo_advantage(rewards, index=[1, "1", 1, "1", 1])
    assert got.tolist() == pytest.approx(grpo_advantage(rewards, index=["a", "b", "a", "b", "a"]).tolist())
    stats = group_statistics(rewards, index=[1, "1", 1, "1", 1])
    assert stats.size.tolist() == [3, 2] and stats.ids.tolist() == [
        1,
        "1",
    ]  # first-seen: 1 and '1' do not sort


def test_dim_with_index_is_refused() -> None:
    with pytest.raises(ValueError, match=r"dim=1 has no effect with index="):
        grpo_advantage(np.array([1.0, 0.0, 1.0, 0.0]), index=[0, 0, 1, 1], dim=1)
    assert grpo_advantage(np.array([1.0, 0.0]), index=[0, 0], dim=0).tolist() == [1.0, -1.0]


def test_meta_and_sparse_tensors_are_refused() -> None:
    with pytest.raises(ValueError, match="meta device"):
        grpo_advantage(torch.ones(2, 4, device="meta"))
    with pytest.raises(TypeError, match=r"layout torch.sparse_coo.*to_dense"):
        grpo_advantage(torch.ones(2, 4).to_sparse())
    with pytest.raises(ValueError, match="meta device"):
        group_statistics(torch.ones(4), index=torch.zeros(4, device="meta"))


@pytest.mark.parametrize("eps", [np.float32(1e-4), np.float64(1e-4), np.float16(0.5), 1e-4, 0])
def test_convention_eps_accepts_any_real_float(eps) -> None:
    """``Convention(eps=np.float32(1e-4))`` works like ``np.float64`` (and is stored as a float)."""
    conv = Convention("mine", ddof=1, eps=eps)
    assert type(conv.eps) is float and conv.eps == float(eps)


@pytest.mark.parametrize("eps", [True, "1e-4", np.array([1e-4, 1e-4]), None])
def test_convention_eps_refuses_non_numbers(eps) -> None:
    with pytest.raises(TypeError, match="eps"):
        Convention("mine", eps=eps)


def test_import_is_light() -> None:
    """``import sigma_ref`` and a closed form load neither torch nor sympy (PEP 562 lazy names)."""
    import subprocess

    code = (
        "import sys, sigma_ref; sigma_ref.silent_group_rate(0.5, 8); import numpy as np; "
        "sigma_ref.grpo_advantage(np.array([1.0, 0.0])); sigma_ref.group_statistics([[1.0, 0.0]]); "
        "assert 'torch' not in sys.modules and 'sympy' not in sys.modules, sorted(sys.modules); "
        "assert set(sigma_ref.__all__) <= set(dir(sigma_ref))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


UNITS = [
    pytest.param([0.0, 0.5, 1.0], np.float64, 2.0**24, id="binary-and-half"),
    pytest.param([0.0, -0.0], np.float64, 0.0, id="zeros"),
    pytest.param([2.0**-149, -2.0], np.float32, 2.0**173, id="float32-subnormal"),
    pytest.param([0.1], np.float32, 13421773.0, id="float32-tenth"),
    pytest.param([1.0, 0.0], np.float16, 2.0**23, id="float16"),
    pytest.param([0.1], np.float64, None, id="float64-tenth"),
    pytest.param([np.nan, 1.0], np.float32, None, id="nan"),
    pytest.param([np.inf, 1.0], np.float64, None, id="inf"),
    pytest.param([2.0**200], np.float64, None, id="beyond-float32"),
]


@pytest.mark.parametrize(("values", "dtype", "expected"), UNITS)
@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_units_pick_the_kernel_way(values: list[float], dtype, expected, library: str) -> None:
    """``_units``: ``max|R| / 2**q`` for float32 numbers, ``None`` otherwise; numpy (on the
    bits) and torch agree."""
    from sigma_ref._kernel import _units

    x = np.array(values, dtype=dtype)
    narrow = dtype != np.float64
    if library == "torch":
        x = torch.from_numpy(x)
    assert _units(x, narrow) == expected


def test_kernel_way_boundaries() -> None:
    """Exact while ``2 G U <= 2**53``; float32 numbers beyond that while ``G <= 2**26``."""
    from sigma_ref._kernel import _centering

    assert _centering(None, 8) == "general"
    assert _centering(0.0, 2**40) == "exact"
    assert _centering(2.0**49, 8) == "exact"
    assert _centering(np.nextafter(2.0**49, np.inf), 8) == "float32"
    assert _centering(2.0**49, 2**26) == "float32"
    assert _centering(2.0**49, 2**26 + 1) == "general"


def _exact_centered(group: np.ndarray) -> tuple[list[Fraction], Fraction]:
    exact = [Fraction(float(v)) for v in group]
    mu = sum(exact) / len(exact)
    return [v - mu for v in exact], mu


@settings(max_examples=150, deadline=None)
@given(
    data=st.lists(
        st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=2, max_size=9),
        min_size=1,
        max_size=6,
    ),
    interleave=st.randoms(use_true_random=False),
)
def test_float32_rewards_center_correctly_rounded_or_within_the_bound(data, interleave) -> None:
    """Any float32 rewards, ragged and interleaved: in the exact way every ``R_i - mu`` and
    ``mu`` is correctly rounded; in the others within ``(G + 4) u max|R_i - mu|``; silent
    groups are silent and nothing else is."""
    from sigma_ref._kernel import _centering, _units

    flat = np.array([v for g in data for v in g], dtype=np.float64)
    index = np.array([i for i, g in enumerate(data) for _ in g])
    perm = list(range(flat.size))
    interleave.shuffle(perm)
    flat, index = flat[perm], index[perm]
    way = _centering(_units(flat, False), max(len(g) for g in data))
    try:
        got = dr_grpo_advantage(flat, index=index)
        stats = group_statistics(flat, index=index)
    except ValueError as exc:  # a sum beyond float64 (float32 numbers near 3.4e38 do fit)
        pytest.fail(f"{way} way raised {exc}")
    for g in range(len(data)):
        members = flat[index == g]
        centered, mu = _exact_centered(members)
        out = got[index == g]
        assert bool(stats.silent[g]) == bool(np.all(members == members[0]))
        if way == "exact":
            assert out.tolist() == [float(c) for c in centered]
            assert float(stats.mean[g]) == float(mu)
        else:
            scale = max(abs(c) for c in centered)
            err = max(abs(Fraction(float(o)) - c) for o, c in zip(out, centered, strict=True))
            assert err <= (len(members) + 4) * Fraction(1, 2**53) * scale
