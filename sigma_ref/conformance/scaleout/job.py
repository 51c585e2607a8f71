"""One level-5 check (:class:`ScaleoutJob`): its validation, every usage error raised before any
process starts, and its plan, the configurations (W, M, split) the ranks run (:func:`_prepare`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from ..._aggregation import PROMPT_MEAN
from ..._options import ADVANTAGE_SCALE_SCOPES
from ..._vocabulary import LOSS_SCALES, SPLITS
from ...conventions import AGGREGATION_MODES
from ..adapter import Adapter, load_object
from ..normalisers import ADVANTAGE_SCALE_MODES, SIZES
from ..packing import check_packing
from .calling import _LOSS_VOCABULARY, _advantage_globals, _declared, _Fn, _resolve
from .design import _Batch, _job_batch, _n_groups, _shard_rows
from .fitting import LOSS_PRECISION_RTOL
from .protocol import _JobConfig, _Key

# ---------------------------------------------------------------------------
# the public entry points


def _backend(requested: str, world_size: int) -> str:
    if requested == "auto":
        return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size else "gloo"
    if requested not in ("gloo", "nccl"):
        raise ValueError(f"backend={requested!r} must be 'auto', 'gloo' or 'nccl'")
    return requested


@dataclasses.dataclass(frozen=True, kw_only=True)
class CallShape:
    """Level 5's call-shape options, keyword-only, as :func:`run_scaleout` takes them: the fields a
    suite run (:class:`~sigma_ref.conformance.launch.ScaleoutOptions`) and one check
    (:class:`ScaleoutJob`) share, declared once.

    ``layout``/``output``: the adapter's (``None``: its own); ``split``, ``loss_scale``, ``timeout``,
    ``seed``; the normaliser patterns' ``sizes``, ``steps_per_generation``, ``mask_truncated``,
    ``pad_value``, ``packing``, ``advantage_scale``, ``advantage_scale_on``, ``advantage_scaler``;
    ``framework`` (``auto``, ``torch``, ``jax``).

    >>> CallShape(split="any").packing
    'none'
    """

    layout: str | None = None
    output: str | int | None = None
    split: str = "whole-groups"
    loss_scale: str = "none"
    timeout: float = 120.0
    seed: int = 0
    sizes: str = "uneven"
    steps_per_generation: int = 1
    mask_truncated: bool = False
    pad_value: float | None = None
    packing: str = "none"
    advantage_scale: str = "none"
    advantage_scale_on: str = "step"
    advantage_scaler: str | None = None
    framework: str = "auto"


@dataclasses.dataclass(frozen=True)
class ScaleoutJob(CallShape):
    """One level-5 check for :func:`run_scaleout_many`: :func:`run_scaleout`'s arguments but W and backend.

    >>> ScaleoutJob("sigma_ref.conformance.scaleout:oracle_advantages",
    ...             "sigma_ref.conformance.scaleout:oracle_loss", layout="index").micro_batches
    2
    """

    advantages_target: str
    loss_target: str | None = None
    micro_batches: int | Sequence[int] = 2
    aggregation: str | None = None
    aggregation_constant: float | None = None
    loss_precision: str = "float64"


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """A validated job: what the ranks run (``config``) and what the analysis needs."""

    job: ScaleoutJob
    config: _JobConfig
    batch: _Batch
    world_size: int
    Ms: tuple[int, ...]


def _prepare(job: ScaleoutJob, world_size: int) -> _Prepared:
    """Validate one job (every usage error raises here, before any process starts) and plan it."""
    Ms = _micro_batch_counts(job.micro_batches)
    _check_options(job)
    adapter, loss_fn = _check_targets(job)
    _check_scaling(job, loss_fn)
    _advantage_globals(adapter)
    _check_inputs(job)
    batch = _checked_batch(job, world_size, Ms)
    plan = _plan(world_size, Ms, job.split, batch.n)
    return _Prepared(job, _job_config(job, plan), batch, world_size, Ms)


def _micro_batch_counts(micro_batches: int | Sequence[int]) -> tuple[int, ...]:
    """Every M asked for, sorted, each a positive int."""
    Ms = (micro_batches,) if isinstance(micro_batches, int) else tuple(micro_batches)
    if not Ms or not all(isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in Ms):
        raise ValueError(f"micro_batches={micro_batches!r} must be a positive int or a sequence of them")
    Ms = tuple(sorted(set(Ms)))
    return Ms


def _check_options(job: ScaleoutJob) -> None:
    """The split, the reading, the sizes, the steps per generation and the declared aggregation."""
    split, loss_scale, aggregation = job.split, job.loss_scale, job.aggregation
    if split not in SPLITS:
        raise ValueError(f"split={split!r} must be one of {SPLITS}")
    if loss_scale not in LOSS_SCALES:
        raise ValueError(f"loss_scale={loss_scale!r} must be one of {LOSS_SCALES}")
    if job.sizes not in SIZES:
        raise ValueError(
            f"sizes={job.sizes!r} must be one of {SIZES} (uneven: ranks and micro-batches hold different "
            "numbers of responses, as verl's use_dynamic_bsz; equal: a fixed per-device batch, as TRL's)"
        )
    steps = job.steps_per_generation
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(
            f"steps_per_generation={steps!r} must be a positive int: the optimizer steps one generation "
            "batch is cut into (TRL's steps_per_generation, verl's ppo_mini_batch_size ratio)"
        )
    if aggregation is not None and aggregation not in (*AGGREGATION_MODES, PROMPT_MEAN):
        raise ValueError(
            f"aggregation={aggregation!r} must be one of {(*AGGREGATION_MODES, PROMPT_MEAN)} or None (detect)"
        )
    constant = job.aggregation_constant
    if constant is not None and not (
        isinstance(constant, int | float) and math.isfinite(constant) and constant > 0
    ):
        raise ValueError(
            f"aggregation_constant={constant!r} must be a positive number (the C of "
            "seq-mean-token-sum-norm, e.g. the padded length) or None"
        )


def _check_targets(job: ScaleoutJob) -> tuple[Adapter, _Fn | None]:
    """The targets the ranks import, resolved here first (a bad one fails fast), and the call shape
    they take: a split group needs layout ``index`` or ``token``, packing a loss that takes it."""
    for name, target in (("advantages_target", job.advantages_target), ("loss_target", job.loss_target)):
        if target is not None and not isinstance(target, str):
            raise TypeError(
                f"{name}={target!r} must be a 'pkg.module:attr' string: the ranks are separate processes "
                "that import it"
            )
    if job.output is not None and not isinstance(job.output, str | int):
        raise TypeError(f"output={job.output!r} must be a key or an index (the ranks read it from a file)")
    adapter, loss_fn = _resolve(  # fail fast (a bad --framework too)
        job.advantages_target, job.layout, job.loss_target, job.output, job.framework
    )
    layout = adapter.layout
    if job.split == "split-groups" and layout not in ("index", "token"):
        raise ValueError(
            f"split='split-groups' needs layout 'index' or 'token' (a {layout!r} function cannot receive "
            "part of a group)"
        )
    if loss_fn is not None:
        check_packing(job.packing, _declared(loss_fn, 4, _LOSS_VOCABULARY, "the loss"))
    else:
        check_packing(job.packing, None)
    return adapter, loss_fn


def _check_scaling(job: ScaleoutJob, loss_fn: _Fn | None) -> None:
    """The pre-scaled advantages: a count (``advantage_scale``) or the trainer's own function."""
    if job.advantage_scale not in ADVANTAGE_SCALE_MODES:
        raise ValueError(
            f"advantage_scale={job.advantage_scale!r} must be one of {tuple(ADVANTAGE_SCALE_MODES)} "
            "(the count the trainer divides each advantage by before a token-sum loss)"
        )
    if job.advantage_scale_on not in ADVANTAGE_SCALE_SCOPES:
        raise ValueError(
            f"advantage_scale_on={job.advantage_scale_on!r} must be one of {ADVANTAGE_SCALE_SCOPES}: the "
            "batch whose counts the advantages are divided by"
        )
    if job.advantage_scale != "none" and loss_fn is None:
        raise ValueError(
            f"advantage_scale={job.advantage_scale!r} scales the advantages a loss gets: give a loss (--loss)"
        )
    if job.advantage_scaler is not None:
        if not isinstance(job.advantage_scaler, str):
            raise TypeError(
                f"advantage_scaler={job.advantage_scaler!r} must be a 'pkg.module:attr' string: the ranks "
                "are separate processes that import it"
            )
        if job.advantage_scale != "none":
            raise ValueError(
                f"advantage_scaler={job.advantage_scaler!r} and advantage_scale={job.advantage_scale!r} both "
                "scale the advantages: give one (the trainer's own function, or the count it divides by)"
            )
        if loss_fn is None:
            raise ValueError(
                f"advantage_scaler={job.advantage_scaler!r} scales the advantages a loss gets: give a loss "
                "(--loss)"
            )
        load_object(job.advantage_scaler, what="advantage_scaler")  # fail fast


