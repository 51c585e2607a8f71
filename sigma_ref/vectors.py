"""Conformance vectors: the suite's cases written as data any trainer's CI can run.

``sigma-ref vectors --out DIR`` writes a versioned set of JSON Lines files, one per family, and a
``manifest.json``; ``sigma_ref/vectors_reader.py`` (one file, numpy only, to vendor) runs a
function against them. Every expected value comes from the oracle (:mod:`sigma_ref.advantages`,
:mod:`sigma_ref.objectives`, :mod:`sigma_ref.difficulty`) and every tolerance from the suite's
working-precision bounds (:mod:`sigma_ref.conformance.precision`, docs/spec.md §7 "Tolerances").
The schema is documented in ``docs/vectors.md``.

Families and the call each case makes (the reader's contract):

* ``advantages``: ``fn(rewards, group_size)`` (layout ``contiguous``), ``fn(rewards[B, G])``
  (``grouped``) or ``fn(rewards, index)`` (``index``: interleaved, ragged integer ids), one set per
  preset convention and RLOO; expected ``advantages``, per-element absolute tolerances per
  working precision (``inf`` where the group is not resolved at that precision).
* ``keep_mask``: ``fn(rewards, index) -> bool[N]``, DAPO's ``0 < k < G`` on binary rewards.
* ``aggregation``: ``fn(loss_mat[N, T], mask[N, T]) -> scalar``, ``sum_it w_it loss_it`` for each
  mode of :data:`sigma_ref.conventions.AGGREGATION_MODES`; the weights ``w`` come along.
* ``objectives``: ``fn(logp, old_logp, advantages, mask, **extras) -> dL/dlogp [N, T]``, the
  per-token gradient of each objective term at and around its boundaries.
* ``closed_forms``: ``fn(p, G)`` or ``fn(p, epsilon)`` at hard points, relative tolerance.

Arrays are nested lists of float64 values written with ``repr`` (exact round trip); the
non-finite values are the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``. A flat array of
:data:`LARGE` or more elements (the G = 4096 group) is written once to ``arrays/<sha256>.npy`` and
referenced as ``{"npy": "arrays/..."}``: numpy's own format rather than Parquet, so that a reader
needs nothing but numpy.

>>> cases = list(advantage_cases())
>>> cases[0]["family"], cases[0]["call"]["layout"], sorted(cases[0]["tolerance"]["atol"])
('advantages', 'contiguous', ['float32', 'float64'])
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["SCHEMA_VERSION", "FAMILIES", "generate", "check", "encode"]

#: Bumped whenever a field changes meaning; readers refuse a newer major version.
SCHEMA_VERSION = 1

Case = dict[str, Any]


def encode(x: Any) -> Any:
    """JSON-ready form of a number, array or nested structure (non-finite floats as strings).

    >>> encode(np.array([1.0, np.nan, -np.inf]))
    [1.0, 'NaN', '-Infinity']
    """
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return [encode(v) for v in x.tolist()] if x.ndim else encode(x.item())
    if isinstance(x, (list, tuple)):
        return [encode(v) for v in x]
    if isinstance(x, dict):
        return {k: encode(v) for k, v in x.items()}
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    return x


# ---------------------------------------------------------------------------
# advantages


def _reward_sets(rng: np.random.Generator) -> list[tuple[str, list[list[float]], str]]:
    """``(name, groups, what)``: the reward groups every convention is checked on."""
    binary = [[1, 0, 0, 0], [1, 1, 0, 1], [0, 1, 0, 0], [1, 0, 1, 0]]
    return [
        ("binary", binary, "binary rewards, 0 < k < G in every group"),
        ("silent", [[1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1]], "silent groups give 0"),
        ("all-silent", [[1, 1, 1, 1], [0, 0, 0, 0]], "every group silent: all advantages 0"),
        (
            "continuous",
            [list(rng.uniform(-2, 3, 6)) for _ in range(3)],
            "continuous rewards (non-dyadic), G = 6",
        ),
        (
            "non-dyadic-silent",
            [[0.1] * 3, [0.7] * 3, [0.2, 0.9, 0.4]],
            "silent groups of equal non-dyadic rewards give 0 (their float mean is not the reward)",
        ),
        (
            "non-dyadic-silent-6",
            [[0.3] * 6, [0.1, 0.7, 0.2, 0.9, 0.4, 0.6]],
            "a silent group of six rewards of 0.3 gives 0",
        ),
        (
            "offset",
            [list(1e4 + rng.uniform(0, 1, 4)) for _ in range(3)],
            "rewards with a large offset (1e4 + U(0, 1)): centering must not cancel",
        ),
        (
            "magnitudes",
            [[1e12, -1e12, 3e11, 0.0], [1e-12, 2e-12, 0.0, 5e-13]],
            "extreme magnitudes (1e12 and 1e-12 spreads)",
        ),
        (
            "one-correct",
            [[1.0] + [0.0] * 15, [0.0] + [1.0] * 15],
            "k = 1 and k = G - 1 at G = 16: the largest advantages, +-sqrt(G - 1)",
        ),
        ("large-G", [list(rng.integers(0, 2, 4096).astype(float))], "one group of G = 4096"),
        (
            "many-groups",
            [list(rng.integers(0, 2, 8).astype(float)) for _ in range(64)],
            "64 groups of 8: no group mixed with another",
        ),
    ]


def _conventions() -> list[str]:
    from .conventions import PRESETS

    return [*PRESETS, "rloo"]


def _eps(convention: str) -> float:
    from .conventions import PRESETS

    conv = PRESETS.get(convention)
    return conv.eps if conv is not None and conv.scale == "group" else 0.0


def _advantages(rewards: np.ndarray, index: np.ndarray, convention: str) -> tuple[np.ndarray, np.ndarray]:
    """The oracle's advantages and each element's divisor ``d`` (0 on silent groups; RLOO: 1)."""
    from .advantages import group_statistics, grpo_advantage, rloo_advantage

    if convention == "rloo":
        a = np.asarray(rloo_advantage(rewards, index=index), dtype=np.float64)
        return a, np.ones_like(a)
    a = np.asarray(grpo_advantage(rewards, convention=convention, index=index), dtype=np.float64)
    stats = group_statistics(rewards, convention=convention, index=index)
    d = np.asarray(stats.expand(stats.divisor), dtype=np.float64)
    return a, np.where(np.asarray(stats.expand(stats.silent), dtype=bool), 0.0, d)


def _tolerances(
    rewards: np.ndarray, index: np.ndarray, divisor: np.ndarray, expected: np.ndarray, convention: str
) -> Any:
    """Per-element absolute tolerances at float64 and float32 working precision (docs/spec.md §7).

    A silent group's centered values are rounding residues, ``<= c (2 + log2 G) u max|R_g|`` (non-dyadic
    rewards: the float mean of ``[0.1] * 3`` is not 0.1), and so is its std; with ``eps > 0`` the
    residue over ``std + eps`` is at most that bound over ``eps``: a residue-level advantage, allowed.
    Without eps the code must see that the group is silent (an O(1) advantage is a wrong update).
    A ``unit_std`` singleton's divisor ``1 + eps`` is a constant trainers write in float32
    (``torch.tensor(1.0) + 1e-6``): it is allowed its float32 rounding, ``2**-24 |A|``.
    """
    from .conventions import PRESETS

    eps = _eps(convention)
    unit_std = convention in PRESETS and PRESETS[convention].singleton == "unit_std"
    from .conformance.precision import PRECISIONS, SAFETY, advantage_tolerance

    _, group = np.unique(index, return_inverse=True)
    group = group.astype(np.intp)
    sizes = np.bincount(group).astype(np.float64)
    top = np.zeros(sizes.size)
    np.maximum.at(top, group, np.abs(rewards))
    silent = (divisor == 0) & (eps > 0)
    out = {}
    for p in ("float64", "float32"):
        atol = advantage_tolerance(
            rewards, group, divisor, expected, precision=p, out_dtype=getattr(torch, p)
        )
        if silent.any():
            residue = SAFETY * (2 + np.log2(sizes[group])) * PRECISIONS[p] * top[group] / max(eps, 1e-300)
            atol = np.where(silent, np.maximum(atol, residue), atol)
        if unit_std:
            atol = np.where(sizes[group] == 1, atol + 2.0**-24 * np.abs(expected), atol)
        out[p] = encode(atol)
    return out


_ADV_TOLERANCE = (
    "|a_i - expected_i| <= atol[precision]_i = 8 (2 + log2 G) u kappa_g (1 + |expected_i|) + u |expected_i|, "
    "kappa_g = max(1, max|R_g| / d_g), u the precision's unit roundoff; Infinity where the group's spread is "
    "below the rounding of its rewards at that precision; on a silent group under a convention with eps > 0, "
    "at least 8 (2 + log2 G) u max|R_g| / eps (a rounding residue over std + eps); a unit_std singleton "
    "adds 2**-24 |expected_i| (its divisor 1 + eps as a float32 constant)"
)


def _advantage_case(
    convention: str, layout: str, name: str, rewards: np.ndarray, index: np.ndarray, what: str, **call: Any
) -> Case:
    expected, divisor = _advantages(rewards, index, convention)
    inputs: dict[str, Any] = {"rewards": encode(rewards)}
    if layout == "index":
        inputs["index"] = encode(index)
    elif layout == "contiguous":
        inputs["group_size"] = call.pop("group_size")
    else:
        inputs["rewards"] = encode(rewards.reshape(-1, call.pop("group_size")))
    return {
        "id": f"advantages/{convention}/{layout}/{name}",
        "family": "advantages",
        "property": "advantage_values",
        "spec": "docs/spec.md §2, §4",
        "what": what,
        "convention": convention,
        "call": {"layout": layout, **call},
        "inputs": inputs,
        "expected": {"advantages": encode(expected)},
        "tolerance": {
            "rule": "working-precision",
            "formula": _ADV_TOLERANCE,
            "atol": _tolerances(rewards, index, divisor, expected, convention),
        },
    }


def advantage_cases() -> Iterator[Case]:
    """Every convention on every reward set, contiguous, grouped and interleaved; edge cases."""
    for convention in _conventions():
        rng = np.random.default_rng(20261204)
        for name, groups, what in _reward_sets(rng):
            G = len(groups[0])
            rewards = np.asarray([r for g in groups for r in g], dtype=np.float64)
            index = np.repeat(np.arange(len(groups)), G)
            yield _advantage_case(convention, "contiguous", name, rewards, index, what, group_size=G)
            if G < 4096:
                yield _advantage_case(convention, "grouped", name, rewards, index, what, group_size=G)
            if len(groups) > 1 and G < 4096:
                order = np.random.default_rng(7).permutation(rewards.size)
                ids = (np.arange(len(groups)) * 7919 + 13)[index]  # sparse ids: not group numbers
                yield _advantage_case(
                    convention, "index", name, rewards[order], ids[order], what + "; interleaved ids"
                )
        # ragged groups by id (sizes 2, 5, 3, 7), interleaved
        rng = np.random.default_rng(11)
        sizes = [2, 5, 3, 7]
        ids = np.repeat(np.array([40, 3, 17, 8]), sizes)
        rewards = rng.integers(0, 2, ids.size).astype(np.float64)
        rewards[:2] = [1.0, 0.0]
        order = rng.permutation(ids.size)
        yield _advantage_case(
            convention,
            "index",
            "ragged",
            rewards[order],
            ids[order],
            "ragged groups (2, 5, 3, 7), interleaved",
        )
        yield from _edge_cases(convention)


def _edge_cases(convention: str) -> Iterator[Case]:
    from .conventions import PRESETS

    single = PRESETS[convention].singleton if convention in PRESETS else "error"
    if single != "error":
        rewards = np.array([1.0, 0.0, 1.0, 0.5, 0.0, 0.0])
        ids = np.array([5, 5, 9, 2, 9, 9])
        case = _advantage_case(
            convention,
            "index",
            "singleton",
            rewards,
            ids,
            f"a group of one ({single!r}) beside larger groups",
        )
        yield case
        rewards = np.array([1.0, 0.0, 0.5])
        yield _advantage_case(
            convention,
            "contiguous",
            "group-size-1",
            rewards,
            np.arange(3),
            f"G = 1: every group is a singleton ({single!r})",
            group_size=1,
        )
    # a trailing partial group: the spec allows refusing it or treating it as its own group
    rewards = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    index = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    case = _advantage_case(
        convention,
        "contiguous",
        "partial-trailing-group",
        rewards,
        index,
        "N = 10 with G = 4: refuse it, or treat the last 2 as their own group",
        group_size=4,
    )
    case["accept"] = ["values", "error"]
    yield case
    # a NaN reward: refuse it, or keep it inside its own group (the other groups exact); a batch-wide
    # std takes every group's rewards, so there the NaN has nowhere to stay
    if convention in PRESETS and PRESETS[convention].scale == "batch":
        return
    rewards = np.array([1.0, 0.0, 0.0, 0.0, 1.0, np.nan, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    index = np.repeat(np.arange(3), 4)
    kept = index != 1
    expected, divisor = _advantages(rewards[kept], index[kept], convention)
    full = np.full(rewards.size, np.nan)
    full[kept] = expected
    div = np.zeros(rewards.size)
    div[kept] = divisor
    atol = _tolerances(np.nan_to_num(rewards), index, div, np.nan_to_num(full), convention)
    for p in atol:
        atol[p] = [a if k else "Infinity" for a, k in zip(atol[p], kept, strict=True)]
    yield {
        "id": f"advantages/{convention}/contiguous/nan-reward",
        "family": "advantages",
        "property": "nan_reward_confined",
        "spec": "docs/spec.md §7 (a NaN reward that spreads to other groups is a WARN)",
        "what": "a NaN reward in group 1: refuse it, or leave the other groups' values exact",
        "convention": convention,
        "call": {"layout": "contiguous"},
        "inputs": {"rewards": encode(rewards), "group_size": 4},
        "expected": {"advantages": encode(full)},
        "tolerance": {"rule": "working-precision", "formula": _ADV_TOLERANCE, "atol": atol},
        "accept": ["values", "error"],
        "verdict_if_wrong": "WARN",
    }


def keep_mask_cases() -> Iterator[Case]:
    """DAPO's keep mask ``0 < k < G`` by group id, on binary rewards."""
    from .advantages import dapo_keep_mask

    rng = np.random.default_rng(3)
    for name, sizes in (("even", [4, 4, 4, 4, 4]), ("ragged", [2, 6, 3, 5, 1])):
        ids = np.repeat(np.arange(len(sizes)) * 31 + 5, sizes)
        rewards = rng.integers(0, 2, ids.size).astype(np.float64)
        rewards[: sizes[0]] = 1.0  # one silent group at least
        order = rng.permutation(ids.size)
        r, i = rewards[order], ids[order]
        yield {
            "id": f"keep_mask/{name}",
            "family": "keep_mask",
            "property": "dapo_keep_mask",
            "spec": "docs/spec.md §2 (DAPO dynamic sampling)",
            "what": f"keep iff 0 < k < G, groups of sizes {sizes} by interleaved ids",
            "call": {"layout": "index"},
            "inputs": {"rewards": encode(r), "index": encode(i)},
            "expected": {"keep": encode(np.asarray(dapo_keep_mask(r, index=i), dtype=bool))},
            "tolerance": {"rule": "exact"},
        }


