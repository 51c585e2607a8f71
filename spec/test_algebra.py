"""Level 1, algebra.

Zero mean within each group; permutation equivariance within a group; groups
independent; invariance to a reward shift; GRPO invariant to a positive scale, Dr. GRPO and
RLOO equivariant; the binary two-valued structure (docs/spec.md §7, level 1).

Each ``test_<name>`` is one property, written once under ``@conformance_property`` (``spec/__init__.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from sigma_ref import strategies as sst
from sigma_ref._compare import find_mismatch
from sigma_ref.conformance.adapter import TOKEN_T, Batch, array_text, token_lengths
from sigma_ref.conformance.core import Context, Finding, PropertyFailure, conformance_property, guarded
from sigma_ref.conformance.inputs import (
    BINARY,
    ILL,
    LIVE,
    WITH_SILENT,
    any_batch,
    at_last,
    batches,
    call_token,
    groups_of,
    live,
    seeded,
    token_only,
    token_repr,
)


@conformance_property(
    level="algebra",
    examples=lambda ctx, p: LIVE + WITH_SILENT + ILL,
    strategy=any_batch,
)
def test_advantage_values(ctx: Context, batch: Batch, p: Any) -> None:
    """A == oracle(R) under the convention: (R - mu) / d per group (d = 1 for Dr. GRPO; RLOO: G/(G-1) (R
    - mu)).
    """
    a = ctx.flat(batch)
    ctx.compare("advantages", batch, a, ctx.expected(batch))


@conformance_property(
    level="algebra",
    examples=live,
    strategy=lambda ctx, p: batches(ctx, silent="never"),
)
def test_group_centering(ctx: Context, batch: Batch, p: Any) -> None:
    """Zero mean within each group: sum_{i in g} A_i = 0."""
    a = ctx.flat(batch)
    g = groups_of(batch)
    sums = np.bincount(g, a)
    slack = np.bincount(g, ctx.tolerance(batch))
    ctx.fail_nonzero(
        np.abs(sums) > slack,
        sums,
        lambda j: f"sum of advantages in group {j}: actual={sums[j]:.6g}, but should be 0",
        batch,
        a,
        at="group",
    )


def _permute_within(batch: Batch, rng: np.random.Generator) -> np.ndarray:
    """A permutation of positions that maps each group's positions onto themselves."""
    perm = np.arange(batch.n)
    for gid in np.unique(batch.index):  # test input preparation, a few groups
        pos = np.nonzero(batch.index == gid)[0]
        perm[pos] = pos[rng.permutation(pos.size)]
    return perm


