"""The trainer-style gallery checked against the oracle, independently of the suite.

Every correct case must equal the oracle (``grpo_advantage`` / ``dr_grpo_advantage`` /
``rloo_advantage`` under its convention, or its ``expected``) on designed batches: binary,
continuous, silent groups (exact and non-dyadic), ragged interleaved integer ids and
uuid-like string ids. Every wrong case must differ from what its author intended on a
designed witness input (or mutate its input, be nondeterministic, or go non-finite).

Tolerance. ``A = (R - b) / d``: a working precision with unit roundoff ``u`` computes the
baseline ``b`` to a few ``u max|R|`` and ``d`` to a few ``u`` relative, so ``|A - A_exact| <=
c u (|A| + max_g|R| / d_g + 1)`` per group. ``u`` is that of the statistics' dtype (the
case's ``precision``, or the input's when lower): float64 ``2**-53``, float32 ``2**-24``
(about 1e-6 relative to the group's scale ``max|R| / d``), bfloat16 ``2**-8``, float16
``2**-11``. ``c = 16``: the float32 cases measured up to 0.86 units on these batches (G <=
16). float64 adds an absolute 1e-7 (the suite's float64 tolerance) for two facts of correct
code: a non-dyadic silent group leaves centered values ~1e-17 that OpenRLHF's eps 1e-9 turns
into ~1e-8, and verl's singleton constants are float32 (``1 + 1e-6`` is 4.6e-8 off). Half
dtypes use ``c = 4`` (statistics at least as precise as the input, one rounding out).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigma_ref import dr_grpo_advantage, grpo_advantage, rloo_advantage
from sigma_ref.advantages import dapo_keep_mask
from sigma_ref.objectives import aggregation_weights
from tests.gallery import shapes, trainers_correct, trainers_token, trainers_wrong
from tests.gallery.cases import Case

_C = 16.0
_UNIT = {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}
_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


# ---------------------------------------------------------------------------------------
# designed batches: (name, rewards float64 [N], index [N], group_size or None)


def _grouped(rows: list[list[float]]) -> tuple[np.ndarray, np.ndarray, int]:
    r = np.asarray(rows, dtype=np.float64)
    return r.reshape(-1), np.repeat(np.arange(r.shape[0]), r.shape[1]), r.shape[1]


_RNG = np.random.default_rng(8)
CONTIGUOUS = {
    "binary": _grouped([[1, 0, 0, 0], [1, 1, 0, 1], [0, 1, 1, 0]]),
    "continuous": _grouped((_RNG.normal(size=(3, 5)) * 3 + 2).round(6).tolist()),
    "silent": _grouped([[0, 0, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1], [0.7, 0.7, 0.7, 0.7]]),
    "non_dyadic_silent": _grouped([[0.1, 0.1, 0.1], [0.1, 0.2, 0.3], [0.3, 0.3, 0.3]]),
    "g16": _grouped([[1.0] + [0.0] * 15, [0.25 * (i % 5) for i in range(16)]]),
}
_UUIDS = ["9f1c2a", "03be7d", "c47e10", "5a0d93"]  # order differs from sorted and first-seen
INDEXED = {
    "ragged_ints": (
        np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.0, 1.0, 0.25, 0.0, 1.0]),
        np.array([7, 3, 7, 5, 3, 7, 5, 3, 5, 7, 5]),
    ),
    "uuid_strings": (
        np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0, 0.75, 1.0, 0.0]),
        np.array([_UUIDS[i] for i in (2, 0, 3, 2, 1, 0, 3, 1, 2, 3, 0, 1)]),
    ),
}
SINGLETON = (np.array([1.0, 0.0, 0.5, 1.0, 0.0]), np.array(["a", "b", "a", "c", "b"]))


def _oracle(case: Case, rewards: np.ndarray, index: np.ndarray) -> np.ndarray:
    if case.convention is None:
        out = case.expected(rewards, index)  # type: ignore[misc]
    elif case.convention == "rloo":
        out = rloo_advantage(rewards, index=index)
    elif case.convention == "dr_grpo":
        out = dr_grpo_advantage(rewards, index=index)
    else:
        out = grpo_advantage(rewards, convention=case.convention, index=index)
    out = np.asarray(out, dtype=np.float64)
    return out if case.clip is None else np.clip(out, -case.clip, case.clip)


def _call(case: Case, rewards: np.ndarray, index: np.ndarray, G: int | None, dtype=torch.float64):
    r = torch.tensor(rewards, dtype=torch.float64).to(dtype)
    if case.layout == "contiguous":
        out = case.fn(r, G)
    elif case.layout == "grouped":
        out = case.fn(r.view(-1, G))
    else:
        out = case.fn(r, index)
    if isinstance(out, np.ndarray):
        out = torch.from_numpy(out)
    return out


def _tolerance(
    case: Case, rewards: np.ndarray, index: np.ndarray, expected: np.ndarray, dtype, c: float = _C
) -> np.ndarray:
    """``c u (|A| + max_g|R| / d_g)`` per element (module doc)."""
    if dtype in (torch.bfloat16, torch.float16):
        precision = "bfloat16" if dtype == torch.bfloat16 else "float16"
    elif case.precision == "float32" or dtype == torch.float32:
        precision = "float32"
    else:
        precision = "float64"
    u = _UNIT[precision]
    scale = np.zeros_like(expected)
    for uid in np.unique(index):
        rows = index == uid
        centered = rewards[rows] - rewards[rows].mean()
        live = np.abs(centered) > 0
        # d_g = |R - b| / |A| on a live element; silent or singleton groups: d = 1 or eps
        if live.any() and np.abs(expected[rows][live]).max() > 0:
            i = np.argmax(np.abs(expected[rows]))
            d = abs(centered[i]) / abs(expected[rows][i]) if abs(centered[i]) > 0 else 1.0
        else:
            d = 1e-6
        scale[rows] = np.abs(rewards[rows]).max() / d
    floor = 1e-7 if precision == "float64" else 0.0
    return c * u * (np.abs(expected) + scale + 1.0) + floor


def _defines_singletons(case: Case) -> bool:
    """Whether the case's convention says what a group of one gets (the oracle accepts it)."""
    try:
        _oracle(case, *SINGLETON)
    except ValueError:
        return False
    return True