# ---------------------------------------------------------------------------
# losses


def _masks() -> list[tuple[str, np.ndarray]]:
    return [
        ("ragged", np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], float)),
        ("full", np.ones((3, 4))),
    ]


def aggregation_cases() -> Iterator[Case]:
    """Each aggregation mode: ``sum_it w_it loss_it`` on a ragged and a full mask."""
    from .conventions import AGGREGATION_MODES
    from .objectives import aggregation_weights

    rng = np.random.default_rng(5)
    for mode in AGGREGATION_MODES:
        for name, mask in _masks():
            loss_mat = rng.normal(size=mask.shape)
            loss_mat[mask == 0] = rng.normal(size=int((mask == 0).sum())) * 100  # padding must not count
            kw: dict[str, Any] = {"constant": 8.0} if mode == "seq-mean-token-sum-norm" else {}
            w = aggregation_weights(torch.tensor(mask), mode, **kw).numpy()
            value = float(np.sum(w * np.where(mask > 0, loss_mat, 0.0)))
            n = int(mask.sum())
            yield {
                "id": f"aggregation/{mode}/{name}",
                "family": "aggregation",
                "property": "loss_aggregation",
                "spec": "docs/spec.md §4 (aggregation), proofs/08_aggregation",
                "what": f"{mode} over a {name} mask; padding holds large values that must not count",
                "call": {"mode": mode, **kw},
                "inputs": {"loss_mat": encode(loss_mat), "mask": encode(mask)},
                "expected": {"loss": encode(value), "weights": encode(w)},
                "tolerance": {
                    "rule": "relative",
                    "rtol": 8 * (2 + math.log2(n)) * 2.0**-24,
                    "why": "float32 rounding over the N T terms of the sum (8 (2 + log2 N_tok) u)",
                },
            }


