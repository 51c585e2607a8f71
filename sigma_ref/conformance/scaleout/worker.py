"""One rank: join the process group once, then run every job of the launch (:func:`_worker`); per
configuration of a job's plan, the advantages of its shard and the gradient its micro-batches
accumulate (:func:`_run_job`)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..adapter import LOSS_EXTRAS, Adapter, load_object
from ..normalisers import advantage_scales, call_advantage_scaler, split_pieces
from ..packing import PACKING_INPUTS, pack, pack_tensor, packing_inputs
from .calling import _LOSS_VOCABULARY, _advantage_globals, _call_advantages, _declared, _Fn, _resolve
from .design import (
    _T,
    PACKED_CAPACITY,
    _Batch,
    _counts,
    _job_batch,
    _lengths,
    _n_groups,
    _outside_counts,
    _scope_order,
    _shard_rows,
    _token_logp,
)
from .keywords import loss_globals
from .protocol import _JobConfig, _LaunchConfig, _Run

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


def _worker(config_path: str, rank: int) -> int:
    """Entry point of one rank: join the process group once, then run every job of the launch in order.

    For each job rank 0 writes its results (``results.<k>.json``) *before* the barrier that ends
    the job, so a rank that has reached job k + 1 proves job k's file is there: the parent blames
    a raising or hung rank on the first job without results, and nothing else is needed to know
    which job a rank was in. Any exception ends the process (``error.<rank>``, exit code 1).
    """
    with open(config_path, encoding="utf-8") as fh:
        cfg: _LaunchConfig = json.load(fh)
    workdir = os.path.dirname(config_path)
    progress = os.path.join(workdir, f"progress.{rank}")

    def say(stage: str) -> None:
        with open(progress, "w", encoding="utf-8") as fh:
            fh.write(stage)

    try:
        import datetime

        import torch.distributed as dist

        torch.set_num_threads(1)
        W, backend = cfg["world_size"], cfg["backend"]
        device = torch.device(
            f"cuda:{rank % max(1, torch.cuda.device_count())}" if backend == "nccl" else "cpu"
        )
        if device.type == "cuda":
            torch.cuda.set_device(device)
        say("init_process_group")
        timeout = datetime.timedelta(seconds=2 * cfg["timeout"])  # the parent's deadline comes first
        host, port = cfg["host"], cfg["port"]
        listen_fd = None
        if rank == 0:  # the store listens on the host asked for only (TCPStore alone listens on every one)
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, port))
            sock.listen(128)
            listen_fd = sock.detach()
        store = dist.TCPStore(  # type: ignore[attr-defined]  # exported at run time, not in the stubs
            host, port, W, rank == 0, timeout=timeout, master_listen_fd=listen_fd
        )
        dist.init_process_group(backend, store=store, rank=rank, world_size=W, timeout=timeout)
        world = dist.group.WORLD
        solo = dist.new_group([0])  # every rank must create it; only rank 0 uses it (W = 1 runs)
        for k, job in enumerate(cfg["jobs"]):
            results = _run_job(job, rank, W, device, world, solo, say)
            if rank == 0:
                tmp = os.path.join(workdir, f"results.{k}.json.tmp")
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump(results, fh)
                os.replace(tmp, os.path.join(workdir, f"results.{k}.json"))
            say("barrier")
            dist.barrier()
        say("done")
        dist.destroy_process_group()
        return 0
    except BaseException:
        with open(os.path.join(workdir, f"error.{rank}"), "w", encoding="utf-8") as fh:
            fh.write(traceback.format_exc())
        return 1


@dataclasses.dataclass(frozen=True)
class _Step:
    """One job as a rank holds it: the designed batch (numpy, and its tensors on ``device``), the
    implementation, and the keywords its functions declare."""

    job: _JobConfig
    rank: int
    device: torch.device
    batch: _Batch
    generation: tuple[int, int]  # (tokens, responses) of the generation batch
    lengths: np.ndarray  # each response's designed length: the tokens packing places
    adapter: Adapter
    loss_fn: _Fn | None
    loss_kw: list[str]
    adv_kw: list[str]
    scaler: Callable[..., object] | None
    feats: torch.Tensor
    tokens: torch.Tensor
    mask: torch.Tensor
    rewards: torch.Tensor


def _step(job: _JobConfig, rank: int, W: int, device: torch.device) -> _Step:
    """Build the job's batch and resolve its implementation on this rank."""
    n_groups = _n_groups(W, job["sizes"])
    batch = _job_batch(job["seed"], n_groups, job["mask_truncated"])
    adapter, loss_fn = _resolve(job["impl"], job["layout"], job["loss"], job["output"], job["framework"])
    target = job["advantage_scaler"]
    return _Step(
        job=job,
        rank=rank,
        device=device,
        batch=batch,
        generation=_outside_counts(job, n_groups)["generation"],
        lengths=_lengths(job["seed"], n_groups),
        adapter=adapter,
        loss_fn=loss_fn,
        loss_kw=[] if loss_fn is None else _declared(loss_fn, 4, _LOSS_VOCABULARY, "the loss"),
        adv_kw=_advantage_globals(adapter),
        scaler=None if target is None else load_object(target, what="advantage_scaler"),
        feats=torch.tensor(batch.feats, device=device),
        tokens=torch.tensor(batch.tokens, device=device),
        mask=torch.tensor(batch.mask, device=device),
        rewards=torch.tensor(batch.rewards, device=device),
    )