def _batches(case: Case):
    for name, (r, index, G) in CONTIGUOUS.items():
        yield name, r, index, G
    if case.layout == "index":
        for name, (r, index) in INDEXED.items():
            yield name, r, index, None
        if _defines_singletons(case):
            yield "singleton", SINGLETON[0], SINGLETON[1], None


CORRECT_ADV = [c for c in trainers_correct.CASES if c.fn.__name__ == c.name]  # cases about fn


def _ids(cases):
    return [c.name for c in cases]


@pytest.mark.parametrize("case", CORRECT_ADV, ids=_ids(CORRECT_ADV))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_correct_case_equals_oracle(case: Case, dtype) -> None:
    for name, r, index, G in _batches(case):
        r = torch.tensor(r).to(dtype).double().numpy()  # the rewards the implementation sees
        expected = _oracle(case, r, index)
        out = _call(case, r, index, G, dtype)
        got = out.detach().to(torch.float64).reshape(-1).numpy()
        tol = _tolerance(case, r, index, expected, dtype)
        bad = np.abs(got - expected) > tol
        assert not bad.any(), (
            f"{case.name} on {name} ({dtype}): got {got[bad][:4]}, oracle {expected[bad][:4]}, "
            f"tolerance {tol[bad][:4]}"
        )


_HALF_RANGE = _grouped(
    [
        [1024.0, 512.0, 0.0, -256.0, 768.0, 1024.0, 8.0, 0.0],
        [-1024.0, 1024.0, -1024.0, 256.0, -1024.0, 0.0, 1024.0, -1024.0],
    ]
)


@pytest.mark.parametrize("case", CORRECT_ADV, ids=_ids(CORRECT_ADV))
def test_correct_case_in_half_precision(case: Case) -> None:
    """In each declared half dtype, within ``c = 4`` units of that dtype (statistics at least as precise
    as the input, one rounding of the output): binary, continuous and |R| = 1024 batches."""
    for dtype_name in set(case.dtypes) & {"bfloat16", "float16"}:
        dtype = _DTYPES[dtype_name]
        for name, (r, index, G) in [*CONTIGUOUS.items(), ("half_range", _HALF_RANGE)]:
            r = torch.tensor(r).to(dtype).double().numpy()
            expected = _oracle(case, r, index)
            got = _call(case, r, index, G, dtype).detach().to(torch.float64).reshape(-1).numpy()
            tol = _tolerance(case, r, index, expected, dtype, c=4.0)
            bad = ~(np.abs(got - expected) <= tol)
            assert not bad.any(), (
                f"{case.name} on {name} ({dtype_name}): got {got[bad][:4]}, oracle {expected[bad][:4]}"
            )


SINGLETON_RULE = [
    c for c in CORRECT_ADV if c.layout == "contiguous" and c.convention in ("trl", "trl_batch", "verl")
]


