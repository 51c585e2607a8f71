"""A batch of groups as the suite generates it: flat rewards and one group id each.

:class:`Batch` is what every property, probe and diagnosis passes around; :func:`array_text`
prints its arrays in messages.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["Batch", "array_text"]


@dataclasses.dataclass(frozen=True)
class Batch:
    """A batch of groups as the suite generates it: flat rewards and one group id each.

    ``rewards``: float64 ``[N]``; ``index``: int64 ``[N]`` group ids. ``group_size`` is
    the common size when every group has the same size and groups are contiguous runs in
    increasing id order (the only batches the ``contiguous`` and ``grouped`` layouts can
    take), else ``None``.
    """

    rewards: np.ndarray
    index: np.ndarray

    @staticmethod
    def grouped(rewards: Any) -> Batch:
        """A ``[B, G]`` array as a batch of B contiguous groups of G."""
        r = np.asarray(rewards, dtype=np.float64)
        if r.ndim != 2 or r.size == 0:
            raise ValueError(f"rewards has shape {r.shape}; pass a non-empty [B, G] array")
        index = np.repeat(np.arange(r.shape[0]), r.shape[1])
        return Batch(r.reshape(-1).copy(), index)

    @property
    def n(self) -> int:
        """Number of rewards."""
        return int(self.rewards.shape[0])

    @property
    def group_size(self) -> int | None:
        """The common group size of a contiguous, equal-sized batch, else ``None``."""
        ids, counts = np.unique(self.index, return_counts=True)
        if not (counts == counts[0]).all():
            return None
        G = int(counts[0])
        expected = np.repeat(np.arange(len(ids)), G)
        rank = np.searchsorted(ids, self.index)
        if not np.array_equal(rank, expected):
            return None
        return G

    @property
    def n_groups(self) -> int:
        """Number of groups."""
        return int(np.unique(self.index).shape[0])

    def runs(self) -> tuple[np.ndarray, list[int]]:
        """``(order, sizes)``: the permutation that gathers each group into one contiguous run (groups
        in first-seen order, members in their order) and the runs' sizes. ``order`` is the identity
        when every group already is one run.

        >>> Batch(np.array([1.0, 0.0, 1.0, 0.5, 0.0]), np.array([7, 3, 7, 3, 3])).runs()
        (array([0, 2, 1, 3, 4]), [2, 3])
        """
        _, first, inverse = np.unique(self.index, return_index=True, return_inverse=True)
        rank = np.argsort(np.argsort(first, kind="stable"), kind="stable")[inverse.reshape(-1)]
        order = np.argsort(rank, kind="stable")
        sizes = np.bincount(rank).tolist()
        return order, [int(v) for v in sizes]

    def with_rewards(self, rewards: np.ndarray) -> Batch:
        """The same grouping with other rewards."""
        return Batch(np.asarray(rewards, dtype=np.float64).reshape(-1).copy(), self.index)

    def __repr__(self) -> str:
        G = self.group_size
        r = array_text(self.rewards)
        if G is not None:
            return f"Batch(rewards={r}, G={G})"
        idx = array_text(self.index)
        return f"Batch(rewards={r}, index={idx})"


def array_text(values: np.ndarray) -> str:
    """``values`` on one line for messages: 4 significant digits, long arrays elided with ``...``."""
    return np.array2string(values, precision=4, separator=", ", threshold=24, max_line_width=10**6)
