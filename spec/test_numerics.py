"""Level 4, numerics.

float64, float32, float16 and bfloat16 within the tolerances of
``sigma_ref.testing.TOLERANCES``; large G; many groups; CUDA when present (docs/spec.md §7,
level 4).

Each ``test_<name>`` is one property, written once under ``@conformance_property`` (``spec/__init__.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sigma_ref._compare import find_mismatch
from sigma_ref.advantages import dapo_keep_mask
from sigma_ref.conformance.adapter import Batch
from sigma_ref.conformance.core import DTYPES, Context, PropertyFailure, conformance_property
from sigma_ref.conformance.diagnose import diagnose_mismatch
from sigma_ref.conformance.inputs import LIVE, batches
from sigma_ref.conformance.precision import coarser
from sigma_ref.conformance.reference import as_numpy


def _dtype_supported(ctx: Context, dtype_name: str) -> str | None:
    if dtype_name not in ctx.adapter.dtypes:
        return f"{ctx.adapter.name} does not declare {dtype_name}"
    return None


def _dtype_accuracy(ctx: Context, batch: Batch, dtype_name: str) -> None:
    """Fail unless the advantages of ``batch`` in ``dtype_name`` are within its tolerance."""
    dtype = DTYPES[dtype_name]
    rounded = batch.with_rewards(torch.tensor(batch.rewards).to(dtype).double().numpy())
    out = ctx.call(rounded, dtype=dtype)
    try:
        a = ctx.adapter.flat(out).detach().to("cpu", torch.float64).numpy()
    except TypeError as exc:
        ctx.fail(str(exc), rounded, kind="shape")
    expected = ctx.expected(rounded)
    found = find_mismatch(
        a, expected, rtol=0.0, atol=ctx.tolerance(rounded, expected, dtype=dtype), noun="advantages"
    )
    if found is None:
        return
    cause, confirmed = diagnose_mismatch(ctx, rounded, a)
    if cause is None and dtype != torch.float64:
        try:  # the targeted probe: the same rewards in float64
            wide = ctx.flat(rounded, dtype=torch.float64)
        except PropertyFailure:
            wide = None
        if (
            wide is not None
            and find_mismatch(
                wide, expected, rtol=0.0, atol=ctx.tolerance(rounded, expected), noun="advantages"
            )
            is None
        ):
            cause, confirmed = (
                f"correct in float64 but not in {dtype_name}: the statistics lose range or precision "
                f"in {dtype_name} (e.g. squares of 1024 exceed float16's 65504, or E[x^2] - E[x]^2 "
                "cancels); compute them in float32 or float64 and cast back",
                True,
            )
    work = coarser(ctx.precision, dtype_name)
    ctx.fail(
        f"{dtype_name} advantages (working precision {work}, tolerance from its unit roundoff and each "
        f"group's condition number): {found.render()}",
        rounded,
        cause=cause,
        confirmed=confirmed,
        kind="mismatch",
        mismatch=found,
        facts={"dtype": dtype_name, "precision": work},
    )


@conformance_property(
    level="numerics",
    examples=lambda ctx, p: LIVE,
    strategy=lambda ctx, p: batches(
        ctx, silent="never", max_size=16, values="mixed" if p in ("float64", "float32") else "dyadic"
    ),
    applies=_dtype_supported,
    params=lambda adapter: tuple(d for d in DTYPES if d in adapter.dtypes),
)
def test_dtype_accuracy(ctx: Context, batch: Batch, dtype_name: str) -> None:
    """In each declared dtype, |A - oracle(R)| <= c (2 + log2 G) u kappa_g (1 + |A|) + u_out |A| with u
    the unit roundoff of the working precision (the coarser of the input dtype and the precision the
    implementation computes in) and kappa_g = max|R| / d the group's condition number.
    """
    _dtype_accuracy(ctx, batch, dtype_name)


def _large_groups(ctx: Context, p: Any) -> list[tuple[Batch, str]]:
    G = 4096
    rows = np.zeros((4, G))
    rows[0, :1] = 1
    rows[1, :7] = 1
    rows[2, : G // 2] = 1
    rows[3, : G - 1] = 1
    real = (np.arange(2 * G) % 37 / 4.0 - 4.0).reshape(2, G)
    dtypes = [d for d in ("float64", "float32") if d in ctx.adapter.dtypes]
    return [(Batch.grouped(r), d) for r in (rows, real) for d in dtypes]


@conformance_property(
    level="numerics",
    examples=_large_groups,
)
def test_large_group(ctx: Context, ex: tuple[Batch, str], p: Any) -> None:
    """G = 4096 (k = 1, 7, G/2, G-1, and real rewards) in float64 and float32 stays within the dtype's
    tolerance: A+ = sqrt((G-k)/k) reaches 64.
    """
    batch, dtype_name = ex
    _dtype_accuracy(ctx, batch, dtype_name)


def _half_range(ctx: Context, p: Any) -> list[tuple[Batch, str]]:
    batch = Batch.grouped(
        np.array(
            [
                [1024.0, 512.0, 0.0, -256.0, 768.0, 1024.0, 8.0, 0.0],
                [-1024.0, 1024.0, -1024.0, 256.0, -1024.0, 0.0, 1024.0, -1024.0],
            ]
        )
    )
    return [(batch, d) for d in ("float16", "bfloat16") if d in ctx.adapter.dtypes]


@conformance_property(
    level="numerics",
    examples=_half_range,
    applies=lambda ctx, p: (
        None if {"float16", "bfloat16"} & set(ctx.adapter.dtypes) else "no half dtype declared"
    ),
)
def test_half_precision_range(ctx: Context, ex: tuple[Batch, str], p: Any) -> None:
    """float16 and bfloat16 rewards of magnitude up to 1024 (squares beyond float16's range) give finite
    advantages within the dtype's tolerance.
    """
    batch, dtype_name = ex
    out = ctx.call(batch, dtype=DTYPES[dtype_name])
    a = ctx.adapter.flat(out).detach().to("cpu", torch.float64).numpy()
    if not np.isfinite(a).all():
        ctx.fail(
            f"{dtype_name} advantages hold {a[~np.isfinite(a)][0]} for rewards of magnitude 1024, "
            "but should be finite",
            batch,
            cause="the variance overflows in half precision (squares of 1024 exceed float16's 65504): "
            "compute the statistics in float32 and cast back",
            kind="not-finite",
            facts={"dtype": dtype_name},
        )
    if ((a == 0) & (ctx.expected(batch) != 0)).all():
        ctx.fail(
            f"{dtype_name} advantages: actual=0 everywhere for rewards of magnitude 1024, but should be "
            f"{ctx.expected(batch)[:2].round(4).tolist()}, ...",
            batch,
            cause="the variance overflows in half precision (squares of 1024 exceed float16's 65504) "
            "and the inf/NaN std is masked to 0: compute the statistics in float32 and cast back",
            kind="value",
            facts={"dtype": dtype_name},
        )
    _dtype_accuracy(ctx, batch, dtype_name)


@conformance_property(
    level="numerics",
    examples=lambda ctx, p: [
        (Batch.grouped([[1.0] * 4, [0.0] * 4, [1.0, 0.0, 0.0, 0.0]]), d)
        for d in ("float16", "bfloat16")
        if d in ctx.adapter.dtypes
    ],
    applies=lambda ctx, p: (
        None if {"float16", "bfloat16"} & set(ctx.adapter.dtypes) else "no half dtype declared"
    ),
    required=lambda ctx: False,
)
def test_half_precision_silent(ctx: Context, ex: tuple[Batch, str], p: Any) -> None:
    """Silent groups stay 0 in float16 and bfloat16 too (an eps below float16's smallest subnormal,
    6e-8, rounds to 0 and gives 0/0): a WARN, as trainers feed float32 rewards.
    """
    batch, dtype_name = ex
    out = ctx.call(batch, dtype=DTYPES[dtype_name])
    a = ctx.adapter.flat(out).detach().to("cpu", torch.float64).numpy()
    silent = ~as_numpy(dapo_keep_mask(batch.rewards, index=batch.index)).astype(bool)
    eps = ctx.reference.eps
    ctx.fail_nonzero(
        silent & ~(np.abs(a) <= 1e-3),
        a,
        lambda i: f"{dtype_name} advantages: out[{i}]={a[i]} in a silent group, but should be 0",
        batch,
        cause=f"std = 0 and the eps ({eps:g}) is below {dtype_name}'s smallest subnormal, so it "
        "rounds to 0 and the division is 0/0; guard silent groups explicitly or compute in float32"
        if 0 < eps < 6e-8 and dtype_name == "float16"
        else "silent groups are not guarded in this dtype",
        confirmed=0 < eps < 6e-8 and dtype_name == "float16",
        facts={"dtype": dtype_name},
    )


def _large_batch(ctx: Context, p: Any) -> list[Batch]:
    rng = np.random.default_rng(0)
    return [
        Batch.grouped(rng.integers(0, 2, (512, 8)).astype(np.float64)),
        Batch.grouped(rng.integers(-20, 21, (300, 5)) / 4.0),
    ]


@conformance_property(
    level="numerics",
    examples=_large_batch,
)
def test_large_batch(ctx: Context, batch: Batch, p: Any) -> None:
    """A batch of 512 groups matches the oracle group for group (no group dropped or mixed)."""
    a = ctx.flat(batch)
    ctx.compare("advantages", batch, a, ctx.expected(batch))


def _cuda_applies(ctx: Context, p: Any) -> str | None:
    if "cuda" not in ctx.adapter.devices:
        return f"{ctx.adapter.name} does not declare cuda"
    if not torch.cuda.is_available():
        return "no CUDA device: torch.cuda.is_available() is False"
    return None


@conformance_property(
    level="numerics",
    examples=lambda ctx, p: LIVE + _large_batch(ctx, p)[:1],
    applies=_cuda_applies,
)
def test_cuda_device(ctx: Context, batch: Batch, p: Any) -> None:
    """On a CUDA tensor the advantages stay on the device and equal the oracle's (float64 tolerance)."""
    out = ctx.call(batch, device="cuda")
    if getattr(out, "device", torch.device("cpu")).type != "cuda":
        ctx.fail(
            f"out.device={getattr(out, 'device', None)}, but should be cuda",
            batch,
            cause="the result moves to the CPU; keep it on rewards.device",
            kind="device",
        )
    a = out.detach().to("cpu", torch.float64).numpy().reshape(-1)
    ctx.compare("advantages on CUDA", batch, a, ctx.expected(batch))