def _objective_inputs(rng: np.random.Generator, ratios: list[float]) -> dict[str, np.ndarray]:
    """Logps whose ratios sit at chosen values (around the clip boundaries), 3 responses x 4 tokens."""
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]], dtype=float)
    old = np.log(rng.uniform(0.05, 0.9, mask.shape))
    ratio = np.resize(np.asarray(ratios, float), mask.shape)
    logp = old + np.log(ratio)
    return {
        "logp": logp,
        "old_logp": old,
        "advantages": np.array([1.3, -0.7, 0.4]),
        "mask": mask,
        "ref_logp": old + rng.normal(0, 0.3, mask.shape),
        "rollout_logp": old + rng.normal(0, 0.6, mask.shape),
    }


def _objectives() -> list[tuple[str, dict[str, Any], list[float]]]:
    """``(name, Objective fields, ratios)``: each term at and around its boundaries."""
    from .conventions import AGGREGATION_MODES

    around = [0.5, 0.79, 0.81, 1.0, 1.19, 1.21, 2.5, 1.05]
    return [
        ("ppo-token-mean", {"kind": "ppo", "eps_low": 0.2}, around),
        ("ppo-asymmetric", {"kind": "ppo", "eps_low": 0.2, "eps_high": 0.28}, [*around, 1.27, 1.29]),
        ("ppo-dual-clip", {"kind": "ppo", "eps_low": 0.2, "dual_clip": 3.0}, [0.5, 2.9, 3.1, 5.0, 1.0, 0.81]),
        ("ppo-seq-mean-token-mean", {"kind": "ppo", "aggregation": "seq-mean-token-mean"}, around),
        ("ppo-seq-mean-token-sum", {"kind": "ppo", "aggregation": "seq-mean-token-sum"}, around),
        # ratios inside the clip range: the unclipped policy gradient of each aggregation
        *(
            (f"pg-{mode}-inside", {"kind": "ppo", "aggregation": mode}, [0.9, 1.0, 1.1, 0.95, 1.02])
            for mode in AGGREGATION_MODES
        ),
        ("gspo", {"kind": "gspo", "eps_low": 3e-4, "eps_high": 4e-4}, [1.0001, 0.9999, 1.0002, 1.0]),
        ("gspo-clipped", {"kind": "gspo", "eps_low": 3e-4, "eps_high": 4e-4}, [1.3, 0.7, 1.2, 0.8]),
        (
            "gspo-token",
            {"kind": "gspo-token", "eps_low": 3e-4, "eps_high": 4e-4},
            [1.0001, 0.9999, 1.0002, 1.0],
        ),
        ("gspo-token-tis", {"kind": "gspo-token", "tis_cap": 2.0}, [1.0001, 0.9999, 1.0002, 1.0]),
        ("cispo", {"kind": "cispo", "eps_low": math.inf, "eps_high": 4.0}, [0.5, 1.0, 4.9, 5.1, 8.0]),
        ("tis-token", {"kind": "ppo", "tis_cap": 2.0}, around),
        ("tis-sequence", {"kind": "ppo", "tis_cap": 2.0, "tis_level": "sequence"}, around),
        ("mis-token", {"kind": "ppo", "tis_cap": 2.0, "tis_mode": "mask"}, around),
        ("kl-k1", {"kind": "ppo", "kl": "k1", "kl_coef": 0.04}, around),
        ("kl-k2", {"kind": "ppo", "kl": "k2", "kl_coef": 0.04}, around),
        ("kl-k3", {"kind": "ppo", "kl": "k3", "kl_coef": 0.04}, around),
        ("kl-k3-is", {"kind": "ppo", "kl": "k3-is", "kl_coef": 0.04}, around),
        ("tis-geometric", {"kind": "ppo", "tis_cap": 2.0, "tis_level": "geometric"}, around),
    ]


