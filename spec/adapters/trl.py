"""Adapters for TRL 1.16 (``trl.trainer.grpo_trainer.GRPOTrainer``): TRL's own lines, run on CPU.

Advantages: TRL computes them inline in ``GRPOTrainer._generate_and_score_completions``,
not in a function. :func:`advantage_block` cuts the installed source of that method
(``inspect`` + ``ast``) from ``unscorable_mask = torch.isnan(rewards_per_func)...`` through
``advantages = torch.nan_to_num(...)``, checks that the statement after the first is the
``if self.multi_objective_aggregation`` branch (so a refactor fails loudly), and
compiles it under the file's own name and line numbers. Each call executes it in the
module's globals (``torch``, ``nanstd``) with ``self`` holding what ``__init__`` sets
(``scale_rewards``, ``multi_objective_aggregation``, one reward function with
``reward_weights = torch.ones(1, dtype=float32)``), ``rewards_per_func = R[:, None]`` and
``num_generations = G`` (layout ``contiguous``: TRL groups by position,
``rewards.view(-1, num_generations)``). Modes ``group``, ``batch``, ``none`` are
``scale_rewards`` (declared ``trl``, ``trl_batch``, ``dr_grpo``); ``normalize_then_sum`` is
``multi_objective_aggregation="normalize_then_sum"`` with one reward function (GDPO-style:
per-group normalisation, then a second normalisation over the whole batch), which
matches no preset, so it declares no convention and the matrix shows what is detected.

Loss: ``GRPOTrainer._compute_loss(stand_in, None, inputs)``, the unmodified method, with
a stand-in trainer (:class:`StandIn`) whose attributes are derived from a real
``GRPOConfig(loss_type=...)`` as ``GRPOTrainer.__init__`` derives them, and whose
``_get_per_token_logps_and_entropies`` returns the suite's log-probs (no model).
``max_completion_length`` is the suite's padded width ``T`` (TRL pads completions to at
most that), ``num_items_in_batch`` the batch's token count (one process, no gradient
accumulation). The advantage modes use the default ``loss_type="dapo"``; the rows
``loss[<type>]`` pair ``scale_rewards="group"`` with each loss type.

>>> sorted(ADAPTERS)[:3]
['batch', 'group', 'loss[bnpo]']
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
import os
import tempfile
import textwrap
import types
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from sigma_ref._vocabulary import TRL_LOSS_TYPES
from sigma_ref.conformance import Adapter
from sigma_ref.objectives import Objective, resolve_aggregation

from ._common import (
    LOSS_PROPERTIES,
    at_scale_name,
    loss_type_scaleout,
    ppo_objective,
    row_builder,
    suite_loss,
    variant_rows,
)
from ._peers import MODULE_API, Peer, ScaleOut, lazy

__all__ = [
    *MODULE_API,
    "LOSS_TYPES",
    "LOSS_ONLY",
    "OBJECTIVES",
    "OBJECTIVE_NOTES",
    "VARIANTS",
    "VLLM_IS",
    "NOTES",
    "SCALEOUT",
    "AT_SCALE",
    "advantage_block",
    "importance_sampling_block",
    "vllm_importance_sampling_ratio",
]

PEER = Peer("trl", "trl", "1.16.0", title="TRL")

#: ``GRPOConfig.loss_type`` values of TRL 1.16.0 (default ``dapo``).
LOSS_TYPES: tuple[str, ...] = TRL_LOSS_TYPES
available = PEER.available
unavailable = PEER.unavailable


#: ``trl.trainer.grpo_trainer`` (imports TRL on first use).
_grpo_module = PEER.importer("trl.trainer.grpo_trainer")


def _assigns(node: ast.stmt, name: str, call: str) -> bool:
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == name
        and call in ast.unparse(node.value)
    )


def _generation_source() -> tuple[ast.FunctionDef, int, str]:
    """``GRPOTrainer._generate_and_score_completions`` parsed: its def, first line and file."""
    method = _grpo_module().GRPOTrainer._generate_and_score_completions
    lines, first = inspect.getsourcelines(method)
    tree = ast.parse(textwrap.dedent("".join(lines))).body[0]
    assert isinstance(tree, ast.FunctionDef)
    return tree, first, inspect.getsourcefile(method) or "grpo_trainer.py"


def _compiled(statements: list[ast.stmt], first: int, path: str) -> tuple[types.CodeType, str]:
    """``statements`` of the method starting at line ``first`` of ``path``, compiled with their real
    line numbers, and where they are (``file:first-last``)."""
    module = ast.Module(body=statements, type_ignores=[])
    ast.increment_lineno(module, first - 1)
    where = f"{path}:{statements[0].lineno}-{statements[-1].end_lineno}"
    return compile(module, path, "exec"), where


@lazy
def advantage_block() -> tuple[types.CodeType, str]:
    """TRL's inline advantage statements, compiled, and where they are (``file:first-last``)."""
    method, first, path = _generation_source()
    body = method.body
    try:
        i0 = next(
            i for i, n in enumerate(body) if _assigns(n, "unscorable_mask", "torch.isnan(rewards_per_func)")
        )
        i1 = next(i for i, n in enumerate(body) if _assigns(n, "advantages", "torch.nan_to_num"))
    except StopIteration:
        raise RuntimeError(
            f"trl {PEER.version}: the inline advantage block of GRPOTrainer._generate_and_score_completions "
            "was not found (unscorable_mask = ... through advantages = torch.nan_to_num(...)); the adapter "
            "needs updating"
        ) from None
    branch = body[i0 + 1]
    if not (
        i1 > i0 + 1
        and isinstance(branch, ast.If)
        and "multi_objective_aggregation" in ast.unparse(branch.test)
    ):
        raise RuntimeError(
            f"trl {PEER.version}: the advantage block changed shape; the adapter needs updating"
        )
    return _compiled(body[i0 : i1 + 1], first, path)


