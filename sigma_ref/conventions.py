"""Conventions: how real code turns a group's rewards into a divisor ``d``.

GRPO's advantage is ``A_i = (R_i - mu) / d``. The paper takes ``d = sigma``, the
population standard deviation of the group; real trainers differ in four small
ways that change the constant of the identity ``g = (sigma**2 / d) * delta_s``
(docs/spec.md §4):

========== ======================================= =====================================
field      values                                  divisor ``d``
========== ======================================= =====================================
ddof       0 (population) or 1 (Bessel)            ``std = sqrt(sum (R - mu)**2 / (n - ddof))``
eps        >= 0, placement ``add`` or ``floor``    ``std + eps`` or ``max(std, eps)``
scale      ``group``, ``batch`` or ``none``        the group's std, one std over the whole
                                                   batch (centered on the batch mean), or 1
singleton  ``error``, ``zero`` or ``unit_std``     a group of one response: rejected,
                                                   advantage 0, or mean 0 and std 1
========== ======================================= =====================================

A silent group (all rewards equal) always gets advantage 0 under ``scale="group"``,
whatever ``eps`` is: its centered rewards are exactly zero.

Presets (each records its ``source``): ``PAPER``, ``POST``, ``DR_GRPO``, ``TRL``,
``TRL_BATCH``, ``VERL``, ``OPENRLHF``; ``PRESETS`` maps their names to them and
:func:`get_convention` looks one up by name.

>>> from sigma_ref.conventions import PAPER, TRL
>>> PAPER.ddof, TRL.ddof, TRL.eps
(0, 1, 0.0001)
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping

import numpy as np

from . import _public_names
from ._vocabulary import (
    AGGREGATION_MODES,
    PLACEMENTS,
    SCALES,
    SINGLETONS,
    TRL_AGGREGATION,
    Placement,
    Scale,
    Singleton,
)

__all__ = [*_public_names(__name__), "AGGREGATION_MODES", "AGGREGATION_ALIASES", "resolve_aggregation"]


@dataclasses.dataclass(frozen=True)
class Convention:
    """How an implementation normalises GRPO advantages: ``A = (R - mu) / d``.

    ``d = std_ddof + eps`` (``eps_placement="add"``) or ``max(std_ddof, eps)``
    (``"floor"``), where ``std_ddof = sqrt(sum_i (R_i - mu)**2 / (n - ddof))`` is taken
    over the group (``scale="group"``), over the whole batch (``"batch"``), or
    replaced by ``d = 1`` (``"none"``, Dr. GRPO). ``singleton`` says what a group of
    one response gets. ``source`` records where the convention was read from.

    >>> Convention("mine", ddof=1, eps=1e-6).describe()
    'mine: d = std(ddof=1) + 1e-06 over each group; singleton groups are an error'
    """

    name: str
    ddof: int = 0
    eps: float = 0.0
    eps_placement: Placement = "add"
    scale: Scale = "group"
    singleton: Singleton = "error"
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Convention name={self.name!r} must be a non-empty string")
        if isinstance(self.ddof, bool) or self.ddof not in (0, 1):
            raise ValueError(
                f"Convention ddof={self.ddof!r} is not supported: use 0 (population "
                "std, the paper) or 1 (Bessel, torch.std's default)"
            )
        if isinstance(self.eps, (bool, np.bool_)) or not isinstance(self.eps, numbers.Real):
            raise TypeError(
                f"Convention eps={self.eps!r} must be a real number >= 0 (a Python or numpy float), "
                "e.g. eps=1e-4"
            )
        object.__setattr__(self, "eps", float(self.eps))  # np.float32(1e-4) is stored as 1e-4's float
        if not math.isfinite(self.eps) or self.eps < 0:
            raise ValueError(
                f"Convention eps={self.eps!r} must be finite and >= 0; use eps=0.0 for no epsilon"
            )
        if self.eps_placement not in PLACEMENTS:
            raise ValueError(
                f"Convention eps_placement={self.eps_placement!r} must be one of "
                f"{PLACEMENTS}: 'add' is std + eps, 'floor' is max(std, eps)"
            )
        if self.scale not in SCALES:
            raise ValueError(
                f"Convention scale={self.scale!r} must be one of {SCALES}: the group's "
                "std, one std over the batch, or no division (Dr. GRPO)"
            )
        if self.singleton not in SINGLETONS:
            raise ValueError(f"Convention singleton={self.singleton!r} must be one of {SINGLETONS}")

    def replace(self, **changes: object) -> Convention:
        """A copy with some fields changed (validated like a new one).

        >>> PAPER.replace(name="paper-ddof1", ddof=1).ddof
        1
        """
        # any value is accepted here and checked by __post_init__ (with the error naming the field)
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def describe(self) -> str:
        """One line saying what ``d`` is under this convention."""
        if self.scale == "none":
            d = "d = 1 (no division)"
        else:
            std = f"std(ddof={self.ddof})"
            if self.eps == 0:
                d = f"d = {std}"
            elif self.eps_placement == "add":
                d = f"d = {std} + {self.eps:g}"
            else:
                d = f"d = max({std}, {self.eps:g})"
            d += " over each group" if self.scale == "group" else " over the whole batch"
        single = {
            "error": "singleton groups are an error",
            "zero": "a singleton group gets advantage 0",
            "unit_std": "a singleton group gets mean 0 and std 1",
        }[self.singleton]
        return f"{self.name}: {d}; {single}"


PAPER = Convention(
    "paper",
    source="arXiv 2607.00152: population std, no epsilon",
)
POST = Convention(
    "post",
    ddof=1,
    eps=1e-8,
    source="seed blog post's grpo_advantage: tensor.std() (Bessel) + 1e-8",
)
DR_GRPO = Convention(
    "dr_grpo",
    scale="none",
    source="Dr. GRPO (arXiv 2503.20783): mean-centering only",
)
TRL = Convention(
    "trl",
    ddof=1,
    eps=1e-4,
    singleton="zero",
    source="trl 1.16.0: GRPOTrainer, scale_rewards='group' (nanstd + 1e-4), contiguous groups",
)
TRL_BATCH = Convention(
    "trl_batch",
    ddof=1,
    eps=1e-4,
    scale="batch",
    singleton="zero",
    source="trl 1.16.0: GRPOTrainer, scale_rewards='batch' (group mean, batch nanstd + 1e-4)",
)
VERL = Convention(
    "verl",
    ddof=1,
    eps=1e-6,
    singleton="unit_std",
    source="verl 0.9.1: core_algos.compute_grpo_outcome_advantage (torch.std + 1e-6), groups by uid",
)
OPENRLHF = Convention(
    "openrlhf",
    ddof=1,
    eps=1e-9,
    source="openrlhf 0.11.2: advantage estimator 'group_norm' (std + 1e-9), contiguous groups",
)

PRESETS: Mapping[str, Convention] = {
    c.name: c for c in (PAPER, POST, DR_GRPO, TRL, TRL_BATCH, VERL, OPENRLHF)
}


def get_convention(name: str | Convention) -> Convention:
    """The preset called ``name``: ``get_convention(name) = PRESETS[name.lower()]``.

    A :class:`Convention` is returned as is.

    >>> get_convention("verl").eps
    1e-06
    """
    if isinstance(name, Convention):
        return name
    if not isinstance(name, str):
        raise TypeError(
            f"convention={name!r} must be a Convention or a preset name, one of {sorted(PRESETS)}"
        )
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise ValueError(
            f"convention={name!r} is not a preset; choose one of {sorted(PRESETS)} "
            "or build a sigma_ref.Convention"
        ) from None


# --------------------------------------------------------------------------------------
# loss aggregation (docs/spec.md §4): the names; the weights are sigma_ref.objectives.aggregation_weights

#: verl 0.9.1's ``loss_agg_mode`` names (``AGGREGATION_MODES``) and TRL 1.16.0's ``GRPOConfig.loss_type``
#: -> verl mode (``AGGREGATION_ALIASES``, read in ``GRPOTrainer._compute_loss``) are the vocabulary's
#: (``sigma_ref._vocabulary.AGGREGATION_MODES`` and ``TRL_AGGREGATION``), re-exported here.
AGGREGATION_ALIASES = TRL_AGGREGATION


def resolve_aggregation(name: str) -> str:
    """The verl mode name for ``name``: a verl mode, a TRL ``loss_type``, or ``_`` spelling.

    ==================  ===========================  =========================================
    TRL 1.16.0           verl 0.9.1                   weight ``w_it`` of an unmasked token
    ==================  ===========================  =========================================
    ``bnpo``, ``dapo``   ``token-mean``               ``1 / N_tok``
    ``grpo``             ``seq-mean-token-mean``      ``1 / (N_seq |y_i|)``
    ``luspo``            ``seq-mean-token-sum``       ``1 / N_seq``
    ``dr_grpo``          ``seq-mean-token-sum-norm``  ``1 / (N_seq C)``, ``C = max_completion_length``
    (none)               ``token-sum``                ``1``
    ==================  ===========================  =========================================

    ``bnpo`` counts the tokens of the local (per-device micro-)batch, ``dapo`` those of the global
    accumulated batch: the same weights on one batch, different ones under scale-out
    (:func:`sigma_ref.objectives.effective_weights`).

    >>> resolve_aggregation("dr_grpo"), resolve_aggregation("token_mean")
    ('seq-mean-token-sum-norm', 'token-mean')
    """
    if not isinstance(name, str):
        raise TypeError(f"aggregation={name!r} must be a string such as 'token-mean'")
    if name in AGGREGATION_MODES:
        return name
    if name in AGGREGATION_ALIASES:
        return AGGREGATION_ALIASES[name]
    dashed = name.replace("_", "-")
    if dashed in AGGREGATION_MODES:
        return dashed
    raise ValueError(
        f"aggregation={name!r} is not a loss aggregation; use one of {AGGREGATION_MODES} "
        f"(verl's loss_agg_mode) or a TRL loss_type {tuple(AGGREGATION_ALIASES)}"
    )