def objective_cases() -> Iterator[Case]:
    """Per-token gradients ``dL/dlogp`` of each objective term (:func:`objectives.loss_gradient`)."""
    from .conformance.precision import PRECISIONS, objective_tolerance
    from .objectives import Objective, gradient_terms_by_name

    for name, fields, ratios in _objectives():
        seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
        x = _objective_inputs(np.random.default_rng(seed), ratios)
        obj = Objective(**fields)
        t = {k: torch.tensor(v) for k, v in x.items()}
        terms = gradient_terms_by_name(obj, t)
        grad = (terms["policy"] + terms["kl"]).numpy()
        extras = [k for k in ("ref_logp", "rollout_logp") if _needs(obj, k)]
        atol = {p: encode(objective_tolerance(obj, t, terms, PRECISIONS[p])) for p in ("float64", "float32")}
        yield {
            "id": f"objectives/{name}",
            "family": "objectives",
            "property": "loss_objective",
            "spec": "docs/spec.md §7 level 2, proofs/11_objectives",
            "what": f"{name}: token ratios pi/pi_old cycling through {ratios}",
            "call": {"objective": encode(fields), "extras": extras},
            "inputs": {k: encode(x[k]) for k in ("logp", "old_logp", "advantages", "mask", *extras)},
            "expected": {"grad": encode(grad)},
            "tolerance": {"rule": "working-precision", "formula": _GRAD_TOLERANCE, "atol": atol},
        }


