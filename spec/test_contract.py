"""Level 0, the contract.

Shape, dtype and device preserved; inputs not mutated; deterministic; finite outputs;
no autograd graph; a clear failure on malformed input (docs/spec.md §7, level 0).

Each ``test_<name>`` is one property, written once under ``@conformance_property`` (``spec/__init__.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sigma_ref._compare import find_mismatch
from sigma_ref.conformance.adapter import Adapter, Batch, token_lengths
from sigma_ref.conformance.core import (
    DTYPES,
    Context,
    Finding,
    PropertyFailure,
    conformance_property,
    guarded,
)
from sigma_ref.conformance.inputs import (
    LIVE,
    WITH_SILENT,
    any_batch,
    at_last,
    call_token,
    groups_of,
    live,
    token_only,
    token_repr,
)


@conformance_property(level="contract", examples=live, strategy=any_batch)
def test_output_shape(ctx: Context, batch: Batch, p: Any) -> None:
    """out.shape == rewards.shape for the layout: [N] (contiguous, index) or [B, G] (grouped)."""
    out = ctx.call(batch)
    shape = ctx.adapter.expected_shape(batch)
    if not isinstance(out, torch.Tensor):
        ctx.fail(
            f"type(out)={type(out).__name__}, but should be torch.Tensor",
            batch,
            cause="return a torch.Tensor like the rewards",
            kind="shape",
        )
    if tuple(out.shape) != shape:
        cause = None
        if out.numel() < batch.n:
            cause = (
                f"{batch.n - out.numel()} advantages are missing: a group was dropped (often the last one)"
            )
        ctx.fail(f"out.shape={tuple(out.shape)}, but should be {shape}", batch, cause=cause, kind="shape")


def _dtype_params(adapter: Adapter) -> Sequence[Any]:
    return adapter.dtypes


@conformance_property(
    level="contract",
    examples=lambda ctx, p: LIVE[:1],
    params=_dtype_params,
)
def test_output_dtype(ctx: Context, batch: Batch, dtype_name: str) -> None:
    """out.dtype == rewards.dtype for every floating dtype the implementation declares."""
    dtype = DTYPES[dtype_name]
    out = ctx.call(batch, dtype=dtype)
    got = getattr(out, "dtype", None)
    if got != dtype:
        floating = isinstance(got, torch.dtype) and got.is_floating_point
        ctx.fail(
            f"out.dtype={got}, but should be {dtype}",
            batch,
            cause=f"the result is cast to another dtype; return advantages.to(rewards.dtype) ({dtype})"
            + (
                "; the values are judged at the precision computed in, so training is unaffected"
                if floating
                else ""
            ),
            verdict="WARN" if floating else "FAIL",
            kind="dtype",
            facts={"dtype": str(got), "expected": str(dtype)},
        )


@conformance_property(
    level="contract",
    examples=lambda ctx, p: LIVE[:1],
)
def test_output_device(ctx: Context, batch: Batch, p: Any) -> None:
    """out.device == rewards.device (CPU here; CUDA in numerics)."""
    out = ctx.call(batch)
    if getattr(out, "device", None) != torch.device("cpu"):
        ctx.fail(
            f"out.device={getattr(out, 'device', None)}, but should be cpu",
            batch,
            cause="the result moves to another device; keep it on rewards.device",
            verdict="WARN",
            kind="device",
        )


@conformance_property(level="contract", examples=live, strategy=any_batch)
def test_input_not_mutated(ctx: Context, batch: Batch, p: Any) -> None:
    """rewards (and index) are equal before and after the call."""
    rewards = torch.tensor(batch.rewards, dtype=torch.float64)
    before = rewards.clone()
    index_before = batch.index.copy()
    probe = Batch(batch.rewards, batch.index.copy())
    ctx.call(probe, rewards=rewards)
    if not torch.equal(rewards, before):
        changed = int(torch.nonzero(rewards != before)[0, 0])
        ctx.fail(
            f"rewards[{changed}]={float(rewards[changed]):g} after the call, but should be "
            f"{float(before[changed]):g} (unchanged)",
            batch,
            cause="the implementation modifies rewards in place (e.g. rewards.sub_(mean)); work on a copy",
            kind="mutated",
            facts={"input": "rewards", "index": changed},
        )
    if not np.array_equal(probe.index, index_before):
        ctx.fail(
            "index changed during the call, but should be unchanged",
            batch,
            cause="the implementation modifies the group index in place",
            kind="mutated",
            facts={"input": "index"},
        )


@conformance_property(level="contract", examples=live, strategy=any_batch)
def test_deterministic(ctx: Context, batch: Batch, p: Any) -> None:
    """Two calls on equal rewards give bitwise equal advantages."""
    a = ctx.flat(batch)
    b = ctx.flat(batch)
    if not np.array_equal(a, b, equal_nan=True):
        i = int(np.argmax(a != b))
        ctx.fail(
            f"second call gave actual={b[i]:.17g}, but should be {a[i]:.17g} (the first call's) at index {i}",
            batch,
            cause="the result depends on randomness or state (e.g. noise added to break ties)",
            kind="nondeterministic",
            facts={"index": i},
        )


@conformance_property(
    level="contract",
    examples=lambda ctx, p: LIVE + WITH_SILENT,
    strategy=any_batch,
)
def test_finite_output(ctx: Context, batch: Batch, p: Any) -> None:
    """Finite rewards give finite advantages, silent groups included."""
    a = ctx.flat(batch)
    if not np.isfinite(a).all():
        i = int(np.argmax(~np.isfinite(a)))
        ctx.fail(f"out[{i}]={a[i]}, but should be finite", batch, a, kind="not-finite", facts={"index": i})


@conformance_property(
    level="contract",
    examples=lambda ctx, p: LIVE[:1],
)
def test_output_detached(ctx: Context, batch: Batch, p: Any) -> None:
    """Advantages are constants of the update: out.requires_grad is False even when rewards require
    grad.
    """
    rewards = torch.tensor(batch.rewards, dtype=torch.float64, requires_grad=True)
    out = ctx.call(batch, rewards=rewards)
    if getattr(out, "requires_grad", False):
        ctx.fail(
            "out.requires_grad=True, but should be False for rewards that require grad",
            batch,
            cause="gradient flows into the advantages: compute them under torch.no_grad() or "
            ".detach() them, so the policy loss treats them as constants (hygiene: a trainer that "
            "calls it under no_grad or on rewards without grad is unaffected)",
            verdict="WARN",
            kind="requires-grad",
        )


@conformance_property(
    level="contract",
    examples=lambda ctx, p: LIVE,
    required=lambda ctx: False,
)
def test_rejects_malformed(ctx: Context, batch: Batch, p: Any) -> None:
    """A NaN reward raises, or at least stays confined to its own group (advisory)."""
    rewards = batch.rewards.copy()
    rewards[0] = math.nan
    bad = batch.with_rewards(rewards)
    out = guarded(ctx.adapter, bad, what=lambda: ctx.adapter.call_repr(bad), refusal_ok=True)
    if out is None:
        return  # a clear failure
    a = out.numpy()
    g = groups_of(bad)
    spread = ~np.isfinite(a) & (g != g[0])
    if spread.any():
        ctx.fail(
            "a NaN reward in the first group made other groups' advantages NaN, but should raise "
            "or stay within its group",
            bad,
            cause="a NaN in one group contaminates the batch statistics",
            kind="not-finite",
        )


@conformance_property(
    level="contract",
    examples=lambda ctx, p: LIVE + WITH_SILENT,
    strategy=any_batch,
    applies=token_only,
)
def test_token_broadcast(ctx: Context, batch: Batch, p: Any) -> None:
    """Layout token: the advantage is broadcast over the response, A_it = A_i on every valid token and
    A_it = 0 where response_mask is 0; token_level_rewards and response_mask are not mutated.
    """
    lengths = token_lengths(batch.n)
    r = torch.tensor(batch.rewards, dtype=torch.float64)
    call = token_repr(ctx, batch, lengths)
    given = ctx.adapter.layout_args(batch, r, lengths)
    before = [g.clone() for g in given[:2]]
    args, kwargs = ctx.adapter.build_call(batch, r, given)
    adv_raw = ctx.adapter.pick(guarded(ctx.adapter.advantages, *args, what=call, **kwargs))
    for name, old, new in zip(("token_level_rewards", "response_mask"), before, given[:2], strict=True):
        if not torch.equal(old, new):
            raise PropertyFailure(
                Finding(
                    f"{name} changed during the call, but should be unchanged",
                    call,
                    cause=f"the implementation modifies {name} in place; work on a copy",
                    confirmed=True,
                    kind="mutated",
                    facts={"input": name},
                )
            )
    if not isinstance(adv_raw, torch.Tensor) or tuple(adv_raw.shape) != tuple(given[0].shape):
        got = tuple(adv_raw.shape) if hasattr(adv_raw, "shape") else type(adv_raw).__name__
        raise PropertyFailure(
            Finding(f"advantages.shape={got}, but should be {tuple(given[0].shape)}", call, kind="shape")
        )
    adv = adv_raw.detach().to("cpu", torch.float64).numpy()
    valid = given[1].numpy() > 0
    row = at_last(adv, lengths)
    pad = ~valid & (adv != 0)
    if pad.any():
        i, t = (int(v) for v in np.argwhere(pad)[0])
        leaked = bool(np.all(np.where(~valid, adv, row[:, None]) == row[:, None]))
        raise PropertyFailure(
            Finding(
                f"advantages[{i}, {t}]={adv[i, t]:.6g} at a padding token (mask 0), but should be 0",
                call,
                cause="the advantages are not multiplied by response_mask: padding tokens hold the row's "
                "advantage (multiply by the mask)"
                if leaked
                else "padding tokens get non-zero advantages",
                confirmed=leaked,
                kind="value",
                facts={"index": [i, t], "actual": float(adv[i, t]), "expected": 0.0},
            )
        )
    scale = np.maximum(np.abs(row), 1.0)[:, None]
    spread = valid & (np.abs(adv - row[:, None]) > 8 * np.finfo(np.float64).eps * scale)
    if spread.any():
        i, t = (int(v) for v in np.argwhere(spread)[0])
        raise PropertyFailure(
            Finding(
                f"advantages[{i}, {t}]={adv[i, t]:.6g} on a valid token, but should be {row[i]:.6g} "
                f"(the row's "
                f"value at its last valid token: one outcome advantage per response)",
                call,
                cause="the advantage is not broadcast over the response: an outcome estimator gives every "
                "valid token the same value",
                confirmed=True,
                kind="value",
                facts={"index": [i, t], "actual": float(adv[i, t]), "expected": float(row[i])},
            )
        )


@conformance_property(
    level="contract",
    examples=lambda ctx, p: LIVE,
    applies=lambda ctx, p: (
        token_only(ctx, p)
        or (
            None if ctx.adapter.returns else "no returns declared (Adapter(returns='advantages') checks them)"
        )
    ),
)
def test_token_returns(ctx: Context, batch: Batch, p: Any) -> None:
    """Layout token: returns (a tuple's second item, or a dict's 'returns') are what the implementation
    declares; returns='advantages' (verl's outcome estimators) means returns == advantages exactly.
    """
    _, raw, adv = call_token(ctx, batch)
    call = token_repr(ctx, batch, None)
    second = ctx.adapter.second_output(raw)
    if second is None:
        raise PropertyFailure(
            Finding(
                f"no returns came back ({type(raw).__name__}), but the implementation declares "
                "returns='advantages'",
                call,
                cause="return (advantages, returns) or a dict with 'returns'",
                confirmed=True,
                kind="shape",
            )
        )
    if not isinstance(second, torch.Tensor) or tuple(second.shape) != adv.shape:
        got = tuple(second.shape) if hasattr(second, "shape") else type(second).__name__
        raise PropertyFailure(Finding(f"returns.shape={got}, but should be {adv.shape}", call, kind="shape"))
    ret = second.detach().to("cpu", torch.float64).numpy()
    found = find_mismatch(
        ret.reshape(-1), adv.reshape(-1), rtol=0.0, atol=np.zeros(adv.size), noun="advantages"
    )
    if found is not None:
        raise PropertyFailure(
            Finding(
                f"returns vs advantages: {found.render()}",
                call,
                cause="an outcome estimator's returns are its advantages (verl: return scores, scores)",
                confirmed=True,
                kind="mismatch",
                mismatch=found,
            )
        )