#: The test of TRL's vLLM importance-sampling block in ``_generate_and_score_completions``.
_IS_TEST = "self.use_vllm and self.vllm_importance_sampling_correction"


@lazy
def importance_sampling_block() -> tuple[types.CodeType, str]:
    """TRL's inline vLLM importance-sampling statements, compiled, and where they are.

    The ``if self.use_vllm and self.vllm_importance_sampling_correction:`` block of
    ``_generate_and_score_completions`` that turns ``old_per_token_logps`` (the trainer's) and
    ``sampling_per_token_logps`` (vLLM's) into ``vllm_importance_sampling_ratio`` under
    ``vllm_importance_sampling_mode`` and its clip bounds; ``_compute_loss`` multiplies the
    per-token loss by it. It needs a vLLM rollout to run in place, so the adapter runs the block
    itself, as it runs the inline advantage block (:func:`advantage_block`).
    """
    method, first, path = _generation_source()
    found = [
        node
        for node in ast.walk(method)
        if isinstance(node, ast.If)
        and ast.unparse(node.test) == _IS_TEST
        and any(
            isinstance(s, ast.stmt) and _assigns(s, "vllm_importance_sampling_ratio", "torch.exp")
            for s in ast.walk(node)
        )
    ]
    if len(found) != 1:
        raise RuntimeError(
            f"trl {PEER.version}: {len(found)} blocks `if {_IS_TEST}:` computing "
            "vllm_importance_sampling_ratio = torch.exp(...) in GRPOTrainer._generate_and_score_completions, "
            "but should be 1; the adapter needs updating"
        )
    return _compiled([found[0]], first, path)


def vllm_importance_sampling_ratio(
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str,
    clip_max: float | None,
    clip_min: float | None = None,
) -> torch.Tensor:
    """``vllm_importance_sampling_ratio`` as TRL 1.16.0 computes it (:func:`importance_sampling_block`).

    ``[N, T]`` for the ``token_*`` modes, ``[N, 1]`` for the ``sequence_*`` modes.
    """
    gt = _grpo_module()
    code, _where = importance_sampling_block()
    trainer = types.SimpleNamespace(
        use_vllm=True,
        vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode=mode,
        vllm_importance_sampling_clip_max=clip_max,
        vllm_importance_sampling_clip_min=clip_min,
    )
    scope = dict(vars(gt))
    scope.update(
        self=trainer,
        completion_mask=mask.to(torch.long),
        tool_mask=None,
        old_per_token_logps=old_logp.detach(),
        sampling_per_token_logps=rollout_logp.detach(),
    )
    exec(code, scope)
    out: torch.Tensor = scope["vllm_importance_sampling_ratio"]
    return out


