"""The group reward standard deviation of binary rewards, in closed form.

For ``k`` correct responses out of ``G``:

* ``group_sigma(k, G)      = sqrt(k (G - k)) / G``            (population std, the paper's)
* ``group_sigma(k, G, 1)   = sqrt(k (G - k) / (G (G - 1)))``  (Bessel, ``torch.std``'s default)
* ``centered_norm(k, G)    = sqrt(k (G - k) / G) = ||R - mu|| = sqrt(G) * sigma``
  (the design card's and the seed post's "sigma", which is not a std)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _errors, _public_names, _roundtrip, _validate

__all__ = _public_names(__name__)


def _counts(k: Any, G: Any) -> tuple[np.ndarray, np.ndarray, _roundtrip.Returner]:
    k_arr, back = _roundtrip.numeric(k, "k")
    G_arr, _ = _roundtrip.numeric(G, "G")
    _validate.check_group_size(G_arr, "G")
    if k_arr.size == 0:
        raise ValueError("k is empty; pass at least one count of correct responses")
    if (~np.isfinite(k_arr) | (k_arr != np.round(k_arr))).any():
        raise TypeError(f"k={_errors.short(k)} must hold integers (counts of correct responses)")
    try:
        k_b, G_b = np.broadcast_arrays(k_arr, G_arr)
    except ValueError:
        raise ValueError(f"k shape {k_arr.shape} and G shape {G_arr.shape} do not broadcast") from None
    bad = (k_b < 0) | (k_b > G_b)
    if bad.any():
        i = np.argwhere(bad)[0]
        raise ValueError(
            f"k={int(k_b[tuple(i)])} is outside [0, G={int(G_b[tuple(i)])}]; k counts the "
            "correct responses of a group of G"
        )
    return k_b, G_b, back


def group_sigma(k: Any, G: Any, *, ddof: int = 0) -> Any:
    """Std of ``k`` ones and ``G - k`` zeros: ``sqrt(k (G - k) / (G (G - ddof)))``.

    ``ddof=0`` gives the population std ``sqrt(k (G - k)) / G = sqrt(mu (1 - mu))``, the
    ``sigma`` of the identity ``g = sigma * (s+ - s-)``; ``ddof=1`` gives the Bessel
    std that ``torch.std`` returns by default. Vectorised over ``k`` and ``G``.

    >>> group_sigma(2, 8)
    0.4330127018922193
    >>> group_sigma(2, 8, ddof=1)
    0.4629100498862757
    """
    if isinstance(ddof, bool) or ddof not in (0, 1):
        raise ValueError(f"ddof={ddof!r} must be 0 (population std) or 1 (Bessel)")
    k_b, G_b, back = _counts(k, G)
    # (k / G) * ((G - k) / (G - ddof)): no intermediate overflows (k (G - k) would at G ~ 1e155)
    return back(np.sqrt((k_b / G_b) * ((G_b - k_b) / (G_b - ddof))))


def centered_norm(k: Any, G: Any) -> Any:
    """Norm of the centered reward vector: ``||R - mu|| = sqrt(k (G - k) / G)``.

    This is the design card's ``sqrt(k(G-k)/G)``; it equals ``sqrt(G) * group_sigma(k, G)``,
    not the standard deviation.

    >>> centered_norm(2, 8)
    1.224744871391589
    """
    k_b, G_b, back = _counts(k, G)
    return back(np.sqrt(k_b * ((G_b - k_b) / G_b)))