@conformance_property(
    level="algebra",
    examples=lambda ctx, p: [(b, 0) for b in LIVE],
    strategy=lambda ctx, p: seeded(batches(ctx)),
)
def test_permutation_equivariance(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    """Permuting responses within a group permutes their advantages: A(pi R) = pi A(R)."""
    batch, s = ex
    perm = _permute_within(batch, np.random.default_rng(s))
    a = ctx.flat(batch)
    moved = batch.with_rewards(batch.rewards[perm])
    b = ctx.flat(moved)
    tol = ctx.tolerance(moved) + ctx.tolerance(batch)[perm]
    ctx.compare("advantages of permuted rewards A(pi R) vs pi A(R)", moved, b, a[perm], tolerance=tol)


def _group_scale(ctx: Context, p: Any) -> str | None:
    conv = ctx.reference.convention
    if conv is not None and conv.scale == "batch":
        return "the convention divides by one std over the batch (scale='batch'): groups share it"
    return None


@conformance_property(
    level="algebra",
    examples=lambda ctx, p: [(LIVE[1], 1), (LIVE[1], 2)],
    strategy=lambda ctx, p: seeded(batches(ctx, min_groups=2)),
    applies=_group_scale,
)
def test_group_independence(ctx: Context, ex: tuple[Batch, int], p: Any) -> None:
    """Each group's advantages depend only on its own rewards: A_g(R) = A_g(R_g)."""
    batch, s = ex
    rng = np.random.default_rng(s)
    g = groups_of(batch)
    j = int(rng.integers(g.max() + 1))
    rewards = batch.rewards.copy()
    member = g == j
    rewards[member] = rng.integers(-8, 9, member.sum()) / 4
    changed = batch.with_rewards(rewards)
    a, b = ctx.flat(batch), ctx.flat(changed)
    others = ~member
    tol = (ctx.tolerance(batch) + ctx.tolerance(changed))[others]
    found = find_mismatch(b[others], a[others], rtol=0.0, atol=tol, noun="advantages")
    if found:
        ctx.fail(
            f"changing the rewards of group {j} changed other groups' advantages: {found.render()}",
            changed,
            b,
            kind="mismatch",
            mismatch=found,
        )


@conformance_property(
    level="algebra",
    examples=lambda ctx, p: [(LIVE[0], 3.0), (LIVE[1], -1.5)],
    strategy=lambda ctx, p: st.tuples(batches(ctx), st.integers(-40, 40).map(lambda i: i / 4)),
)
def test_shift_invariance(ctx: Context, ex: tuple[Batch, float], p: Any) -> None:
    """A reward shift changes nothing: A(R + c) = A(R)."""
    batch, c = ex
    a = ctx.flat(batch)
    shifted = batch.with_rewards(batch.rewards + c)
    b = ctx.flat(shifted)
    tol = ctx.tolerance(shifted) + ctx.tolerance(batch)
    ctx.compare(f"advantages of R + {c:g} vs advantages of R", shifted, b, a, tolerance=tol)


@conformance_property(
    level="algebra",
    examples=lambda ctx, p: [(LIVE[0], 4.0), (LIVE[1], 0.5)],
    strategy=lambda ctx, p: st.tuples(
        batches(ctx, silent="never"), st.sampled_from([0.25, 0.5, 2.0, 3.0, 8.0])
    ),
)
def test_scale_behaviour(ctx: Context, ex: tuple[Batch, float], p: Any) -> None:
    """GRPO is invariant to a positive reward scale, A(lambda R) = A(R); Dr. GRPO and RLOO are
    equivariant, A(lambda R) = lambda A(R).
    """
    batch, lam = ex
    a = ctx.flat(batch)
    scaled = batch.with_rewards(batch.rewards * lam)
    b = ctx.flat(scaled)
    tol = ctx.tolerance(scaled) + ctx.tolerance(batch) * (1.0 if ctx.reference.scale_invariant else lam)
    if ctx.reference.scale_invariant:
        _, _, std = ctx.reference.statistics(batch.rewards, batch.index)
        live = std[std > 0]
        # d = std + eps: the relative change of A is at most eps / (lambda std)
        slack = 4 * ctx.reference.eps / (min(lam, 1.0) * live.min()) if live.size else 0.0
        ctx.compare(
            f"advantages of {lam:g} R vs advantages of R (GRPO divides by the std: invariant)",
            scaled,
            b,
            a,
            tolerance=tol + slack * np.abs(a),
        )
    else:
        ctx.compare(
            f"advantages of {lam:g} R vs {lam:g} times advantages of R (no division: equivariant)",
            scaled,
            b,
            lam * a,
            tolerance=tol,
        )


@conformance_property(
    level="algebra",
    examples=lambda ctx, p: list(BINARY),
    strategy=lambda ctx, p: batches(ctx, binary=True, silent="never"),
)
def test_binary_two_valued(ctx: Context, batch: Batch, p: Any) -> None:
    """Binary rewards give two values per group: A+ on correct, A- on incorrect responses; with d =
    sigma, A+ = sqrt((G-k)/k) and A- = -sqrt(k/(G-k)).
    """
    a = ctx.flat(batch)
    e = ctx.expected(batch)
    g = groups_of(batch)
    slack = np.zeros(g.max() + 1)
    np.maximum.at(slack, g, 2 * ctx.tolerance(batch, e))
    for side, name in ((batch.rewards == 1, "A+"), (batch.rewards == 0, "A-")):
        lo = np.full(g.max() + 1, np.inf)
        hi = np.full(g.max() + 1, -np.inf)
        np.minimum.at(lo, g[side], a[side])
        np.maximum.at(hi, g[side], a[side])
        seen = np.isfinite(hi - lo)
        spread = (hi - lo)[seen]
        if (spread > slack[seen]).any():
            ctx.fail(
                f"{name} takes {spread.max():.3g} different values within a group, but should be one value",
                batch,
                a,
                kind="value",
                facts={"side": name, "spread": float(spread.max())},
            )
    ctx.compare(
        "two-valued advantages (A+ = sqrt((G-k)/k) sigma/d, A- = -sqrt(k/(G-k)) sigma/d)", batch, a, e
    )


def _index_only(ctx: Context, p: Any) -> str | None:
    if not ctx.adapter.ragged:
        return f"layout {ctx.adapter.layout!r} takes contiguous groups of one size"
    return None


_INTERLEAVED = [
    Batch(np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 2.0]), np.array([7, 3, 7, 3, 7, 11, 11])),
    # uuid-like ids whose sorted order (a, c, e) is neither the first-seen order (e, a, c) nor
    # its reverse: a result returned in sorted-id order is caught
    Batch(
        np.array([0.25, 1.0, 3.0, 0.0, 0.5, 2.0, 1.0, 0.0]),
        np.array(["e7f1", "a09c", "c3d2", "e7f1", "a09c", "c3d2", "e7f1", "a09c"], dtype=object),
    ),
]


