"""The bug class of a failing split gradient from the probes at (1, M), (1, M + 1) and (W, 1), when no
normaliser hypothesis (:class:`~sigma_ref.conformance.normalisers.Judge`) names it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeGuard

import numpy as np

from .fitting import _RTOL, _Fit, _fit, _scale
from .protocol import _Key, _Run


def _diagnose(
    runs: Mapping[_Key, _Run],
    g_full: np.ndarray,
    W: int,
    M: int,
    split: str,
    c: float,
    resid: float,
    adv_ok: bool,
    loss_scale: str,
    aggregation: str | None,
    rtol: float = _RTOL,
) -> str:
    """Name the bug class from the probes at (1, M), (1, M + 1) and (W, 1)."""
    if not adv_ok:
        return (
            f"the gradient at W={W}, M={M} is {_scale(c, resid, detail=False)} the full-batch gradient "
            "because the advantages differ (see scaleout_advantages)"
        )

    def probe(w: int, m: int) -> _Fit | None:
        run = runs.get((w, m, split)) if w > 1 else runs.get((w, m, "whole-groups"))
        return None if run is None else _fit(np.asarray(run["grad"]), g_full)

    on_m = probe(1, M) if M > 1 else None
    on_m2 = probe(1, M + 1) if M > 1 else None
    on_w = probe(W, 1) if W > 1 else None
    if W == 1:
        on_m = (c, resid, 1.0)
    if M == 1:
        on_w = (c, resid, 1.0)

    def bad(f: _Fit | None) -> TypeGuard[_Fit]:
        """The probe ran and its gradient differs from the full batch's."""
        return f is not None and f[2] > rtol

    def pure(f: _Fit) -> bool:
        """One factor explains the probe's gradient."""
        return f[1] <= 1e-6

    if bad(on_m):
        trend = ""
        if on_m2 is not None:
            trend = f"; {_scale(on_m2[0], on_m2[1], detail=False)} at M = {M + 1}"
            if (
                pure(on_m)
                and pure(on_m2)
                and abs(on_m[0] * M - 1) < 1e-6
                and abs(on_m2[0] * (M + 1) - 1) < 1e-6
            ):
                trend += ": it shrinks as 1/M"
            elif (
                pure(on_m)
                and pure(on_m2)
                and abs(on_m[0] / M - 1) < 1e-6
                and abs(on_m2[0] / (M + 1) - 1) < 1e-6
            ):
                trend += ": it grows as M"
        confirm = (
            f" (confirmed on one rank: {_scale(on_m[0], on_m[1], detail=False)} at W = 1, M = {M}{trend}"
        )
        if W > 1 and bad(on_w):
            confirm += (
                f"; {_scale(on_w[0], on_w[1], detail=False)} at W = {W}, M = 1, where a rank's shard is "
                "one micro-batch)"
            )
        elif W > 1:
            confirm += f"; equal at W = {W}, M = 1)"
        else:
            confirm += ")"
        hint = ""
        if loss_scale == "mean-over-micro-batches" and pure(on_m) and abs(on_m[0] * M - 1) < 1e-6:
            hint = (
                ". The harness divides each micro-batch loss by M (loss_scale='mean-over-micro-batches'), "
                "so the loss must normalise by the micro-batch's share, not by a constant"
            )
            if aggregation == "seq-mean-token-sum-norm":
                hint += "; seq-mean-token-sum-norm's sum grows with the micro-batch size"
        return (
            "normaliser computed per micro-batch: the accumulated gradient is "
            f"{_scale(c, resid)} the full-batch gradient at M = {M}{confirm}{hint}"
        )
    if bad(on_w):
        confirm = (
            f" (confirmed with one micro-batch: {_scale(on_w[0], on_w[1], detail=False)} at W = {W}, M = 1"
        )
        confirm += f"; equal on one rank at M = {M})" if M > 1 else ")"
        if pure(on_w) and abs(on_w[0] * W - 1) < 1e-6:
            return (
                f"world size not applied: the rank-averaged gradient is {_scale(c, resid)} the full-batch "
                f"gradient at W = {W}{confirm}. DDP divides by W; the loss must multiply by world_size "
                "(verl's dp_size)"
            )
        return (
            f"token count not gathered across ranks: the rank-averaged gradient is {_scale(c, resid)} the "
            f"full-batch gradient at W = {W}{confirm}. Normalise by the global count (global_num_tokens, "
            "or all-reduce rank_num_tokens over process_group)"
        )
    return (
        f"the gradient at W = {W}, M = {M} is {_scale(c, resid)} the full-batch gradient, although it is "
        f"right at W = 1, M = {M} and at W = {W}, M = 1: the normaliser depends on ranks and "
        "micro-batches jointly"
    )