@dataclasses.dataclass(frozen=True)
class _Config:
    """One configuration (w, m, split) of the plan on this rank: its rows and its process group."""

    w: int
    m: int
    split: str
    group: ProcessGroup | None
    rows: np.ndarray
    tag: str


def _run_job(
    job: _JobConfig,
    rank: int,
    W: int,
    device: torch.device,
    world: ProcessGroup | None,
    solo: ProcessGroup | None,
    say: Callable[[str], None],
) -> list[_Run | None]:
    """One job's plan on this rank: rank 0's results per configuration (None where it is not a member)."""
    step = _step(job, rank, W, device)
    results: list[_Run | None] = []
    for w, m, split in job["plan"]:
        if rank >= w:
            results.append(None)
            continue
        rows = _shard_rows(step.batch, w, rank, split, job["sizes"])
        cfg = _Config(w, m, split, world if w == W else solo, rows, f"W={w}, M={m}, {split}")
        results.append(_run_configuration(step, cfg, say))
    return results


def _run_configuration(step: _Step, cfg: _Config, say: Callable[[str], None]) -> _Run:
    """The shard's advantages, then every micro-batch's loss and backward; the rank-averaged gradient."""
    import torch.distributed as dist

    torch.manual_seed(
        step.job["seed"] + step.rank
    )  # code that draws (verl's clip_cov) draws the same every run
    say(f"the advantage function at {cfg.tag}")
    adv = _shard_advantages(step, cfg)
    theta = torch.tensor(step.batch.theta, device=step.device, requires_grad=True)
    pieces = split_pieces(len(cfg.rows), cfg.m, step.job["sizes"]) if step.loss_fn is not None else []
    for j, piece in enumerate(pieces):
        _micro_batch(step, cfg, theta, adv, j, piece, say)
    say(f"all_reduce of the gradients at {cfg.tag}")
    grad = theta.grad if theta.grad is not None else torch.zeros_like(theta)
    dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=cfg.group)
    grad = grad / cfg.w
    full_adv = torch.zeros(step.batch.n, dtype=torch.float64, device=step.device)
    full_adv[torch.tensor(cfg.rows, device=step.device)] = adv
    dist.all_reduce(full_adv, op=dist.ReduceOp.SUM, group=cfg.group)
    grad_list = grad.cpu().tolist() if step.loss_fn is not None else None
    return {"grad": grad_list, "advantages": full_adv.cpu().tolist()}


def _shard_advantages(step: _Step, cfg: _Config) -> torch.Tensor:
    """The advantage function on this rank's shard, with the process-group keywords it declares."""
    env: dict[str, object] = {
        "process_group": cfg.group,
        "rank": step.rank,
        "world_size": cfg.w,
        "dp_size": cfg.w,
    }
    rows_t = torch.tensor(cfg.rows, device=step.device)
    kw = {k: env[k] for k in step.adv_kw}
    adv = _call_advantages(step.adapter, step.rewards[rows_t], step.batch.index[cfg.rows], kw).to(step.device)
    if adv.shape != (len(cfg.rows),):
        raise ValueError(
            f"the advantage function returned shape {tuple(adv.shape)} for {len(cfg.rows)} rewards at "
            f"{cfg.tag}"
        )
    return adv


