"""Inputs the suite's properties share: designed batches, hypothesis strategies of batches, the tiny
softmax policy a loss is called on, and the token-level call (layout ``token``).

Inputs of one property live with it, in ``spec/test_<level>.py``.

Layout ``token`` (verl's ``compute_grpo_outcome_advantage(token_level_rewards, response_mask,
index)``): the suite builds the token inputs itself
(:func:`~sigma_ref.conformance.adapter.token_inputs`: lengths 1 to T, the scalar reward on the last
valid token) and the value properties read one value per row at its last valid token
(:func:`at_last`).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from .. import strategies as sst
from .adapter import LOSS_EXTRAS as _LOSS_EXTRAS
from .adapter import TOKEN_T, Batch, array_text, token_lengths
from .core import Context, Finding, PropertyFailure, guarded

__all__ = [
    "batches",
    "LIVE",
    "BINARY",
    "ILL",
    "WITH_SILENT",
    "live",
    "any_batch",
    "seeded",
    "groups_of",
    "POLICY_T",
    "Policy",
    "call_loss",
    "scalar_loss",
    "loss_keywords",
    "prescaled_advantages",
    "check_loss_call",
    "LOSS_EXTRAS",
    "keyword_inputs",
    "required_extras",
    "needs_loss",
    "needs_policy_loss",
    "token_only",
    "call_token",
    "token_repr",
    "at_last",
]


def batches(
    ctx: Context,
    *,
    binary: bool = False,
    silent: str = "sometimes",
    min_groups: int = 1,
    max_groups: int = 4,
    min_size: int = 2,
    max_size: int = 8,
    values: str = "mixed",
) -> st.SearchStrategy[Batch]:
    """Batches the adapter can take: ragged and interleaved for the index layout (integer or
    uuid-like string ids); dyadic, continuous and ill-conditioned rewards (``values``)."""
    kw = dict(
        binary=binary,
        silent=silent,
        min_groups=min_groups,
        max_groups=max_groups,
        min_size=min_size,
        max_size=max_size,
        values=values,
    )
    if ctx.adapter.ragged:
        return st.one_of(
            sst.ragged_batches(**kw).map(lambda ri: Batch(*ri)),  # type: ignore[arg-type]
            sst.ragged_batches(ids="str", **kw).map(lambda ri: Batch(*ri)),  # type: ignore[arg-type]
        )
    return sst.reward_groups(**kw).map(Batch.grouped)  # type: ignore[arg-type]


LIVE = [
    Batch.grouped([[1.0, 0.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0]]),
    Batch.grouped([[0.5, 2.0, -1.0], [1.0, 1.0, 0.0], [0.25, 0.0, 4.0]]),
]
BINARY = [Batch.grouped([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])]
#: Ill-conditioned groups: near-equal rewards with an offset (a one-pass variance in float32 errs
#: by 1.5% on the first; a stable float32 computation by ~1e-5)
ILL = [Batch.grouped([[5.0, 5.01, 5.0, 5.02], [10000.3, 10000.1, 10000.7, 10000.2]])]
WITH_SILENT = [Batch.grouped([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])]


def live(ctx: Context, p: Any) -> list[Batch]:
    """The designed live batches (an ``examples`` callable)."""
    return list(LIVE)


def any_batch(ctx: Context, p: Any) -> st.SearchStrategy[Batch]:
    """The generated batches of :func:`batches` with its defaults (a ``strategy`` callable)."""
    return batches(ctx)


def seeded(strategy: st.SearchStrategy[Batch]) -> st.SearchStrategy[tuple[Batch, int]]:
    """``(batch, seed)`` pairs: a batch and a seed for the property's own random choices."""
    return st.tuples(strategy, st.integers(0, 2**32 - 1))


def groups_of(batch: Batch) -> np.ndarray:
    """Each response's group as 0, 1, ... (in sorted-id order)."""
    return np.unique(batch.index, return_inverse=True)[1].reshape(-1)


# the tiny policy: logits = x_it @ W over a vocabulary of 6, tokens y_it, lengths L_i
_V, _F, POLICY_T = 6, 4, 5


