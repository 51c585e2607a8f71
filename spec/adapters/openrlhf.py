"""Adapters for OpenRLHF 0.11 (``RemoteExperienceMaker.compute_advantages_and_returns``, ``PolicyLoss``).

Importing OpenRLHF needs ``flash_attn`` and ``vllm``, which do not install on a CPU
machine; :func:`_stand_ins` puts raising stand-in modules in ``sys.modules`` for the
import only (never when the real packages are importable) and removes them afterwards.

Advantages (layout ``contiguous``: OpenRLHF scatters samples to prompt-major order by
``Experience.index`` and then groups by position, ``reshape(-1, n_samples_per_prompt)``):
the arguments come from OpenRLHF's own CLI parser (the statements of
``openrlhf/cli/train_ppo_ray.py``'s ``__main__`` block before ``parse_args``, read with
``ast``) parsed with ``--algo.advantage.estimator E --rollout.n_samples_per_prompt G``
and passed through ``openrlhf.utils.config.hierarchize``, so every default (KL
coefficient, ``reward.clip_range``) is OpenRLHF's. A real ``RemoteExperienceMaker`` (its
``__init__`` only stores references) runs ``compute_advantages_and_returns`` on one
``Experience(rewards=R, index=range(N), action_mask=ones[N, 1], kl=zeros[N, 1])``; the
advantage is read from the single action token. OpenRLHF computes in at least float32
and writes the advantages in ``kl``'s dtype, which in training is the log-probs' (float32
in a float32 or bf16 run: float64 rewards then give float32 advantages); here ``kl`` gets
the rewards' dtype, so the suite checks the arithmetic (``tests/test_peers.py`` shows the
cast with a float32 ``kl``). Modes
``group_norm`` (declared ``openrlhf``), ``dr_grpo`` (``dr_grpo``), ``rloo`` (``rloo``).

Loss: ``PolicyLoss(token_level_loss=...)(log_probs, old_log_probs, A_i mask_it,
action_mask=mask)[0]`` with OpenRLHF's defaults (clip 0.2); ``token-mean`` (the default
``actor.loss_agg_mode``) for the advantage modes, and a ``loss[seq-mean-token-mean]`` row.

>>> sorted(ADAPTERS)[:4]
['dr_grpo', 'group_norm', 'kl[k1]', 'kl[k2]']
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import torch

from sigma_ref.conformance import Adapter
from sigma_ref.objectives import Objective

from ._common import LOSS_PROPERTIES, at_scale_name, ppo_objective, row_builder, suite_loss, variant_rows
from ._peers import MODULE_API, Peer, ScaleOut, lazy, per_token

__all__ = [*MODULE_API, "VARIANTS", "LOSS_ONLY", "SCALEOUT", "AT_SCALE"]

PEER = Peer("openrlhf", "openrlhf", "0.11.2", title="OpenRLHF")

#: Modules OpenRLHF imports at import time that have no CPU build.
_STAND_IN_MODULES: dict[str, tuple[str, ...]] = {
    "flash_attn": (
        "flash_attn",
        "flash_attn.bert_padding",
        "flash_attn.utils",
        "flash_attn.utils.distributed",
    ),
    "vllm": (
        "vllm",
        "vllm.inputs",
        "vllm.utils",
        "vllm.distributed",
        "vllm.distributed.utils",
        "vllm.distributed.device_communicators",
        "vllm.distributed.device_communicators.pynccl",
    ),
}

available = PEER.available
unavailable = PEER.unavailable


def _stand_in(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = []

    def __getattr__(attr: str) -> Any:  # noqa: N807  # any name: a callable that raises when called
        if attr.startswith("__"):
            raise AttributeError(attr)

        def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{name}.{attr} is a CPU stand-in of sigma-ref's OpenRLHF adapter")

        return unavailable

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


@contextlib.contextmanager
def _stand_ins() -> Iterator[None]:
    """Stand-ins for ``flash_attn`` / ``vllm`` in ``sys.modules`` while OpenRLHF is imported."""
    added = []
    for root, names in _STAND_IN_MODULES.items():
        if root in sys.modules or importlib.util.find_spec(root) is not None:
            continue
        for name in names:
            sys.modules[name] = _stand_in(name)
            added.append(name)
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, sys.modules[name])
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


@lazy
def _openrlhf() -> types.SimpleNamespace:
    """The OpenRLHF names the adapters use (imported once, with the stand-ins)."""
    PEER.require()
    # deepspeed (imported by openrlhf) logs to the stdout of import time; send it to stderr,
    # so that `sigma-ref matrix` prints only the matrix on stdout
    with _stand_ins(), contextlib.redirect_stdout(sys.stderr):
        import openrlhf
        from openrlhf.models.loss import PolicyLoss, aggregate_loss
        from openrlhf.models.utils import compute_approx_kl
        from openrlhf.trainer.ppo_utils.experience import Experience
        from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
        from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
        from openrlhf.utils.config import hierarchize
    return types.SimpleNamespace(
        root=os.path.dirname(openrlhf.__file__),
        PolicyLoss=PolicyLoss,
        aggregate_loss=aggregate_loss,
        compute_approx_kl=compute_approx_kl,
        Experience=Experience,
        RemoteExperienceMaker=RemoteExperienceMaker,
        FixedKLController=FixedKLController,
        hierarchize=hierarchize,
    )


@lazy
def _parser() -> argparse.ArgumentParser:
    """OpenRLHF's own CLI parser (train_ppo_ray.py, read not imported: its imports need ray actors)."""
    path = os.path.join(_openrlhf().root, "cli", "train_ppo_ray.py")
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    main = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    stop = next(
        i
        for i, n in enumerate(main.body)
        if isinstance(n, ast.Assign) and "parse_args" in ast.unparse(n.value)
    )
    scope: dict[str, Any] = {"argparse": argparse, "os": os, "datetime": datetime, "__name__": "__main__"}
    exec(compile(ast.Module(body=main.body[:stop], type_ignores=[]), path, "exec"), scope)
    parser: argparse.ArgumentParser = scope["parser"]
    return parser


