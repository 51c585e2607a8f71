"""Glue between pytest and the properties: the session's context and the one-screen summary and
JSON report (used by the pytest plugin and ``sigma-ref check``). Each spec test runs its property
itself (:func:`~.core.conformance_property`) and puts its outcome on its pytest report, from which
the plugin builds the summary in the main process.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from typing import TYPE_CHECKING, Any

from .._options import SuiteOptions
from .._vocabulary import OUTCOMES, VERDICTS
from ..objectives import resolve_declared_aggregation
from .adapter import Adapter, check_call, load_adapter, oracle_adapter
from .core import LEVELS, Context, Outcome
from .detect import Detection, detect_convention
from .frameworks import on_framework
from .levels import SCALEOUT_LEVEL
from .losses import make_policy_loss
from .precision import PRECISIONS
from .reference import REFERENCE_NAMES, reference_for

if TYPE_CHECKING:
    from .launch import ScaleoutOptions

__all__ = [
    "build_context",
    "declare_objective",
    "scaleout_options",
    "SuiteOptions",
    "Outcome",
    "summary",
    "report_dict",
]

#: The columns of the summary, in order.
_COUNTED: tuple[str, ...] = OUTCOMES


def build_context(
    impl: str | Adapter | None = None, *, options: SuiteOptions | None = None, **overrides: Any
) -> Context:
    """The context for a run: the adapter, what it should compute, and the detection.

    ``options``: the run's :class:`~sigma_ref._options.SuiteOptions` (default: every option at its
    default), with ``overrides`` (its fields by keyword: ``build_context(adapter, layout="index")``).
    ``impl``, when given, is the implementation in place of ``options.impl``: ``pkg.module:attr`` of
    a function or an :class:`Adapter`, or an :class:`Adapter` itself; ``None`` tests the oracle
    itself (PAPER, index layout, the token-mean reference loss). ``convention="auto"`` uses the
    adapter's declared convention if it has one, else the detected one; a name (a preset or
    ``rloo``) fixes it. ``precision="auto"`` uses the adapter's declared working precision, else the
    detected one (``float64`` or ``float32``). ``strict``: WARN verdicts count as FAIL. ``output``
    (``--output KEY|INDEX``): where the advantages are in the result. ``aggregation`` and ``clip``
    (``"0.2"`` or ``"0.2,0.28"``) declare the loss's aggregation and PPO clip range, and
    ``aggregation_constant`` the ``C`` of seq-mean-token-sum-norm. ``returns`` (layout token:
    ``"advantages"``) and ``keep_metric`` (a keep-mask filter's ``"accuracy"`` or ``"reward"``)
    declare the :class:`Adapter` fields of those names. Each given option overrides the
    adapter's field. ``objective`` (``ppo``, ``gspo``, ``cispo``) with ``dual_clip``, ``kl``,
    ``kl_coef``, ``kl_placement``, ``tis_cap``, ``tis_level`` and ``tis_mode`` declares the loss's
    :class:`~sigma_ref.objectives.Objective` (:func:`declare_objective`). ``framework``
    (``auto``, ``torch``, ``jax``): the array library the implementation is written in; JAX code
    runs behind :func:`~.frameworks.on_framework`'s bridge. A call that does not
    fit the layout raises :class:`~.adapter.CallMismatch` (a ``ValueError``) before any
    property runs; a bad combination of options, a ``ValueError`` naming the options and the fix.
    The level-5 options are :func:`scaleout_options`'.

    >>> build_context(layout="index", convention="paper").reference.name
    'paper'
    """
    options = (options or SuiteOptions()).replace(**overrides)
    adapter = _load(impl if impl is not None else options.impl, options)
    _check_names(options)
    adapter = _declare(adapter, options)
    _check_calls(adapter)
    return _judged_against(adapter, options)


def _load(impl: str | Adapter | None, options: SuiteOptions) -> Adapter:
    """The adapter of ``impl`` (the oracle's when ``None``), on its framework's bridge."""
    if impl is None:
        adapter: Adapter = oracle_adapter("paper", layout=options.layout or "index").replace(
            loss=make_policy_loss("token-mean")
        )
        if options.loss is not None:
            adapter = load_adapter(adapter, loss=options.loss)
    else:
        adapter = load_adapter(impl, layout=options.layout, loss=options.loss, output=options.output)
    return on_framework(adapter, options.framework)  # JAX code behind the bridge (frameworks.py)


def _check_names(options: SuiteOptions) -> None:
    """``--convention`` and ``--precision`` name a known one, or ``auto``."""
    convention, precision = options.convention, options.precision
    if convention != "auto" and convention.lower() not in REFERENCE_NAMES:
        raise ValueError(f"--convention {convention!r} must be 'auto' or one of {', '.join(REFERENCE_NAMES)}")
    if precision != "auto" and precision not in PRECISIONS:
        raise ValueError(f"--precision {precision!r} must be 'auto' or one of {', '.join(PRECISIONS)}")


def _declare(adapter: Adapter, options: SuiteOptions) -> Adapter:
    """``adapter`` with the fields the options declare (each overrides the adapter's), and the
    objective when one of its options is given (:func:`declare_objective`)."""
    aggregation, constant = options.aggregation, options.aggregation_constant
    changes: dict[str, Any] = {}
    if aggregation is not None:
        changes["aggregation"] = aggregation
        if constant is None and resolve_declared_aggregation(aggregation) != "seq-mean-token-sum-norm":
            changes["aggregation_constant"] = None  # the adapter's C belonged to the mode replaced
    if constant is not None:
        mode = aggregation if aggregation is not None else adapter.aggregation
        if mode is None or resolve_declared_aggregation(mode) != "seq-mean-token-sum-norm":
            raise ValueError(
                f"--aggregation-constant {constant!r} is the C of seq-mean-token-sum-norm, but "
                f"the aggregation is {mode!r}: add --aggregation seq-mean-token-sum-norm (or dr_grpo), or "
                "drop --aggregation-constant"
            )
        changes["aggregation_constant"] = constant
    terms = options.objective_terms()
    declaring = options.objective is not None or any(v is not None for v in terms.values())
    if options.clip is not None and not declaring:  # with an objective, its declaration sets the clip
        changes["clip"] = _clip_range(options.clip)
    if options.returns is not None:
        changes["returns"] = options.returns
    if options.keep_metric is not None:
        changes["keep_metric"] = options.keep_metric
    if changes:
        adapter = adapter.replace(**changes)
    if declaring:
        adapter = declare_objective(adapter, options.objective, clip=options.clip, **terms)
    return adapter


def _check_calls(adapter: Adapter) -> None:
    """Fail fast: the first probe must fit the layout, and the first loss probe the loss call."""
    check_call(adapter)
    if adapter.loss is not None:
        from .inputs import check_loss_call

        check_loss_call(Context(adapter, reference_for("paper")))


def _judged_against(adapter: Adapter, options: SuiteOptions) -> Context:
    """The context: ``adapter`` with the reference it is judged against (declared, else detected)
    and the working precision of the tolerances."""
    convention, precision = options.convention, options.precision
    if adapter.layout == "keep-mask":  # a filter: no advantages to detect a convention from
        ref = reference_for("paper" if convention == "auto" else convention)
        return Context(adapter, ref, None, None, precision=precision if precision != "auto" else "float64")
    detection = detect_convention(adapter)
    if precision == "auto":
        precision = adapter.precision or detection.precision
    declared: Any = convention if convention != "auto" else adapter.convention
    strict = options.strict
    if declared is not None:
        # exactly as declared, a detected clamp is a deviation; a detected spread filter (groups whose
        # std is below a threshold treated as silent) is a data policy on top of the convention and is
        # kept, so groups near its threshold are never judged by whether a seed happens to draw them
        ref = reference_for(declared)
        if detection.silent_below > 0 and ref.family == "grpo":
            ref = dataclasses.replace(ref, silent_below=detection.silent_below)
        return Context(adapter, ref, detection, ref.name, precision=precision, strict=strict)
    return Context(adapter, detection.reference, detection, None, precision=precision, strict=strict)


def scaleout_options(options: SuiteOptions) -> ScaleoutOptions | None:
    """Level 5's options (:class:`~.launch.ScaleoutOptions`) from the run's, or ``None`` when neither
    ``--world-size`` nor ``--micro-batches`` is given (then a level-5 option given alone is a
    ``ValueError`` naming it). Each field of ``ScaleoutOptions`` is the option of its name
    (:data:`SCALEOUT_FIELDS` for the two named otherwise); ``seed`` stays at its default.

    >>> scaleout_options(SuiteOptions(world_size=2)).describe()
    'W=2, M=1, whole-groups'
    >>> scaleout_options(SuiteOptions()) is None
    True
    """
    from .launch import LEVEL5_ONLY, ScaleoutOptions

    if options.world_size is None and options.micro_batches is None:
        for name in _LEVEL5_ONLY:
            value = getattr(options, name.replace("-", "_"))
            if value not in ("none", None):
                raise ValueError(LEVEL5_ONLY.format(option=f"--{name} {value}"))
        return None
    taken = {f.name for f in dataclasses.fields(ScaleoutOptions)} - {"seed"}
    values = {name: getattr(options, SCALEOUT_FIELDS.get(name, name)) for name in taken}
    values["world_size"] = options.world_size or 1
    values["micro_batches"] = tuple(options.micro_batches or (1,))
    return ScaleoutOptions(**values)


#: The fields of :class:`~.launch.ScaleoutOptions` that take an option of another name.
SCALEOUT_FIELDS: dict[str, str] = {"timeout": "scaleout_timeout", "sizes": "split_sizes"}
#: Level-5 options that mean nothing without ``--world-size`` or ``--micro-batches``, in the order
#: a usage error names the first one given.
_LEVEL5_ONLY: tuple[str, ...] = ("packing", "advantage-scale", "advantage-scaler")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def declare_objective(
    adapter: Adapter,
    objective: str | None,
    *,
    clip: str | tuple[float, float] | None = None,
    dual_clip: float | None = None,
    kl: str | None = None,
    kl_coef: float | None = None,
    kl_placement: str | None = None,
    tis_cap: float | None = None,
    tis_level: str | None = None,
    tis_mode: str | None = None,
) -> Adapter:
    """``adapter`` with the :class:`~sigma_ref.objectives.Objective` the options declare.

    ``objective`` is the kind (``ppo``, ``gspo``, ``cispo``); the clip range is ``clip``
    (``--clip EPS_LOW[,EPS_HIGH]``; CISPO in TRL's form, no lower bound and an absolute upper
    one, is ``inf,EPS_MAX-1``); the aggregation and its constant are the adapter's (``--aggregation``).
    Every option that needs another names it: ``--kl`` needs ``--kl-coef`` (and the reverse),
    ``--kl-placement`` needs ``--kl``, ``--tis-level``/``--tis-mode`` need ``--tis-cap``, ``--dual-clip``
    needs ``--objective ppo``; a term in the loss needs the loss to take its input (``ref_logp=``,
    ``rollout_logp=``). A PPO objective also declares its clip to ``loss_clipped_surrogate``.

    >>> from sigma_ref.conformance.adapter import oracle_adapter
    >>> a = oracle_adapter("paper").replace(loss=lambda logp, old_logp, advantages, mask: logp.sum())
    >>> declare_objective(a, "gspo", clip="0.2", kl="k3", kl_coef=0.04)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --objective gspo needs --aggregation (how the loss reduces its tokens: ...
    >>> declare_objective(a.replace(aggregation="grpo"), "gspo", clip="0.2", kl="k3", kl_coef=0.04)
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --kl k3 in the loss needs a loss that takes ref_logp= (the reference policy's log-probs); ...
    >>> declare_objective(a.replace(aggregation="grpo"), "gspo", clip="0.2").objective.kind
    'gspo'
    """
    from ..objectives import Objective

    terms = {
        "dual_clip": dual_clip,
        "kl": kl,
        "kl_coef": kl_coef,
        "kl_placement": kl_placement,
        "tis_cap": tis_cap,
        "tis_level": tis_level,
        "tis_mode": tis_mode,
    }
    kind, aggregation = _declarable(adapter, objective, terms)
    if clip is None:
        raise ValueError(
            f"--objective {kind} needs --clip EPS_LOW[,EPS_HIGH] (its clip range, e.g. 0.2 or 0.2,0.28)"
        )
    eps_low, eps_high = _clip_range(clip, bounded=False)
    _check_terms(adapter, kind, terms)
    try:
        declared = Objective(
            kind,  # type: ignore[arg-type]  # checked by Objective
            eps_low=eps_low,
            eps_high=eps_high,
            dual_clip=dual_clip,
            kl=kl,  # type: ignore[arg-type]
            kl_coef=kl_coef or 0.0,
            kl_placement=kl_placement or "loss",  # type: ignore[arg-type]
            tis_cap=tis_cap,
            tis_level=tis_level or "token",  # type: ignore[arg-type]
            tis_mode=tis_mode or "truncate",  # type: ignore[arg-type]
            aggregation=aggregation,
            constant=adapter.aggregation_constant,
        )
    except ValueError as exc:
        raise ValueError(f"--objective {kind} --clip {clip}: {exc}") from None
    adapter = adapter.replace(objective=declared)
    if kind == "ppo":  # the same clip, read by loss_clipped_surrogate
        if not (eps_low < 1 and eps_high < 1):
            raise ValueError(f"--objective ppo --clip {clip}: each of EPS_LOW, EPS_HIGH must be in [0, 1)")
        adapter = adapter.replace(clip=(eps_low, eps_high), dual_clip=dual_clip)
    return adapter


def _declarable(adapter: Adapter, objective: str | None, terms: dict[str, Any]) -> tuple[str, str]:
    """``objective`` and the adapter's aggregation, once the adapter can take a declared objective:
    ``--objective`` given with its terms, no objective of the adapter's own, a loss, and an
    aggregation an objective is declared with."""
    from ..objectives import AGGREGATION_MODES

    if objective is None:
        named = ", ".join(_flag(k) for k, v in terms.items() if v is not None)
        raise ValueError(
            f"{named} declare a term of the loss's objective; add --objective ppo, gspo or cispo "
            "(with --clip and --aggregation)"
        )
    if adapter.objective is not None:
        raise ValueError(
            f"the implementation declares its objective (Adapter(objective={adapter.objective!r})); drop "
            "--objective and its options, or the Adapter's objective="
        )
    if adapter.loss is None:
        raise ValueError(f"--objective {objective} needs --loss pkg.module:loss (the loss it describes)")
    if adapter.aggregation is None:
        raise ValueError(
            f"--objective {objective} needs --aggregation (how the loss reduces its tokens: "
            f"{', '.join(AGGREGATION_MODES)}, or a TRL loss_type): the objective's per-token gradient "
            "depends on it"
        )
    if resolve_declared_aggregation(adapter.aggregation) == "prompt-mean":
        raise ValueError(
            f"--objective {objective} with --aggregation prompt-mean: an objective's per-token gradient is "
            f"declared with one of {', '.join(AGGREGATION_MODES)}; drop --objective (prompt-mean is judged "
            "by the aggregation property and at level 5) or declare one of those modes"
        )
    return objective, adapter.aggregation


def _check_terms(adapter: Adapter, objective: str, terms: dict[str, Any]) -> None:
    """The objective's terms: each with the options it needs, and a loss that takes their inputs."""
    from .inputs import keyword_inputs

    dual_clip, kl, kl_coef, kl_placement = (
        terms["dual_clip"],
        terms["kl"],
        terms["kl_coef"],
        terms["kl_placement"],
    )
    tis_cap, tis_level, tis_mode = terms["tis_cap"], terms["tis_level"], terms["tis_mode"]
    if dual_clip is not None and objective != "ppo":
        raise ValueError(f"--dual-clip {dual_clip:g} applies to --objective ppo only, not {objective}")
    if kl is None and (kl_coef is not None or kl_placement is not None):
        flag = "--kl-coef" if kl_coef is not None else "--kl-placement"
        raise ValueError(f"{flag} needs --kl k1, k2 or k3 (the estimator)")
    if kl is not None and kl_coef is None:
        raise ValueError(f"--kl {kl} needs --kl-coef BETA (its coefficient, e.g. 0.04)")
    if tis_cap is None and (tis_level is not None or tis_mode is not None):
        flag = "--tis-level" if tis_level is not None else "--tis-mode"
        raise ValueError(f"{flag} needs --tis-cap C (the cap of the importance weights, e.g. 2.0)")
    accepted = keyword_inputs(adapter.loss)
    if kl is not None and (kl_placement or "loss") == "loss" and "ref_logp" not in accepted:
        raise ValueError(
            f"--kl {kl} in the loss needs a loss that takes ref_logp= (the reference policy's log-probs); "
            "for a KL already in the rewards, add --kl-placement reward"
        )
    if tis_cap is not None and "rollout_logp" not in accepted:
        raise ValueError(
            f"--tis-cap {tis_cap:g} needs a loss that takes rollout_logp= (the rollout engine's log-probs)"
        )


def _clip_range(clip: str | tuple[float, float], *, bounded: bool = True) -> tuple[float, float]:
    """``"0.2"`` -> ``(0.2, 0.2)``; ``"0.2,0.28"`` -> ``(0.2, 0.28)`` (``--clip EPS_LOW[,EPS_HIGH]``)."""
    if isinstance(clip, tuple):
        return clip
    try:
        parts = [float(x) for x in str(clip).split(",")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or any(math.isnan(x) or x < 0 for x in parts):
        raise ValueError(f"--clip {clip!r} must be EPS_LOW or EPS_LOW,EPS_HIGH, e.g. 0.2 or 0.2,0.28")
    if bounded and any(math.isinf(x) for x in parts):
        raise ValueError(f"--clip {clip!r}: an infinite bound needs --objective cispo (TRL's form, inf,EPS)")
    return (parts[0], parts[-1])


def new_seed() -> int:
    """A fresh hypothesis seed for a non-derandomized run."""
    return random.SystemRandom().randrange(2**32)


def _short(outcome: Outcome, width: int = 160) -> str:
    """``cause: ...`` when a probe confirmed the cause (the finding's field), else the message's start."""
    finding = outcome.finding
    if finding is not None and finding.cause and finding.confirmed:
        text = "cause: " + " ".join(finding.cause.split())
    else:
        text = " ".join(outcome.message.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def declarations(adapter: Adapter) -> dict[str, str]:
    """What the adapter declares beyond its convention, as the summary shows it: the call hooks
    (``output``, ``inputs``), the loss's ``aggregation`` (with its constant), ``clip`` and ``dual
    clip``, the token layout's ``returns``, a filter's ``keep metric`` and ``keep order``.

    >>> from sigma_ref.conformance import Adapter
    >>> declarations(Adapter(print, "index", output="advantages", clip=(0.2, 0.28), aggregation="dr_grpo"))
    {'output': "'advantages'", 'aggregation': 'seq-mean-token-sum-norm (dr_grpo)', 'clip': '0.2,0.28'}
    """
    out: dict[str, str] = {}
    if adapter.output is not None:
        out["output"] = repr(adapter.output) if not callable(adapter.output) else _name(adapter.output)
    if adapter.inputs is not None:
        out["inputs"] = _name(adapter.inputs)
    if adapter.aggregation is not None:
        mode = resolve_declared_aggregation(adapter.aggregation)
        text = mode if mode == adapter.aggregation else f"{mode} ({adapter.aggregation})"
        if adapter.aggregation_constant is not None:
            text += f", C = {adapter.aggregation_constant:g}"
        out["aggregation"] = text
    if adapter.clip is not None:
        out["clip"] = f"{adapter.clip[0]:g},{adapter.clip[1]:g}"
    if adapter.dual_clip is not None:
        out["dual clip"] = f"{adapter.dual_clip:g}"
    if adapter.returns is not None:
        out["returns"] = adapter.returns
    if adapter.keep_metric is not None:
        out["keep metric"] = adapter.keep_metric
    if adapter.keep_order is not None:
        out["keep order"] = adapter.keep_order
    return out


def _name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"


def conformant(outcomes: list[Outcome]) -> bool:
    """No FAIL among the outcomes (WARN and NOTE do not count)."""
    return not any(o.verdict == "FAIL" for o in outcomes)


def report_dict(
    ctx: Context, outcomes: list[Outcome], *, seed: int | None, profile: str, seconds: float
) -> dict[str, Any]:
    """The JSON report: implementation, convention, precision, one entry per property."""
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
        "declared": declarations(ctx.adapter),
        "precision": ctx.precision,
        "strict": ctx.strict,
        "hypothesis": {"profile": profile, "seed": seed},
        "conformant": conformant(outcomes),
        "counts": {k: sum(o.verdict == k for o in outcomes) for k in _COUNTED},
        "seconds": round(seconds, 2),
        "properties": [
            {
                "test": o.label,
                "level": o.level,
                "verdict": o.verdict,
                "message": o.message,
                "finding": dataclasses.asdict(o.finding) if o.finding is not None else None,
            }
            for o in outcomes
        ],
    }


def summary(ctx: Context, outcomes: list[Outcome], *, seed: int | None, profile: str, seconds: float) -> str:
    """The one-screen summary: convention, precision, a table of verdicts per level, each FAIL,
    WARN and NOTE in a line, and the result."""
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
    shown = declarations(ctx.adapter)
    if shown:
        lines.append("declared:   " + ", ".join(f"{k} {v}" for k, v in shown.items()))
    declared_precision = ctx.adapter.precision is not None
    lines.append(f"precision:  {ctx.precision} [{'declared' if declared_precision else 'detected'}]")
    seed_text = "derandomized" if seed is None else f"seed {seed} (reproduce: --hypothesis-seed={seed})"
    lines.append(f"hypothesis: profile {profile}, {seed_text}; {seconds:.1f} s")
    asked = ctx.scaleout is not None  # level 5 runs (and has its row) only when asked for
    if ctx.scaleout is not None:
        lines.append(f"scale-out:  {ctx.scaleout.describe()} (real torch.distributed processes)")
    lines.append(f"{'level':<10} " + " ".join(f"{k:>5}" for k in _COUNTED))
    for level in (*LEVELS, SCALEOUT_LEVEL):
        sub = [o for o in outcomes if o.level == level]
        if sub and (level != SCALEOUT_LEVEL or asked or any(o.verdict != "skip" for o in sub)):
            lines.append(
                f"{level:<10} " + " ".join(f"{sum(o.verdict == k for o in sub):>5}" for k in _COUNTED)
            )
    for verdict in VERDICTS:
        lines += [f"{verdict:<4} {o.label}: {_short(o)}" for o in outcomes if o.verdict == verdict]
    if asked:  # a level-5 property that was asked for and did not run says why
        lines += [
            f"skip {o.label}: {_short(o)}"
            for o in outcomes
            if o.level == SCALEOUT_LEVEL and o.verdict == "skip"
        ]
    first = next((o for o in outcomes if o.verdict == "FAIL"), None)
    if first is not None:
        text = " ".join(first.message.split())
        lines.append(f"first failure, {first.label}: {text[:600]}")
    n_fail = sum(o.verdict == "FAIL" for o in outcomes)
    n_warn = sum(o.verdict == "WARN" for o in outcomes)
    warn = f", {n_warn} WARN" if n_warn else ""
    if conformant(outcomes):
        lines.append(
            f"result: CONFORMANT ({sum(o.verdict == 'pass' for o in outcomes)} properties pass{warn})"
        )
    else:
        lines.append(f"result: NOT CONFORMANT ({n_fail} FAIL{warn})")
    return "\n".join(lines)


def to_json(data: dict[str, Any]) -> str:
    """Pretty JSON."""
    return json.dumps(data, indent=2, default=str)
