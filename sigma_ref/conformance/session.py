"""Glue between pytest and the properties: the session's context, running one property,
and the one-screen summary and JSON report (used by the pytest plugin and ``sigma-ref check``).
"""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

from .adapter import Adapter, load_adapter, oracle_adapter
from .detect import Detection, detect_convention
from .losses import make_policy_loss
from .properties import LEVELS, PROPERTIES, Context, NotApplicable, PropertyFailure, run_property
from .reference import REFERENCE_NAMES, reference_for

__all__ = ["build_context", "Outcome", "summary", "report_dict", "check_in_pytest"]


def build_context(
    impl: str | Adapter | None = None,
    *,
    layout: str | None = None,
    loss: str | None = None,
    convention: str = "auto",
) -> Context:
    """The context for a run: the adapter, what it should compute, and the detection.

    ``impl``: ``pkg.module:attr`` of a function or an :class:`Adapter`, or an
    :class:`Adapter` itself; ``None`` tests the oracle itself (PAPER, index layout, the
    token-mean reference loss). ``convention="auto"`` uses the adapter's declared convention if it has one,
    else the detected one; a name (a preset or ``rloo``) fixes it.
    """
    if impl is None:
        adapter: Adapter = oracle_adapter("paper", layout=layout or "index").replace(
            loss=make_policy_loss("token_mean")
        )
        if loss is not None:
            adapter = load_adapter(adapter, loss=loss)
    else:
        adapter = load_adapter(impl, layout=layout, loss=loss)
    if convention != "auto" and convention.lower() not in REFERENCE_NAMES:
        raise ValueError(f"--convention {convention!r} must be 'auto' or one of {', '.join(REFERENCE_NAMES)}")
    detection = detect_convention(adapter)
    declared: Any = convention if convention != "auto" else adapter.convention
    if declared is not None:
        ref = reference_for(declared)
        return Context(adapter, ref, detection, ref.name)
    return Context(adapter, detection.reference, detection, None)


@dataclasses.dataclass
class Outcome:
    """One property's result in a run."""

    name: str
    level: str
    param: str | None
    required: bool
    outcome: str  # passed, failed, advisory, skipped
    message: str = ""

    @property
    def label(self) -> str:
        """``test_name[param]``."""
        return f"test_{self.name}" + (f"[{self.param}]" if self.param else "")


def check_in_pytest(ctx: Context, name: str, param: Any = None, seed: int | None = None) -> None:
    """Run property ``name`` inside a pytest test: skip, xfail (advisory) or fail with the message."""
    import pytest

    __tracebackhide__ = True
    prop = PROPERTIES[name]
    try:
        run_property(prop, ctx, param, seed=seed)
    except NotApplicable as exc:
        pytest.skip(f"not applicable: {exc}")
    except PropertyFailure as exc:
        msg = str(exc)
        notes = [n for n in getattr(exc, "__notes__", []) if n.strip()]
        if notes:
            msg += "\n" + "\n".join(notes)
        if not prop.required(ctx):
            pytest.xfail(f"advisory: {msg}")
        if seed is not None:
            msg += f"\nreproduce with --hypothesis-seed={seed}"
        pytest.fail(msg, pytrace=False)


def new_seed() -> int:
    """A fresh hypothesis seed for a non-derandomized run."""
    return random.SystemRandom().randrange(2**32)


def _short(message: str, width: int = 150) -> str:
    """The likely cause if the message names one, else its start."""
    text = " ".join(message.split())
    if "Likely cause: " in text:
        text = "cause: " + text.split("Likely cause: ", 1)[1]
    return text if len(text) <= width else text[: width - 3] + "..."


def _conformant(outcomes: list[Outcome]) -> bool:
    return not any(o.outcome == "failed" for o in outcomes)


def report_dict(
    ctx: Context, outcomes: list[Outcome], *, seed: int | None, profile: str, seconds: float
) -> dict[str, Any]:
    """The JSON report: implementation, convention, one entry per property."""
    det: Detection | None = ctx.detection
    return {
        "implementation": ctx.adapter.name,
        "layout": ctx.adapter.layout,
        "loss": getattr(ctx.adapter.loss, "__name__", None) if ctx.adapter.loss else None,
        "convention": {
            "used": ctx.reference.name,
            "describe": ctx.reference.describe(),
            "declared": ctx.declared,
            "detected": det.to_dict() if det else None,
        },
        "hypothesis": {"profile": profile, "seed": seed},
        "conformant": _conformant(outcomes),
        "counts": {
            k: sum(o.outcome == k for o in outcomes) for k in ("passed", "failed", "advisory", "skipped")
        },
        "seconds": round(seconds, 2),
        "properties": [
            {
                "test": o.label,
                "level": o.level,
                "required": o.required,
                "outcome": o.outcome,
                "message": o.message,
            }
            for o in outcomes
        ],
    }


def summary(ctx: Context, outcomes: list[Outcome], *, seed: int | None, profile: str, seconds: float) -> str:
    """The one-screen summary."""
    det = ctx.detection
    lines = [
        f"sigma-ref conformance: {ctx.adapter.name} (layout {ctx.adapter.layout}, "
        f"loss {getattr(ctx.adapter.loss, '__name__', 'given') if ctx.adapter.loss else 'none'})"
    ]
    if ctx.declared is not None:
        lines.append(f"convention: {ctx.reference.describe()} [declared]")
        if det is not None:
            lines.append(f"detected:   {det.summary()}")
    elif det is not None:
        lines.append(f"convention: {det.summary()} [detected]")
    seed_text = "derandomized" if seed is None else f"seed {seed} (reproduce: --hypothesis-seed={seed})"
    lines.append(f"hypothesis: profile {profile}, {seed_text}; {seconds:.1f} s")
    lines.append(f"{'level':<10} {'passed':>6} {'failed':>6} {'advisory':>8} {'skipped':>7}")
    for level in LEVELS:
        sub = [o for o in outcomes if o.level == level]
        if not sub:
            continue
        c = {k: sum(o.outcome == k for o in sub) for k in ("passed", "failed", "advisory", "skipped")}
        lines.append(f"{level:<10} {c['passed']:>6} {c['failed']:>6} {c['advisory']:>8} {c['skipped']:>7}")
    for o in outcomes:
        if o.outcome in ("failed", "advisory"):
            tag = "FAILED  " if o.outcome == "failed" else "ADVISORY"
            lines.append(f"{tag} {o.label}: {_short(o.message)}")
    first = next((o for o in outcomes if o.outcome == "failed"), None)
    if first is not None:
        text = " ".join(first.message.split())
        lines.append(f"first failure, {first.label}: {text[:600]}")
    n_fail = sum(o.outcome == "failed" for o in outcomes)
    if _conformant(outcomes):
        lines.append(f"result: CONFORMANT ({sum(o.outcome == 'passed' for o in outcomes)} properties pass)")
    else:
        lines.append(
            f"result: NOT CONFORMANT ({n_fail} required propert{'y' if n_fail == 1 else 'ies'} fail)"
        )
    return "\n".join(lines)


def to_json(data: dict[str, Any]) -> str:
    """Pretty JSON."""
    return json.dumps(data, indent=2, default=str)