@dataclasses.dataclass
class Policy:
    """A tiny softmax policy ``log pi(y_it) = log_softmax(x_it @ W)[y_it]`` over responses of lengths
    2 to ``POLICY_T`` (``mask``), for the properties that differentiate a loss."""

    W: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor

    @staticmethod
    def make(n: int, seed: int) -> Policy:
        """``n`` responses drawn from ``seed``."""
        gen = torch.Generator().manual_seed(seed)
        W = torch.randn(_F, _V, generator=gen, dtype=torch.float64).requires_grad_(True)
        x = torch.randn(n, POLICY_T, _F, generator=gen, dtype=torch.float64)
        y = torch.randint(0, _V, (n, POLICY_T), generator=gen)
        lengths = torch.randint(2, POLICY_T + 1, (n,), generator=gen)
        mask = (torch.arange(POLICY_T).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
        return Policy(W, x, y, mask)

    def logp(self) -> torch.Tensor:
        """``log pi(y_it)``, ``[n, POLICY_T]``, differentiable in ``W``."""
        logits = self.x @ self.W
        return torch.log_softmax(logits, -1).gather(-1, self.y.unsqueeze(-1)).squeeze(-1)


def call_loss(
    ctx: Context,
    logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    batch: Batch,
    old_logp: torch.Tensor | None = None,
) -> torch.Tensor:
    """The implementation's loss (ratio 1 unless ``old_logp`` is given); ``(loss, metrics)`` accepted."""
    assert ctx.adapter.loss is not None
    where = "at ratio 1" if old_logp is None else "at ratio != 1"
    index = None  # a probe of its own rows: each row its own prompt
    if batch.index.shape == (mask.shape[0],):  # the batch's groups (any ids) as integer prompt ids
        index = np.unique(batch.index, return_inverse=True)[1].reshape(-1)
    old, extra = _loss_inputs(ctx, logp, mask, old_logp, index)
    adv = prescaled_advantages(ctx, adv, mask, index)
    return scalar_loss(
        guarded(ctx.adapter.loss, logp, old, adv, mask, what=lambda: f"loss {where} on {batch!r}", **extra)
    )


def scalar_loss(out: Any) -> torch.Tensor:
    """What a loss call returned, as a 0-d Tensor: a ``(loss, metrics)`` pair's loss, as many trainers
    return; anything but a one-element Tensor fails (kind ``shape``)."""
    if isinstance(out, tuple | list) and out:
        out = out[0]  # (loss, metrics), as many trainers return
    if not isinstance(out, torch.Tensor) or out.numel() != 1:
        raise PropertyFailure(
            Finding(
                f"loss returned {type(out).__name__} {getattr(out, 'shape', '')}, "
                "but should be a scalar Tensor",
                kind="shape",
            )
        )
    return out.reshape(())


def _loss_inputs(
    ctx: Context,
    logp: torch.Tensor,
    mask: torch.Tensor,
    old_logp: torch.Tensor | None,
    index: Any = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """``old_logp`` (``logp`` detached: ratio 1, unless given) and the keyword inputs the loss takes.

    A loss that requires the reference or rollout log-probs gets neutral ones: ``ref_logp = logp``
    (a k2 or k3 term has no gradient there) and ``rollout_logp = old_logp`` (importance weight 1).
    A loss that takes ``position_ids=`` or ``cu_seqlens=`` gets the boundaries of one response per
    row (:func:`~.packing.unpacked_inputs`). ``index``: each row's prompt, for the prompt globals."""
    assert ctx.adapter.loss is not None
    old = logp.detach() if old_logp is None else old_logp
    neutral = {"ref_logp": logp.detach(), "rollout_logp": old.detach()}
    extra: dict[str, Any] = {k: neutral[k] for k in sorted(required_extras(ctx.adapter.loss))}
    extra.update(loss_keywords(ctx, mask, index))
    return old, extra


def loss_keywords(ctx: Context, mask: torch.Tensor, index: Any = None) -> dict[str, Any]:
    """The keyword inputs of one process's loss call besides the objective inputs: the level-5
    globals the loss declares (:func:`single_process_globals`, ``index`` each row's prompt) and, for
    a loss written for packed rows, ``position_ids=``/``cu_seqlens=`` of one response per row."""
    assert ctx.adapter.loss is not None
    return {**single_process_globals(ctx, mask, index), **_boundaries(ctx.adapter.loss, mask)}


def prescaled_advantages(
    ctx: Context, adv: torch.Tensor, mask: torch.Tensor, index: Any = None
) -> torch.Tensor:
    """``adv`` as the trainer hands it to the loss under ``--advantage-scale`` or
    ``--advantage-scaler`` (one process, one micro-batch: the counts of ``mask``), else unchanged:
    a token-sum loss of pre-scaled advantages is judged at every level under the aggregation the
    scaling reproduces (:func:`~sigma_ref.conformance.normalisers.advantage_scales`)."""
    opts = ctx.scaleout
    if opts is None or (opts.advantage_scale == "none" and opts.advantage_scaler is None):
        return adv
    from .normalisers import advantage_scales, call_advantage_scaler

    m = mask.detach().cpu().numpy()
    if opts.advantage_scaler is not None:  # the trainer's own function, on this one micro-batch
        from .adapter import load_object

        scaler = load_object(opts.advantage_scaler, what="--advantage-scaler")
        factors = call_advantage_scaler(scaler, m, prompt_index=index)  # index: the rows' prompts, if known
        return adv * torch.as_tensor(factors, dtype=adv.dtype, device=adv.device)
    scale = advantage_scales(
        m,
        opts.advantage_scale,
        num_tokens=float(m.sum()),
        num_seqs=float((m.sum(-1) > 0).sum()),
        constant=ctx.adapter.aggregation_constant,
    )
    return adv * torch.as_tensor(scale, dtype=adv.dtype, device=adv.device)


def _boundaries(loss: Any, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """``position_ids=``/``cu_seqlens=`` of the unpacked layout (one response per row) for a loss
    written for packed rows (level 5's ``--packing``), as its signature names them."""
    import inspect

    from .packing import PACKING_INPUTS, unpacked_inputs

    try:
        params = inspect.signature(loss).parameters
    except (TypeError, ValueError):
        return {}
    return unpacked_inputs([k for k in PACKING_INPUTS if k in params], mask)


#: How the suite calls a loss (``spec/README.md``, "Call shapes").
LOSS_SIGNATURE = (
    "loss(logp [N, T], old_logp [N, T], advantages [N], mask [N, T], **inputs) -> scalar Tensor "
    "(or (loss, metrics))"
)


def check_loss_call(ctx: Context) -> None:
    """Fail fast: call the loss once on a designed probe (8 responses of lengths 2 to 5, width 5, at
    ratio 1) and check that it takes the suite's call and returns a scalar.

    A signature or shape error (``TypeError``, ``IndexError``, ``KeyError``, ``AttributeError``, a
    torch shape error) or a result that is not a scalar raises
    :class:`~.adapter.CallMismatch` with what was passed, what came back and the signature the suite
    calls; the implementation's other errors are left to the properties. A loss written for
    ``[N, T]`` advantages, given the suite's ``[N]``, stops here instead of failing every loss property.
    """
    from .adapter import _SIGNATURE_ERRORS, CallMismatch, _call_unwrapped, _shape_of

    loss = ctx.adapter.loss
    if loss is None:
        return
    pol = Policy.make(8, 0)
    logp = pol.logp().detach().requires_grad_(True)
    adv = torch.linspace(-1.5, 2.0, 8, dtype=torch.float64)
    old, extra = _loss_inputs(ctx, logp, pol.mask, None)
    args = (logp, old, prescaled_advantages(ctx, adv, pol.mask), pol.mask)
    passed = ", ".join(
        [f"{n}={_shape_of(a)}" for n, a in zip(("logp", "old_logp", "advantages", "mask"), args, strict=True)]
        + [f"{k}={_shape_of(v)}" for k, v in extra.items()]
    )
    name = getattr(loss, "__name__", type(loss).__name__)
    raw: Any = None
    try:
        raw = _call_unwrapped(loss, *args, what=f"{name} on the first loss probe", **extra)
    except Exception as exc:
        words = ("shape", "size", "dimension")
        shape_error = isinstance(exc, RuntimeError) and any(w in str(exc) for w in words)
        if not (isinstance(exc, _SIGNATURE_ERRORS) or shape_error):
            return  # the implementation's own error: the properties report it
        problem = f"raised {type(exc).__name__}: {exc}"
    else:
        out = raw[0] if isinstance(raw, tuple | list) and raw else raw
        if isinstance(out, torch.Tensor) and out.numel() == 1:
            return
        problem = f"it returned {_shape_of(raw)}, not a scalar Tensor"
    hint = ""
    if "advantages" in problem or "size of tensor" in problem or "match" in problem:
        hint = (
            "; a loss written for advantages [N, T] can be wrapped: "
            "Adapter(loss=lambda logp, old_logp, advantages, mask: "
            "my_loss(logp, old_logp, advantages.unsqueeze(1).expand_as(logp), mask))"
        )
    raise CallMismatch(
        f"the first loss probe did not fit the loss call {LOSS_SIGNATURE}: called {name}({passed}); "
        f"{problem}{hint}"
    )


def single_process_globals(ctx: Context, mask: torch.Tensor, index: Any = None) -> dict[str, Any]:
    """The level-5 globals the loss declares (``global_num_tokens``, ``world_size``, ...), for one
    process and one micro-batch: the batch counts of ``mask``, ``W = M = 1``
    (:func:`~sigma_ref.conformance.scaleout.loss_globals`). A loss written for scale-out runs at
    levels 0 to 4 unchanged; ``process_group`` is a one-rank group of this process
    (:func:`one_rank_group`). The prompt globals (``global_num_prompts``, ``prompt_num_tokens``,
    ``prompt_index``) count the prompts of ``index`` (the batch's group ids, one per row of
    ``mask``); without it (a probe built row by row) each row is its own prompt."""
    from .scaleout import declared_globals, loss_globals

    assert ctx.adapter.loss is not None
    names = declared_globals(ctx.adapter.loss)
    if not names:
        return {}
    group = one_rank_group() if "process_group" in names else None
    declared = ctx.adapter.aggregation
    if declared is not None:
        from ..objectives import resolve_declared_aggregation

        declared = resolve_declared_aggregation(declared)
    values = loss_globals(mask, process_group=group, aggregation=declared, micro_index=index)
    dtype = mask.dtype if mask.is_floating_point() else torch.float64  # per row, beside the mask
    values["prompt_num_tokens"] = values["prompt_num_tokens"].to(mask.device, dtype)
    values["prompt_index"] = values["prompt_index"].to(mask.device)
    return {k: values[k] for k in names}


def one_rank_group() -> Any:
    """A ``torch.distributed`` group of this process alone, for a loss that all-reduces its counts.

    When no process group exists yet, this starts a one-rank gloo group on an in-memory store
    (no port, no file) and keeps it for the session; when one exists with a single rank, it is
    used; in a multi-rank process the default group (None) is passed, as a trainer would.
    """
    import torch.distributed as dist

    if not dist.is_available():
        return None
    if not dist.is_initialized():
        store = dist.HashStore()  # type: ignore[attr-defined]  # exported at run time, not in the stubs
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    return dist.group.WORLD if dist.get_world_size() == 1 else None


#: The keyword inputs a loss may take beyond ``(logp, old_logp, advantages, mask)`` (defined beside the
#: Adapter, so that level 5's ranks read it without importing the suite).
LOSS_EXTRAS: tuple[str, ...] = _LOSS_EXTRAS


def keyword_inputs(fn: Any) -> set[str]:
    """The parameter names of ``fn`` (:data:`LOSS_EXTRAS` too if it takes ``**kwargs``).

    >>> sorted(keyword_inputs(lambda logp, old_logp, advantages, mask, *, ref_logp: 0))
    ['advantages', 'logp', 'mask', 'old_logp', 'ref_logp']
    """
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    names = {p.name for p in params}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        names |= set(LOSS_EXTRAS)
    return names


def required_extras(fn: Any) -> set[str]:
    """The :data:`LOSS_EXTRAS` that ``fn`` requires (no default): a loss call must pass them.

    >>> required_extras(lambda logp, old_logp, advantages, mask, *, ref_logp, rollout_logp=None: 0)
    {'ref_logp'}
    """
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return set()
    return {k for k in LOSS_EXTRAS if k in params and params[k].default is inspect.Parameter.empty}


def needs_loss(ctx: Context, p: Any) -> str | None:
    """Why a loss property does not apply (no loss given)."""
    return None if ctx.adapter.loss is not None else "no loss given (--loss pkg.module:loss enables it)"


def needs_policy_loss(ctx: Context, p: Any) -> str | None:
    """Why a ratio-1 policy-gradient property does not apply: no loss, or a declared k1 KL term in the
    loss, whose gradient ``beta w`` is on every token at ratio 1 too (``loss_objective`` checks it)."""
    obj = ctx.adapter.objective
    if obj is not None and obj.kl == "k1" and obj.kl_placement == "loss" and obj.kl_coef != 0:
        return (
            "the declared objective has a k1 KL term in the loss: its gradient beta w_it is on every "
            "token at ratio 1 too, so the loss is not a policy gradient there (loss_objective checks "
            "its gradient)"
        )
    return needs_loss(ctx, p)


# ---------------------------------------------------------------------------------
# layout token
def token_only(ctx: Context, p: Any) -> str | None:
    """Why a token-layout property does not apply (another layout)."""
    if ctx.adapter.layout != "token":
        return f"layout {ctx.adapter.layout!r} takes no token-level inputs (layout 'token' does)"
    return None


def call_token(
    ctx: Context, batch: Batch, lengths: torch.Tensor | None = None, rewards: np.ndarray | None = None
) -> tuple[tuple[Any, ...], Any, np.ndarray]:
    """``(inputs given, raw output, advantages [N, T] as float64 numpy)``; failures as findings."""
    r = torch.tensor(batch.rewards if rewards is None else rewards, dtype=torch.float64)
    call = token_repr(ctx, batch, lengths)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            given, raw, adv = ctx.adapter.call_token(batch, r, lengths)
    except Exception as exc:
        raised = {"how": "raised", "exception": type(exc).__name__}
        raise PropertyFailure(
            Finding(f"raised {type(exc).__name__}: {exc}", call, kind="raised", facts=raised)
        ) from exc
    shape = tuple(given[0].shape)
    if not isinstance(adv, torch.Tensor) or tuple(adv.shape) != shape:
        got = tuple(adv.shape) if hasattr(adv, "shape") else type(adv).__name__
        raise PropertyFailure(
            Finding(
                f"advantages.shape={got}, but should be {shape} (like token_level_rewards)",
                call,
                kind="shape",
            )
        )
    return given, raw, adv.detach().to("cpu", torch.float64).numpy()


def token_repr(ctx: Context, batch: Batch, lengths: torch.Tensor | None) -> str:
    """The token-level call, in words, for a finding."""
    n = batch.n
    L = (token_lengths(n) if lengths is None else lengths).tolist()
    r = array_text(batch.rewards)
    idx = array_text(batch.index)
    return (
        f"{ctx.adapter.name}(token_level_rewards=[{n}, {TOKEN_T}] with R={r} on the last valid token of "
        f"lengths {L}, response_mask=[{n}, {TOKEN_T}], index={idx})"
    )


def at_last(adv: np.ndarray, lengths: torch.Tensor) -> np.ndarray:
    """Each row's value at its last valid token (``adv[i, L_i - 1]``)."""
    L = lengths.numpy()
    last: np.ndarray = adv[np.arange(adv.shape[0]), np.maximum(L - 1, 0)]
    return last