@pytest.mark.parametrize("case", SINGLETON_RULE, ids=_ids(SINGLETON_RULE))
def test_contiguous_group_of_one(case: Case) -> None:
    """G = 1 under a convention that defines singletons (TRL: 0; verl: mean 0, std 1)."""
    r = np.array([1.0, 0.0, 0.5])
    got = _call(case, r, np.arange(3), 1).detach().double().numpy()
    assert np.allclose(got, _oracle(case, r, np.arange(3)), rtol=1e-6, atol=1e-6), got


def test_gallery_shape() -> None:
    """Names unique and resolvable; at least 25 correct, 20 wrong; every case sourced."""
    all_cases = trainers_correct.CASES + trainers_wrong.CASES + trainers_token.CASES + shapes.CASES
    names = [c.name for c in all_cases]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for c in all_cases:
        module, attr = c.target.split(":")
        assert getattr(__import__(module, fromlist=[attr]), attr) is not None
        assert c.source and c.note
    assert sum(c.shape == "advantages" for c in trainers_correct.CASES) >= 25
    assert sum(c.shape == "advantages" for c in trainers_wrong.CASES) >= 20
    assert all(c.correct for c in trainers_correct.CASES)
    assert not any(c.correct for c in trainers_wrong.CASES)


# ---------------------------------------------------------------------------------------
# keep masks


KEEP = [c for c in trainers_correct.CASES + trainers_wrong.CASES if c.keep_mask is not None]


@pytest.mark.parametrize("case", KEEP, ids=_ids(KEEP))
def test_keep_mask(case: Case) -> None:
    """A correct filter keeps exactly the non-silent groups (no singletons probed)."""
    differs = False
    for name, r, index, _G in [*list(_batches(case)), ("shaped", *_SHAPED_KEEP, None)]:
        keep = np.asarray(case.keep_mask(torch.tensor(r), index)).reshape(-1).astype(bool)  # type: ignore[misc]
        expected = np.asarray(dapo_keep_mask(r, index=index))
        if case.correct:
            assert np.array_equal(keep, expected), f"{case.name} on {name}: {keep} != {expected}"
        differs |= not np.array_equal(keep, expected)
    assert case.correct or differs, f"{case.name}: no designed batch shows the bug"


_SHAPED_KEEP = (np.array([1.0, 1.0, 0.0, 0.0, 1.0, 0.0]), np.array([0, 0, 0, 1, 1, 1]))


# ---------------------------------------------------------------------------------------
# losses: at ratio 1 the gradient is -A_i w_it with the declared aggregation's weights


