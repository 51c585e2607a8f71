"""Adapters for Unsloth 2026.10 (``unsloth_zoo.rl_replacements.grpo_compute_loss``): its own GRPO loss.

Unsloth patches TRL's ``GRPOTrainer``: the advantages are TRL's (the TRL rows), the loss is
Unsloth's ``grpo_compute_loss(ref, new, old, sampling_per_token_logps, input_ids, mask, beta,
advantages, **kwargs)``, which its trainer (``unsloth/models/rl_replacements.py``) calls with
``loss_type``, ``importance_sampling_level``, ``epsilon_low``/``epsilon_high``, ``delta``,
``max_completion_length``, ``num_items_in_batch``, ``current_gradient_accumulation_steps`` and
``num_processes``. The adapter calls it eagerly on CPU (``grpo_compute_loss_slow`` is the same source
under ``torch.compile``) with TRL's defaults: one process, no accumulation, ``num_items_in_batch`` the
batch's token count, ``max_completion_length`` the padded width, clip 0.2 both sides.

Rows: ``loss[<loss_type>]`` for the eight loss types, each with TRL's group advantage (``trl``,
computed by TRL's own code, as in Unsloth's trainer); options as rows ``loss[<type>, <option>]``;
``loss[dapo, vllm <mode>]``: ``use_vllm`` with ``vllm_importance_sampling_correction`` on the
rollout's log-probs, the ratio computed inside ``grpo_compute_loss`` (``clip_max`` 3).

``UNSLOTH_IS_PRESENT=1`` is set before the import, as ``unsloth`` sets it for ``unsloth_zoo``, and
``UNSLOTH_COMPILE_LOCATION`` points to the temporary directory (else ``./unsloth_compiled_cache``).

>>> sorted(ADAPTERS)[:2]
['loss[bnpo]', 'loss[cispo, epsilon_high=5]']
"""

from __future__ import annotations

import functools
import os
import tempfile
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch

from sigma_ref.conformance import Adapter
from sigma_ref.objectives import Objective

from . import trl as _trl
from ._common import LOSS_PROPERTIES, loss_type_scaleout, row_builder, suite_loss, variant_rows
from ._peers import MODULE_API, Peer, ScaleOut, lazy

__all__ = [*MODULE_API, "NOTES", "LOSS_ONLY", "LOSS_TYPES", "OBJECTIVE_NOTES", "SCALEOUT", "AT_SCALE"]

PEER = Peer("unsloth-zoo", "unsloth_zoo", "2026.10.9", title="Unsloth")

#: The loss types ``grpo_compute_loss`` implements (its ``loss_type`` branches).
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")


def available() -> bool:
    """Whether unsloth_zoo (and TRL, whose advantages and gamma weights it uses) are installed."""
    return unavailable() is None


def unavailable() -> str | None:
    """Why Unsloth cannot be used, or ``None``."""
    return PEER.unavailable() or _trl.unavailable()


@lazy
def _compute_loss() -> Any:
    """``unsloth_zoo.rl_replacements.grpo_compute_loss`` (imports unsloth_zoo on first use)."""
    PEER.require()
    os.environ.setdefault("UNSLOTH_IS_PRESENT", "1")
    # unsloth_zoo writes generated sources to ./unsloth_compiled_cache unless told otherwise
    os.environ.setdefault(
        "UNSLOTH_COMPILE_LOCATION", os.path.join(tempfile.gettempdir(), "sigma-ref-unsloth")
    )
    from unsloth_zoo.rl_replacements import grpo_compute_loss

    return grpo_compute_loss


@lazy
def _gamma_weights() -> Any:
    """TRL's ``GRPOTrainer.get_gamma_weights`` (vespo's weights; Unsloth's trainer passes it)."""
    import inspect

    from trl.trainer.grpo_trainer import GRPOTrainer

    return inspect.getattr_static(GRPOTrainer, "get_gamma_weights").__func__


