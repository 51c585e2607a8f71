"""What an implementation should compute: the oracle under one convention.

A :class:`Reference` names the expected behaviour (a preset, a custom
:class:`~sigma_ref.Convention`, or RLOO) and computes expected advantages with the
oracle (``sigma_ref.grpo_advantage`` / ``sigma_ref.rloo_advantage``); no formula is
re-typed here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..advantages import dapo_keep_mask, grpo_advantage, rloo_advantage
from ..conventions import PRESETS, Convention, get_convention

__all__ = ["Reference", "reference_for", "REFERENCE_NAMES"]

#: Names ``--convention`` accepts besides ``auto``: every preset and ``rloo``.
REFERENCE_NAMES: tuple[str, ...] = (*PRESETS, "rloo")


@dataclasses.dataclass(frozen=True)
class Reference:
    """Expected behaviour: GRPO under ``convention``, or RLOO when ``convention`` is ``None``.

    ``family``: ``"grpo"`` (divides by a std), ``"dr_grpo"`` (``scale="none"``) or
    ``"rloo"`` (``A = G/(G-1) (R - mu)``).

    >>> import numpy as np
    >>> reference_for("paper").advantages(np.array([1.0, 0.0]), np.array([0, 0])).tolist()
    [1.0, -1.0]
    """

    name: str
    convention: Convention | None

    @property
    def family(self) -> str:
        """``grpo``, ``dr_grpo`` or ``rloo``."""
        if self.convention is None:
            return "rloo"
        return "dr_grpo" if self.convention.scale == "none" else "grpo"

    @property
    def scale_invariant(self) -> bool:
        """True when ``A(lambda R) = A(R)`` for ``lambda > 0`` (up to eps): std scaling."""
        return self.family == "grpo"

    @property
    def eps(self) -> float:
        """The convention's eps (0 for RLOO and Dr. GRPO)."""
        return 0.0 if self.convention is None or self.family != "grpo" else self.convention.eps

    @property
    def singleton(self) -> str:
        """What a group of one gets: ``error``, ``zero`` or ``unit_std``."""
        return "error" if self.convention is None else self.convention.singleton

    def advantages(self, rewards: Any, index: Any) -> Any:
        """Expected advantages of flat ``rewards`` grouped by ``index`` (the oracle's)."""
        if self.convention is None:
            return rloo_advantage(rewards, index=index)
        return grpo_advantage(rewards, convention=self.convention, index=index)

    def keep_mask(self, rewards: Any, index: Any) -> Any:
        """DAPO's keep mask (the oracle's ``dapo_keep_mask``)."""
        return dapo_keep_mask(rewards, index=index)

    def describe(self) -> str:
        """One line: the name and what ``d`` is."""
        if self.convention is None:
            return "rloo: A = R - mean of the other responses = G/(G-1) (R - mean)"
        return self.convention.describe()


def reference_for(convention: Convention | str | Reference) -> Reference:
    """The :class:`Reference` for a preset name, ``"rloo"``, or a Convention.

    >>> reference_for("rloo").family, reference_for("dr_grpo").family
    ('rloo', 'dr_grpo')
    """
    if isinstance(convention, Reference):
        return convention
    if isinstance(convention, str) and convention.lower() == "rloo":
        return Reference("rloo", None)
    conv = get_convention(convention)
    return Reference(conv.name, conv)


def as_numpy(x: Any) -> np.ndarray:
    """A result of the oracle as float64 numpy."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)