@conformance_property(
    level="algebra",
    examples=lambda ctx, p: list(_INTERLEAVED),
    strategy=lambda ctx, p: st.one_of(
        sst.ragged_batches(interleaved=True, min_groups=2).map(lambda ri: Batch(*ri)),
        sst.ragged_batches(interleaved=True, min_groups=2, ids="str", values="mixed").map(
            lambda ri: Batch(*ri)
        ),
    ),
    applies=_index_only,
)
def test_interleaved_groups(ctx: Context, batch: Batch, p: Any) -> None:
    """Groups given by an index are found wherever their responses are: ragged, interleaved, any ids."""
    a = ctx.flat(batch)
    ctx.compare("advantages", batch, a, ctx.expected(batch))


def _partial_examples(ctx: Context, p: Any) -> list[tuple[np.ndarray, int]]:
    return [
        (np.array([1.0, 0.0, 0.0, 0.0, 0.0, 3.0, 1.0, 0.0, 1.0, 0.0]), 4),
        (np.array([0.5, 2.0, -1.0, 1.0, 0.25, 0.0, 4.0, 1.0]), 3),
    ]


def _partial_strategy(ctx: Context, p: Any) -> st.SearchStrategy[tuple[np.ndarray, int]]:
    def build(r: np.ndarray, extra: int) -> tuple[np.ndarray, int]:
        G = r.shape[1]
        tail = np.arange(extra, dtype=np.float64) % 2  # a live remainder: 0, 1, 0, ...
        return np.concatenate([r.reshape(-1), tail]), G

    groups = sst.reward_groups(min_size=3, max_size=8, silent="never", values="mixed")
    return groups.flatmap(lambda r: st.integers(2, r.shape[1] - 1).map(lambda e: build(r, e)))