def _check_inputs(job: ScaleoutJob) -> None:
    """The loss's working precision, the truncation mask and the padding value."""
    if job.loss_precision not in LOSS_PRECISION_RTOL:
        raise ValueError(
            f"loss_precision={job.loss_precision!r} must be one of {tuple(LOSS_PRECISION_RTOL)}: the "
            "precision the loss computes its gradient in (tunix: float32)"
        )
    if not isinstance(job.mask_truncated, bool):
        raise TypeError(f"mask_truncated={job.mask_truncated!r} must be a bool")
    if job.pad_value is not None and not isinstance(job.pad_value, int | float):
        raise TypeError(f"pad_value={job.pad_value!r} must be a float (e.g. float('nan')) or None")


def _checked_batch(job: ScaleoutJob, world_size: int, Ms: tuple[int, ...]) -> _Batch:
    """The designed batch, whose every rank must hold at least M responses."""
    batch = _job_batch(job.seed, _n_groups(world_size, job.sizes), job.mask_truncated)
    per_rank = min(len(_shard_rows(batch, world_size, r, job.split, job.sizes)) for r in range(world_size))
    if max(Ms) > per_rank:
        raise ValueError(
            f"micro_batches={max(Ms)} exceeds the {per_rank} responses a rank holds at "
            f"world_size={world_size}; use at most {per_rank}"
        )
    return batch


