"""The public entry points: :func:`run_scaleout_many` (several checks, one launch), :func:`run_scaleout`
(one) and the command line (``python -m sigma_ref.conformance.scaleout``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from ..._aggregation import PROMPT_MEAN
from ...conventions import AGGREGATION_MODES
from ..adapter import LAYOUTS
from .analysis import _analyse
from .design import _lengths, _outside_counts
from .job import ScaleoutJob, _backend, _prepare
from .launcher import RENDEZVOUS_HOST, _run_jobs
from .protocol import _RunError
from .results import ScaleoutReport, ScaleoutResult


def run_scaleout_many(
    jobs: Sequence[ScaleoutJob],
    *,
    world_size: int = 2,
    backend: str = "auto",
    rendezvous_host: str = RENDEZVOUS_HOST,
) -> list[ScaleoutReport]:
    """Run several level-5 checks on one launch of ``world_size`` processes; one report per job, in order.

    The ranks start once (the torch import, seconds, instead of milliseconds of work per job) and
    run the jobs one after another, each exactly as :func:`run_scaleout` runs it alone: the same
    designed batch, the same plan, the same results, messages and factors. Every job is validated
    before any process starts (a usage error raises, as in :func:`run_scaleout`). A job whose rank
    raises or hangs gets the FAIL it gets alone (the rank and its exception; where every rank was,
    after the job's own ``timeout``, which counts from the end of the job before it); every process
    is killed and the jobs after it run in fresh processes, so their verdicts are their own.
    ``rendezvous_host``: where rank 0's store listens (loopback unless a multi-host run needs more).
    ``ScaleoutReport.seconds`` is the job's share of the wall time: from the end of the job before
    it (the first: from the start) to the end of its analysis.

    What a batch shares is the processes: modules the jobs import stay imported, so code under test
    that keeps state between calls (a module-level counter, a global torch setting changed on
    import) sees what the jobs before it left; check such code alone with :func:`run_scaleout`.

    Example (two processes, started once for both jobs)::

        adv = "sigma_ref.conformance.scaleout:oracle_advantages"
        loss = "sigma_ref.conformance.scaleout:oracle_loss"
        reports = run_scaleout_many([ScaleoutJob(adv, loss, layout="index", aggregation=mode)
                                     for mode in ("token-mean", "token-sum")], world_size=2)
        assert all(r.passed for r in reports)
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be a positive int")
    prepared = [_prepare(job, world_size) for job in jobs]
    backend = _backend(backend, world_size)
    start = time.monotonic()
    if not prepared:
        return []
    if not isinstance(rendezvous_host, str) or not rendezvous_host:
        raise ValueError(
            f"rendezvous_host={rendezvous_host!r} must be an address to listen on, e.g. {RENDEZVOUS_HOST!r}"
        )
    outcomes = _run_jobs(
        [p.config for p in prepared],
        [p.job.timeout for p in prepared],
        world_size=world_size,
        backend=backend,
        host=rendezvous_host,
    )
    reports: list[ScaleoutReport] = []
    since = start
    for p, (outcome, ended) in zip(prepared, outcomes, strict=True):
        analysed = time.monotonic()
        W, Ms = p.world_size, p.Ms
        if isinstance(outcome, _RunError):
            prop = f"scaleout[W={W},M={','.join(map(str, Ms))}]"
            results = [ScaleoutResult(prop, "FAIL", None, outcome.message)]
        else:
            runs = {key: r for key, r in zip(p.config["plan"], outcome, strict=True) if r is not None}
            results = _analyse(
                runs,
                p.batch,
                W=W,
                Ms=Ms,
                split=p.job.split,
                aggregation=p.job.aggregation,
                loss_scale=p.job.loss_scale,
                constant=p.job.aggregation_constant,
                sizes=p.job.sizes,
                counts=_outside_counts(p.config, int(p.batch.index.max()) + 1),
                pad_value=p.job.pad_value,
                packing=p.job.packing,
                lengths=_lengths(p.job.seed, int(p.batch.index.max()) + 1),
                advantage_scale=p.job.advantage_scale,
                advantage_scale_on=p.job.advantage_scale_on,
                loss_precision=p.job.loss_precision,
            )
        seconds = (ended - since) + (time.monotonic() - analysed)
        reports.append(ScaleoutReport(tuple(results), W, Ms, backend, seconds))
        since = ended
    return reports


def run_scaleout(
    advantages_target: str,
    loss_target: str | None = None,
    *,
    layout: str | None = None,
    world_size: int = 2,
    micro_batches: int | Sequence[int] = 2,
    split: str = "whole-groups",
    aggregation: str | None = None,
    loss_scale: str = "none",
    timeout: float = 120.0,
    seed: int = 0,
    backend: str = "auto",
    aggregation_constant: float | None = None,
    output: str | int | None = None,
    rendezvous_host: str = RENDEZVOUS_HOST,
    sizes: str = "uneven",
    steps_per_generation: int = 1,
    mask_truncated: bool = False,
    pad_value: float | None = None,
    packing: str = "none",
    advantage_scale: str = "none",
    advantage_scale_on: str = "step",
    advantage_scaler: str | None = None,
    framework: str = "auto",
    loss_precision: str = "float64",
) -> ScaleoutReport:
    """Run the level-5 check on ``world_size`` real processes (module doc); a :class:`ScaleoutReport`.

    ``advantages_target``/``loss_target``: ``pkg.module:attr`` strings (child processes import
    them; an :class:`~sigma_ref.conformance.Adapter` may carry the loss and layout).
    ``micro_batches``: M, or several (``(1, 2, 3)``: one verdict each, in the same processes).
    ``split``: ``whole-groups`` or ``split-groups`` (then only layout ``index`` fits).
    ``aggregation``: the declared mode (one of :data:`AGGREGATION_MODES`) or None to detect.
    ``aggregation_constant``: the ``C`` of a declared ``seq-mean-token-sum-norm``, whose weights are
    the oracle's ``1 / (N_seq C)``; None means ``C = T``, the padded length (verl's and TRL's
    default).
    ``sizes``: ``uneven`` (ranks and micro-batches hold different numbers of responses and tokens)
    or ``equal`` (:mod:`~.normalisers`). ``steps_per_generation``: S, the optimizer steps of one
    generation batch; the judged step's loss may ask for ``generation_num_tokens``/``_seqs``, the
    counts of all S steps' batches, and must not normalise by them. ``mask_truncated``: the
    responses reaching the padded length lose their mask (TRL's ``mask_truncated_completions``):
    counts must be of the mask the loss gets. ``pad_value``: fill ``logp`` (and so ``old_logp``) at
    masked positions with it (``float('nan')``, ``float('inf')``): the loss must not let it through.
    ``packing``: ``none``, ``position_ids`` or ``cu_seqlens``: call the loss on packed rows with
    the responses' boundaries by that keyword (:mod:`~.packing`). ``advantage_scale``: hand the
    loss ``s_i A_i`` (:func:`~.normalisers.advantage_scales`) with the counts of
    ``advantage_scale_on`` (``step``, ``rank``, ``micro-batch``); the loss is then a token sum.
    ``advantage_scaler``: instead, the trainer's own pre-scaling function (``pkg.module:attr``,
    :func:`~.normalisers.call_advantage_scaler`), called on the mask of ``advantage_scale_on``'s batch.
    ``loss_scale``: the trainer's reading as the user declares it (module doc); the check measures
    both readings and judges the one the loss is right under (the declaration is reported). A hung or crashed
    rank ends the check within ``timeout`` seconds with a FAIL; every process is killed.
    ``output``: where the advantages are in the result (a key or an index, the Adapter's ``output``).
    ``loss_target=None`` (and no loss on the Adapter): only the advantages are checked.
    ``rendezvous_host``: where rank 0's store listens (default loopback only; module doc).
    ``framework``: ``auto``, ``torch`` or ``jax``, as ``sigma-ref check --framework``: JAX code runs
    in the ranks behind the bridge (module doc, **JAX code**). ``loss_precision``: ``float64`` or
    ``float32``, the precision the loss computes its gradient in; every gradient comparison is made
    at its tolerance (:data:`LOSS_PRECISION_RTOL`).

    Performance: one check starts W processes once (torch import, ~2-4 s each) and runs every
    configuration it needs in them: (1, 1), (W, M) and the probes (1, M), (1, M + 1), (W, 1).
    Several checks at the same W: :func:`run_scaleout_many` starts the processes once for all
    (this function is its one-job case).

    Example (starts two processes, a few seconds)::

        report = run_scaleout("sigma_ref.conformance.scaleout:oracle_advantages",
                              "sigma_ref.conformance.scaleout:oracle_loss", layout="index",
                              aggregation="token-mean", world_size=2, micro_batches=(1, 2, 3))
        assert report.passed, report.summary()
    """
    job = ScaleoutJob(
        advantages_target,
        loss_target,
        layout=layout,
        micro_batches=micro_batches,
        split=split,
        aggregation=aggregation,
        loss_scale=loss_scale,
        timeout=timeout,
        seed=seed,
        aggregation_constant=aggregation_constant,
        output=output,
        sizes=sizes,
        steps_per_generation=steps_per_generation,
        mask_truncated=mask_truncated,
        pad_value=pad_value,
        packing=packing,
        advantage_scale=advantage_scale,
        advantage_scale_on=advantage_scale_on,
        advantage_scaler=advantage_scaler,
        framework=framework,
        loss_precision=loss_precision,
    )
    (report,) = run_scaleout_many(
        [job], world_size=world_size, backend=backend, rendezvous_host=rendezvous_host
    )
    return report


# ---------------------------------------------------------------------------
# command line


def add_scaleout_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the level-5 options (``--world-size``, ``--micro-batches``, ``--split``, ``--loss-scale``,
    ``--packing``, ``--advantage-scale``, ``--advantage-scale-on``, ``--scaleout-timeout``,
    ``--backend``, ``--rendezvous-host``, ...) from the one option table, ``sigma_ref._options``."""
    from ..._options import add_to_argparse

    add_to_argparse(
        parser.add_argument_group("scale-out (level 5, real torch.distributed processes)"),
        group="scale-out",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sigma_ref.conformance.scaleout --impl ... --loss ...``: print; exit 0 iff it passes."""
    p = argparse.ArgumentParser(
        prog="python -m sigma_ref.conformance.scaleout",
        description="Check an advantage function and loss under micro-batching, gradient accumulation and "
        "data-parallel ranks, on real torch.distributed processes.",
    )
    p.add_argument("--impl", required=True, help="pkg.module:attr of the advantage function (or an Adapter)")
    p.add_argument("--layout", choices=LAYOUTS, help="how the advantage function is called")
    p.add_argument("--loss", help="pkg.module:attr of loss(logp, old_logp, advantages, mask, **globals)")
    p.add_argument(
        "--aggregation",
        choices=(*AGGREGATION_MODES, PROMPT_MEAN),
        help="the declared aggregation (default: detect)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the designed batch")
    add_scaleout_arguments(p)
    args = p.parse_args(argv)
    if args.world_size is None and args.micro_batches is None:
        args.world_size, args.micro_batches = 2, 2
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        report = run_scaleout(
            args.impl,
            args.loss,
            layout=args.layout,
            world_size=args.world_size or 1,
            micro_batches=args.micro_batches or 1,
            split=args.split,
            aggregation=args.aggregation,
            loss_scale=args.loss_scale,
            timeout=args.scaleout_timeout,
            seed=args.seed,
            backend=args.backend,
            rendezvous_host=args.rendezvous_host,
            sizes=args.split_sizes,
            steps_per_generation=args.steps_per_generation,
            mask_truncated=args.mask_truncated,
            pad_value=args.pad_value,
            packing=args.packing,
            advantage_scale=args.advantage_scale,
            advantage_scale_on=args.advantage_scale_on,
        )
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.passed else 1