_GRAD_TOLERANCE = (
    "|g_it - expected_it| <= atol[precision]_it = (r + 1e-6) s_it + r max s, r = 8 (2 + log2 N T) u kappa, "
    "kappa = 1 + max_i sum_t mask_it (|logp| + |old_logp| + |ref_logp| + |rollout_logp|), "
    "s_it the size of the token's policy and KL terms (sigma_ref.conformance.precision.objective_tolerance)"
)


def _needs(obj: Any, key: str) -> bool:
    if key == "ref_logp":
        return obj.kl is not None and obj.kl_placement == "loss" and obj.kl_coef != 0
    return obj.tis_cap is not None


# ---------------------------------------------------------------------------
# closed forms


def _closed_form_points() -> list[tuple[str, Callable[..., Any], str, list[tuple[float, float]]]]:
    from . import difficulty as d

    hard: list[tuple[float, float]] = [
        (0.5, 8),
        (0.05, 8),
        (1e-6, 16),
        (0.999999, 16),
        (0.3, 100000),
        (1e-9, 1000),
        (0.5, 2),
    ]
    return [
        ("silent_group_rate", d.silent_group_rate, "p^G + (1-p)^G", hard),
        ("expected_gradient", d.expected_gradient, "(1/G) sum_k C(G,k) p^k (1-p)^(G-k) sqrt(k(G-k))", hard),
        ("fidelity", d.fidelity, "E[g] / sqrt(p(1-p))", [h for h in hard if 0 < h[0] < 1]),
        ("difficulty_weight", lambda p, G: d.difficulty_weight(p), "1 / sqrt(p(1-p))", hard),
        (
            "exact_group_size",
            d.exact_group_size,
            "least G with phi(G, p) >= 1 - epsilon",
            [(0.5, 0.05), (0.05, 0.05), (0.2, 0.01), (0.01, 0.1), (0.5, 1e-6)],
        ),
        (
            "min_group_size",
            d.min_group_size,
            "1 / (8 epsilon p (1-p)) rounded up",
            [(0.5, 0.05), (0.05, 0.05), (0.2, 0.01)],
        ),
    ]


