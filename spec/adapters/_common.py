"""What the adapter modules share beyond the peer contract (private): the suite's call shapes.

Every adapter calls its peer's own functions; what repeats from peer to peer is the shape the
suite calls them in, written here once:

* :func:`suite_loss`: a peer's loss call in the suite's loss signature, ``loss(logp, old_logp,
  advantages, mask, ...)`` with the optional inputs (``ref_logp``, ``rollout_logp``) and the
  level-5 globals (``world_size``, ``global_num_tokens``, ...) the row takes. The suite reads the
  signature to decide what to pass (``sigma_ref.conformance.inputs.keyword_inputs``,
  ``scaleout.declared_globals``), so the signature is exact, never ``**kwargs``;
* :func:`outcome_estimator` / :func:`token_estimator`: the outcome-advantage estimators of verl
  and SkyRL (one registry shape, ``(token_level_rewards, response_mask, index) -> (advantages,
  returns)``), called with one reward per response or in their own token layout;
* :func:`ppo_objective`, :data:`LOSS_PROPERTIES`, :func:`at_scale_name`: the declared PPO
  objective, the loss properties a loss-only row runs, a row's name in ``AT_SCALE``;
* :func:`loss_type_scaleout`: the level-5 rows of a trainer configured by TRL's ``loss_type``
  (TRL and Unsloth);
* :func:`row_builder`, :func:`variant_rows`: a peer's ``_adapter``, the row of an advantage function
  and a loss with its declared convention, aggregation and objective; the rows of its loss options.
"""

from __future__ import annotations

import enum
import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from sigma_ref.conformance import Adapter
from sigma_ref.conformance.scaleout import HORIZON
from sigma_ref.objectives import Objective, resolve_aggregation

from ._peers import ScaleOut

__all__ = [
    "LOSS_PROPERTIES",
    "at_scale_name",
    "loss_type_scaleout",
    "outcome_estimator",
    "ppo_objective",
    "registry_estimators",
    "row_builder",
    "suite_loss",
    "token_estimator",
    "token_rows",
    "variant_rows",
]

#: The loss properties the matrix runs on a row that differs from another only in its loss.
LOSS_PROPERTIES: tuple[str, ...] = (
    "loss_aggregation",
    "loss_clipped_surrogate",
    "loss_objective",
    "loss_ignores_padding",
)

_P = inspect.Parameter
_INPUTS = ("logp", "old_logp", "advantages", "mask")
#: The keywords that are not counts (the level-5 globals are ints).
_KEYWORD_TYPES: dict[str, Any] = {"prompt_index": torch.Tensor, "process_group": Any}


def suite_loss(
    call: Callable[..., torch.Tensor],
    name: str,
    *,
    extras: Sequence[str] = (),
    keywords: Sequence[str] = (),
    keyword_extras: Sequence[str] = (),
) -> Callable[..., torch.Tensor]:
    """``call`` in the suite's loss signature, named ``name``.

    The signature is ``loss(logp, old_logp, advantages, mask, <extras>=None, *, <keywords>,
    <keyword_extras>=None)``; ``call`` gets every parameter by keyword (the defaults filled in).

    >>> loss = suite_loss(lambda **kw: sorted(kw), "demo", extras=["ref_logp"], keywords=["world_size"])
    >>> sig = inspect.signature(loss)
    >>> list(sig.parameters)
    ['logp', 'old_logp', 'advantages', 'mask', 'ref_logp', 'world_size']
    >>> sig.parameters["ref_logp"].default, sig.parameters["world_size"].kind.name
    (None, 'KEYWORD_ONLY')
    >>> loss(1, 2, 3, 4, world_size=2), loss.__name__
    (['advantages', 'logp', 'mask', 'old_logp', 'ref_logp', 'world_size'], 'demo')
    """
    signature = inspect.Signature(
        [
            *(_P(n, _P.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor) for n in _INPUTS),
            *(_P(n, _P.POSITIONAL_OR_KEYWORD, default=None, annotation=torch.Tensor | None) for n in extras),
            *(_P(n, _P.KEYWORD_ONLY, annotation=_KEYWORD_TYPES.get(n, int)) for n in keywords),
            *(_P(n, _P.KEYWORD_ONLY, default=None, annotation=torch.Tensor | None) for n in keyword_extras),
        ],
        return_annotation=torch.Tensor,
    )

    def loss(*args: Any, **kwargs: Any) -> torch.Tensor:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return call(**bound.arguments)

    loss.__signature__ = signature  # type: ignore[attr-defined]
    loss.__name__ = name
    return loss


