"""Properties of the call shapes trainers use: token-level advantages and keep-mask filters.

Layout ``token`` (verl's ``compute_grpo_outcome_advantage(token_level_rewards,
response_mask, index)``): the suite builds the token inputs itself
(:func:`~sigma_ref.conformance.adapter.token_inputs`: lengths 1 to T, the scalar reward on
the last valid token) and the value properties of :mod:`.properties` read one value per
row at its last valid token. The properties here check what that reduction cannot see:
where the scalar is read, the broadcast over the valid tokens and the zeros on padding,
``returns``, and rows that must not move their siblings' baseline (an all-zero mask, a
NaN reward).

Layout ``keep-mask`` (a DAPO dynamic-sampling filter): :func:`layout_reason` makes the
advantage properties not applicable, and ``keep_mask_rule`` checks the filter on the
metric it declares (``Adapter.keep_metric``).

Registered into :data:`.properties.PROPERTIES` when :mod:`.properties` is imported.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from ..advantages import dapo_keep_mask
from ..testing import mismatch_message
from .adapter import TOKEN_T, Batch, array_text, token_lengths
from .properties import (
    _BINARY,
    _LIVE,
    _WITH_SILENT,
    Context,
    Finding,
    Property,
    PropertyFailure,
    _batches,
    _guarded,
    _register,
)
from .reference import as_numpy

__all__ = ["layout_reason", "ACCURACY_THRESHOLD"]

#: A response is correct (accuracy 1) iff its reward exceeds this, for filters declared with
#: ``keep_metric="accuracy"``. The suite's shaped probes are accuracy plus a shaping bonus in
#: [0, 0.5), so ``R > 0.5`` and ``R >= 1`` (correctness plus a format bonus) agree on them.
ACCURACY_THRESHOLD = 0.5

#: The properties a keep-mask filter is checked by (the rest need advantages).
_KEEP_MASK_PROPERTIES = ("keep_mask_rule", "dapo_keep_mask")


def layout_reason(prop: Property, ctx: Context) -> str | None:
    """Why ``prop`` does not apply to the adapter's layout (``None`` if it does).

    A ``keep-mask`` adapter is a filter: it returns which responses to keep, not
    advantages, so only the keep-mask properties apply.
    """
    if ctx.adapter.layout == "keep-mask" and prop.name not in _KEEP_MASK_PROPERTIES:
        return "layout 'keep-mask' is a dynamic-sampling filter: it returns a keep mask, not advantages"
    return None


def _token_only(ctx: Context, p: Any) -> str | None:
    if ctx.adapter.layout != "token":
        return f"layout {ctx.adapter.layout!r} takes no token-level inputs (layout 'token' does)"
    return None


def _call_token(
    ctx: Context, batch: Batch, lengths: torch.Tensor | None = None, rewards: np.ndarray | None = None
) -> tuple[tuple[Any, ...], Any, np.ndarray]:
    """``(inputs given, raw output, advantages [N, T] as float64 numpy)``; failures as findings."""
    r = torch.tensor(batch.rewards if rewards is None else rewards, dtype=torch.float64)
    call = _token_repr(ctx, batch, lengths)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            given, raw, adv = ctx.adapter.call_token(batch, r, lengths)
    except Exception as exc:
        raise PropertyFailure(Finding(f"raised {type(exc).__name__}: {exc}", call)) from exc
    shape = tuple(given[0].shape)
    if not isinstance(adv, torch.Tensor) or tuple(adv.shape) != shape:
        got = tuple(adv.shape) if hasattr(adv, "shape") else type(adv).__name__
        raise PropertyFailure(
            Finding(f"advantages.shape={got}, but should be {shape} (like token_level_rewards)", call)
        )
    return given, raw, adv.detach().to("cpu", torch.float64).numpy()


def _token_repr(ctx: Context, batch: Batch, lengths: torch.Tensor | None) -> str:
    n = batch.n
    L = (token_lengths(n) if lengths is None else lengths).tolist()
    r = array_text(batch.rewards)
    idx = array_text(batch.index)
    return (
        f"{ctx.adapter.name}(token_level_rewards=[{n}, {TOKEN_T}] with R={r} on the last valid token of "
        f"lengths {L}, response_mask=[{n}, {TOKEN_T}], index={idx})"
    )


def _at_last(adv: np.ndarray, lengths: torch.Tensor) -> np.ndarray:
    L = lengths.numpy()
    return adv[np.arange(adv.shape[0]), np.maximum(L - 1, 0)]


# ---------------------------------------------------------------------------------
# where the scalar is read
def _short_lengths(n: int) -> torch.Tensor:
    """Every row shorter than T: the last column is padding (0) everywhere."""
    return torch.clamp(token_lengths(n), max=TOKEN_T - 1)


def _check_position(ctx: Context, batch: Batch, p: Any) -> None:
    lengths = _short_lengths(batch.n)
    _, _, adv = _call_token(ctx, batch, lengths)
    a = _at_last(adv, lengths)
    expected = ctx.expected(batch)
    tol = ctx.tolerance(batch, expected)
    found = mismatch_message(a, expected, 0.0, tol)
    if found is None:
        return
    L = lengths.numpy().astype(np.float64)
    readings = {
        "the scalar is read from the last column (token_level_rewards[:, -1]), which is padding for a "
        "response shorter than T: read it at the last valid token (or sum the row)": np.zeros_like(
            batch.rewards
        ),
        "the scalar is the mean of the token rewards over the valid tokens (R / length): sum the row, or "
        "read the last valid token": batch.rewards / L,
        "the scalar is read from the first token: read the last valid token": np.where(
            L == 1, batch.rewards, 0.0
        ),
    }
    cause = None
    for words, read in readings.items():
        if mismatch_message(a, ctx.expected(batch.with_rewards(read)), 0.0, tol) is None:
            cause = words
            break
    raise PropertyFailure(
        Finding(
            f"advantage at the last valid token: {found[0]}",
            _token_repr(ctx, batch, lengths),
            ctx.reference.name,
            cause,
            confirmed=cause is not None,
        )
    )


_register(
    Property(
        "token_reward_position",
        "algebra",
        "Layout token: the scalar reward of a response is read at its last valid token (or the row is "
        "summed), not at the last column: with every response shorter than T, the advantage at the last "
        "valid token equals oracle(R).",
        _check_position,
        lambda ctx, p: _LIVE + _BINARY,
        lambda ctx, p: _batches(ctx),
        applies=_token_only,
    )
)


# ---------------------------------------------------------------------------------
# broadcast over the valid tokens, zeros on padding, inputs untouched
def _check_broadcast(ctx: Context, batch: Batch, p: Any) -> None:
    lengths = token_lengths(batch.n)
    r = torch.tensor(batch.rewards, dtype=torch.float64)
    call = _token_repr(ctx, batch, lengths)
    given = ctx.adapter.layout_args(batch, r, lengths)
    before = [g.clone() for g in given[:2]]
    args, kwargs = ctx.adapter.build_call(batch, r, given)
    adv_raw = ctx.adapter.pick(_guarded(ctx.adapter.advantages, *args, what=call, **kwargs))
    for name, old, new in zip(("token_level_rewards", "response_mask"), before, given[:2], strict=True):
        if not torch.equal(old, new):
            raise PropertyFailure(
                Finding(
                    f"{name} changed during the call, but should be unchanged",
                    call,
                    cause=f"the implementation modifies {name} in place; work on a copy",
                    confirmed=True,
                )
            )
    if not isinstance(adv_raw, torch.Tensor) or tuple(adv_raw.shape) != tuple(given[0].shape):
        got = tuple(adv_raw.shape) if hasattr(adv_raw, "shape") else type(adv_raw).__name__
        raise PropertyFailure(Finding(f"advantages.shape={got}, but should be {tuple(given[0].shape)}", call))
    adv = adv_raw.detach().to("cpu", torch.float64).numpy()
    valid = given[1].numpy() > 0
    row = _at_last(adv, lengths)
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
            )
        )


_register(
    Property(
        "token_broadcast",
        "contract",
        "Layout token: the advantage is broadcast over the response, A_it = A_i on every valid token and "
        "A_it = 0 where response_mask is 0; token_level_rewards and response_mask are not mutated.",
        _check_broadcast,
        lambda ctx, p: _LIVE + _WITH_SILENT,
        lambda ctx, p: _batches(ctx),
        applies=_token_only,
    )
)


def _check_returns(ctx: Context, batch: Batch, p: Any) -> None:
    _, raw, adv = _call_token(ctx, batch)
    call = _token_repr(ctx, batch, None)
    second = ctx.adapter.second_output(raw)
    if second is None:
        raise PropertyFailure(
            Finding(
                f"no returns came back ({type(raw).__name__}), but the implementation declares "
                "returns='advantages'",
                call,
                cause="return (advantages, returns) or a dict with 'returns'",
                confirmed=True,
            )
        )
    if not isinstance(second, torch.Tensor) or tuple(second.shape) != adv.shape:
        got = tuple(second.shape) if hasattr(second, "shape") else type(second).__name__
        raise PropertyFailure(Finding(f"returns.shape={got}, but should be {adv.shape}", call))
    ret = second.detach().to("cpu", torch.float64).numpy()
    found = mismatch_message(ret.reshape(-1), adv.reshape(-1), 0.0, np.zeros(adv.size))
    if found is not None:
        raise PropertyFailure(
            Finding(
                f"returns vs advantages: {found[0]}",
                call,
                cause="an outcome estimator's returns are its advantages (verl: return scores, scores)",
                confirmed=True,
            )
        )


_register(
    Property(
        "token_returns",
        "contract",
        "Layout token: returns (a tuple's second item, or a dict's 'returns') are what the implementation "
        "declares; returns='advantages' (verl's outcome estimators) means returns == advantages exactly.",
        _check_returns,
        lambda ctx, p: _LIVE,
        applies=lambda ctx, p: (
            _token_only(ctx, p)
            or (
                None
                if ctx.adapter.returns
                else "no returns declared (Adapter(returns='advantages') checks them)"
            )
        ),
    )
)


# ---------------------------------------------------------------------------------
# rows that must not move their siblings' baseline
#: Group 0 holds a rejected response (row 2: an all-zero mask); group 1 is silent and holds
#: one too (row 8); group 2 is a plain live group.
_REJECTED = Batch(
    np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 3.0, 1.0, 0.0]),
    np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2]),
)
_REJECTED_ROWS = np.array([2, 8])


def _check_rejected(ctx: Context, batch: Batch, p: Any) -> None:
    rows = _REJECTED_ROWS
    lengths = token_lengths(batch.n)
    lengths[rows] = 0
    _, _, adv = _call_token(ctx, batch, lengths)
    call = _token_repr(ctx, batch, lengths)
    if (adv[rows] != 0).any():
        raise PropertyFailure(
            Finding(
                f"advantages of a rejected response (all-zero mask, row {int(rows[0])}) = "
                f"{adv[rows][adv[rows] != 0][:3].tolist()}, but should be 0 on every token",
                call,
                cause="the advantages are not multiplied by response_mask",
                confirmed=True,
            )
        )
    keep = np.ones(batch.n, dtype=bool)
    keep[rows] = False
    a = _at_last(adv, lengths)[keep]
    kept = Batch(batch.rewards[keep], batch.index[keep])
    expected = ctx.expected(kept)
    tol = ctx.tolerance(kept, expected)
    found = mismatch_message(a, expected, 0.0, tol)
    if found is None:
        return
    as_zero = batch.rewards.copy()
    as_zero[rows] = 0.0  # the rejected rows' token rewards sum to 0
    counted = ctx.expected(batch.with_rewards(as_zero))[keep]
    effect = np.abs(a - expected)
    silent_moved = a[kept.index == 1]
    measured = (
        f"measured: siblings' advantages {np.round(a, 4).tolist()} vs {np.round(expected, 4).tolist()} "
        f"without the rejected rows (max change {effect.max():.4g}); the silent group [1, 1, 1, 1] gets "
        f"{np.round(silent_moved, 4).tolist()}"
    )
    if mismatch_message(a, counted, 0.0, tol + ctx.tolerance(batch.with_rewards(as_zero))[keep]) is None:
        raise PropertyFailure(
            Finding(
                f"a rejected response (all-zero response_mask) moved its siblings' baseline: {measured}",
                call,
                ctx.reference.name,
                "the rejected row is counted as a response with reward 0 (its token rewards sum to 0), so "
                "its group's baseline includes it, as verl 0.9.1's outcome estimators do (GRPO, its "
                "vectorized form, RLOO); "
                "leave rows with response_mask.sum(-1) == 0 out of the group statistics",
                confirmed=True,
                verdict="WARN",
            )
        )
    raise PropertyFailure(
        Finding(
            "a rejected response (all-zero response_mask) moved its siblings' baseline: "
            f"{found[0]}; {measured}",
            call,
            ctx.reference.name,
        )
    )


_register(
    Property(
        "rejected_rows_ignored",
        "silent",
        "Layout token: a rejected response (response_mask all 0) gets A = 0 on every token and does not "
        "move its siblings' baseline: their advantages equal oracle(R) of the group without it (counting "
        "it as reward 0, as verl 0.9.1 does, is a WARN with the measured change).",
        _check_rejected,
        lambda ctx, p: [_REJECTED],
        applies=_token_only,
    )
)


_NAN = Batch(
    np.array([1.0, 0.0, np.nan, 0.0, 1.0, 0.0, 3.0, 1.0, 0.0]), np.array([0, 0, 0, 0, 0, 1, 1, 1, 1])
)


def _check_nan_row(ctx: Context, batch: Batch, p: Any) -> None:
    row = int(np.argmax(np.isnan(batch.rewards)))
    lengths = token_lengths(batch.n)
    try:
        _, _, adv = _call_token(ctx, batch, lengths)
    except PropertyFailure as exc:
        if exc.finding.what.startswith("raised"):
            return  # a clear refusal of a NaN reward
        raise
    call = _token_repr(ctx, batch, lengths)
    a = _at_last(adv, lengths)
    keep = np.arange(batch.n) != row
    kept = Batch(batch.rewards[keep], batch.index[keep])
    expected = ctx.expected(kept)
    got = a[keep]
    same = kept.index == batch.index[row]
    found_other = mismatch_message(got[~same], expected[~same], 0.0, ctx.tolerance(kept, expected)[~same])
    if found_other is not None:
        raise PropertyFailure(
            Finding(
                f"a NaN reward in group {batch.index[row]} changed other groups' advantages: "
                f"{found_other[0]}",
                call,
                ctx.reference.name,
                "a NaN in one group contaminates the batch statistics",
                confirmed=True,
            )
        )
    sib = got[same]
    if np.isnan(sib).all():
        raise PropertyFailure(
            Finding(
                f"a NaN reward made its siblings' advantages NaN ({sib.tolist()}), but should raise or leave "
                f"them at {np.round(expected[same], 4).tolist()} (the group without it)",
                call,
                ctx.reference.name,
                "the NaN enters the group's statistics (as in verl 0.9.1's outcome estimators); loud, "
                "since the loss turns NaN, but the group is lost: "
                "raise on a NaN reward, or leave it out",
                confirmed=True,
                verdict="WARN",
            )
        )
    found = mismatch_message(sib, expected[same], 0.0, ctx.tolerance(kept, expected)[same])
    if found is not None:
        replaced = batch.rewards.copy()
        replaced[row] = 0.0
        zero = ctx.expected(batch.with_rewards(replaced))[keep][same]
        counted = mismatch_message(sib, zero, 0.0, ctx.tolerance(kept, expected)[same]) is None
        raise PropertyFailure(
            Finding(
                f"a NaN reward silently moved its siblings' baseline: {found[0]}",
                call,
                ctx.reference.name,
                "the NaN is replaced by 0 (e.g. nan_to_num) and counted in the group's mean and std"
                if counted
                else None,
                confirmed=counted,
            )
        )


_register(
    Property(
        "nan_rows_confined",
        "silent",
        "Layout token: a response with a NaN reward raises, or leaves its siblings' baseline unmoved (their "
        "advantages equal oracle(R) of the group without it) and other groups untouched; NaN siblings are a "
        "WARN, silently moved finite values a FAIL.",
        _check_nan_row,
        lambda ctx, p: [_NAN],
        applies=_token_only,
    )
)


# ---------------------------------------------------------------------------------
# keep-mask filters
#: Shaped rewards (accuracy + a bonus in [0, 0.5)): group 7 is all correct but its rewards
#: differ, group 3 all wrong but differing, group 5 mixed; ids whose sorted and first-seen
#: orders differ.
_SHAPED = Batch(
    np.array([1.1, 0.1, 1.0, 0.0, 1.05, 1.1, 0.3, 0.4, 1.2, 0.2, 0.0, 1.25]),
    np.array([7, 3, 7, 3, 7, 5, 3, 5, 7, 3, 5, 5]),
)


#: The same shaped rewards as contiguous groups of one size, for layouts without ids.
_SHAPED_GROUPED = Batch.grouped([[1.1, 1.0, 1.05, 1.2], [0.1, 0.0, 0.3, 0.2], [1.1, 0.4, 0.0, 1.25]])


def _accuracy(rewards: np.ndarray) -> np.ndarray:
    return (rewards > ACCURACY_THRESHOLD).astype(np.float64)


def _check_keep_rule(ctx: Context, batch: Batch, p: Any) -> None:
    metric = ctx.adapter.keep_metric
    signal = _accuracy(batch.rewards) if metric == "accuracy" else batch.rewards
    want = as_numpy(dapo_keep_mask(signal, index=batch.index)).astype(bool)
    got = _guarded(ctx.adapter.keep, batch, what=f"keep_mask on {batch!r}").numpy().astype(bool)
    call = f"{ctx.adapter.name}(rewards={batch.rewards.round(4).tolist()}, index={batch.index.tolist()})"
    if got.shape != want.shape:
        raise PropertyFailure(
            Finding(f"keep mask of shape {got.shape}, but should be {want.shape} (or one per group)", call)
        )
    if np.array_equal(got, want):
        return
    i = int(np.argmax(got != want))
    other = _accuracy(batch.rewards) if metric == "reward" else batch.rewards
    swapped = as_numpy(dapo_keep_mask(other, index=batch.index)).astype(bool)
    cause = None
    if np.array_equal(got, swapped):
        cause = (
            "the filter drops on the spread of the rewards, not of the accuracy: shaped rewards that differ "
            "while every response is right (or every one wrong) are kept; count k on the accuracy"
            if metric == "accuracy"
            else "the filter counts k on an accuracy (R > 0.5), but declares keep_metric='reward'"
        )
    raise PropertyFailure(
        Finding(
            f"keep[{i}]={bool(got[i])} (group {batch.index[i]}), but should be {bool(want[i])}: keep iff "
            f"0 < k < G on the {metric}",
            call,
            cause=cause,
            confirmed=cause is not None,
        )
    )


def _keep_strategy(ctx: Context, p: Any) -> Any:
    from hypothesis import strategies as st

    def shaped(b: Batch, s: int) -> Batch:
        rng = np.random.default_rng(s)
        return b.with_rewards(b.rewards + rng.integers(0, 8, b.n) / 16)  # a bonus in [0, 0.5)

    return st.tuples(_batches(ctx, binary=True), st.integers(0, 2**32 - 1)).map(lambda bs: shaped(*bs))


_register(
    Property(
        "keep_mask_rule",
        "silent",
        "A dynamic-sampling filter keeps a response iff 0 < k < G in its group, k counted on its declared "
        "metric: accuracy (R > 0.5; rewards are accuracy plus a bonus in [0, 0.5)), so shaped rewards "
        "that differ while every response is right (or "
        "wrong) are dropped, or the reward (keep iff not all equal); per response or per group.",
        _check_keep_rule,
        lambda ctx, p: [_SHAPED if ctx.adapter.ragged else _SHAPED_GROUPED, *_WITH_SILENT, *_BINARY],
        _keep_strategy,
        applies=lambda ctx, p: (
            None if ctx.adapter.keep_mask is not None else "no keep mask given (layout keep-mask checks one)"
        ),
    )
)
