"""Group statistics and group-relative advantages: GRPO, Dr. GRPO, RLOO, DAPO's keep mask.

All functions take rewards in either layout:

* ``[..., G]``: one group per row along ``dim`` (default the last axis);
* flat ``[N]`` with ``index=``: one group id per reward (any hashables or integers),
  groups ragged and interleaved, as verl's ``uid``.

They accept numpy arrays and torch tensors (CPU or CUDA; float64, float32, float16,
bfloat16, integer or bool), compute in float64 in the caller's library (numpy input
never imports torch), and return the caller's type, device and floating dtype
(float64 for integer or bool rewards). The input is never mutated and the output
never requires grad.

Accuracy. Every statistic is computed once, by :func:`group_statistics`'s kernel, so
that it is right for every finite input. The kernel centers each group one of three ways,
chosen from the values (``proofs/13_kernel.py`` proves each):

* exactly, when the batch's values are float32 numbers and, with ``q = e - 24`` from the batch's
  smallest non-zero ``|R|`` (``2**(e-1) <= min|R| < 2**e``: every float32 number that large is
  an integer of ``2**q``), ``2 G max|R| <= 2**53 2**q`` for its largest group ``G`` (binary and
  most real rewards; integers of a coarser grid that fail this rule, e.g. float32
  ``[6544071, 842256448, -1380129758511104]``, take the next way): ``sum R``, ``n R_i`` and
  ``n R_i - sum R`` are exact, so ``R_i - mu`` and ``mu`` are correctly rounded and a group
  is silent iff its centered values are exactly 0. One sum, one subtraction, one sum of squares;
* for other float32 numbers (a wide dynamic range): unshifted, in two passes (below); a
  silent group of ``v`` sums exactly to ``G v`` and centers to exactly 0;
* for any other input: each group is shifted by its own maximum, so a group whose rewards
  are all equal is exactly zero (silent detection is exact: ``min == max``); a group whose
  largest ``|R|`` is outside ``[2**-400, 2**400]`` is first scaled by a power of two (exact)
  so that it lies in ``[1/2, 1)``: no sum overflows and no square overflows or underflows.

In the last two ways the mean is taken in two passes (the second removes the rounding
error of the first), so the centered values sum to zero within rounding
(``[1e16, 1e16 + 2, 1e16, 1e16]`` centers to ``[-0.5, 1.5, -0.5, -0.5]`` exactly). In all
three, sums run left to right over the ``G`` members (pairwise beyond ``G = 64``), in the
same order for numpy and torch, and square roots are correctly rounded, so both libraries
give bit-identical float64 results (on the CPU).

Bound: ``|A_i - A_i*| <= ~(G + 4) u max_j |A_j|`` with ``u = 2**-53`` (relative to the
group's largest advantage): measured, not proved (``proofs/13_kernel.py`` §4), which the tests
check against 60-digit arithmetic. A result
that does not fit in float64 (``|R_i - mu| > 1.8e308`` for Dr. GRPO or RLOO) raises
``ValueError`` instead of returning ``inf``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from . import _layouts, _public_names, _roundtrip, _validate
from ._kernel import _apply, _fits_output, _prepare, _quiet, _statistics, _times_pow2, _where, _xp
from ._layouts import Layout
from ._tensors import Array, is_tensor
from .conventions import DR_GRPO, PAPER, Convention, get_convention

__all__ = _public_names(__name__)


@dataclasses.dataclass(frozen=True)
class GroupStatistics:
    """Per-group statistics of a batch of rewards under a convention.

    Per group (arrays shaped ``[...]`` for ``[..., G]`` rewards, ``[n_groups]`` with
    ``index=``; the caller's library and device):

    * ``size``: ``G``, the number of rewards (int64);
    * ``k``: ``sum_i R_i`` (the number of correct responses for binary rewards; float64);
    * ``mean``: ``mu = k / G``;
    * ``sigma``: the population std ``sqrt(sum_i (R_i - mu)**2 / G)``;
    * ``divisor``: ``d`` under ``convention`` (``std_ddof + eps`` or ``max(std_ddof, eps)``
      over the group or the whole batch, 1 for ``scale="none"``; a singleton group gets
      1 under ``singleton="zero"``, ``1 + eps`` under ``"unit_std"``);
    * ``silent``: all rewards of the group are equal (exactly, as ``min == max``);
    * ``singleton``: ``G == 1``.

    With ``index=``: ``ids`` holds the group ids in group order (sorted order when the
    ids sort, else first-seen order) and ``inverse[i]`` the group number of reward ``i``;
    both are ``None`` for ``[..., G]`` rewards. :meth:`expand` broadcasts a per-group
    array back to the rewards' layout in either case.
    """

    size: Array
    k: Array
    mean: Array
    sigma: Array
    divisor: Array
    silent: Array
    singleton: Array
    ids: np.ndarray | None
    inverse: Array | None
    convention: Convention
    _layout: Layout = dataclasses.field(repr=False, compare=False)
    _backend: _roundtrip.Backend = dataclasses.field(repr=False, compare=False)

    def expand(self, per_group: Array) -> Array:
        """A per-group array (shaped like ``self.mean``) as one value per reward, shaped like
        the rewards: ``expand(v)[..., i] = v[...]``, or ``expand(v)[i] = v[inverse[i]]``.

        >>> import numpy as np
        >>> stats = group_statistics(np.array([1.0, 0.0, 3.0, 5.0]), index=[7, 7, 9, 9])
        >>> stats.expand(stats.mean)
        array([0.5, 0.5, 4. , 4. ])
        """
        lay = self._layout
        if lay.ids is not None:
            inverse = self.inverse
            assert inverse is not None  # set together with ids
            if is_tensor(inverse) and not is_tensor(per_group):
                inverse = inverse.cpu().numpy()
            return per_group[inverse]
        assert isinstance(lay, _layouts.Rows)  # [..., G] rewards: one row per group
        moved = per_group[..., None]
        shape = (*moved.shape[:-1], lay.size)
        if is_tensor(moved):
            out = moved.expand(shape)
            return out if lay.dim == lay.ndim - 1 else out.movedim(-1, lay.dim)
        spread = np.broadcast_to(moved, shape)
        return spread if lay.dim == lay.ndim - 1 else np.moveaxis(spread, -1, lay.dim)


@_quiet
def group_statistics(
    rewards: Array, *, convention: Convention | str = "paper", index: Any = None, dim: int = -1
) -> GroupStatistics:
    """Each group's size ``G``, ``k = sum R``, mean ``mu``, std ``sigma`` and divisor ``d``.

    ``mu = k / G``, ``sigma = sqrt(sum_i (R_i - mu)**2 / G)`` (population), and ``d`` the
    divisor of GRPO's ``A_i = (R_i - mu) / d`` under ``convention``; for binary rewards
    ``sigma = sqrt(k (G - k)) / G``. These are the numbers every advantage function of
    ``sigma_ref`` uses (one computation; see the module's accuracy note). A statistic
    that does not fit in float64 raises ``ValueError``.

    >>> import numpy as np
    >>> stats = group_statistics(np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]))
    >>> stats.k, stats.sigma, stats.divisor, stats.silent
    (array([1., 4.]), array([0.4330127, 0.       ]), array([0.4330127, 0.       ]), array([False,  True]))
    >>> group_statistics(np.array([1.0, 0.0, 0.0, 1.0]), convention="trl", index=["b", "a", "a", "b"]).ids
    array(['a', 'b'], dtype=object)
    """
    conv = get_convention(convention)
    values, lay, backend, units, owned = _prepare(rewards, index, dim)
    k = lay.sum(values)
    scaled = _statistics(values, lay, conv, owned=owned, units=units)
    kern = scaled.kernel
    xp = _xp(k)
    std = scaled.sigma
    mean = _times_pow2(kern.mean, kern.exponent)
    k = _where(xp.isfinite(k), k, _times_pow2(kern.size * kern.mean, kern.exponent))
    for name, value in (("k = sum(R)", k), ("sigma", std), ("divisor d", scaled.divisor)):
        finite = value.isfinite() if is_tensor(value) else np.isfinite(value)
        if not bool(finite.all()):
            group = lay.first_group(~finite)
            raise ValueError(
                f"the {name} of {lay.describe(group)} does not fit in float64 (> 1.8e308); "
                "rescale the rewards (GRPO's advantages do not change under a positive scale)"
            )
    per = lay.per_group

    def out(v: Array, kind: str) -> Array:
        return backend.out(per(v), kind)

    inverse = None
    if lay.ids is not None and lay.inverse is not None:
        own = lay.inverse  # may be the caller's ids themselves (factorize): a copy goes out
        inverse = backend.out(own.clone() if is_tensor(own) else own.copy(), "int64")
    return GroupStatistics(
        size=out(kern.size, "int64"),
        k=out(k, "float64"),
        mean=out(mean, "float64"),
        sigma=out(std, "float64"),
        divisor=out(scaled.divisor, "float64"),
        silent=out(kern.silent, "bool"),
        singleton=out(kern.singleton, "bool"),
        ids=lay.ids,
        inverse=inverse,
        convention=conv,
        _layout=lay,
        _backend=backend,
    )


@_quiet
def grpo_advantage(
    rewards: Array, *, convention: Convention | str = PAPER, index: Any = None, dim: int = -1
) -> Array:
    """GRPO advantages ``A_i = (R_i - mu) / d`` per group.

    With the default ``convention=PAPER``, ``d = sigma = sqrt(k (G - k)) / G`` for
    binary rewards (the population std), so ``A+ = sqrt((G - k) / k)`` and
    ``A- = -sqrt(k / (G - k))``. A silent group (all rewards equal) gets 0. ``mu`` and
    ``d`` are :func:`group_statistics`'s.

    >>> import numpy as np
    >>> grpo_advantage(np.array([[1.0, 0.0, 0.0, 0.0]]))
    array([[ 1.73205081, -0.57735027, -0.57735027, -0.57735027]])
    >>> grpo_advantage(np.array([1.0, 0.0, 0.0, 1.0, 1.0]), index=["a", "b", "a", "b", "a"])
    array([ 0.70710678, -1.        , -1.41421356,  1.        ,  0.70710678])
    """
    conv = get_convention(convention)
    values, lay, backend, units, owned = _prepare(rewards, index, dim, sort=False)
    scaled = _statistics(values, lay, conv, owned=owned, units=units)
    adv = scaled.advantages(backend.numpy_dtype)
    if conv.scale != "group":  # |A| <= sqrt(G - 1) under a group's own divisor (proofs/14): fits
        adv = _fits_output(adv, scaled.kernel, backend, "advantages")
    return backend.out(lay.restore(adv))


def dr_grpo_advantage(
    rewards: Array, *, convention: Convention | str = DR_GRPO, index: Any = None, dim: int = -1
) -> Array:
    """Dr. GRPO advantages ``A_i = R_i - mu``: mean-centering, no division.

    Only ``convention.singleton`` is used (its divisor fields are ignored).

    >>> import numpy as np
    >>> dr_grpo_advantage(np.array([1.0, 0.0, 0.0, 0.0]))
    array([ 0.75, -0.25, -0.25, -0.25])
    """
    conv = get_convention(convention).replace(scale="none")
    return grpo_advantage(rewards, convention=conv, index=index, dim=dim)


@_quiet
def rloo_advantage(rewards: Array, *, index: Any = None, dim: int = -1) -> Array:
    """RLOO advantages ``A_i = R_i - mean_{j != i} R_j = G / (G - 1) * (R_i - mu)``.

    Needs ``G >= 2`` in every group (a leave-one-out baseline of nothing is undefined).

    >>> import numpy as np
    >>> rloo_advantage(np.array([1.0, 0.0, 0.0, 0.0]))
    array([ 1.        , -0.33333333, -0.33333333, -0.33333333])
    """
    values, lay, backend, units, owned = _prepare(rewards, index, dim, sort=False)
    lonely = lay.sizes == 1
    if bool(lonely.any()):
        group = lay.first_group(lonely)
        raise ValueError(
            f"rewards has a group of size 1 ({lay.describe(group)}); RLOO's leave-one-out "
            "baseline needs G >= 2 responses per group. Sample more responses or drop the group"
        )
    kern = _statistics(values, lay, DR_GRPO, owned=owned, units=units).kernel
    adv = _apply(kern, kern.centered, (kern.size - 1) / kern.size, None if kern.unscaled else -kern.exponent)
    adv = _fits_output(adv, kern, backend, "advantages")
    return backend.out(lay.restore(adv))


def dapo_keep_mask(rewards: Array, *, index: Any = None, dim: int = -1) -> Array:
    """DAPO's dynamic-sampling rule, per response: keep iff its group is not silent.

    ``keep_i = (0 < k < G)`` for binary rewards (iff ``sigma > 0``); for real
    rewards iff not all rewards of the group are equal (``min < max``). A group of one
    response is never kept. Returns a boolean array shaped like ``rewards``.

    >>> import numpy as np
    >>> dapo_keep_mask(np.array([[1, 0, 1], [1, 1, 1]]))
    array([[ True,  True,  True],
           [False, False, False]])
    """
    values, lay, backend, _, _ = _prepare(rewards, index, dim, sort=False, statistics=False)
    _validate.check_finite(values, lay, "rewards")
    keep = lay.min(values) < lay.max(values)  # not silent; a singleton is silent
    element = lay.expand(keep)
    if isinstance(lay, _layouts.Rows):
        shape = (lay.size, lay.n_groups)
        element = element.expand(shape) if is_tensor(element) else np.broadcast_to(element, shape)
    return backend.out(lay.restore(element), "bool")
