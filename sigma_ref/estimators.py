"""Named estimators: advantage families real trainers ship that are not one divisor per group.

A :class:`~sigma_ref.Convention` divides a group's centered rewards by one ``d``. Trainers also
ship estimators outside that form; each is named here, built only from the oracle's own
functions (:func:`~sigma_ref.grpo_advantage`, :func:`~sigma_ref.rloo_advantage`,
:func:`~sigma_ref.dr_grpo_advantage`, :func:`~sigma_ref.group_statistics`), and derived in
``proofs/14_estimators.py``:

================== ===================================================================
name               advantage of response ``i`` in a group of ``G``
================== ===================================================================
``rloo_std``       ``(R_i - mean_{j!=i} R_j) / (std_ddof + eps)``
                   ``= G/(G-1) (R_i - mu) / (std_ddof + eps)``: RLOO divided by the group std
``loo_std``        ``(R_i - mean_{j!=i} R_j) / (std_ddof_{j!=i} + eps)``: leave-one-out
                   baseline and leave-one-out std (the other ``G - 1`` responses)
``group_then_batch`` ``a = grpo(R)`` per group, then ``(a - mean_batch a) / (std_batch a + eps)``:
                   two-stage normalisation (GDPO with one reward; TRL's
                   ``multi_objective_aggregation="normalize_then_sum"``)
``gdpo``           ``sum_k grpo(R_k)`` over reward components ``k``, then normalised over
                   the batch (GDPO: each reward normalised in its group before the sum)
``maxrl``          ``(R_i - mu) / mu`` (0 when ``mu = 0``): the group mean in place of the
                   std (MaxRL's ``1/p`` weighting of a group with pass rate ``p = mu``)
================== ===================================================================

:data:`ESTIMATORS` maps each name to its function. Results are float64 numpy arrays shaped like
``rewards`` (``[N]`` with ``index=``, or ``[..., G]`` rows).

>>> import numpy as np
>>> from sigma_ref.estimators import rloo_std_advantage
>>> rloo_std_advantage(np.array([[1.0, 0.0, 0.0, 0.0]]), ddof=0).round(4).tolist()
[[2.3094, -0.7698, -0.7698, -0.7698]]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from .advantages import dr_grpo_advantage, group_statistics, grpo_advantage, rloo_advantage
from .conventions import PAPER, Convention, get_convention

__all__ = [
    "ESTIMATORS",
    "rloo_std_advantage",
    "loo_std_advantage",
    "group_then_batch_advantage",
    "gdpo_advantage",
    "maxrl_advantage",
]

Floats = npt.NDArray[np.float64]


def _numpy(x: Any) -> Floats:
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _divisor(rewards: Floats, index: Any, ddof: int, eps: float) -> Floats:
    """``std_ddof + eps`` of each reward's group, shaped like ``rewards`` (the oracle's divisor)."""
    conv = Convention("estimator", ddof=ddof, eps=eps, singleton="zero")
    st = group_statistics(rewards, convention=conv, index=index)
    return _numpy(st.expand(st.divisor))


def rloo_std_advantage(rewards: Any, *, index: Any = None, ddof: int = 1, eps: float = 0.0) -> Floats:
    """RLOO divided by the group std: ``A_i = (R_i - mean_{j!=i} R_j) / (std_ddof + eps)``.

    Equals ``G / (G - 1) * (R_i - mu) / (std_ddof + eps)`` (proofs/14: the leave-one-out
    identity); a silent group gets 0. AReaL's ``NormConfig(mean_leave1out=True,
    std_level="group")`` computes it (``std_unbiased`` is ``ddof=1``, its ``eps`` 1e-5).
    Needs ``G >= 2`` (as RLOO).

    >>> import numpy as np
    >>> rloo_std_advantage(np.array([1.0, 0.0, 1.0, 1.0]), index=[0, 0, 1, 1], ddof=0).tolist()
    [2.0, -2.0, 0.0, 0.0]
    """
    r = _numpy(rewards)
    d = _divisor(r, index, ddof, eps)
    num = _numpy(rloo_advantage(r, index=index))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(num == 0, 0.0, num / d)


def _group_ids(rewards: Floats, index: Any) -> npt.NDArray[np.intp]:
    """The group number of each flat response (rows of ``rewards`` when ``index`` is None)."""
    flat = rewards.reshape(-1)
    if index is None:
        G = rewards.shape[-1]
        return np.repeat(np.arange(flat.size // G), G)
    ids = np.asarray(index, dtype=object).reshape(-1).astype(str)
    return np.unique(ids, return_inverse=True)[1].reshape(-1)


def _distinct(flat: Floats, group: npt.NDArray[np.intp]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """``(representatives, inverse)``: one response per distinct (group, reward) pair, and the pair of
    each response. Responses with one reward in one group have the same leave-one-out set."""
    order = np.lexsort((flat, group))
    g, v = group[order], flat[order]
    first = np.ones(flat.size, dtype=bool)
    first[1:] = (g[1:] != g[:-1]) | (v[1:] != v[:-1])
    inverse = np.empty(flat.size, dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return order[first], inverse


def _others(
    flat: Floats, group: npt.NDArray[np.intp], owners: npt.NDArray[np.intp]
) -> tuple[Floats, npt.NDArray[np.intp]]:
    """The leave-one-out sets of the responses ``owners``: ``(values, owner)``: ``values[m]`` is a
    reward of the group of response ``owners[owner[m]]`` other than itself. Size: the sum of the
    owners' group sizes less one each."""
    order = np.argsort(group, kind="stable")
    place = np.empty(flat.size, dtype=np.intp)
    place[order] = np.arange(flat.size)  # where each response sits once sorted by group
    counts = np.bincount(group)
    if (counts < 2).any():
        raise ValueError(
            "rewards has a group of size 1; a leave-one-out baseline needs G >= 2 responses per group"
        )
    first = (np.cumsum(counts) - counts)[group[owners]]  # each owner's group start, sorted
    sizes = counts[group[owners]] - 1  # each owner's leave-one-out set
    position = place[owners] - first
    owner = np.repeat(np.arange(owners.size), sizes)
    k = np.arange(owner.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    other = first[owner] + k + (k >= position[owner])
    return flat[order][other], owner


def loo_std_advantage(rewards: Any, *, index: Any = None, ddof: int = 1, eps: float = 0.0) -> Floats:
    """Leave-one-out baseline and leave-one-out std:
    ``A_i = (R_i - mean_{j!=i} R_j) / (std_ddof({R_j : j != i}) + eps)``.

    The std is over the other ``G - 1`` responses (the oracle's :func:`group_statistics` of each
    leave-one-out set, so exact where the oracle is); ``G - 1 > ddof`` is needed. A response whose
    siblings are all equal divides its (non-zero) centered reward by ``eps`` (``inf`` for ``eps = 0``):
    the estimator's own behaviour, not the oracle's. A silent group gets 0. Equal rewards of one
    group share their leave-one-out set, so the work is ``G`` per distinct reward of a group, not
    ``G**2`` (binary rewards at ``G = 4096``: two sets per group).

    >>> import numpy as np
    >>> loo_std_advantage(np.array([[1.0, 0.0, 1.0, 0.0]]), ddof=0).round(4).tolist()
    [[1.4142, -1.4142, 1.4142, -1.4142]]
    """
    r = _numpy(rewards)
    flat = r.reshape(-1)
    group = _group_ids(r, index)
    representatives, pair = _distinct(flat, group)
    values, owner = _others(flat, group, representatives)
    if (np.bincount(owner, minlength=representatives.size) <= ddof).any():
        raise ValueError(
            f"loo_std_advantage(ddof={ddof}) needs G - 1 > ddof responses besides each one: use groups of "
            f"G >= {ddof + 2}, or ddof=0"
        )
    d_sets = _divisor(values, owner, ddof, eps)
    starts = np.searchsorted(owner, np.arange(representatives.size))  # owner is sorted
    d = d_sets[starts][pair]  # the divisor of each set, read at its first element (all are equal)
    num = _numpy(rloo_advantage(r, index=index)).reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(num == 0, 0.0, num / d)
    return out.reshape(r.shape)


def group_then_batch_advantage(
    rewards: Any,
    *,
    index: Any = None,
    convention: Convention | str = PAPER,
    batch_ddof: int = 0,
    batch_eps: float = 0.0,
) -> Floats:
    """Two-stage normalisation: ``a = grpo_advantage(R, convention)`` per group, then
    ``A = (a - mean_batch a) / (std_batch_ddof a + batch_eps)`` over the whole batch.

    ``mean_batch a = 0`` exactly (every group's ``a`` sums to 0; proofs/14), so
    ``A = a / (sqrt(sum a^2 / (N - batch_ddof)) + batch_eps)``: a batch-wide rescaling of GRPO, one
    constant for every group (computed so, a silent group keeps exactly 0). A batch of silent groups
    gets 0. With population stds in both stages a live group has ``sum a^2 = G``: without silent
    groups the second stage is the identity, and each silent group scales the rest by ``sqrt(N / live)``.

    >>> import numpy as np
    >>> group_then_batch_advantage(np.array([[1.0, 0.0], [1.0, 1.0]])).round(4).tolist()
    [[1.4142, -1.4142], [0.0, 0.0]]
    """
    a = _numpy(grpo_advantage(_numpy(rewards), convention=get_convention(convention), index=index))
    return _batch_normalised(a, batch_ddof, batch_eps)


def _batch_normalised(a: Floats, ddof: int, eps: float) -> Floats:
    """``a / (sqrt(sum a^2 / (N - ddof)) + eps)``: the batch normalisation of advantages whose batch
    mean is 0 exactly (proofs/14), so their rounding residue is never re-centered into silent groups."""
    Convention("batch", ddof=ddof, eps=eps)  # validates ddof and eps, naming them
    if a.size - ddof < 1:
        raise ValueError(f"batch_ddof={ddof} needs more than {ddof} advantages in the batch; got {a.size}")
    std = math.sqrt(math.fsum((a * a).reshape(-1).tolist()) / (a.size - ddof))
    return a / (std + eps) if std + eps > 0 else np.zeros_like(a)


def gdpo_advantage(
    rewards: Any,
    *,
    index: Any = None,
    convention: Convention | str = PAPER,
    batch_ddof: int = 0,
    batch_eps: float = 0.0,
) -> Floats:
    """GDPO: each reward component normalised in its group, summed, then normalised over the batch:
    ``A = batch_norm(sum_k grpo(R[:, k]))`` for ``rewards [N, K]`` grouped by ``index``.

    With one component it is :func:`group_then_batch_advantage`.

    >>> import numpy as np
    >>> R = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    >>> gdpo_advantage(R, index=[0, 0, 0, 0]).round(4).tolist()
    [[0.0], [0.0], [1.4142], [-1.4142]]
    """
    r = _numpy(rewards)
    if r.ndim != 2 or index is None:
        raise ValueError(
            f"gdpo_advantage takes rewards [N, K] (one column per reward component) and index= (the group "
            f"of each row); got rewards of shape {r.shape} and index={'None' if index is None else '...'}"
        )
    conv = get_convention(convention)
    total = sum(_numpy(grpo_advantage(r[:, k], convention=conv, index=index)) for k in range(r.shape[1]))
    return _batch_normalised(np.asarray(total, dtype=np.float64), batch_ddof, batch_eps).reshape(-1, 1)


def maxrl_advantage(rewards: Any, *, index: Any = None) -> Floats:
    """MaxRL: ``A_i = (R_i - mu) / mu`` (the group mean in place of the std); a group with ``mu = 0``
    gets 0. For binary rewards with ``k`` of ``G`` correct: ``A+ = (G - k) / k``, ``A- = -1``.

    >>> import numpy as np
    >>> maxrl_advantage(np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])).tolist()
    [[3.0, -1.0, -1.0, -1.0], [0.0, 0.0, 0.0, 0.0]]
    """
    r = _numpy(rewards)
    st = group_statistics(r, convention=PAPER.replace(singleton="zero"), index=index)
    mu = _numpy(st.expand(st.mean))
    num = _numpy(dr_grpo_advantage(r, index=index))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mu == 0, 0.0, num / mu)


#: Every named estimator: ``name -> function(rewards, *, index=None, ...)``.
ESTIMATORS: Mapping[str, Callable[..., Floats]] = {
    "rloo_std": rloo_std_advantage,
    "loo_std": loo_std_advantage,
    "group_then_batch": group_then_batch_advantage,
    "gdpo": gdpo_advantage,
    "maxrl": maxrl_advantage,
}