@functools.cache
def _maker(estimator: str, group_size: int) -> Any:
    """A real RemoteExperienceMaker over the CLI's arguments for ``estimator`` and ``group_size``."""
    o = _openrlhf()
    argv = ["--algo.advantage.estimator", estimator, "--rollout.n_samples_per_prompt", str(group_size)]
    args = o.hierarchize(_parser().parse_args(argv))
    if args.actor.eps_clip_low_high is None:  # the CLI's own post-processing (train_ppo_ray.py)
        args.actor.eps_clip_low_high = (args.actor.eps_clip, args.actor.eps_clip)
    strategy = types.SimpleNamespace(args=args)
    kl = o.FixedKLController(args.algo.kl.init_coef)
    return o.RemoteExperienceMaker(
        None, None, None, None, kl_controller=kl, strategy=strategy, tokenizer=None
    )


def _advantages(
    estimator: str, kl_dtype: torch.dtype | None = None
) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """``compute_advantages_and_returns`` for ``estimator``; ``kl`` in ``kl_dtype`` (default: rewards')."""

    def advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        o = _openrlhf()
        n = rewards.shape[0]
        mask = torch.ones(n, 1, dtype=torch.bool, device=rewards.device)
        kl = torch.zeros(n, 1, dtype=kl_dtype or rewards.dtype, device=rewards.device)
        exp = o.Experience(rewards=rewards, index=list(range(n)), action_mask=mask, kl=kl, info={})
        (exp,) = _maker(estimator, group_size).compute_advantages_and_returns([exp])
        out: torch.Tensor = exp.advantages[:, 0]
        return out

    advantages.__name__ = f"openrlhf_compute_advantages_and_returns[{estimator}]"
    return advantages


def _call(
    policy_loss: Any,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    kl: tuple[str, float] | None = None,
    ref_logp: torch.Tensor | None = None,
    **keywords: Any,
) -> torch.Tensor:
    """``policy_loss(log_probs, old_log_probs, A_i mask_it, action_mask=mask, **keywords)[0]`` as
    ``PPOActor.training_step`` calls it; with ``kl = (estimator, coef)``, plus
    ``aggregate_loss(compute_approx_kl(...), mask, **loss_batch_info) * coef`` on ``ref_logp`` (None:
    ``logp`` detached), as it adds the KL loss with ``algo.kl.use_loss``."""
    out: torch.Tensor = policy_loss(
        logp, old_logp, per_token(advantages, mask), action_mask=mask, **keywords
    )[0]
    if kl is not None:
        o = _openrlhf()
        estimator, coef = kl
        ref = logp.detach() if ref_logp is None else ref_logp
        approx = o.compute_approx_kl(logp, ref, log_probs_old=old_logp, kl_estimator=estimator)
        info = {k: v for k, v in keywords.items() if k != "rollout_log_probs"}
        out = out + o.aggregate_loss(approx, mask, **info) * coef
    return out


def _policy_loss(mode: str, **options: Any) -> Callable[..., torch.Tensor]:
    """``PolicyLoss(token_level_loss=..., **options)`` called as ``PPOActor.training_step`` calls it."""

    def call(old_logp: torch.Tensor, rollout_logp: torch.Tensor | None, **inputs: Any) -> torch.Tensor:
        fn = _openrlhf().PolicyLoss(token_level_loss=mode == "token-mean", **options)
        rollout = old_logp if rollout_logp is None else rollout_logp
        return _call(fn, old_logp=old_logp, **inputs, rollout_log_probs=rollout)

    extra = "".join(f", {k}={v}" for k, v in options.items())
    return suite_loss(call, f"openrlhf_PolicyLoss[{mode}{extra}]", extras=["rollout_logp"])