def _call(
    loss_type: str,
    options: Mapping[str, Any],
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    items: torch.Tensor | None = None,
    accumulation: int = 1,
    processes: int = 1,
    ref_logp: torch.Tensor | None = None,
    rollout_logp: torch.Tensor | None = None,
) -> torch.Tensor:
    """``grpo_compute_loss`` as Unsloth's trainer calls it: TRL's defaults, ``options`` as keywords
    (``beta`` positional), the reference log-probs when ``beta`` is set and the rollout's when
    ``use_vllm`` is (None: ``logp`` / ``old_logp`` detached)."""
    opts = dict(options)
    beta = float(opts.pop("beta", 0.0))
    n, width = mask.shape
    ref = (logp.detach() if ref_logp is None else ref_logp) if beta else None
    kwargs: dict[str, Any] = {
        "loss_type": loss_type,
        "epsilon_low": _EPS,
        "epsilon_high": _EPS,
        "max_completion_length": width,
        "num_items_in_batch": mask.sum() if items is None else items,
        "current_gradient_accumulation_steps": accumulation,
        "num_processes": processes,
        "get_gamma_weights": _gamma_weights(),
        **opts,
    }
    sampling = None
    if opts.get("use_vllm"):
        sampling = old_logp.detach() if rollout_logp is None else rollout_logp
    out = _compute_loss()(
        ref,
        logp,
        old_logp,
        sampling,
        torch.zeros(n, width, dtype=torch.long),
        mask,
        beta,
        advantages,
        **kwargs,
    )
    loss: torch.Tensor = out[0]
    return loss


def _loss(loss_type: str, **options: Any) -> Callable[..., torch.Tensor]:
    """``grpo_compute_loss`` with ``loss_type`` and ``options``, one process, no accumulation (a KL
    ``beta`` reads ``ref_logp``, ``use_vllm`` the rollout's ``rollout_logp``)."""
    extras = ["ref_logp"] if options.get("beta") else ["rollout_logp"] if options.get("use_vllm") else []
    extra = "".join(f", {k}={v}" for k, v in sorted(options.items()))
    name = f"unsloth_zoo.grpo_compute_loss[loss_type={loss_type}{extra}]"
    return suite_loss(functools.partial(_call, loss_type, options), name, extras=extras)


def _at_scale(loss_type: str, options: tuple[tuple[str, Any], ...] = ()) -> Callable[..., torch.Tensor]:
    """``grpo_compute_loss`` with ``loss_type`` and ``options`` on one of W processes with M
    accumulation steps, as Unsloth's trainer calls it: ``num_items_in_batch`` the generation batch's
    token count (every process and micro-batch), ``current_gradient_accumulation_steps`` M,
    ``num_processes`` W; the reference and rollout log-probs by keyword when the options use them."""

    def call(
        logp: torch.Tensor, global_num_tokens: int, world_size: int, micro_batches: int, **inputs: Any
    ) -> torch.Tensor:
        items = torch.tensor(float(global_num_tokens), dtype=logp.dtype)
        return _call(
            loss_type,
            dict(options),
            logp,
            **inputs,
            items=items,
            accumulation=micro_batches,
            processes=world_size,
        )

    extra = "".join(f", {k}={v}" for k, v in options)
    return suite_loss(
        call,
        f"unsloth_zoo.grpo_compute_loss[loss_type={loss_type}{extra}, W processes, M accumulation steps]",
        keywords=["global_num_tokens", "world_size", "micro_batches"],
        keyword_extras=["ref_logp", "rollout_logp"],
    )


#: TRL's clip default, which Unsloth's trainer passes: ``epsilon`` 0.2 on both sides.
_EPS = 0.2


#: The objective each loss type computes with TRL's defaults (which Unsloth's trainer passes), where
#: the oracle has it: TRL's table.
OBJECTIVES: dict[str, Objective | None] = {t: _trl.OBJECTIVES.get(t) for t in LOSS_TYPES}


def _group_advantages() -> Callable[..., Any]:
    """TRL's group advantage (``scale_rewards="group"``), which Unsloth's trainer inherits.

    Its first call also imports ``unsloth_zoo`` (seconds), so that the matrix's warm-up, which
    calls a row's advantages once outside the suite's per-call time limit, imports it there and
    not inside a timed loss call (an import cut short by the limit leaves torch._dynamo half set up).
    """
    trl_group = _trl.ADAPTERS["group"].advantages

    def advantages(rewards: torch.Tensor, group_size: int) -> Any:
        _compute_loss()
        return trl_group(rewards, group_size)

    advantages.__name__ = getattr(trl_group, "__name__", "trl_group_advantages")
    return advantages


_GROUP = _group_advantages()


_adapter = row_builder("unsloth", "contiguous")