def outcome_estimator(
    lookup: Callable[[], Callable[..., Any]], name: str, **options: Any
) -> Callable[[torch.Tensor, np.ndarray], torch.Tensor]:
    """The registered estimator ``lookup()`` on one reward per response (layout ``index``).

    The reward goes in a ``[N, 1]`` token matrix with a full response mask, as verl's
    ``compute_advantage`` and SkyRL's ``compute_advantages_and_returns`` pass outcome rewards;
    the advantage is read from the single token.
    """

    def advantages(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
        scores = rewards.reshape(-1, 1)
        adv, _returns = lookup()(
            token_level_rewards=scores,
            response_mask=torch.ones_like(scores),
            index=np.asarray(index),
            **options,
        )
        out: torch.Tensor = adv[:, 0]
        return out

    advantages.__name__ = name
    return advantages


def token_estimator(
    lookup: Callable[[], Callable[..., Any]], name: str, **options: Any
) -> Callable[..., Any]:
    """The registered estimator ``lookup()`` in its own token-level signature (layout ``token``)."""

    def advantages(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray) -> Any:
        return lookup()(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            index=np.asarray(index),
            **options,
        )

    advantages.__name__ = name
    return advantages


def registry_estimators(
    lookup: Callable[[str], Callable[..., Any]], prefix: str
) -> tuple[Callable[..., Callable[..., torch.Tensor]], Callable[..., Callable[..., Any]]]:
    """``(estimator, token_estimator)``: ``name, **options -> advantage function`` builders of
    :func:`outcome_estimator` / :func:`token_estimator` for the estimator ``lookup(name)`` (looked up
    at each call), named ``<prefix>_<name>`` / ``<prefix>_<name>_token_level``."""

    def estimator(name: str, **options: Any) -> Callable[..., torch.Tensor]:
        return outcome_estimator(lambda: lookup(name), f"{prefix}_{name}", **options)

    def token(name: str, **options: Any) -> Callable[..., Any]:
        return token_estimator(lambda: lookup(name), f"{prefix}_{name}_token_level", **options)

    return estimator, token


def token_rows(
    build: Callable[..., Callable[..., Any]], peer: str, rows: Iterable[tuple[str, dict[str, Any], str]]
) -> dict[str, Adapter]:
    """The ``<name>[token]`` rows: each estimator ``build(name, **options)`` in its own token-level
    signature (layout ``token``: the reward on each response's last valid token), declared
    ``convention``; ``rows``: ``(name, options, convention)``."""
    return {
        f"{name}[token]": Adapter(
            build(name, **options),
            "token",
            convention=convention,
            returns="advantages",
            name=f"{peer} {name} (token level)",
        )
        for name, options, convention in rows
    }


def ppo_objective(aggregation: str, *, eps: float, **options: Any) -> Objective:
    """PPO's clipped surrogate with the symmetric clip ``eps`` (``eps_high`` in ``options`` overrides
    its upper side) and ``aggregation``.

    >>> o = ppo_objective("token-mean", eps=0.2, eps_high=0.28)
    >>> (o.eps_low, o.eps_high, o.aggregation)
    (0.2, 0.28, 'token-mean')
    """
    eps_high = options.pop("eps_high", eps)
    return Objective("ppo", eps_low=eps, eps_high=eps_high, aggregation=aggregation, **options)


class _Declared(enum.Enum):
    """The ``objective`` a :func:`row_builder` row takes when none is passed: its peer's default."""

    DEFAULT = enum.auto()


def row_builder(
    peer: str,
    layout: str,
    *,
    ppo: Callable[[str], Objective] | None = None,
    loss: Callable[..., Any] | None = None,
    aggregation: str = "token-mean",
    **fixed: Any,
) -> Callable[..., Adapter]:
    """``row(fn, convention, name, loss, aggregation, objective, **options)``: the :class:`Adapter`
    of ``peer``'s advantage function ``fn`` (in ``layout``) and its ``loss``, named ``"<peer> <name>"``.

    ``loss`` and ``aggregation`` here are the row's defaults; without an ``objective`` (``None``
    declares none) the row declares ``ppo(aggregation)``, or none where ``ppo`` is ``None``.
    ``fixed`` and ``options`` are further ``Adapter`` fields.

    >>> row = row_builder("demo", "index", ppo=lambda agg: ppo_objective(agg, eps=0.2), ragged=True)
    >>> a = row(len, "verl", "grpo", None)
    >>> (a.name, a.layout, a.ragged, a.aggregation, a.objective.eps_high)
    ('demo grpo', 'index', True, 'token-mean', 0.2)
    >>> row(len, "verl", "grpo", None, "seq-mean-token-mean", None).objective is None
    True
    """
    default_loss, default_aggregation = loss, aggregation

    def row(
        fn: Callable[..., Any],
        convention: str | None,
        name: str,
        loss: Callable[..., Any] | None = default_loss,
        aggregation: str = default_aggregation,
        objective: Objective | _Declared | None = _Declared.DEFAULT,
        **options: Any,
    ) -> Adapter:
        if isinstance(objective, _Declared):
            objective = ppo(aggregation) if ppo is not None else None
        return Adapter(
            fn,
            layout,
            loss=loss,
            convention=convention,
            name=f"{peer} {name}",
            aggregation=aggregation,
            objective=objective,
            **fixed,
            **options,
        )

    return row


def variant_rows(
    row: Callable[..., Adapter],
    fn: Callable[..., Any],
    convention: str | None,
    name: str,
    loss: Callable[..., Callable[..., Any]],
    variants: Mapping[str, tuple[str, Mapping[str, Any], Objective | None]],
) -> dict[str, Adapter]:
    """The rows of a peer's loss options ``variants``, ``mode: (aggregation, options, objective)``:
    ``row(fn, convention, name + <the words in the mode's brackets>, loss(aggregation, **options),
    aggregation, objective)``, ``row`` a :func:`row_builder` row.

    >>> rows = variant_rows(row_builder("demo", "index"), len, "verl", "grpo + ", lambda agg, **o: None,
    ...                     {"loss[token-sum, c=2]": ("token-sum", {"c": 2}, None)})
    >>> a = rows["loss[token-sum, c=2]"]
    >>> (a.name, a.aggregation, a.objective)
    ('demo grpo + token-sum, c=2', 'token-sum', None)
    """
    return {
        mode: row(
            fn,
            convention,
            name + mode.partition("[")[2].removesuffix("]"),
            loss(aggregation, **options),
            aggregation,
            objective,
        )
        for mode, (aggregation, options, objective) in variants.items()
    }


def at_scale_name(mode: str, prefix: str = "") -> str:
    """A row's name as an attribute of its module's ``AT_SCALE`` (``prefix`` dropped, ``+`` spelled).

    >>> at_scale_name("loss[dapo, delta=1.5]", "loss[")
    'dapo_delta_1_5'
    >>> at_scale_name("kl[k3+]")
    'kl_k3_plus'
    """
    inner = mode.removeprefix(prefix).removesuffix("]") if prefix else mode
    return re.sub(r"\W+", "_", inner.replace("+", "_plus")).strip("_")


def loss_type_scaleout(
    at_scale: Callable[..., Callable[..., torch.Tensor]],
    loss_types: Iterable[str],
    variants: Mapping[str, tuple[str, Mapping[str, Any], Objective | None]],
    *,
    how: str,
    sizes: str,
) -> tuple[dict[str, Callable[..., torch.Tensor]], dict[str, ScaleOut]]:
    """The at-scale losses (``AT_SCALE``'s attributes) and the level-5 rows of a trainer configured by
    TRL's ``loss_type``.

    ``at_scale(loss_type, options)``: the peer's loss on W processes with M accumulation steps.
    Each ``loss[<type>]`` row is predicted with the type's aggregation (``dr_grpo``: its constant is
    the padded width); each variant ``mode: (loss_type, options, objective)`` runs its own loss and
    is predicted where the oracle has its objective.
    """
    types_ = tuple(loss_types)
    names = {mode: at_scale_name(mode, "loss[") for mode in variants}
    losses = {
        **{t: at_scale(t) for t in types_},
        **{names[m]: at_scale(t, tuple(sorted(o.items()))) for m, (t, o, _obj) in variants.items()},
    }
    rows = {
        f"loss[{t}]": ScaleOut(
            t, resolve_aggregation(t), constant=HORIZON if t == "dr_grpo" else None, how=how, sizes=sizes
        )
        for t in types_
    }
    rows.update(
        {
            m: ScaleOut(names[m], resolve_aggregation(t) if obj is not None else None, how=how)
            for m, (t, _o, obj) in variants.items()
        }
    )
    return losses, rows
