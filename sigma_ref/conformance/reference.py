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
import numpy.typing as npt

from ..advantages import grpo_advantage, rloo_advantage
from ..conventions import PAPER, PRESETS, Convention, get_convention

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
    #: A spread filter: groups whose std (the convention's ddof) is below this are
    #: treated as silent (advantage 0), as code that drops near-constant groups does.
    silent_below: float = 0.0
    #: A clamp of the advantages to ``[-clip, clip]`` (OpenRLHF's ``advantage_clip`` default
    #: 10); 0 for none.
    clip: float = 0.0

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
        """Expected advantages of flat ``rewards`` grouped by ``index`` (the oracle's).

        Under a spread filter (``silent_below > 0``) the groups below it get 0.
        """
        if self.convention is None:
            out = rloo_advantage(rewards, index=index)
        else:
            out = grpo_advantage(rewards, convention=self.convention, index=index)
        if self.silent_below > 0:
            out = np.where(self.filtered(rewards, index), 0.0, as_numpy(out))
        if self.clip > 0:
            out = np.clip(as_numpy(out), -self.clip, self.clip)
        return out

    def statistics(
        self, rewards: Any, index: Any
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """``(group, divisor, std)`` per element: group number ``0..B-1``, ``d`` (0 in silent
        groups; RLOO's ``(G - 1) / G``) and the group std with the convention's ddof, read from
        the oracle's :func:`sigma_ref.group_statistics`."""
        from ..advantages import group_statistics

        conv = PAPER if self.convention is None else self.convention
        st = group_statistics(
            np.asarray(rewards, dtype=np.float64),
            convention=conv.replace(singleton="zero"),
            index=np.asarray(index).reshape(-1),
        )
        size = np.asarray(st.size, dtype=np.float64)
        if self.convention is None:  # RLOO: A = (R - mu) / ((G - 1) / G)
            d = np.where(size > 1, (size - 1) / np.maximum(size, 1), 1.0)
        else:
            d = np.asarray(st.divisor, dtype=np.float64)
        d = np.where(np.asarray(st.silent) & (size > 1), 0.0, d)
        std = np.asarray(st.sigma) * np.sqrt(size / np.maximum(size - conv.ddof, 1))
        group = np.asarray(st.inverse).reshape(-1)
        return group, d[group], std[group]

    def filtered(self, rewards: Any, index: Any) -> npt.NDArray[np.bool_]:
        """Elements of groups a spread filter treats as silent (``std < silent_below``)."""
        if self.silent_below <= 0:
            return np.zeros(np.shape(rewards), dtype=bool)
        group, _, std = self.statistics(rewards, index)
        sizes = np.bincount(group)[group]
        return (std < self.silent_below) & (sizes > 1)  # a group of one follows the singleton rule

    def ambiguous(self, rewards: Any, index: Any) -> npt.NDArray[np.bool_]:
        """Elements of groups whose std is within a factor 1.5 of a spread filter's
        threshold: the probes bracket the threshold, not the filter's own std formula."""
        if self.silent_below <= 0:
            return np.zeros(np.shape(rewards), dtype=bool)
        _, _, std = self.statistics(rewards, index)
        return (std > self.silent_below / 1.5) & (std < self.silent_below * 1.5)

    def describe(self) -> str:
        """One line: the name and what ``d`` is."""
        if self.convention is None:
            text = "rloo: A = R - mean of the other responses = G/(G-1) (R - mean)"
        else:
            text = self.convention.describe()
        if self.silent_below > 0:
            text += f"; groups with std < {self.silent_below:.2g} treated as silent (spread filter)"
        if self.clip > 0:
            text += f"; advantages clamped to [-{self.clip:g}, {self.clip:g}]"
        return text


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


def as_numpy(x: Any) -> npt.NDArray[np.float64]:
    """A result of the oracle as float64 numpy."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)
