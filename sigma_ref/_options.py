"""The conformance suite's options, declared once for ``pytest`` and for ``sigma-ref check``.

Each :class:`Option` is ``--sigma-ref-<name>`` in pytest (``pytest_plugin``: every option of
the plugin shares the prefix, as hypothesis's share ``--hypothesis-``) and ``--<name>`` on
``sigma-ref check``, which passes what it was given on to the child pytest
(:func:`pytest_argv`). This module imports nothing heavy: the plugin loads it in every pytest
session of every project where sigma-ref is installed.

>>> [o.name for o in OPTIONS][:3]
['impl', 'layout', 'output']
>>> OPTIONS[1].pytest_flag, OPTIONS[1].dest
('--sigma-ref-layout', 'sigma_ref_layout')
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from ._vocabulary import LAYOUTS, LOSS_SCALES, SPLITS

__all__ = [
    "LAYOUTS",
    "FRAMEWORKS",
    "SPLITS",
    "LOSS_SCALES",
    "SPLIT_SIZES",
    "PACKINGS",
    "ADVANTAGE_SCALES",
    "ADVANTAGE_SCALE_SCOPES",
    "RETURNS",
    "KEEP_METRICS",
    "OBJECTIVES",
    "KL_ESTIMATORS",
    "KL_PLACEMENTS",
    "TIS_LEVELS",
    "TIS_MODES",
    "OBJECTIVE_OPTIONS",
    "Option",
    "OPTIONS",
    "SuiteOptions",
    "seconds",
    "counts",
    "positive",
    "dual_clip_bound",
    "add_to_pytest",
    "add_to_argparse",
    "pytest_argv",
    "pytest_flags",
]

#: ``--framework``: the array library of the implementation (``sigma_ref.conformance.frameworks``).
FRAMEWORKS: tuple[str, ...] = ("auto", "torch", "jax")
#: Level 5: ranks and micro-batches with different response counts, or equal ones.
SPLIT_SIZES: tuple[str, ...] = ("uneven", "equal")
#: Level 5: several responses per row, their boundaries as ``position_ids`` or ``cu_seqlens``.
PACKINGS: tuple[str, ...] = ("none", "position_ids", "cu_seqlens")
#: Level 5: the aggregation folded into the advantages before a token-sum loss (each reproduces one
#: mode: none token-sum, batch-tokens token-mean, sequence-tokens seq-mean-token-mean,
#: batch-sequences seq-mean-token-sum, batch-sequences-horizon seq-mean-token-sum-norm), and the
#: batch whose counts the scaling takes.
ADVANTAGE_SCALES: tuple[str, ...] = (
    "none",
    "batch-tokens",
    "sequence-tokens",
    "batch-sequences",
    "batch-sequences-horizon",
)
ADVANTAGE_SCALE_SCOPES: tuple[str, ...] = ("step", "rank", "micro-batch")
#: Layout token: what the returns may be declared to equal (``Adapter.returns``).
RETURNS: tuple[str, ...] = ("advantages",)
#: A keep-mask filter's metric (``Adapter.keep_metric``): k counted on the accuracy or the reward.
KEEP_METRICS: tuple[str, ...] = ("accuracy", "reward")
#: ``--objective`` and its terms (``sigma_ref.objectives.Objective``'s fields).
OBJECTIVES: tuple[str, ...] = ("ppo", "gspo", "gspo-token", "cispo")
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3", "k3-is")
KL_PLACEMENTS: tuple[str, ...] = ("loss", "reward")
TIS_LEVELS: tuple[str, ...] = ("token", "sequence", "geometric")
TIS_MODES: tuple[str, ...] = ("truncate", "mask")
#: The options that declare the objective, as ``build_context`` takes them (``dest`` without prefix).
OBJECTIVE_OPTIONS: tuple[str, ...] = (
    "objective",
    "dual-clip",
    "kl",
    "kl-coef",
    "kl-placement",
    "tis-cap",
    "tis-level",
    "tis-mode",
)


def seconds(text: str) -> float:
    """Parse a time limit (argparse ``type=``): a number of seconds >= 0 (0: no limit).

    >>> seconds("2.5")
    2.5
    """
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0 (0: no limit)")
    return value


def counts(text: str) -> tuple[int, ...]:
    """Parse ``M`` or ``M1,M2,...`` (argparse ``type=``): counts >= 1.

    >>> counts("1,2,3")
    (1, 2, 3)
    """
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count or a list like 1,2,3") from None
    if not all(v >= 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: micro-batch counts must be >= 1")
    return values


def _number(text: str, *, what: str, above: float, fix: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > above and value != float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what} > {above:g} ({fix})")
    return value


def positive(text: str) -> float:
    """Parse a finite number > 0 (``--tis-cap``, ``--kl-coef``).

    >>> positive("2")
    2.0
    """
    return _number(text, what="a finite number", above=0, fix="e.g. 2.0, or 1024 for a max_completion_length")


def dual_clip_bound(text: str) -> float:
    """Parse dual-clip PPO's ``c`` (``--dual-clip``): a finite number > 1.

    >>> dual_clip_bound("3")
    3.0
    """
    return _number(text, what="a finite number", above=1, fix="verl's clip_ratio_c, e.g. 3.0")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of ranks >= 1")
    return value


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of the suite: its name, help, default and parser (argparse's meanings).

    ``group``: ``"suite"`` (levels 0-4) or ``"scale-out"`` (level 5). ``flag``: a switch
    (``store_true``). ``show``: ``str`` of a parsed value as the child pytest reads it back.
    """

    name: str
    help: str
    default: Any = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    flag: bool = False
    type: Callable[[str], Any] | None = None
    group: str = "suite"
    show: Callable[[Any], str] = str

    @property
    def pytest_flag(self) -> str:
        """``--sigma-ref-<name>``."""
        return f"--sigma-ref-{self.name}"

    @property
    def dest(self) -> str:
        """The attribute pytest's ``config.getoption`` reads: ``sigma_ref_<name>``."""
        return "sigma_ref_" + self.name.replace("-", "_")

    @property
    def check_dest(self) -> str:
        """The attribute of ``sigma-ref check``'s namespace: ``<name>`` with ``_``."""
        return self.name.replace("-", "_")

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``add_argument`` / ``addoption``."""
        if self.flag:
            return {"action": "store_true", "help": self.help}
        kw: dict[str, Any] = {"default": self.default, "help": self.help}
        for key in ("choices", "metavar", "type"):
            value = getattr(self, key)
            if value is not None:
                kw[key] = value
        return kw


def _show_counts(value: Sequence[int]) -> str:
    return ",".join(str(v) for v in value)


OPTIONS: tuple[Option, ...] = (
    Option(
        "impl",
        "implementation under test: a function or an Adapter (default: the oracle)",
        metavar="PKG.MODULE:ATTR",
    ),
    Option(
        "layout",
        "how a plain function is called: fn(rewards, G), fn(rewards, index), fn(rewards[B, G]), "
        "fn(token_level_rewards, response_mask, index) or a keep-mask filter fn(rewards, index)",
        choices=LAYOUTS,
    ),
    Option(
        "output",
        "where the advantages are in what the function returns: o[KEY] or o[INDEX]",
        metavar="KEY|INDEX",
    ),
    Option(
        "framework",
        "the array library the implementation is written in: auto (detected from its code, default), "
        "torch, or jax (called with jax arrays, its loss differentiated by jax.grad)",
        default="auto",
        choices=FRAMEWORKS,
    ),
    Option(
        "loss",
        "loss(logp, old_logp, advantages, mask) -> scalar or (scalar, metrics); enables the gradient checks",
        metavar="PKG.MODULE:ATTR",
    ),
    Option("convention", "auto (detect from probes, default), a preset name, or rloo", default="auto"),
    Option("report", "write the conformance results as JSON to this path", metavar="PATH"),
    Option("force", "let --report replace an existing file that is not a previous report", flag=True),
    Option(
        "precision",
        "working precision of the tolerances: auto (declared or detected), float64, float32, ...",
        default="auto",
    ),
    Option("strict", "a WARN verdict counts as a FAIL", flag=True),
    Option(
        "aggregation",
        "the loss's aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum, "
        "seq-mean-token-sum-norm, token-sum, or a TRL loss_type (grpo, bnpo, dr_grpo, dapo, ...); "
        "default: detected",
    ),
    Option(
        "aggregation-constant",
        "the constant C of seq-mean-token-sum-norm (e.g. TRL's max_completion_length; default: the "
        "padded length T)",
        metavar="C",
        type=positive,
        show=repr,
    ),
    Option(
        "clip",
        "the loss's PPO clip range (default: read off its gradient)",
        metavar="EPS_LOW[,EPS_HIGH]",
    ),
    Option(
        "returns",
        "layout token: what the returns (a tuple's second item) equal; 'advantages' as verl's outcome "
        "estimators (default: not checked)",
        choices=RETURNS,
    ),
    Option(
        "keep-metric",
        "a keep-mask filter's metric: accuracy (k counted on R > 0.5) or reward (keep iff the rewards are "
        "not all equal); default: detected",
        choices=KEEP_METRICS,
    ),
    Option(
        "timeout",
        "limit on each call of the implementation (default 10; 0: none)",
        metavar="SECONDS",
        type=seconds,
        show=repr,
    ),
    # the declared objective of the loss at ratios != 1 (sigma_ref.objectives.Objective), checked by
    # loss_objective; with --clip and --aggregation
    Option(
        "objective",
        "the loss's objective at ratios != 1: ppo (token ratio, clipped), gspo (sequence ratio "
        "exp(mean_t log r), clipped per sequence, gradient through it: TRL, OpenRLHF), gspo-token (its token "
        "form sg(s) pi / sg(pi): verl) or cispo (stop-gradient clipped ratio times log pi); "
        "needs --clip and --aggregation",
        choices=OBJECTIVES,
    ),
    Option(
        "dual-clip",
        "for a PPO objective: dual clip c > 1 (verl clip_ratio_c): the loss of A < 0 tokens capped at -c A",
        metavar="C",
        type=dual_clip_bound,
        show=repr,
    ),
    Option(
        "kl",
        "the objective's KL estimator against the reference policy (k1 = delta, k2 = delta^2/2, "
        "k3 = exp(-delta) - 1 + delta, k3-is = r k3 with the differentiable ratio r: TRL's "
        "use_bias_correction_kl, an unbiased reverse-KL gradient; delta = logp - ref_logp); needs --kl-coef",
        choices=KL_ESTIMATORS,
    ),
    Option(
        "kl-coef",
        "the KL term's coefficient beta (TRL beta, verl kl_loss_coef)",
        metavar="BETA",
        type=positive,
        show=repr,
    ),
    Option(
        "kl-placement",
        "where the KL term is: in the loss (default; the loss takes ref_logp=) or in the reward "
        "(already inside the advantages: no term of the loss)",
        choices=KL_PLACEMENTS,
    ),
    Option(
        "tis-cap",
        "the objective's rollout-vs-training importance weights rho = pi_old / pi_rollout with cap C "
        "(the loss takes rollout_logp=)",
        metavar="C",
        type=positive,
        show=repr,
    ),
    Option(
        "tis-level",
        "the importance weights: one per token (default), per sequence (prod_t rho_t) or the sequence's "
        "geometric mean (prod_t rho_t)^(1/|y|)",
        choices=TIS_LEVELS,
    ),
    Option(
        "tis-mode",
        "how the cap acts: truncate (min(rho, C), TIS; default) or mask (rho if rho <= C else 0, MIS)",
        choices=TIS_MODES,
    ),
    # level 5
    Option(
        "world-size",
        "level 5: data-parallel ranks (starts W real torch.distributed processes)",
        metavar="W",
        type=_positive_int,
        group="scale-out",
    ),
    Option(
        "micro-batches",
        "level 5: micro-batches per rank (gradient accumulation); several as 1,2,3",
        metavar="M",
        type=counts,
        group="scale-out",
        show=_show_counts,
    ),
    Option(
        "split",
        "level 5: how groups are sharded over ranks",
        default="whole-groups",
        choices=SPLITS,
        group="scale-out",
    ),
    Option(
        "split-sizes",
        "level 5: uneven: ranks and micro-batches hold different numbers of responses and tokens (verl's "
        "use_dynamic_bsz); equal: a fixed per-device batch (TRL's per_device_train_batch_size)",
        default="uneven",
        choices=SPLIT_SIZES,
        group="scale-out",
    ),
    Option(
        "steps-per-generation",
        "level 5: optimizer steps per generation batch (TRL's steps_per_generation); the loss may ask for "
        "generation_num_tokens/_seqs and must normalise by the step's counts",
        default=1,
        metavar="S",
        type=_positive_int,
        group="scale-out",
    ),
    Option(
        "mask-truncated",
        "level 5: responses reaching the padded length lose their mask (TRL's mask_truncated_completions)",
        flag=True,
        group="scale-out",
    ),
    Option(
        "pad-value",
        "level 5: fill logp at masked positions with this (nan, inf): it must not reach the loss",
        metavar="X",
        type=float,
        group="scale-out",
    ),
    Option(
        "packing",
        "level 5: pack several responses per row (capacity 2T) and pass their boundaries to the loss as "
        "position_ids= (restarting at 0 for each response) or cu_seqlens= (cumulative lengths over the "
        "flattened rows, flash-attn varlen style); sequence-mean modes must take each response, not each "
        "row, as a sequence",
        default="none",
        choices=PACKINGS,
        group="scale-out",
    ),
    Option(
        "advantage-scale",
        "level 5 (and the loss calls of levels 0-4): the aggregation folded into the advantages before a "
        "token-sum loss, as the trainer does: "
        "A_i/N_tok (batch-tokens: token-mean), A_i/(N_seq L_i) (sequence-tokens: seq-mean-token-mean), "
        "A_i/N_seq (batch-sequences: seq-mean-token-sum), A_i/(N_seq C) (batch-sequences-horizon: "
        "seq-mean-token-sum-norm); judged against --aggregation",
        default="none",
        choices=ADVANTAGE_SCALES,
        group="scale-out",
    ),
    Option(
        "advantage-scaler",
        "level 5 (and the loss calls of levels 0-4): the trainer's own advantage pre-scaling function, "
        "PKG.MODULE:ATTR, called as fn(mask, world_size=, micro_batches=, horizon=) on the float64 mask "
        "[n, T] of the batch named by advantage-scale-on (rows rank by rank, micro-batch by micro-batch); "
        "it returns each response's factor ([n], or [n, T] constant along a response); the token sum is "
        "judged against the declared aggregation",
        default=None,
        metavar="PKG.MODULE:ATTR",
        group="scale-out",
    ),
    Option(
        "advantage-scale-on",
        "level 5: the batch whose counts --advantage-scale divides by: step (the optimizer step's batch, "
        "all ranks and micro-batches), rank (this rank's shard) or micro-batch",
        default="step",
        choices=ADVANTAGE_SCALE_SCOPES,
        group="scale-out",
    ),
    Option(
        "loss-scale",
        "level 5: the trainer's accumulation scaling as declared (none: micro-batch gradients are added; "
        "mean-over-micro-batches: each loss is divided by M); both are measured and the one the loss is "
        "right under is judged",
        default="none",
        choices=LOSS_SCALES,
        group="scale-out",
    ),
    Option(
        "scaleout-timeout",
        "level 5: seconds before a hung rank fails the check",
        default=120.0,
        metavar="S",
        type=float,
        group="scale-out",
        show=repr,
    ),
    Option(
        "backend",
        "level 5: the torch.distributed backend (auto: nccl when every rank has a CUDA device, else gloo)",
        default="auto",
        choices=("auto", "gloo", "nccl"),
        group="scale-out",
    ),
    Option(
        "rendezvous-host",
        "level 5: the address rank 0's rendezvous store listens on (default 127.0.0.1, this machine only; "
        "an interface address or 0.0.0.0 only for a multi-host run)",
        default="127.0.0.1",
        metavar="HOST",
        group="scale-out",
    ),
)


#: Each option by its name (``"kl-coef"``).
_BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}


def _default(name: str) -> Any:
    """The table's default of the option ``name`` (a switch: ``False``): :class:`SuiteOptions`'s."""
    option = _BY_NAME[name]
    return False if option.flag else option.default


@dataclasses.dataclass(frozen=True, kw_only=True)
class SuiteOptions:
    """Every option of a run of the suite, one field per :data:`OPTIONS` entry, in its order.

    A field is named as ``sigma-ref check``'s namespace names the option (``kl-coef`` ->
    ``kl_coef``) and defaults to the table's default (a switch to ``False``); ``None``: not given.
    Built from pytest's config (:meth:`from_pytest`, the plugin) or an argparse namespace
    (:meth:`from_argparse`, ``sigma-ref check``), and read by
    :func:`~sigma_ref.conformance.session.build_context` (levels 0-4) and
    :func:`~sigma_ref.conformance.session.scaleout_options` (level 5). ``tests/test_options.py``
    checks that the fields and the table agree.

    >>> options = SuiteOptions(layout="index", kl_coef=0.04)
    >>> options.convention, options.split, options.strict
    ('auto', 'whole-groups', False)
    >>> options.argv()
    ['--sigma-ref-layout', 'index', '--sigma-ref-kl-coef', '0.04']
    """

    impl: str | None = _default("impl")
    layout: str | None = _default("layout")
    output: str | None = _default("output")
    framework: str = _default("framework")
    loss: str | None = _default("loss")
    convention: str = _default("convention")
    report: str | None = _default("report")
    force: bool = _default("force")
    precision: str = _default("precision")
    strict: bool = _default("strict")
    aggregation: str | None = _default("aggregation")
    aggregation_constant: float | None = _default("aggregation-constant")
    clip: str | tuple[float, float] | None = _default("clip")
    returns: str | None = _default("returns")
    keep_metric: str | None = _default("keep-metric")
    timeout: float | None = _default("timeout")
    objective: str | None = _default("objective")
    dual_clip: float | None = _default("dual-clip")
    kl: str | None = _default("kl")
    kl_coef: float | None = _default("kl-coef")
    kl_placement: str | None = _default("kl-placement")
    tis_cap: float | None = _default("tis-cap")
    tis_level: str | None = _default("tis-level")
    tis_mode: str | None = _default("tis-mode")
    world_size: int | None = _default("world-size")
    micro_batches: tuple[int, ...] | None = _default("micro-batches")
    split: str = _default("split")
    split_sizes: str = _default("split-sizes")
    steps_per_generation: int = _default("steps-per-generation")
    mask_truncated: bool = _default("mask-truncated")
    pad_value: float | None = _default("pad-value")
    packing: str = _default("packing")
    advantage_scale: str = _default("advantage-scale")
    advantage_scaler: str | None = _default("advantage-scaler")
    advantage_scale_on: str = _default("advantage-scale-on")
    loss_scale: str = _default("loss-scale")
    scaleout_timeout: float = _default("scaleout-timeout")
    backend: str = _default("backend")
    rendezvous_host: str = _default("rendezvous-host")

    @classmethod
    def _read(cls, value_of: Callable[[Option], Any]) -> SuiteOptions:
        """Each option's value as ``value_of`` reads it; ``None`` (not given) is the table's default."""
        values = {option.check_dest: value_of(option) for option in OPTIONS}
        return cls(**{name: value for name, value in values.items() if value is not None})

    @classmethod
    def from_pytest(cls, config: Any) -> SuiteOptions:
        """The options of a pytest run (``config.getoption("sigma_ref_<name>")``, the plugin's
        ``--sigma-ref-<name>``); an option the session lacks is at its default."""
        return cls._read(lambda option: config.getoption(option.dest, None))

    @classmethod
    def from_argparse(cls, namespace: argparse.Namespace) -> SuiteOptions:
        """The options of a parsed ``sigma-ref check`` (or ``detect``: the few it has) command line.

        >>> SuiteOptions.from_argparse(argparse.Namespace(impl="m:f", layout=None)).impl
        'm:f'
        """
        return cls._read(lambda option: getattr(namespace, option.check_dest, None))

    def replace(self, **changes: Any) -> SuiteOptions:
        """A copy with ``changes`` (field names); an unknown name is a ``TypeError`` naming the fields.

        >>> SuiteOptions().replace(layout="index").layout
        'index'
        """
        unknown = sorted(set(changes) - {option.check_dest for option in OPTIONS})
        if unknown:
            names = ", ".join(option.check_dest for option in OPTIONS)
            raise TypeError(f"{', '.join(unknown)}: not an option of the suite (SuiteOptions: {names})")
        return dataclasses.replace(self, **changes)

    def objective_terms(self) -> dict[str, Any]:
        """The terms of the declared objective (:data:`OBJECTIVE_OPTIONS` but ``objective``), by field.

        >>> SuiteOptions(kl="k3", kl_coef=0.04).objective_terms()["kl_coef"]
        0.04
        """
        names = (name.replace("-", "_") for name in OBJECTIVE_OPTIONS if name != "objective")
        return {name: getattr(self, name) for name in names}

    def argv(self, *, names: Sequence[str] | None = None, prefix: str = "--sigma-ref-") -> list[str]:
        """The options given (not at their default) as arguments: ``--sigma-ref-<name>`` for pytest, or
        with ``prefix="--"`` as ``sigma-ref check`` takes them; only those in ``names`` when given.

        >>> SuiteOptions(layout="index", timeout=2.5).argv(names=("timeout",), prefix="--")
        ['--timeout', '2.5']
        """
        argv: list[str] = []
        for option in OPTIONS:
            if names is not None and option.name not in names:
                continue
            value = getattr(self, option.check_dest)
            if option.flag:
                argv += [prefix + option.name] if value else []
            elif value is not None and value != option.default:
                argv += [prefix + option.name, option.show(value)]
        return argv


def add_to_pytest(group: Any) -> None:
    """Register every option on a pytest option group as ``--sigma-ref-<name>``."""
    for option in OPTIONS:
        group.addoption(option.pytest_flag, dest=option.dest, **option.kwargs())


def add_to_argparse(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    group: str | None = None,
    names: Sequence[str] | None = None,
    skip: Sequence[str] = (),
) -> None:
    """Add options as ``--<name>``: those of ``group`` (``"suite"`` or ``"scale-out"``) or those
    in ``names``, except ``skip``."""
    for option in OPTIONS:
        chosen = (names is None or option.name in names) and (group is None or option.group == group)
        if chosen and option.name not in skip:
            parser.add_argument(f"--{option.name}", dest=option.check_dest, **option.kwargs())


def pytest_argv(args: argparse.Namespace) -> list[str]:
    """``sigma-ref check``'s parsed options as the child pytest's ``--sigma-ref-*`` arguments
    (an option left at its default is not passed): :meth:`SuiteOptions.argv` of the namespace.

    >>> pytest_argv(argparse.Namespace(impl="m:f", strict=True, timeout=2.5, micro_batches=(1, 2)))
    ... # doctest: +NORMALIZE_WHITESPACE
    ['--sigma-ref-impl', 'm:f', '--sigma-ref-strict', '--sigma-ref-timeout', '2.5',
     '--sigma-ref-micro-batches', '1,2']
    """
    return SuiteOptions.from_argparse(args).argv()


#: Any of the options as ``sigma-ref check`` names it, longest names first, not inside a longer flag.
_FLAG = re.compile(
    r"(?<![\w-])--("
    + "|".join(re.escape(o.name) for o in sorted(OPTIONS, key=lambda o: -len(o.name)))
    + r")(?![\w-])"
)


def pytest_flags(text: str) -> str:
    """``text`` with every option named as pytest takes it: ``--loss`` -> ``--sigma-ref-loss``.

    Messages name the ``sigma-ref check`` form (``--<name>``); the pytest plugin shows them through
    this, so that a message names the flag of the route in use. Flags that are not the suite's
    (``--hypothesis-seed``) and longer names (``--loss-scale``) are left whole.

    >>> pytest_flags("no loss given (--loss pkg.module:loss enables it); --loss-scale none")
    'no loss given (--sigma-ref-loss pkg.module:loss enables it); --sigma-ref-loss-scale none'
    >>> pytest_flags("reproduce with --hypothesis-seed=3; --sigma-ref-impl is pytest's")
    "reproduce with --hypothesis-seed=3; --sigma-ref-impl is pytest's"
    """
    return _FLAG.sub(lambda m: f"--sigma-ref-{m.group(1)}", text)