_MASK = torch.tensor(
    [[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], dtype=torch.float64
)
_ADV = torch.tensor([1.5, -0.5, -0.25, 0.75], dtype=torch.float64)


def loss_gradient(loss, mask: torch.Tensor = _MASK, adv: torch.Tensor = _ADV) -> torch.Tensor:
    """d loss / d logp at logp = old_logp (ratio 1), ``[N, T]``; a tuple's first item is the loss."""
    logp = (torch.linspace(-2.0, -0.1, mask.numel(), dtype=torch.float64).view_as(mask)).requires_grad_()
    out = loss(logp, logp.detach().clone(), adv, mask)
    value = out[0] if isinstance(out, tuple) else out
    (grad,) = torch.autograd.grad(value, logp, allow_unused=True)
    return torch.zeros_like(logp) if grad is None else grad


LOSSES = [
    c
    for c in trainers_correct.CASES + trainers_wrong.CASES + trainers_token.CASES + shapes.CASES
    if c.loss is not None
]


@pytest.mark.parametrize("case", LOSSES, ids=_ids(LOSSES))
def test_loss_weights(case: Case) -> None:
    """Correct: gradient = -A w under the declared aggregation; wrong: it differs (or is zero)."""
    grad = loss_gradient(case.loss)
    weights = aggregation_weights(_MASK, case.aggregation, constant=case.aggregation_constant)  # type: ignore[arg-type]
    expected = -_ADV.unsqueeze(1) * weights
    same = torch.allclose(grad, expected, rtol=1e-7, atol=1e-12)  # verl adds 1e-8 to each length
    assert same == case.correct, f"{case.name}: gradient\n{grad}\nexpected\n{expected}"


# ---------------------------------------------------------------------------------------
# wrong cases: a witness where each demonstrably departs from what its author intended


def _departs(case: Case, r: np.ndarray, index: np.ndarray, G: int | None, dtype) -> str | None:
    """Why the output on this input is wrong, or None when it matches the intent."""
    rewards = torch.tensor(r, dtype=torch.float64).to(dtype)
    before = rewards.clone()
    try:
        out = _call_tensor(case, rewards, index, G)
    except (ValueError, RuntimeError) as exc:  # refusing a bad input is correct behaviour
        return None if "partial_trailing_group" in case.breaks else f"raised {exc!r}"
    if not torch.equal(rewards, before):
        return "mutated its input"
    got = out.detach().to(torch.float64).reshape(-1).numpy()
    if not np.isfinite(got).all():
        return f"non-finite output {got}"
    again = _call_tensor(case, before.clone(), index, G).detach().to(torch.float64).reshape(-1).numpy()
    if not np.array_equal(np.nan_to_num(got), np.nan_to_num(again)):
        return "nondeterministic"
    seen = torch.tensor(r).to(dtype).double().numpy()
    expected = _oracle(case, seen, index)
    precision = "float32" if dtype == torch.float32 else "float64"
    tol = 1e-3 * (np.abs(expected) + 1.0) if precision == "float32" else 1e-6 * (np.abs(expected) + 1.0)
    if got.shape != expected.shape:
        return f"shape {got.shape} != {expected.shape}"
    bad = np.abs(got - expected) > tol
    return f"values {got[bad][:3]} != oracle {expected[bad][:3]}" if bad.any() else None


def _call_tensor(case: Case, rewards: torch.Tensor, index: np.ndarray, G: int | None):
    if case.layout == "contiguous":
        out = case.fn(rewards, G)
    elif case.layout == "grouped":
        out = case.fn(rewards.view(-1, G))
    else:
        out = case.fn(rewards, index)
    return torch.from_numpy(out) if isinstance(out, np.ndarray) else out


WRONG_ADV = [c for c in trainers_wrong.CASES if c.fn.__name__ == c.name]


@pytest.mark.filterwarnings("ignore:std\\(\\)")  # singleton_nan_index's own bug
@pytest.mark.parametrize("case", WRONG_ADV, ids=_ids(WRONG_ADV))
def test_wrong_case_departs_from_intent(case: Case) -> None:
    witness = trainers_wrong.WITNESSES[case.name]
    r, index, G, dtype = witness
    index = (
        np.asarray(index) if index is not None else np.repeat(np.arange(math.ceil(len(r) / G)), G)[: len(r)]
    )
    why = _departs(case, np.asarray(r, dtype=np.float64), index, G, dtype)
    assert why is not None, f"{case.name} matches its intended convention on its witness"


def test_openrlhf_clip_bites_only_beyond_g101() -> None:
    """OpenRLHF's default clip (-10, 10) never changes group_norm for G <= 101 (max |A| = (G-1)/sqrt(G))
    and does at G = 102: the openrlhf preset, which has no clip, disagrees with the shipped code there."""
    clipped = trainers_correct.openrlhf_group_norm_clipped
    for G, bites in ((101, False), (102, True)):
        r = torch.zeros(G, dtype=torch.float64)
        r[0] = 1.0
        preset = grpo_advantage(r.numpy(), convention="openrlhf")
        assert (abs(preset[0]) > 10) == bites
        assert np.allclose(clipped(r, G).numpy(), np.clip(preset, -10, 10), rtol=1e-12)


def test_every_wrong_case_has_a_witness() -> None:
    assert {c.name for c in WRONG_ADV} == set(trainers_wrong.WITNESSES)


_SUITE_LAYOUTS = ("contiguous", "index", "grouped")
SUITE_WRONG = [c for c in trainers_wrong.CASES if c.layout in _SUITE_LAYOUTS and c.verdict == "FAIL"]
SUITE_HYGIENE = [c for c in trainers_wrong.CASES if c.layout in _SUITE_LAYOUTS and c.verdict == "WARN"]


@pytest.mark.slow
@pytest.mark.parametrize("case", SUITE_WRONG, ids=_ids(SUITE_WRONG))
def test_wrong_trainer_code_is_not_conformant(case: Case) -> None:
    """Run by the suite with its author's intent declared, wrong trainer code gets a FAIL (the kill
    table of ``python -m tests.gallery --trainers``)."""
    from tests.gallery.__main__ import _trainer_outcomes

    outcomes = _trainer_outcomes(case, declare=True)
    assert any(o.verdict == "FAIL" for o in outcomes), [(o.label, o.verdict) for o in outcomes]


@pytest.mark.slow
@pytest.mark.parametrize("case", SUITE_HYGIENE, ids=_ids(SUITE_HYGIENE))
def test_hygiene_trainer_code_gets_its_warn_and_no_fail(case: Case) -> None:
    """OpenRLHF's group_norm on float16 rewards (0/0 on silent groups): a WARN with its confirmed cause,
    no FAIL, as trainers feed float32 rewards."""
    from tests.gallery import caught_by
    from tests.gallery.__main__ import _trainer_outcomes

    outcomes = _trainer_outcomes(case, declare=True)
    assert caught_by(case, outcomes), [
        (o.label, o.verdict, o.message[:200]) for o in outcomes if o.verdict != "pass"
    ]


# ---------------------------------------------------------------------------------------
# issue-10 shapes: token level, dict, keep mask on accuracy

_LENGTHS = [6, 1, 3, 4, 2, 6, 5, 1]
_TOKEN_IDS = np.array([_UUIDS[i] for i in (1, 0, 1, 0, 0, 1, 0, 1)])
_TOKEN_R = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0, 1.0])


