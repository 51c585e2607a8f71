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
import os
import tempfile
import textwrap
import types
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from sigma_ref.conformance import Adapter

from ._peers import Peer, lazy

__all__ = ["PEER", "ADAPTERS", "NOT_APPLICABLE", "LOSS_TYPES", "available", "unavailable", "advantage_block"]

PEER = Peer("trl", "trl", "1.16.0", title="TRL")

#: ``GRPOConfig.loss_type`` values of TRL 1.16.0 (default ``dapo``).
LOSS_TYPES: tuple[str, ...] = ("dapo", "grpo", "bnpo", "dr_grpo", "luspo", "cispo", "sapo", "vespo")


def available() -> bool:
    """Whether TRL is installed."""
    return PEER.unavailable() is None


def unavailable() -> str | None:
    """Why TRL cannot be used, or ``None``."""
    return PEER.unavailable()


@lazy
def _grpo_module() -> Any:
    """``trl.trainer.grpo_trainer`` (imports TRL on first use)."""
    PEER.require()
    from trl.trainer import grpo_trainer

    return grpo_trainer


def _assigns(node: ast.stmt, name: str, call: str) -> bool:
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == name
        and call in ast.unparse(node.value)
    )


@lazy
def advantage_block() -> tuple[types.CodeType, str]:
    """TRL's inline advantage statements, compiled, and where they are (``file:first-last``)."""
    gt = _grpo_module()
    method = gt.GRPOTrainer._generate_and_score_completions
    lines, first = inspect.getsourcelines(method)
    body = ast.parse(textwrap.dedent("".join(lines))).body[0].body  # type: ignore[attr-defined]
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
    module = ast.Module(body=body[i0 : i1 + 1], type_ignores=[])
    ast.increment_lineno(module, first - 1)
    path = inspect.getsourcefile(method) or "grpo_trainer.py"
    where = f"{path}:{body[i0].lineno + first - 1}-{body[i1].end_lineno + first - 1}"
    return compile(module, path, "exec"), where


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
        return scope["advantages"]

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


@functools.cache
def _stand_in(loss_type: str) -> StandIn:
    gt = _grpo_module()
    from accelerate import Accelerator

    out = os.path.join(tempfile.gettempdir(), "sigma-ref-trl")  # never written: no training runs
    args = gt.GRPOConfig(output_dir=out, report_to=[], use_cpu=True, loss_type=loss_type)
    return StandIn(args, Accelerator(cpu=True))  # after GRPOConfig: TrainingArguments resets the state


def _loss(loss_type: str) -> Callable[..., torch.Tensor]:
    def loss(
        logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        gt = _grpo_module()
        trainer = _stand_in(loss_type)
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
            "num_items_in_batch": mask.sum(),
        }
        try:
            return gt.GRPOTrainer._compute_loss(trainer, None, inputs)
        finally:
            trainer._logps = None

    loss.__name__ = f"trl_GRPOTrainer._compute_loss[loss_type={loss_type}]"
    return loss


_DEFAULT_LOSS = _loss("dapo")
_GROUP = _advantages("group")


def _adapter(fn: Callable[..., Any], convention: str, name: str, loss: Callable[..., Any]) -> Adapter:
    return Adapter(fn, "contiguous", loss=loss, convention=convention, name=f"trl {name}")


ADAPTERS: dict[str, Adapter] = {
    "group": _adapter(_GROUP, "trl", "scale_rewards=group", _DEFAULT_LOSS),
    "batch": _adapter(_advantages("batch"), "trl_batch", "scale_rewards=batch", _DEFAULT_LOSS),
    "none": _adapter(_advantages("none"), "dr_grpo", "scale_rewards=none", _DEFAULT_LOSS),
    "normalize_then_sum": Adapter(
        _advantages("group", "normalize_then_sum"),
        "contiguous",
        loss=_DEFAULT_LOSS,
        name="trl multi_objective_aggregation=normalize_then_sum",
    ),
}
ADAPTERS.update(
    {
        f"loss[{t}]": _adapter(_GROUP, "trl", f"scale_rewards=group + loss_type={t}", _loss(t))
        for t in LOSS_TYPES
    }
)

NOT_APPLICABLE: dict[str, str] = {
    "dapo_filter": "TRL 1.16 has no DAPO dynamic sampling: silent groups stay in the batch with advantage 0",
}