def _plan(W: int, Ms: tuple[int, ...], split: str, n: int) -> list[_Key]:
    """The configurations the ranks run: (1, 1), (W, M) and the probes (1, M), (1, M + 1), (W, 1)."""
    plan: list[_Key] = [(1, 1, "whole-groups")]
    for M in Ms:
        plan.append((W, M, split))
        if M > 1:
            plan += [(1, M, "whole-groups")] + ([(1, M + 1, "whole-groups")] if M + 1 <= n else [])
        if W > 1 and M > 1:
            plan.append((W, 1, split))
    if split == "split-groups":
        plan.append((W, max(Ms), "whole-groups"))
    return plan


def _job_config(job: ScaleoutJob, plan: list[_Key]) -> _JobConfig:
    """The job as the ranks read it from the launch's config file."""
    config: _JobConfig = {
        "impl": job.advantages_target,
        "loss": job.loss_target,
        "layout": job.layout,
        "output": job.output,
        "seed": job.seed,
        "aggregation": job.aggregation,
        "loss_scale": job.loss_scale,
        "plan": list(dict.fromkeys(plan)),
        "sizes": job.sizes,
        "steps_per_generation": job.steps_per_generation,
        "mask_truncated": job.mask_truncated,
        "pad_value": None if job.pad_value is None else float(job.pad_value),
        "packing": job.packing,
        "advantage_scale": job.advantage_scale,
        "advantage_scale_on": job.advantage_scale_on,
        "advantage_scaler": job.advantage_scaler,
        "aggregation_constant": None if job.aggregation_constant is None else float(job.aggregation_constant),
        "framework": job.framework,
    }
    return config