def closed_form_cases() -> Iterator[Case]:
    """The closed forms of docs/spec.md §5 at hard points (tiny p, p near 1, G = 10^5)."""
    for name, fn, formula, points in _closed_form_points():
        for p, second in points:
            integer = name in ("exact_group_size", "min_group_size")
            arg = "epsilon" if integer else "G"
            value = fn(p, **{arg: second})  # epsilon is keyword-only; G may be named
            yield {
                "id": f"closed_forms/{name}/p={p!r},{arg}={second!r}",
                "family": "closed_forms",
                "property": name,
                "spec": "docs/spec.md §5",
                "what": formula,
                "call": {"function": name, "args": ["p", arg]},
                "inputs": {"p": p, arg: second},
                "expected": {"value": encode(int(value) if integer else float(value))},
                "tolerance": {"rule": "exact"} if integer else {"rule": "relative", "rtol": 1e-12},
            }


#: Family name -> the generator of its cases, in file order.
FAMILIES: dict[str, Callable[[], Iterator[Case]]] = {
    "advantages": advantage_cases,
    "keep_mask": keep_mask_cases,
    "aggregation": aggregation_cases,
    "objectives": objective_cases,
    "closed_forms": closed_form_cases,
}


#: Arrays with at least this many elements go to ``arrays/<sha256>.npy`` (numpy's own format: a reader
#: needs nothing but numpy, and ``np.save`` writes the same bytes for the same array).
LARGE = 1024