def _loss(mode: str) -> Callable[..., torch.Tensor]:
    def call(**inputs: Any) -> torch.Tensor:
        return _call(_openrlhf().PolicyLoss(token_level_loss=mode == "token-mean"), **inputs)

    return suite_loss(call, f"openrlhf_PolicyLoss[{mode}]")


def _kl_loss(estimator: str, coef: float) -> Callable[..., torch.Tensor]:
    """The PPO loss (token-mean) plus ``aggregate_loss(compute_approx_kl(...)) * kl_ctl``, as
    ``PPOActor.training_step`` adds it with ``algo.kl.use_loss``."""

    def call(**inputs: Any) -> torch.Tensor:
        return _call(_openrlhf().PolicyLoss(), **inputs, kl=(estimator, coef))

    return suite_loss(call, f"openrlhf_PolicyLoss+kl_loss[{estimator}, coef={coef:g}]", extras=["ref_logp"])


def _at_scale(
    mode: str, options: tuple[tuple[str, Any], ...] = (), kl: str | None = None, kl_coef: float = 0.0
) -> Callable[..., torch.Tensor]:
    """``PolicyLoss(**options)`` with the normalisers of ``utils/loss_utils.py:_optimizer_step_loss_norm``:
    the step's tokens and sequences over every rank and micro-batch, divided by the accumulation
    steps (DeepSpeed then divides each micro-batch loss by them), and ``dp_size``; with ``kl``, the
    KL loss ``aggregate_loss(compute_approx_kl(...), **loss_batch_info) * kl_ctl`` as
    ``PPOActor.training_step`` adds it (on ``ref_logp``); the rollout's log-probs reach the
    importance-sampling correction as ``rollout_log_probs``."""

    def call(
        old_logp: torch.Tensor,
        dp_size: int,
        global_num_tokens: int,
        global_num_seqs: int,
        micro_batches: int,
        rollout_logp: torch.Tensor | None,
        **inputs: Any,
    ) -> torch.Tensor:
        fn = _openrlhf().PolicyLoss(token_level_loss=mode == "token-mean", **dict(options))
        info: dict[str, Any] = {
            "dp_size": dp_size,
            "batch_num_tokens": torch.tensor(float(global_num_tokens), dtype=torch.float32) / micro_batches,
            "global_batch_size": torch.tensor(float(global_num_seqs), dtype=torch.float32) / micro_batches,
        }
        rollout = old_logp if rollout_logp is None else rollout_logp
        terms = None if kl is None else (kl, kl_coef)
        return _call(fn, old_logp=old_logp, **inputs, kl=terms, rollout_log_probs=rollout, **info)

    extra = "".join(f", {k}={v}" for k, v in options) + (f", kl {kl}" if kl else "")
    return suite_loss(
        call,
        f"openrlhf_PolicyLoss[{mode}{extra}, loss_batch_info]",
        keywords=["dp_size", "global_num_tokens", "global_num_seqs", "micro_batches"],
        keyword_extras=["ref_logp", "rollout_logp"],
    )


_TOKEN_MEAN = _loss("token-mean")
_GROUP_NORM = _advantages("group_norm")
#: OpenRLHF's clip default: ``actor.eps_clip`` 0.2 both sides, no dual clip.
_EPS = 0.2
#: The KL coefficient of the ``kl[...]`` rows (the CLI's ``algo.kl.init_coef`` is 0.01; 0.1 makes the
#: term a visible part of the gradient).
KL_COEF = 0.1


def _ppo(aggregation: str, **kw: Any) -> Objective:
    return ppo_objective(aggregation, eps=_EPS, **kw)


_adapter = row_builder("openrlhf", "contiguous", ppo=_ppo)