def _scaled_advantages(step: _Step, cfg: _Config, piece: np.ndarray, piece_adv: torch.Tensor) -> torch.Tensor:
    """The micro-batch's advantages as the trainer hands them to the loss: pre-scaled by its own
    function (``advantage_scaler``) or by a count (``advantage_scale``), else as computed."""
    job, batch, rows = step.job, step.batch, cfg.rows
    if step.scaler is not None:  # the trainer's own pre-scaling function
        scope_rows = _scope_order(
            batch, cfg.w, cfg.m, cfg.split, job["sizes"], rows, piece, job["advantage_scale_on"]
        )
        factors = np.zeros(batch.n)
        factors[scope_rows] = call_advantage_scaler(
            step.scaler,
            batch.mask[scope_rows],
            world_size=cfg.w,
            micro_batches=cfg.m,
            prompt_index=batch.index[scope_rows],
        )
        return piece_adv * torch.tensor(factors[rows[piece]], device=step.device)
    if job["advantage_scale"] == "none":
        return piece_adv
    # the trainer folds the aggregation into the advantages
    scope = {"step": batch.mask, "rank": batch.mask[rows], "micro-batch": batch.mask[rows[piece]]}
    tok, seq = _counts(scope[job["advantage_scale_on"]])
    scale = advantage_scales(
        batch.mask[rows[piece]],
        job["advantage_scale"],
        num_tokens=tok,
        num_seqs=seq,
        constant=job["aggregation_constant"],
    )
    return piece_adv * torch.tensor(scale, device=step.device)


def _loss_keywords(
    step: _Step, cfg: _Config, j: int, piece: np.ndarray, logp: torch.Tensor, order: torch.Tensor | None
) -> dict[str, object]:
    """Every keyword the harness can pass micro-batch ``j``'s loss (:data:`~.keywords.GLOBALS`, the
    objective inputs); the per-row ones in the order the loss gets the rows (``order`` under packing)."""
    batch, rows = step.batch, cfg.rows
    values = loss_globals(
        batch.mask[rows[piece]],
        rank_mask=batch.mask[rows],
        global_mask=batch.mask,
        world_size=cfg.w,
        rank=step.rank,
        micro_batches=cfg.m,
        micro_batch_index=j,
        process_group=cfg.group,
        aggregation=step.job["aggregation"],
        micro_index=batch.index[rows[piece]],
        rank_index=batch.index[rows],
        global_index=batch.index,
    )
    for name in ("prompt_index", "prompt_num_tokens"):  # per row, in the order the loss gets the rows
        per_row = values[name].to(step.device)
        values[name] = per_row if order is None else per_row[order]
    # the objective inputs, this micro-batch's rows: neutral at ratio 1, as at levels 0 to 4
    values.update(dict.fromkeys(LOSS_EXTRAS, logp.detach()))
    values["generation_num_tokens"], values["generation_num_seqs"] = step.generation
    return values


def _micro_batch(
    step: _Step,
    cfg: _Config,
    theta: torch.Tensor,
    adv: torch.Tensor,
    j: int,
    piece: np.ndarray,
    say: Callable[[str], None],
) -> None:
    """Micro-batch ``j``'s loss (packed, padded, scaled as the job asks) and its ``backward()``."""
    job, device, loss_fn = step.job, step.device, step.loss_fn
    assert loss_fn is not None
    r = torch.tensor(cfg.rows, device=device)[torch.tensor(piece, device=device)]
    logp = _token_logp(theta, step.feats[r], step.tokens[r])
    piece_adv = _scaled_advantages(step, cfg, piece, adv[torch.tensor(piece, device=device)])
    piece_mask = step.mask[r]
    packed: dict[str, torch.Tensor] = {}
    order = None  # the responses' order under packing (each per-response input follows it)
    if job["packing"] != "none":  # several responses per row, their boundaries by keyword
        packing = pack(step.lengths[cfg.rows[piece]], PACKED_CAPACITY, _T)
        logp, piece_mask = pack_tensor(logp, packing), pack_tensor(piece_mask, packing)
        order = torch.tensor(packing.order, device=device)
        piece_adv = piece_adv[order]
        packed = packing_inputs(PACKING_INPUTS, packing, device)
    if job["pad_value"] is not None:  # padded log-probs holding NaN or inf, on the gradient's path
        logp = logp + torch.where(piece_mask > 0, 0.0, job["pad_value"]).to(logp.dtype)
    values = {**_loss_keywords(step, cfg, j, piece, logp, order), **packed}
    say(f"the loss at {cfg.tag}, micro-batch {j}")
    out = loss_fn(logp, logp.detach(), piece_adv, piece_mask, **{k: values[k] for k in step.loss_kw})
    value = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise TypeError(f"the loss returned {value!r} at {cfg.tag}; it should return a scalar Tensor")
    if job["loss_scale"] == "mean-over-micro-batches":
        value = value / cfg.m
    torch.autograd.backward(value.reshape(()))
