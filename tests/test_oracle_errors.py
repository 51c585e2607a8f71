"""Errors are API (issue 2, item 7): one test per case.

Each case asserts the exception type and that the message names the argument and the
bad value (and, where there is one, what to do instead).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pytest
import torch

from sigma_ref import (
    PAPER,
    Convention,
    arcsine_objective,
    attenuation,
    centered_norm,
    corpus_audit,
    dapo_keep_mask,
    decompose,
    decompose_continuous,
    difficulty_weight,
    dr_grpo_advantage,
    exact_group_size,
    expected_gradient,
    fidelity,
    get_convention,
    group_sigma,
    grpo_advantage,
    mass_share,
    mass_weight,
    min_group_size,
    policy_gradient,
    rloo_advantage,
    silent_group_rate,
)

R2 = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]])
S2 = np.ones((2, 4, 3))


def case(call: Callable[[], object], exc: type[Exception], *needles: str, id: str):
    """A ``pytest.param``: ``call()`` raises ``exc`` whose message contains every needle."""
    return pytest.param(call, exc, needles, id=id)


def _check(call: Callable[[], object], exc: type[Exception], needles: tuple[str, ...]) -> None:
    with pytest.raises(exc) as info:
        call()
    assert type(info.value) is exc, f"raised {type(info.value).__name__}, but should be {exc.__name__}"
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in the message: {message!r}"


# ---------------------------------------------------------------------------
# rewards

nan_cases = [
    case(
        lambda: grpo_advantage(np.array([[1.0, 0.0], [math.nan, 1.0]])),
        ValueError,
        "rewards",
        "nan",
        "batch position (1,)",
        id="nan-grouped-names-row",
    ),
    case(
        lambda: grpo_advantage(np.array([1.0, 0.0, math.nan, 1.0]), index=["a", "a", "b", "b"]),
        ValueError,
        "rewards",
        "nan",
        "index id 'b'",
        id="nan-index-names-id",
    ),
    case(
        lambda: decompose(np.array([[1.0, math.nan]]), np.ones((1, 2, 1))),
        ValueError,
        "rewards",
        "nan",
        "batch position (0,)",
        id="nan-decompose",
    ),
    case(
        lambda: rloo_advantage(torch.tensor([[0.0, 1.0], [1.0, math.nan]])),
        ValueError,
        "rewards",
        "nan",
        "batch position (1,)",
        id="nan-torch-rloo",
    ),
    case(
        lambda: policy_gradient(np.array([[1.0, math.nan]]), np.ones((1, 2))),
        ValueError,
        "advantages",
        "nan",
        id="nan-advantages",
    ),
    case(
        lambda: decompose(np.array([[1.0, 0.0]]), np.array([[[1.0], [math.nan]]])),
        ValueError,
        "scores",
        "NaN",
        "flat position 1",
        id="nan-scores",
    ),
]
inf_cases = [
    case(
        lambda: grpo_advantage(np.array([[1.0, math.inf]])),
        ValueError,
        "rewards",
        "inf",
        "batch position (0,)",
        id="inf-rewards",
    ),
    case(
        lambda: dr_grpo_advantage(torch.tensor([[1.0, -math.inf]])),
        ValueError,
        "rewards",
        "-inf",
        id="-inf-rewards-torch",
    ),
    case(
        lambda: dapo_keep_mask(np.array([0.0, math.inf]), index=[7, 7]),
        ValueError,
        "rewards",
        "inf",
        "index id 7",
        id="inf-dapo-index",
    ),
    case(
        lambda: decompose_continuous(np.array([[0.5, math.inf]]), np.ones((1, 2))),
        ValueError,
        "rewards",
        "inf",
        id="inf-continuous",
    ),
]
binary_cases = [
    case(
        lambda: decompose(np.array([[0.5, 1.0]]), np.ones((1, 2, 2))),
        ValueError,
        "rewards",
        "binary",
        "0.5",
        "decompose_continuous",
        id="nonbinary-0.5",
    ),
    case(
        lambda: decompose(np.array([2.0, 1.0, 0.0]), np.ones(3), index=[0, 0, 1], convention="trl"),
        ValueError,
        "rewards",
        "2.0",
        "index id 0",
        id="nonbinary-2-index",
    ),
    case(
        lambda: decompose(np.array([[-1.0, 0.0]]), np.ones((1, 2))),
        ValueError,
        "rewards",
        "-1.0",
        id="nonbinary-negative",
    ),
]
small_group_cases = [
    case(
        lambda: grpo_advantage(np.ones((3, 1))),
        ValueError,
        "rewards",
        "size 1",
        "G >= 2",
        "'paper'",
        id="G1-grouped-paper",
    ),
    case(
        lambda: grpo_advantage(np.array([1.0, 0.0, 1.0]), index=["a", "a", "z"]),
        ValueError,
        "size 1",
        "index id 'z'",
        id="G1-index-paper",
    ),
    case(lambda: dr_grpo_advantage(np.ones((2, 1))), ValueError, "size 1", "'dr_grpo'", id="G1-dr-grpo"),
    case(
        lambda: rloo_advantage(np.ones((2, 1))),
        ValueError,
        "rewards",
        "size 1",
        "RLOO",
        "G >= 2",
        id="G1-rloo",
    ),
    case(lambda: decompose(np.ones((2, 1)), np.ones((2, 1, 3))), ValueError, "size 1", id="G1-decompose"),
    case(
        lambda: grpo_advantage(np.array([1.0]), convention="trl_batch"),
        ValueError,
        "rewards",
        "1 element",
        "ddof=1",
        id="G1-batch-std",
    ),
    case(lambda: group_sigma(0, 1), ValueError, "G=1", "G >= 2", id="G1-group-sigma"),
    case(lambda: centered_norm(1, 1), ValueError, "G=1", id="G1-centered-norm"),
    case(lambda: silent_group_rate(0.5, 1), ValueError, "G=1", "G >= 2", id="G1-silent-group-rate"),
    case(lambda: expected_gradient(0.5, 0), ValueError, "G=0", id="G0-expected-gradient"),
    case(lambda: fidelity(0.5, -3), ValueError, "G=-3", id="G-negative-fidelity"),
    case(lambda: corpus_audit([0.5], G=1), ValueError, "G=1", id="G1-audit"),
]
empty_cases = [
    case(lambda: grpo_advantage(np.array([])), ValueError, "rewards", "empty", "(0,)", id="empty-1d"),
    case(lambda: grpo_advantage(np.zeros((0, 4))), ValueError, "rewards", "empty", "(0, 4)", id="empty-2d"),
    case(lambda: rloo_advantage([]), ValueError, "rewards", "empty", id="empty-list"),
    case(
        lambda: dapo_keep_mask(torch.zeros(3, 0)), ValueError, "rewards", "empty", "(3, 0)", id="empty-torch"
    ),
    case(
        lambda: policy_gradient(np.zeros((0, 4)), np.zeros((0, 4, 2))),
        ValueError,
        "advantages",
        "empty",
        id="empty-policy-gradient",
    ),
    case(
        lambda: decompose(np.zeros((0, 2)), np.zeros((0, 2, 1))),
        ValueError,
        "rewards",
        "empty",
        id="empty-decompose",
    ),
    case(lambda: grpo_advantage(np.array(1.0)), ValueError, "rewards", "scalar", id="scalar-rewards"),
    case(lambda: silent_group_rate([], 8), ValueError, "p", "empty", id="empty-p"),
    case(lambda: group_sigma([], 8), ValueError, "k", "empty", id="empty-k"),
    case(lambda: corpus_audit([]), ValueError, "pass_rates", "empty", id="empty-audit"),
]
shape_cases = [
    case(
        lambda: decompose(R2, np.ones((2, 3, 5))),
        ValueError,
        "scores",
        "(2, 3, 5)",
        "rewards",
        "(2, 4)",
        id="scores-vs-rewards-G",
    ),
    case(
        lambda: decompose(R2, np.ones((3, 4, 5))),
        ValueError,
        "scores",
        "(3, 4, 5)",
        id="scores-vs-rewards-batch",
    ),
    case(
        lambda: policy_gradient(R2, np.ones((2, 5))),
        ValueError,
        "scores",
        "(2, 5)",
        "advantages",
        "(2, 4)",
        id="scores-vs-advantages",
    ),
    case(lambda: decompose_continuous(R2, np.ones(4)), ValueError, "scores", "(4,)", id="scores-continuous"),
    case(
        lambda: decompose(np.array([1.0, 0.0, 1.0]), np.ones((2, 3)), index=[0, 0, 0]),
        ValueError,
        "scores",
        "(2, 3)",
        "(3,)",
        id="scores-index-layout",
    ),
]
index_cases = [
    case(
        lambda: grpo_advantage(np.ones(4), index=[0, 0, 1]),
        ValueError,
        "index",
        "3 entries",
        "rewards has 4",
        id="index-too-short",
    ),
    case(
        lambda: rloo_advantage(np.ones(4), index=np.arange(6)),
        ValueError,
        "index",
        "6 entries",
        id="index-too-long",
    ),
    case(
        lambda: policy_gradient(np.ones(4), np.ones((4, 2)), index=[0, 1]),
        ValueError,
        "index",
        "2 entries",
        id="index-length-policy-gradient",
    ),
    case(
        lambda: grpo_advantage(R2, index=[0, 0, 1, 1]),
        ValueError,
        "rewards",
        "(2, 4)",
        "index",
        id="index-with-2d-rewards",
    ),
    case(
        lambda: decompose(R2, S2, index=np.arange(8)),
        ValueError,
        "rewards",
        "(2, 4)",
        "index",
        id="index-with-2d-rewards-decompose",
    ),
    case(
        lambda: grpo_advantage(np.ones(4), index=np.zeros((2, 2))),
        TypeError,
        "index",
        "(2, 2)",
        "one-dimensional",
        id="index-2d-array",
    ),
    case(lambda: grpo_advantage(np.ones(3), index=3), TypeError, "index=3", id="index-scalar"),
    case(lambda: grpo_advantage(np.ones(3), index="abc"), TypeError, "index='abc'", id="index-string"),
    case(
        lambda: grpo_advantage(np.ones(3), index=[0.0, math.nan, 0.0]),
        ValueError,
        "index",
        "NaN",
        id="index-nan",
    ),
]


def _closed_form_cases() -> list:
    out = []
    calls = {
        "silent_group_rate": lambda p: silent_group_rate(p, 8),
        "expected_gradient": lambda p: expected_gradient(p, 8),
        "expected_gradient-dr_grpo": lambda p: expected_gradient(p, 8, method="dr_grpo"),
        "fidelity": lambda p: fidelity(p, 8),
        "attenuation": lambda p: attenuation(p, 8),
        "min_group_size": min_group_size,
        "exact_group_size": exact_group_size,
        "difficulty_weight": difficulty_weight,
        "mass_weight": mass_weight,
        "mass_share": lambda p: mass_share([0.5, p], [True, False]),
        "arcsine_objective": arcsine_objective,
        "corpus_audit": lambda p: corpus_audit([0.5, p]),
    }
    for name, fn in calls.items():
        arg = "pass_rates" if name == "corpus_audit" else "p"
        for bad, shown in ((-0.1, "-0.1"), (1.5, "1.5"), (math.nan, "nan")):
            out.append(
                case(
                    (lambda f, b: lambda: f(b))(fn, bad),
                    ValueError,
                    f"{arg}={shown}",
                    "[0, 1]",
                    id=f"{name}-p={shown}",
                )
            )
        if name not in ("mass_share", "corpus_audit"):  # those take the whole corpus: below
            out.append(
                case(
                    (lambda f: lambda: f(torch.tensor([0.5, 2.0])))(fn),
                    ValueError,
                    "p=2.0",
                    id=f"{name}-torch-p=2",
                )
            )
    out.append(
        case(
            lambda: mass_share(torch.tensor([0.5, 2.0]), [True, False]),
            ValueError,
            "p=2.0",
            id="mass_share-torch-p=2",
        )
    )
    out.append(
        case(
            lambda: corpus_audit(torch.tensor([0.5, 2.0])),
            ValueError,
            "pass_rates=2.0",
            id="corpus_audit-torch-p=2",
        )
    )
    for name, fn in {"min_group_size": min_group_size, "exact_group_size": exact_group_size}.items():
        for edge in (0.0, 1.0):
            out.append(
                case(
                    (lambda f, e: lambda: f(e))(fn, edge),
                    ValueError,
                    f"p={edge}",
                    "0 < p < 1",
                    id=f"{name}-p={edge}",
                )
            )
    return out


def _epsilon_cases() -> list:
    out = []
    calls = {
        "min_group_size": lambda e: min_group_size(0.3, epsilon=e),
        "exact_group_size": lambda e: exact_group_size(0.3, epsilon=e),
        "corpus_audit": lambda e: corpus_audit([0.3], epsilon=e),
    }
    for name, fn in calls.items():
        for bad, shown in ((0, "0.0"), (1, "1.0"), (-0.5, "-0.5"), (2, "2.0"), (math.nan, "nan")):
            out.append(
                case(
                    (lambda f, b: lambda: f(b))(fn, bad),
                    ValueError,
                    f"epsilon={shown}",
                    "(0, 1)",
                    id=f"{name}-eps={shown}",
                )
            )
        out.append(
            case((lambda f: lambda: f("0.05"))(fn), TypeError, "epsilon='0.05'", id=f"{name}-eps-string")
        )
    return out


convention_cases = [
    case(lambda: Convention("x", eps=-1e-3), ValueError, "eps=-0.001", ">= 0", id="negative-eps"),
    case(lambda: Convention("x", eps=math.inf), ValueError, "eps=inf", id="infinite-eps"),
    case(lambda: Convention("x", eps="1e-8"), TypeError, "eps='1e-8'", id="string-eps"),
    case(lambda: PAPER.replace(eps=-1.0), ValueError, "eps=-1.0", id="negative-eps-replace"),
    case(lambda: Convention("x", ddof=2), ValueError, "ddof=2", "0", "1", id="ddof-2"),
    case(lambda: Convention("x", ddof=True), ValueError, "ddof=True", id="ddof-bool"),
    case(lambda: group_sigma(1, 4, ddof=2), ValueError, "ddof=2", id="group-sigma-ddof-2"),
    case(lambda: Convention("x", scale="bogus"), ValueError, "scale='bogus'", "'group'", id="bad-scale"),
    case(
        lambda: Convention("x", eps_placement="mul"),
        ValueError,
        "eps_placement='mul'",
        "'add'",
        id="bad-placement",
    ),
    case(
        lambda: Convention("x", singleton="drop"),
        ValueError,
        "singleton='drop'",
        "'zero'",
        id="bad-singleton",
    ),
    case(lambda: Convention(""), TypeError, "name=''", id="empty-name"),
    case(
        lambda: grpo_advantage(R2, convention="nope"),
        ValueError,
        "convention='nope'",
        "'paper'",
        id="unknown-preset",
    ),
    case(
        lambda: decompose(R2, S2, convention="grpo"),
        ValueError,
        "convention='grpo'",
        id="unknown-preset-decompose",
    ),
    case(lambda: get_convention(3), TypeError, "convention=3", id="preset-not-a-string"),
    case(
        lambda: expected_gradient(0.5, 8, method="rloo"),
        ValueError,
        "method='rloo'",
        "'grpo'",
        id="bad-method",
    ),
    case(lambda: mass_weight(0.5, method="GRPO"), ValueError, "method='GRPO'", id="bad-method-mass"),
]
dim_cases = [
    case(
        lambda: grpo_advantage(R2, dim=2), ValueError, "dim=2", "(2, 4)", "-2 <= dim < 2", id="dim-too-large"
    ),
    case(lambda: grpo_advantage(R2, dim=-3), ValueError, "dim=-3", id="dim-too-small"),
    case(lambda: rloo_advantage(R2, dim=1.0), TypeError, "dim=1.0", "int", id="dim-float"),
    case(lambda: dapo_keep_mask(R2, dim=None), TypeError, "dim=None", id="dim-none"),
    case(lambda: policy_gradient(R2, S2, dim=3), ValueError, "dim=3", id="dim-policy-gradient"),
]
type_cases = [
    case(
        lambda: grpo_advantage(np.array(["1", "0"])),
        TypeError,
        "rewards",
        "<U1",
        "real numbers",
        id="strings-array",
    ),
    case(lambda: grpo_advantage(["1", "0"]), TypeError, "rewards", "'1'", id="strings-list"),
    case(lambda: grpo_advantage("10"), TypeError, "rewards='10'", id="string"),
    case(lambda: grpo_advantage(None), TypeError, "rewards=None", id="none"),
    case(lambda: grpo_advantage([[1.0, 0.0], [1.0]]), TypeError, "rewards", "rectangular", id="ragged-list"),
    case(
        lambda: grpo_advantage(np.array([1 + 1j, 0j])), TypeError, "rewards", "complex128", id="complex-numpy"
    ),
    case(
        lambda: grpo_advantage(torch.tensor([[1 + 1j, 0j]])),
        TypeError,
        "rewards",
        "complex64",
        id="complex-torch",
    ),
    case(
        lambda: decompose(R2, torch.ones(2, 4, 3, dtype=torch.complex64)),
        TypeError,
        "scores",
        "complex64",
        id="complex-scores",
    ),
    case(lambda: expected_gradient(torch.tensor([0.5 + 0j]), 8), TypeError, "p", "complex", id="complex-p"),
    case(lambda: silent_group_rate("0.5", 8), TypeError, "p='0.5'", id="string-p"),
]
count_cases = [
    case(lambda: group_sigma(5, 4), ValueError, "k=5", "[0, G=4]", id="k-above-G"),
    case(lambda: group_sigma(-1, 4), ValueError, "k=-1", id="k-negative"),
    case(lambda: centered_norm(np.array([1, 9]), 8), ValueError, "k=9", "G=8", id="k-above-G-array"),
    case(lambda: group_sigma(1.5, 4), TypeError, "k=1.5", "integers", id="k-not-integer"),
    case(lambda: group_sigma(1, 4.5), TypeError, "G=4.5", "integer", id="G-not-integer-sigma"),
    case(lambda: silent_group_rate(0.5, 8.5), TypeError, "G=8.5", id="G-not-integer-silent"),
    case(lambda: expected_gradient(0.5, math.inf), TypeError, "G=inf", id="G-infinite"),
    case(lambda: corpus_audit([0.5], G=[8, 16]), TypeError, "G=[8, 16]", "one integer", id="G-list-audit"),
    case(lambda: expected_gradient(0.5, 2.0**41), ValueError, "G=2.19902e+12", "2**40", id="G-above-maximum"),
    case(
        lambda: group_sigma(np.array([1, 2]), np.array([4, 4, 4])),
        ValueError,
        "k shape (2,)",
        "G shape (3,)",
        id="k-G-broadcast",
    ),
]
huge_cases = [
    case(
        lambda: min_group_size(np.array([0.5, 1e-300])),
        ValueError,
        "p=1e-300",
        "2.5e+300",
        "64-bit",
        id="min_group_size-beyond-int64",
    ),
    case(
        lambda: exact_group_size(1e-12),
        ValueError,
        "p=1e-12",
        "2**40",
        "epsilon=0.05",
        id="exact_group_size-beyond-2**40",
    ),
]
mask_cases = [
    case(
        lambda: mass_share([0.5, 0.3], [True]),
        ValueError,
        "mask",
        "1 entries",
        "p has 2",
        id="mask-too-short",
    ),
    case(lambda: mass_share([0.5, 0.3], [1, 0]), TypeError, "mask", "int64", "booleans", id="mask-not-bool"),
    case(lambda: mass_share([0.5, 0.3], "TF"), TypeError, "mask='TF'", id="mask-string"),
    case(
        lambda: mass_share([0.0, 1.0], [True, False]),
        ValueError,
        "zero update mass",
        "p in {0, 1}",
        id="mask-zero-mass",
    ),
]

ALL_CASES = (
    nan_cases
    + inf_cases
    + binary_cases
    + small_group_cases
    + empty_cases
    + shape_cases
    + index_cases
    + _closed_form_cases()
    + _epsilon_cases()
    + convention_cases
    + dim_cases
    + type_cases
    + count_cases
    + huge_cases
    + mask_cases
)


@pytest.mark.parametrize(("call", "exc", "needles"), ALL_CASES)
def test_error(call: Callable[[], object], exc: type[Exception], needles: tuple[str, ...]) -> None:
    """Bad input raises ``exc`` with a message naming the argument and the bad value."""
    _check(call, exc, needles)


def test_every_case_id_is_unique() -> None:
    """One test per case: ids never collide (pytest would suffix them silently)."""
    ids = [p.id for p in ALL_CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    plain = [i for i in ids if not re.fullmatch(r"[\w.=\-+*]+", i)]
    assert not plain, f"ids with odd characters: {plain}"