ADAPTERS: dict[str, Adapter] = {
    "group_norm": _adapter(_GROUP_NORM, "openrlhf", "group_norm", _TOKEN_MEAN),
    "dr_grpo": _adapter(_advantages("dr_grpo"), "dr_grpo", "dr_grpo", _TOKEN_MEAN),
    "rloo": _adapter(_advantages("rloo"), "rloo", "rloo", _TOKEN_MEAN),
    "loss[seq-mean-token-mean]": _adapter(
        _GROUP_NORM,
        "openrlhf",
        "group_norm + PolicyLoss seq-mean-token-mean",
        _loss("seq-mean-token-mean"),
        "seq-mean-token-mean",
    ),
}
#: PolicyLoss options (``actor.policy_loss_type``, ``actor.dual_clip``, ``actor.eps_clip_low_high``,
#: ``algo.advantage.is_correction_*``): ``mode: (aggregation, options, declared objective)``
VARIANTS: dict[str, tuple[str, dict[str, Any], Objective]] = {
    "policy[gspo]": (
        "seq-mean-token-mean",  # PolicyLoss forces token_level_loss=False for GSPO
        {"policy_loss_type": "gspo"},
        Objective("gspo", eps_low=_EPS, eps_high=_EPS, aggregation="seq-mean-token-mean"),
    ),
    "policy[dual_clip=3]": ("token-mean", {"dual_clip": 3.0}, _ppo("token-mean", dual_clip=3.0)),
    "policy[eps_clip_low_high=0.2,0.28]": (
        "token-mean",
        {"clip_eps_high": 0.28},
        _ppo("token-mean", eps_high=0.28),
    ),
    "policy[is_correction token clip 0,2]": (
        "token-mean",
        {"is_correction_level": "token", "is_correction_mode": "clip", "is_correction_threshold": (0.0, 2.0)},
        _ppo("token-mean", tis_cap=2.0, tis_level="token", tis_mode="truncate"),
    ),
    "policy[is_correction token mask 0,2]": (
        "token-mean",
        {"is_correction_level": "token", "is_correction_mode": "mask", "is_correction_threshold": (0.0, 2.0)},
        _ppo("token-mean", tis_cap=2.0, tis_level="token", tis_mode="mask"),
    ),
}
ADAPTERS.update(
    variant_rows(_adapter, _GROUP_NORM, "openrlhf", "group_norm + PolicyLoss ", _policy_loss, VARIANTS)
)
ADAPTERS.update(
    {
        f"kl[{est}]": _adapter(
            _GROUP_NORM,
            "openrlhf",
            f"group_norm + PolicyLoss + kl.use_loss, kl.estimator={est}, kl_ctl={KL_COEF:g}",
            _kl_loss(est, KL_COEF),
            objective=_ppo("token-mean", kl=est, kl_coef=KL_COEF),
        )
        for est in ("k1", "k2", "k3")
    }
)

#: The objective variants are checked on their loss only (their advantage is ``group_norm``'s); with
#: a KL term the loss has a gradient at ratio 1 beyond the policy's, so only the objective.
LOSS_ONLY: dict[str, tuple[str, ...]] = {
    **{mode: LOSS_PROPERTIES for mode in VARIANTS},
    **{f"kl[{est}]": ("loss_objective",) for est in ("k1", "k2", "k3")},
}


_attr = at_scale_name


#: The losses of :data:`SCALEOUT` in their at-scale form (child processes import them by name): the
#: two aggregations, every PolicyLoss variant with its options and every KL estimator.
AT_SCALE = types.SimpleNamespace(
    **{m: _at_scale(m) for m in ("token-mean", "seq-mean-token-mean")},
    **{_attr(mode): _at_scale(agg, tuple(sorted(o.items()))) for mode, (agg, o, _obj) in VARIANTS.items()},
    **{_attr(f"kl[{est}]"): _at_scale("token-mean", kl=est, kl_coef=KL_COEF) for est in ("k1", "k2", "k3")},
)
_HOW = "dp_size, batch_num_tokens / gas, global_batch_size / gas; DeepSpeed divides by gas"
#: The level-5 column: PolicyLoss with OpenRLHF's per-step global normalisers.
SCALEOUT: dict[str, ScaleOut | str] = {
    **{
        m: ScaleOut("token-mean", "token-mean", loss_scale="mean-over-micro-batches", how=_HOW)
        for m in ("group_norm", "dr_grpo", "rloo")
    },
    "loss[seq-mean-token-mean]": ScaleOut(
        "seq-mean-token-mean", "seq-mean-token-mean", loss_scale="mean-over-micro-batches", how=_HOW
    ),
    # the variants and KL rows: their own loss at scale (k1 in the loss has the gradient kl_ctl * w_it
    # on every token at ratio 1: no policy-gradient prediction, the split-vs-full gradient is checked)
    **{
        mode: ScaleOut(_attr(mode), agg, loss_scale="mean-over-micro-batches", how=_HOW)
        for mode, (agg, _o, _obj) in VARIANTS.items()
    },
    **{
        f"kl[{est}]": ScaleOut(
            _attr(f"kl[{est}]"),
            None if est == "k1" else "token-mean",
            loss_scale="mean-over-micro-batches",
            how=_HOW,
        )
        for est in ("k1", "k2", "k3")
    },
}

NOT_APPLICABLE: dict[str, str] = {
    "dapo_filter": "OpenRLHF's dynamic filtering (keep a prompt iff 0 < mean(scores) < 1) runs inside the "
    "vLLM rollout loop (samples_generator.py) and cannot be driven on its own",
}