@conformance_property(
    level="algebra",
    examples=_partial_examples,
    strategy=_partial_strategy,
    applies=lambda ctx, p: (
        None
        if ctx.adapter.layout == "contiguous"
        else f"layout {ctx.adapter.layout!r} has no group size to misalign"
    ),
)
def test_partial_trailing_group(ctx: Context, ex: tuple[np.ndarray, int], p: Any) -> None:
    """With N rewards not a multiple of G, a contiguous implementation raises, or treats the trailing N
    mod G responses as a group of their own; it never returns values computed from missing or padded
    entries.
    """
    rewards, G = ex
    n = rewards.shape[0]
    call = f"{ctx.adapter.name}(rewards={array_text(rewards)}, G={G})"
    out = guarded(
        ctx.adapter.advantages, torch.tensor(rewards, dtype=torch.float64), G, what=call, refusal_ok=True
    )
    if out is None:
        return  # refused: a clear error is one of the two right answers
    batch = Batch(rewards, np.arange(n) // G)  # the remainder is a group of its own
    flat = out.reshape(-1) if isinstance(out, torch.Tensor) else None
    if flat is None or flat.shape[0] != n:
        got = tuple(out.shape) if hasattr(out, "shape") else type(out).__name__
        raise PropertyFailure(
            Finding(
                f"N = {n} rewards with G = {G} (a trailing partial group of {n % G}) gave out.shape={got}, "
                f"but should raise or return {n} advantages with the remainder as its own group",
                call,
                cause=f"the last {n % G} responses are dropped or mixed into another group",
                confirmed=True,
                kind="shape",
            )
        )
    a = flat.detach().to("cpu", torch.float64).numpy()
    expected = ctx.expected(batch)
    found = find_mismatch(a, expected, rtol=0.0, atol=ctx.tolerance(batch, expected), noun="advantages")
    if found is not None:
        raise PropertyFailure(
            Finding(
                f"N = {n} rewards with G = {G}: a trailing partial group of {n % G} was neither refused nor "
                f"treated as its own group: {found.render()}",
                call,
                ctx.reference.name,
                *_partial_cause(ctx, a, rewards, G),
                kind="mismatch",
                mismatch=found,
            )
        )


def _partial_cause(ctx: Context, a: np.ndarray, rewards: np.ndarray, G: int) -> tuple[str | None, bool]:
    """What the code did with the trailing partial group, from the values it returned: the whole
    batch normalised as one group (a size check that falls back to one group), or the full groups
    right and only the tail off (the tail computed from missing or padded entries); else nothing."""
    n = rewards.shape[0]
    whole = Batch(rewards, np.zeros(n, dtype=np.int64))
    one = ctx.expected(whole)
    if find_mismatch(a, one, rtol=0.0, atol=ctx.tolerance(whole, one), noun="advantages") is None:
        return (
            f"N = {n} is not a multiple of G = {G}, and the code then normalises the whole batch as one "
            "group (its values equal the oracle's over all N rewards at once); raise, or group the "
            "remainder on its own",
            True,
        )
    full = n - n % G
    head = Batch(rewards[:full], np.arange(full) // G)
    exp_head = ctx.expected(head)
    if (
        full
        and find_mismatch(a[:full], exp_head, rtol=0.0, atol=ctx.tolerance(head, exp_head), noun="advantages")
        is None
    ):
        return (
            f"the {full // G} full groups are right and only the last {n % G} responses are off: the "
            "trailing group is computed from missing or padded entries, or with the nominal group size "
            f"G = {G} in place of its own {n % G}; raise (e.g. rewards.view(-1, G)) or group the remainder "
            "on its own",
            True,
        )
    return None, False


def _short_lengths(n: int) -> torch.Tensor:
    """Every row shorter than T: the last column is padding (0) everywhere."""
    return torch.clamp(token_lengths(n), max=TOKEN_T - 1)


@conformance_property(
    level="algebra",
    examples=lambda ctx, p: LIVE + BINARY,
    strategy=any_batch,
    applies=token_only,
)
def test_token_reward_position(ctx: Context, batch: Batch, p: Any) -> None:
    """Layout token: the scalar reward of a response is read at its last valid token (or the row is
    summed), not at the last column: with every response shorter than T, the advantage at the last valid
    token equals oracle(R).
    """
    lengths = _short_lengths(batch.n)
    _, _, adv = call_token(ctx, batch, lengths)
    a = at_last(adv, lengths)
    expected = ctx.expected(batch)
    tol = ctx.tolerance(batch, expected)
    found = find_mismatch(a, expected, rtol=0.0, atol=tol, noun="advantages")
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
        if (
            find_mismatch(a, ctx.expected(batch.with_rewards(read)), rtol=0.0, atol=tol, noun="advantages")
            is None
        ):
            cause = words
            break
    raise PropertyFailure(
        Finding(
            f"advantage at the last valid token: {found.render()}",
            token_repr(ctx, batch, lengths),
            ctx.reference.name,
            cause,
            confirmed=cause is not None,
            kind="mismatch",
            mismatch=found,
        )
    )


def _runs(sizes: list[int], values: list[float]) -> Batch:
    """A batch of contiguous groups of the given ``sizes``, rewards cycled from ``values``."""
    n = sum(sizes)
    rewards = np.array([values[i % len(values)] for i in range(n)], dtype=np.float64)
    return Batch(rewards, np.repeat(np.arange(len(sizes)), sizes))


#: Uneven runs: sizes 4, 2, 6 (N = 12 = 3 x 4: code that takes group_sizes[0] for every group runs and
#: regroups), then the issue's group of 5 between groups of 8, with binary and continuous rewards.
_UNEVEN = [
    _runs([4, 2, 6], [1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0, 2.0, 0.25]),
    _runs([8, 5, 8], [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]),
    _runs([8, 5, 8], [0.5, 2.0, -1.0, 0.75, 3.0, 0.0, 1.25, -0.5, 1.5, 0.0, 2.5]),
]


def _sizes_only(ctx: Context, p: Any) -> str | None:
    return None if ctx.adapter.layout == "sizes" else f"layout {ctx.adapter.layout!r} takes no group sizes"


@conformance_property(
    level="algebra",
    examples=lambda ctx, p: list(_UNEVEN),
    strategy=lambda ctx, p: sst.ragged_batches(
        min_groups=2, max_groups=4, interleaved=False, values="mixed"
    ).map(lambda ri: Batch(*ri)),
    applies=_sizes_only,
)
def test_uneven_group_sizes(ctx: Context, ex: Batch, p: Any) -> None:
    """Positional groups of uneven sizes (``fn(rewards, group_sizes)``, e.g. a group of 5 between groups
    of 8) are each normalised over their own run: A equals the oracle's per group.
    """
    batch = ex
    _, sizes = batch.runs()
    call = ctx.adapter.call_repr(batch)
    try:
        a = ctx.flat(batch)
    except PropertyFailure:
        if len(set(sizes)) > 1 and batch.n % sizes[0] != 0:
            raise PropertyFailure(
                Finding(
                    f"the call raised on group sizes {sizes}, but should return {batch.n} advantages",
                    call,
                    ctx.reference.name,
                    f"the code takes group_sizes[0] = {sizes[0]} for every group (a view(-1, G)), which "
                    f"cannot reshape N = {batch.n}: split by the sizes (torch.split(rewards, group_sizes))",
                    confirmed=True,
                    kind="raised",
                )
            ) from None
        raise
    expected = ctx.expected(batch)
    tol = ctx.tolerance(batch, expected)
    found = find_mismatch(a, expected, rtol=0.0, atol=tol, noun="advantages")
    if found is None:
        return
    starts = np.cumsum([0, *sizes[:-1]])
    longest = max(sizes)
    # the groups padded with zeros to the longest one, each row's statistics over the padded row
    padded = np.zeros((len(sizes), longest))
    for j, (s, g) in enumerate(zip(starts, sizes, strict=True)):
        padded[j, :g] = batch.rewards[s : s + g]
    over_padding = ctx.expected(Batch.grouped(padded)).reshape(len(sizes), longest)
    readings: dict[str, np.ndarray] = {
        f"each group's statistics are taken over the groups padded with zeros to the longest size "
        f"({longest}, pad_sequence): a short group counts the padding as rewards; take each group's mean "
        "and std over its own run": np.concatenate([over_padding[j, :g] for j, g in enumerate(sizes)]),
    }
    if batch.n % sizes[0] == 0:
        equal = Batch(batch.rewards, np.repeat(np.arange(batch.n // sizes[0]), sizes[0]))
        readings[
            f"every group is taken to have group_sizes[0] = {sizes[0]} members (a view(-1, G)): the runs "
            f"after the first uneven group are regrouped; split by the sizes {sizes}"
        ] = ctx.expected(equal)
    cause = next(
        (
            w
            for w, v in readings.items()
            if find_mismatch(a, v, rtol=0.0, atol=tol, noun="advantages") is None
        ),
        None,
    )
    raise PropertyFailure(
        Finding(
            f"advantages of uneven groups {sizes}: {found.render()}",
            call,
            ctx.reference.name,
            cause,
            confirmed=cause is not None,
            kind="mismatch",
            mismatch=found,
        )
    )
