"""The bug class of a failing split gradient from the probes at (1, M), (1, M + 1) and (W, 1), when no
normaliser hypothesis (:class:`~sigma_ref.conformance.normalisers.Judge`) names it.

:data:`_CLASSES` is the table of classes in the order they are tried: each reads the probes and
gives its message when they show it; the last, the normaliser depending on ranks and micro-batches
jointly, holds whenever the gradient is wrong and none before it does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TypeGuard

import numpy as np

from .fitting import _RTOL, _Fit, _fit, _scale
from .protocol import _Key, _Run


@dataclasses.dataclass(frozen=True)
class _Probes:
    """The failing gradient at (W, M) (factor ``c``, residual ``resid``) and its probes' fits
    against the full-batch gradient: ``on_m`` at (1, M), ``on_m2`` at (1, M + 1), ``on_w`` at (W, 1)."""

    W: int
    M: int
    c: float
    resid: float
    adv_ok: bool
    loss_scale: str
    aggregation: str | None
    rtol: float
    on_m: _Fit | None
    on_m2: _Fit | None
    on_w: _Fit | None

    def bad(self, f: _Fit | None) -> TypeGuard[_Fit]:
        """The probe ran and its gradient differs from the full batch's."""
        return f is not None and f[2] > self.rtol


def _pure(f: _Fit) -> bool:
    """One factor explains the probe's gradient."""
    return f[1] <= 1e-6


def _short(f: _Fit) -> str:
    return _scale(f[0], f[1], detail=False)


def _advantages_differ(p: _Probes) -> str | None:
    if p.adv_ok:
        return None
    return (
        f"the gradient at W={p.W}, M={p.M} is {_scale(p.c, p.resid, detail=False)} the full-batch gradient "
        "because the advantages differ (see scaleout_advantages)"
    )


def _trend(p: _Probes, on_m: _Fit) -> str:
    """How the per-micro-batch factor moves from M to M + 1: as 1/M, as M, or as it is."""
    if p.on_m2 is None:
        return ""
    M, on_m2 = p.M, p.on_m2
    trend = f"; {_short(on_m2)} at M = {M + 1}"
    if _pure(on_m) and _pure(on_m2) and abs(on_m[0] * M - 1) < 1e-6 and abs(on_m2[0] * (M + 1) - 1) < 1e-6:
        trend += ": it shrinks as 1/M"
    elif _pure(on_m) and _pure(on_m2) and abs(on_m[0] / M - 1) < 1e-6 and abs(on_m2[0] / (M + 1) - 1) < 1e-6:
        trend += ": it grows as M"
    return trend


def _per_micro_batch(p: _Probes) -> str | None:
    if not p.bad(p.on_m):
        return None
    W, M, on_m = p.W, p.M, p.on_m
    confirm = f" (confirmed on one rank: {_short(on_m)} at W = 1, M = {M}{_trend(p, on_m)}"
    if W > 1 and p.bad(p.on_w):
        confirm += f"; {_short(p.on_w)} at W = {W}, M = 1, where a rank's shard is one micro-batch)"
    elif W > 1:
        confirm += f"; equal at W = {W}, M = 1)"
    else:
        confirm += ")"
    hint = ""
    if p.loss_scale == "mean-over-micro-batches" and _pure(on_m) and abs(on_m[0] * M - 1) < 1e-6:
        hint = (
            ". The harness divides each micro-batch loss by M (loss_scale='mean-over-micro-batches'), "
            "so the loss must normalise by the micro-batch's share, not by a constant"
        )
        if p.aggregation == "seq-mean-token-sum-norm":
            hint += "; seq-mean-token-sum-norm's sum grows with the micro-batch size"
    return (
        "normaliser computed per micro-batch: the accumulated gradient is "
        f"{_scale(p.c, p.resid)} the full-batch gradient at M = {M}{confirm}{hint}"
    )


def _rank_confirm(p: _Probes, on_w: _Fit) -> str:
    confirm = f" (confirmed with one micro-batch: {_short(on_w)} at W = {p.W}, M = 1"
    return confirm + (f"; equal on one rank at M = {p.M})" if p.M > 1 else ")")


def _world_size(p: _Probes) -> str | None:
    if not p.bad(p.on_w) or not (_pure(p.on_w) and abs(p.on_w[0] * p.W - 1) < 1e-6):
        return None
    return (
        f"world size not applied: the rank-averaged gradient is {_scale(p.c, p.resid)} the full-batch "
        f"gradient at W = {p.W}{_rank_confirm(p, p.on_w)}. DDP divides by W; the loss must multiply by "
        "world_size (verl's dp_size)"
    )


def _rank_count(p: _Probes) -> str | None:
    if not p.bad(p.on_w):
        return None
    return (
        f"token count not gathered across ranks: the rank-averaged gradient is {_scale(p.c, p.resid)} the "
        f"full-batch gradient at W = {p.W}{_rank_confirm(p, p.on_w)}. Normalise by the global count "
        "(global_num_tokens, or all-reduce rank_num_tokens over process_group)"
    )


def _joint(p: _Probes) -> str | None:
    return (
        f"the gradient at W = {p.W}, M = {p.M} is {_scale(p.c, p.resid)} the full-batch gradient, although "
        f"it is right at W = 1, M = {p.M} and at W = {p.W}, M = 1: the normaliser depends on ranks and "
        "micro-batches jointly"
    )


#: The classes the probes can name, in the order they are tried: ``(bug class, its message or None)``.
_CLASSES: tuple[tuple[str, Callable[[_Probes], str | None]], ...] = (
    ("advantages differ", _advantages_differ),
    ("normaliser computed per micro-batch", _per_micro_batch),
    ("world size not applied", _world_size),
    ("token count not gathered across ranks", _rank_count),
    ("the normaliser depends on ranks and micro-batches jointly", _joint),
)


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
) -> tuple[str, str]:
    """The bug class and its message from the probes at (1, M), (1, M + 1) and (W, 1)."""

    def probe(w: int, m: int) -> _Fit | None:
        run = runs.get((w, m, split)) if w > 1 else runs.get((w, m, "whole-groups"))
        return None if run is None else _fit(np.asarray(run["grad"]), g_full)

    on_m = (c, resid, 1.0) if W == 1 else probe(1, M) if M > 1 else None
    on_w = (c, resid, 1.0) if M == 1 else probe(W, 1) if W > 1 else None
    on_m2 = probe(1, M + 1) if M > 1 else None
    p = _Probes(W, M, c, resid, adv_ok, loss_scale, aggregation, rtol, on_m, on_m2, on_w)
    for bug_class, words in _CLASSES:
        message = words(p)
        if message is not None:
            return bug_class, message
    raise AssertionError("the last class always holds")  # pragma: no cover