ADAPTERS: dict[str, Adapter] = {
    f"loss[{t}]": _adapter(_GROUP, "trl", f"loss_type={t}", _loss(t), t, OBJECTIVES[t]) for t in LOSS_TYPES
}
#: Options of a loss type, ``mode: (loss_type, options, declared objective)``: TRL's variants
#: (``GRPOConfig`` options, which Unsloth's trainer passes to ``grpo_compute_loss`` as keywords) that
#: the adapter runs, and vLLM's importance sampling (its options, TRL's objectives).
VARIANTS: dict[str, tuple[str, dict[str, Any], Objective | None]] = {
    mode: _trl.VARIANTS[mode]
    for mode in (
        "loss[dapo, epsilon_high=0.28]",
        "loss[dapo, delta=1.5]",
        "loss[cispo, epsilon_high=5]",
        "loss[grpo, sequence]",
        "loss[dapo, sequence]",
        "loss[dapo, beta=0.04, use_bias_correction_kl=False]",
    )
}
VLLM_CLIP_MAX = _trl.VLLM_CLIP_MAX
VARIANTS.update(
    {
        f"loss[dapo, vllm {m}]": (
            "dapo",
            {
                "use_vllm": True,
                "vllm_importance_sampling_correction": True,
                "vllm_importance_sampling_mode": m,
                "vllm_importance_sampling_clip_max": VLLM_CLIP_MAX,
            },
            _trl.VLLM_IS[f"loss[dapo, vllm {m}]"][2],
        )
        for m in ("sequence_mask", "sequence_truncate", "token_mask", "token_truncate")
    }
)
ADAPTERS.update(variant_rows(_adapter, _GROUP, "trl", "", _loss, VARIANTS))

OBJECTIVE_NOTES: dict[str, str] = {
    "loss[cispo]": "cispo weight min(r, 0.2): the default epsilon_high = 0.2 < 1 caps every weight below 1",
    "loss[sapo]": "sapo: sigmoid gate 4/tau sigmoid(tau (r - 1)), not in the oracle",
    "loss[vespo]": "vespo: Gamma weights of the sequence ratio (TRL's get_gamma_weights), not in the oracle",
}
#: The variants share the ``loss[...]`` rows' advantage: loss properties only (a KL term changes the
#: gradient at ratio 1, so only the objective there).
LOSS_ONLY: dict[str, tuple[str, ...]] = {
    mode: ("loss_objective",) if "beta" in options else LOSS_PROPERTIES
    for mode, (_t, options, _o) in VARIANTS.items()
}
NOTES: dict[str, str] = {
    "loss[cispo]": "Deviation (as TRL's): grpo_compute_loss clamps the weight at max=epsilon_high, which "
    "defaults to epsilon = 0.2; input: ratio 1, A = 1, mask [[1, 1], [1, 0]]: dL/dlogp = -0.2/3 per "
    "token instead of -1/3. CISPO's paper and TRL's docs use epsilon_high = 5 (row cispo, epsilon_high=5).",
    "loss[bnpo]": "Level 5 (as TRL's): bnpo divides each micro-batch by its own token count (Unsloth's "
    "comment: 'BNPO uses the local micro-batch token count even when TRL supplies a global count'); "
    "input: M = 2 micro-batches of 1 and 3 tokens, A = 1: token weights 1/2 and 1/6 instead of 1/4.",
    **{
        mode: "vLLM is not run: grpo_compute_loss computes the weight from the suite's old and rollout "
        "log-probs."
        for mode in VARIANTS
        if "vllm" in mode
    },
}


_HOW = "num_items_in_batch, num_processes, current_gradient_accumulation_steps"
_AT_SCALE, _SCALE = loss_type_scaleout(_at_scale, LOSS_TYPES, VARIANTS, how=_HOW, sizes="uneven")
#: The losses of :data:`SCALEOUT` in their at-scale form (child processes import them by name).
AT_SCALE = types.SimpleNamespace(**_AT_SCALE)
#: The level-5 column: every loss type on W processes with M accumulation steps; the variants with
#: their own loss, predicted where the oracle has the objective.
SCALEOUT: dict[str, ScaleOut | str] = dict(_SCALE)

NOT_APPLICABLE: dict[str, str] = {
    "advantages": "Unsloth's GRPOTrainer keeps TRL's advantages (the TRL rows); only the loss is its own",
}