def _token_inputs(lengths, rewards):
    T = max(6, *lengths)
    mask = torch.zeros(len(lengths), T, dtype=torch.float64)
    trr = torch.zeros(len(lengths), T, dtype=torch.float64)
    for i, (n, r) in enumerate(zip(lengths, rewards, strict=True)):
        mask[i, :n] = 1.0
        if n:
            trr[i, n - 1] = r
        elif math.isnan(r):
            trr[i, 0] = r
    return trr, mask


def _token_scenarios():
    """(name, lengths, rewards, ids, rows that count); the others must get 0 and not move the rest."""
    yield "plain", _LENGTHS, _TOKEN_R, _TOKEN_IDS, np.ones(8, dtype=bool)
    yield "empty_row", [*_LENGTHS, 0], [*_TOKEN_R, 0.0], np.array([*_TOKEN_IDS, _UUIDS[1]]), np.arange(9) < 8
    yield (
        "nan_row",
        [*_LENGTHS, 3],
        [*_TOKEN_R, math.nan],
        np.array([*_TOKEN_IDS, _UUIDS[0]]),
        np.arange(9) < 8,
    )


def _token_departure(case: Case) -> str | None:
    for name, lengths, rewards, ids, counts in _token_scenarios():
        trr, mask = _token_inputs(lengths, rewards)
        out = case.fn(trr, mask, ids)
        adv = out[0] if isinstance(out, tuple) else out
        r = np.asarray(rewards, dtype=np.float64)
        expected = np.zeros(len(r))
        expected[counts] = _oracle(case, r[counts], ids[counts])
        want = torch.from_numpy(expected).unsqueeze(-1) * mask
        if adv.shape != want.shape or not torch.allclose(adv.double(), want, rtol=1e-7, atol=1e-7):
            return f"{name}: got\n{adv}\nwant\n{want}"
    return None


TOKEN = [c for c in trainers_token.CASES if c.shape == "token"]


@pytest.mark.parametrize("case", TOKEN, ids=_ids(TOKEN))
def test_token_case(case: Case) -> None:
    why = _token_departure(case)
    if case.correct:
        assert why is None, why
    else:
        assert why is not None, f"{case.name} passes every token scenario"


DICT = [c for c in trainers_token.CASES if c.shape == "dict"]


@pytest.mark.parametrize("case", DICT, ids=_ids(DICT))
def test_dict_case(case: Case) -> None:
    r, ids = INDEXED["uuid_strings"]
    out = case.fn({"rewards": torch.tensor(r), "prompt_ids": ids.tolist()})
    got = out["advantages"].double().numpy()
    same = got.shape == r.shape and np.allclose(got, _oracle(case, r, ids), rtol=1e-7, atol=1e-7)
    assert same == case.correct, f"{case.name}: {got}"


ACC_KEEP = [c for c in trainers_token.CASES if c.shape == "keep-mask"]
# correctness (0/1) plus a format bonus in [0, 0.5): all correct, mixed, all wrong, mixed
_SHAPED = np.array([1.2, 1.0, 1.3, 1.1, 1.0, 0.2, 0.0, 1.4, 0.1, 0.3, 0.0, 0.2, 0.0, 1.0, 0.45, 1.49])
_SHAPED_IDS = np.array(["q7", "q2", "q9", "q4"])[np.repeat([0, 1, 2, 3], 4)]


@pytest.mark.parametrize("case", ACC_KEEP, ids=_ids(ACC_KEEP))
def test_accuracy_keep_mask(case: Case) -> None:
    keep = np.asarray(case.keep_mask(torch.tensor(_SHAPED), _SHAPED_IDS)).astype(bool)  # type: ignore[misc]
    expected = np.asarray(dapo_keep_mask((_SHAPED >= 1.0).astype(np.float64), index=_SHAPED_IDS))
    assert np.array_equal(keep, expected) == case.correct, f"{case.name}: {keep} vs {expected}"