def _advantages(
    scale_rewards: str, aggregation: str = "sum_then_normalize"
) -> Callable[[torch.Tensor, int], torch.Tensor]:
    def advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        gt = _grpo_module()
        code, _where = advantage_block()
        trainer = types.SimpleNamespace(
            multi_objective_aggregation=aggregation,
            scale_rewards=scale_rewards,
            reward_weights=torch.ones(1, dtype=torch.float32),  # as GRPOTrainer.__init__ builds it
            reward_funcs=[None],
        )
        scope = dict(vars(gt))
        scope.update(
            self=trainer,
            rewards_per_func=rewards.reshape(-1, 1),
            num_generations=group_size,
            device=rewards.device,
        )
        exec(code, scope)
        out: torch.Tensor = scope["advantages"]
        return out

    advantages.__name__ = f"trl_inline_advantages[scale_rewards={scale_rewards}, {aggregation}]"
    return advantages


class StandIn:
    """What ``GRPOTrainer._compute_loss`` reads from ``self`` (trl 1.16.0), derived from a real
    ``GRPOConfig`` the way ``GRPOTrainer.__init__`` derives it; log-probs come from the caller."""

    def __init__(self, args: Any, accelerator: Any) -> None:
        gt = _grpo_module()
        self.args = args
        self.loss_type = args.loss_type
        self.max_completion_length = args.max_completion_length
        self.beta = args.beta
        self.epsilon_low = args.epsilon
        self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
        self.importance_sampling_level = args.importance_sampling_level
        self.top_entropy_quantile = args.top_entropy_quantile
        self.off_policy_mask_threshold = args.off_policy_mask_threshold
        self.use_vllm = args.use_vllm
        self.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
        self.aux_loss_enabled = False
        self.entropy_coef = args.entropy_coef
        self.use_adaptive_entropy = args.use_adaptive_entropy
        self._entropy_bonus_enabled = self.entropy_coef != 0.0 or self.use_adaptive_entropy
        self.current_gradient_accumulation_steps = args.gradient_accumulation_steps
        self.accelerator = accelerator
        self.model = torch.nn.Module().train()  # only .training is read
        self._metrics: dict[str, Any] = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._logps: torch.Tensor | None = None
        cls = gt.GRPOTrainer
        self.get_gamma_weights = inspect.getattr_static(cls, "get_gamma_weights").__func__
        self.get_off_policy_mask = inspect.getattr_static(cls, "get_off_policy_mask").__func__
        self.get_high_entropy_mask = types.MethodType(cls.get_high_entropy_mask, self)

    def _get_per_token_logps_and_entropies(
        self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, **kw: Any
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        assert self._logps is not None
        return self._logps, torch.zeros_like(self._logps), None


class _Processes:
    """The accelerator at scale: ``num_processes`` is the world size W; the metrics' ``gather`` and
    ``reduce`` return the local values (they never reach the loss or its gradient)."""

    sync_gradients = True

    def __init__(self, num_processes: int) -> None:
        self.num_processes = num_processes

    def gather(self, x: Any) -> Any:
        return x

    gather_for_metrics = gather

    def reduce(self, x: Any, reduction: str = "sum") -> Any:
        return x


def _config(loss_type: str, options: tuple[tuple[str, Any], ...], accumulation: int) -> tuple[Any, Any]:
    """A real ``GRPOConfig`` and a CPU ``Accelerator``. Building the config
    (``TrainingArguments.__post_init__``) resets accelerate's shared state, which every
    ``Accelerator`` reads (``num_processes``); the new one sets it up again at once, so a stand-in
    built earlier keeps working whatever is built after it."""
    from accelerate import Accelerator

    gt = _grpo_module()
    out = os.path.join(tempfile.gettempdir(), "sigma-ref-trl")  # never written: no training runs
    config = gt.GRPOConfig(
        output_dir=out,
        report_to=[],
        use_cpu=True,
        loss_type=loss_type,
        gradient_accumulation_steps=accumulation,
        **dict(options),
    )
    return config, Accelerator(cpu=True)


@functools.cache
def _stand_in(loss_type: str, options: tuple[tuple[str, Any], ...] = ()) -> StandIn:
    return StandIn(*_config(loss_type, options, 1))


@functools.cache
def _stand_in_at_scale(
    loss_type: str,
    world_size: int,
    accumulation: int,
    options: tuple[tuple[str, Any], ...] = (),
    use_vllm: bool = False,
) -> StandIn:
    """A stand-in for one of W processes accumulating ``accumulation`` micro-batches per step
    (``GRPOConfig(gradient_accumulation_steps=M, **options)``, so ``steps_per_generation`` = M, TRL's
    default); ``use_vllm``: generating with vLLM (:func:`_stand_in_vllm`)."""
    trainer = StandIn(_config(loss_type, options, accumulation)[0], _Processes(world_size))
    trainer.use_vllm = use_vllm or trainer.use_vllm
    return trainer


def _compute_loss(
    trainer: StandIn,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    num_items_in_batch: torch.Tensor,
    ref_logp: torch.Tensor | None = None,
    importance_sampling_ratio: torch.Tensor | None = None,
) -> torch.Tensor:
    gt = _grpo_module()
    n, width = mask.shape
    trainer._logps = logp
    trainer.max_completion_length = width
    inputs = {
        "prompt_ids": torch.ones(n, 1, dtype=torch.long),
        "prompt_mask": torch.ones(n, 1, dtype=torch.long),
        "completion_ids": torch.ones(n, width, dtype=torch.long),
        "completion_mask": mask.to(torch.long),
        "advantages": advantages,
        "old_per_token_logps": old_logp,
        "num_items_in_batch": num_items_in_batch,
    }
    if trainer.beta != 0.0:
        inputs["ref_per_token_logps"] = logp.detach() if ref_logp is None else ref_logp
    if importance_sampling_ratio is not None:
        inputs["importance_sampling_ratio"] = importance_sampling_ratio
    try:
        out: torch.Tensor = gt.GRPOTrainer._compute_loss(trainer, None, inputs)
        return out
    finally:
        trainer._logps = None


def _loss(loss_type: str, **options: Any) -> Callable[..., torch.Tensor]:
    """``_compute_loss`` of ``GRPOConfig(loss_type=loss_type, **options)``, one process, no accumulation
    (a KL ``beta`` reads ``ref_logp``)."""
    frozen = tuple(sorted(options.items()))

    def call(mask: torch.Tensor, **inputs: Any) -> torch.Tensor:
        return _compute_loss(_stand_in(loss_type, frozen), mask=mask, num_items_in_batch=mask.sum(), **inputs)

    extra = "".join(f", {k}={v}" for k, v in frozen)
    name = f"trl_GRPOTrainer._compute_loss[loss_type={loss_type}{extra}]"
    return suite_loss(call, name, extras=["ref_logp"] if options.get("beta") else [])


@functools.cache
def _stand_in_vllm(loss_type: str) -> StandIn:
    """A stand-in of a trainer generating with vLLM (``use_vllm=True``): ``_compute_loss`` multiplies
    the per-token loss by ``inputs["importance_sampling_ratio"]``. GRPOConfig is built without
    ``use_vllm`` (it would look for a vLLM server); the flag is what ``__init__`` copies."""
    trainer = StandIn(*_config(loss_type, (), 1))
    trainer.use_vllm = True
    return trainer


def _vllm_is_loss(loss_type: str, mode: str, clip_max: float) -> Callable[..., torch.Tensor]:
    """``_compute_loss`` under vLLM's importance-sampling correction: the ratio from TRL's own block
    (:func:`vllm_importance_sampling_ratio`) on the trainer's ``old_logp`` and the rollout's log-probs."""

    def call(
        old_logp: torch.Tensor, mask: torch.Tensor, rollout_logp: torch.Tensor | None, **inputs: Any
    ) -> torch.Tensor:
        rho = _vllm_ratio(old_logp, rollout_logp, mask, mode, clip_max)
        trainer = _stand_in_vllm(loss_type)
        return _compute_loss(
            trainer,
            old_logp=old_logp,
            mask=mask,
            num_items_in_batch=mask.sum(),
            **inputs,
            importance_sampling_ratio=rho,
        )

    name = (
        f"trl_GRPOTrainer._compute_loss[loss_type={loss_type}, use_vllm, "
        f"vllm_importance_sampling_mode={mode}, vllm_importance_sampling_clip_max={clip_max:g}]"
    )
    return suite_loss(call, name, extras=["rollout_logp"])


def _vllm_ratio(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor | None, mask: torch.Tensor, mode: str, clip_max: float
) -> torch.Tensor:
    """:func:`vllm_importance_sampling_ratio` of a loss call (``rollout_logp`` None: the rollout is
    ``old_logp``)."""
    rollout = old_logp if rollout_logp is None else rollout_logp
    return vllm_importance_sampling_ratio(old_logp, rollout, mask, mode=mode, clip_max=clip_max)


def _at_scale(
    loss_type: str, options: tuple[tuple[str, Any], ...] = (), vllm_is: str | None = None
) -> Callable[..., torch.Tensor]:
    """``_compute_loss`` on one of W processes with M accumulation steps: ``num_items_in_batch`` is
    the generation batch's token count (every process and micro-batch), as the Trainer passes it.
    ``options``: the row's ``GRPOConfig`` options (a KL ``beta`` reads ``ref_logp``); ``vllm_is``: the
    row's ``vllm_importance_sampling_mode`` (TRL's own ratio block on ``old_logp`` and ``rollout_logp``)."""

    def call(
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        mask: torch.Tensor,
        global_num_tokens: int,
        world_size: int,
        micro_batches: int,
        rollout_logp: torch.Tensor | None,
        **inputs: Any,
    ) -> torch.Tensor:
        trainer = _stand_in_at_scale(loss_type, world_size, micro_batches, options, vllm_is is not None)
        items = torch.tensor(float(global_num_tokens), dtype=logp.dtype)
        rho = None if vllm_is is None else _vllm_ratio(old_logp, rollout_logp, mask, vllm_is, VLLM_CLIP_MAX)
        return _compute_loss(
            trainer,
            logp,
            old_logp,
            mask=mask,
            num_items_in_batch=items,
            **inputs,
            importance_sampling_ratio=rho,
        )

    extra = "".join(f", {k}={v}" for k, v in options) + (f", vllm {vllm_is}" if vllm_is else "")
    return suite_loss(
        call,
        f"trl_GRPOTrainer._compute_loss[loss_type={loss_type}{extra}, W processes, M accumulation steps]",
        keywords=["global_num_tokens", "world_size", "micro_batches"],
        keyword_extras=["ref_logp", "rollout_logp"],
    )


_DEFAULT_LOSS = _loss("dapo")
_GROUP = _advantages("group")
#: TRL's clip defaults: ``epsilon`` 0.2, ``epsilon_high`` None (= epsilon).
_EPS = 0.2


def _ppo(loss_type: str, **kw: Any) -> Objective:
    return ppo_objective(loss_type, eps=_EPS, **kw)


#: The objective each ``loss_type`` computes with TRL's defaults, where the oracle has it: PPO's
#: clipped surrogate with the type's aggregation. ``cispo`` with the default ``epsilon_high`` (0.2)
#: caps every weight at 0.2, below 1, which no CISPO clip range expresses; ``sapo`` (a sigmoid
#: gate) and ``vespo`` (Gamma weights) are not in the oracle.
OBJECTIVES: dict[str, Objective | None] = {
    t: (_ppo(t) if t in ("dapo", "grpo", "bnpo", "dr_grpo", "luspo") else None) for t in LOSS_TYPES
}


#: A row with TRL's default ``loss_type`` and no objective unless given.
_adapter = row_builder("trl", "contiguous", aggregation="dapo")


ADAPTERS: dict[str, Adapter] = {
    "group": _adapter(_GROUP, "trl", "scale_rewards=group", _DEFAULT_LOSS, objective=OBJECTIVES["dapo"]),
    "batch": _adapter(
        _advantages("batch"), "trl_batch", "scale_rewards=batch", _DEFAULT_LOSS, objective=OBJECTIVES["dapo"]
    ),
    "none": _adapter(
        _advantages("none"), "dr_grpo", "scale_rewards=none", _DEFAULT_LOSS, objective=OBJECTIVES["dapo"]
    ),
    "normalize_then_sum": Adapter(
        _advantages("group", "normalize_then_sum"),
        "contiguous",
        loss=_DEFAULT_LOSS,
        name="trl multi_objective_aggregation=normalize_then_sum",
        aggregation="dapo",
        objective=OBJECTIVES["dapo"],
    ),
}
ADAPTERS.update(
    {
        f"loss[{t}]": _adapter(
            _GROUP, "trl", f"scale_rewards=group + loss_type={t}", _loss(t), t, OBJECTIVES[t]
        )
        for t in LOSS_TYPES
    }
)
#: TRL's importance-sampling level, clip options and KL term, each a GRPOConfig option on a loss type:
#: ``mode: (loss_type, options, declared objective)``
VARIANTS: dict[str, tuple[str, dict[str, Any], Objective | None]] = {
    "loss[dapo, epsilon_high=0.28]": ("dapo", {"epsilon_high": 0.28}, _ppo("dapo", eps_high=0.28)),
    # delta (INTELLECT-2's two-sided clip) caps r at delta inside the min: for A < 0 it is a dual clip
    "loss[dapo, delta=1.5]": ("dapo", {"delta": 1.5}, _ppo("dapo", dual_clip=1.5)),
    "loss[cispo, epsilon_high=5]": (
        "cispo",
        {"epsilon_high": 5.0},
        Objective("cispo", eps_low=math.inf, eps_high=4.0, aggregation="cispo"),
    ),
    "loss[grpo, sequence]": (
        "grpo",
        {"importance_sampling_level": "sequence"},
        Objective("gspo", eps_low=_EPS, eps_high=_EPS, aggregation="grpo"),
    ),
    "loss[dapo, sequence]": (
        "dapo",
        {"importance_sampling_level": "sequence"},
        Objective("gspo", eps_low=_EPS, eps_high=_EPS, aggregation="dapo"),
    ),
    "loss[luspo, sequence]": (
        "luspo",
        {"importance_sampling_level": "sequence"},
        Objective("gspo", eps_low=_EPS, eps_high=_EPS, aggregation="luspo"),
    ),
    "loss[dapo, beta=0.04, use_bias_correction_kl=False]": (
        "dapo",
        {"beta": 0.04, "use_bias_correction_kl": False},
        _ppo("dapo", kl="k3", kl_coef=0.04),
    ),
    # the default use_bias_correction_kl=True multiplies k3 by the (differentiable) ratio: k3-is
    "loss[dapo, beta=0.04]": ("dapo", {"beta": 0.04}, _ppo("dapo", kl="k3-is", kl_coef=0.04)),
    # GSPO's sequence ratio s_i weighs the KL too (its gradient moves the whole row)
    "loss[grpo, sequence, beta=0.04]": (
        "grpo",
        {"importance_sampling_level": "sequence", "beta": 0.04},
        Objective("gspo", eps_low=_EPS, eps_high=_EPS, aggregation="grpo", kl="k3-is", kl_coef=0.04),
    ),
}
ADAPTERS.update(variant_rows(_adapter, _GROUP, "trl", "scale_rewards=group + loss_type=", _loss, VARIANTS))
#: TRL generating with vLLM (``use_vllm=True``) corrects for the rollout engine with
#: ``vllm_importance_sampling_correction`` (default True): each ``vllm_importance_sampling_mode``
#: with the default ``vllm_importance_sampling_clip_max`` 3 (``sequence_mask`` is the default mode):
#: ``mode: (loss_type, IS mode, declared objective)``.
VLLM_CLIP_MAX = 3.0
VLLM_IS: dict[str, tuple[str, str, Objective]] = {
    f"loss[dapo, vllm {is_mode}]": (
        "dapo",
        is_mode,
        _ppo(
            "dapo",
            tis_cap=VLLM_CLIP_MAX,
            tis_level=is_mode.split("_")[0],
            tis_mode=is_mode.split("_")[1],
        ),
    )
    for is_mode in ("sequence_mask", "sequence_truncate", "token_mask", "token_truncate")
}
ADAPTERS.update(
    {
        mode: _adapter(
            _GROUP,
            "trl",
            f"scale_rewards=group + loss_type=dapo, use_vllm, vllm_importance_sampling_mode={is_mode}",
            _vllm_is_loss(loss_type, is_mode, VLLM_CLIP_MAX),
            loss_type,
            objective,
        )
        for mode, (loss_type, is_mode, objective) in VLLM_IS.items()
    }
)

#: The matrix's notes column.
NOTES: dict[str, str] = {
    mode: "vLLM is not run: the weight is TRL's own importance-sampling block "
    "(_generate_and_score_completions) on the suite's old and rollout log-probs, clip_max 3."
    for mode in VLLM_IS
}

#: What the loss types and variants without an oracle objective compute (the objective cell).
OBJECTIVE_NOTES: dict[str, str] = {
    "loss[cispo]": "cispo weight min(r, 0.2): the default epsilon_high = 0.2 < 1 caps every weight below 1",
    "loss[sapo]": "sapo: sigmoid gate 4/tau sigmoid(tau (r - 1)), not in the oracle",
    "loss[vespo]": "vespo: Gamma weights of the sequence ratio, not in the oracle",
}

#: The objective variants are checked on their loss only (their advantage is the ``group`` row's);
#: with a KL term the loss has a gradient at ratio 1 beyond the policy's, so only the objective.
LOSS_ONLY: dict[str, tuple[str, ...]] = {
    mode: ("loss_objective",)
    if "beta" in options and objective is not None
    else ("loss_ignores_padding",)
    if "beta" in options
    else LOSS_PROPERTIES
    for mode, (_t, options, objective) in VARIANTS.items()
}
LOSS_ONLY.update({mode: LOSS_PROPERTIES for mode in VLLM_IS})

_HOW = "num_items_in_batch, num_processes, gradient_accumulation_steps"
# per_device_train_batch_size: every micro-batch holds as many responses (sizes "equal"); the variants
# are predicted where the oracle has the objective and it is a policy gradient at ratio 1 (a k3 term
# is, at ref_logp = logp; the ratio-weighted k3 of use_bias_correction_kl is not in the oracle)
_AT_SCALE, _SCALE = loss_type_scaleout(_at_scale, LOSS_TYPES, VARIANTS, how=_HOW, sizes="equal")
#: The losses of :data:`SCALEOUT` in their at-scale form (child processes import them by name): every
#: ``loss_type``, every variant with its options and every vLLM importance-sampling mode.
AT_SCALE = types.SimpleNamespace(
    **_AT_SCALE,
    **{
        at_scale_name(mode, "loss["): _at_scale(t, vllm_is=is_mode)
        for mode, (t, is_mode, _obj) in VLLM_IS.items()
    },
)
#: The level-5 column: every ``loss_type`` on W processes with M accumulation steps (the advantage
#: rows use the default ``dapo``), the variants and the vLLM modes with their own loss.
SCALEOUT: dict[str, ScaleOut | str] = {
    **{mode: _SCALE["loss[dapo]"] for mode in ("group", "batch", "none", "normalize_then_sum")},
    **_SCALE,
    **{
        mode: ScaleOut(at_scale_name(mode, "loss["), resolve_aggregation(t), how=_HOW)
        for mode, (t, _m, _o) in VLLM_IS.items()
    },
}

NOT_APPLICABLE: dict[str, str] = {
    "dapo_filter": "TRL 1.16 has no DAPO dynamic sampling: silent groups stay in the batch with advantage 0",
}