def _npy(values: list[Any]) -> bytes:
    import io

    a = np.asarray([_SPECIAL.get(v, v) if isinstance(v, str) else v for v in values], dtype=np.float64)
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _externalise(x: Any, arrays: dict[str, bytes]) -> Any:
    """Replace each flat list of ``>= LARGE`` numbers by ``{"npy": "arrays/<sha256>.npy"}``."""
    if isinstance(x, dict):
        return {k: _externalise(v, arrays) for k, v in x.items()}
    if isinstance(x, list) and len(x) >= LARGE and not any(isinstance(v, list) for v in x):
        data = _npy(x)
        name = f"arrays/{hashlib.sha256(data).hexdigest()[:24]}.npy"
        arrays[name] = data
        return {"npy": name}
    return x


def _lines(family: str, arrays: dict[str, bytes]) -> str:
    return "".join(
        json.dumps(_externalise(c, arrays), separators=(",", ":")) + "\n" for c in FAMILIES[family]()
    )


def _render() -> dict[str, str | bytes]:
    """File name -> contents of a full set of vectors (deterministic: fixed seeds, ``repr`` floats)."""
    from . import __version__

    arrays: dict[str, bytes] = {}
    files: dict[str, str | bytes] = {f"{family}.jsonl": _lines(family, arrays) for family in FAMILIES}
    manifest = {
        "schema": "sigma-ref-vectors",
        "schema_version": SCHEMA_VERSION,
        "generator": f"sigma-ref {__version__}",
        "documentation": "docs/vectors.md",
        "families": {
            name[: -len(".jsonl")]: {
                "file": name,
                "cases": text.count("\n"),
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
            }
            for name, text in files.items()
            if isinstance(text, str)
        },
        "arrays": sorted(arrays),
    }
    files.update(arrays)
    files["manifest.json"] = json.dumps(manifest, indent=2) + "\n"
    return files


def _out_dir(out: str | Path) -> Path:
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file; name a directory (it is created if missing)")
    return path


def generate(out: str | Path) -> dict[str, int]:
    """Write the vectors into directory ``out`` (created if missing); returns cases per family.

    Files are written whole to a temporary name and renamed, so a reader never sees half a file.
    """
    path = _out_dir(out)
    (path / "arrays").mkdir(parents=True, exist_ok=True)
    files = _render()
    for name, content in files.items():
        target = path / name
        tmp = target.with_name(f".{target.name}.tmp")
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        else:
            tmp.write_text(content)
        tmp.replace(target)
    keep = {path / name for name in files}
    for old in (path / "arrays").glob("*.npy"):  # arrays no case refers to any more
        if old not in keep:
            old.unlink()
    return {
        name[: -len(".jsonl")]: content.count("\n")
        for name, content in files.items()
        if isinstance(content, str) and name.endswith(".jsonl")
    }


def check(directory: str | Path) -> list[str]:
    """The files of ``directory`` that differ from freshly generated vectors (empty: up to date)."""
    path = _out_dir(directory)
    stale = []
    files = _render()
    for name, content in files.items():
        target = path / name
        data = content if isinstance(content, bytes) else content.encode()
        if not target.is_file() or target.read_bytes() != data:
            stale.append(name)
    extra = {p.relative_to(path).as_posix() for p in path.glob("arrays/*.npy")} - set(files)
    return stale + sorted(extra)
