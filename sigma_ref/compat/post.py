"""The seed blog post's code, reproduced as published (flaws included, on purpose).

These functions are what the post "GRPO, Dr. GRPO, and DAPO Explained" prints under
"Show Me The Code". They are kept so that the conformance suite and the errata ledger
can run the post's documented behaviour; use :mod:`sigma_ref` for correct values.

What they do, against the paper (docs/spec.md §6):

* :func:`grpo_advantage` treats the whole tensor as one group and divides by
  ``tensor.std()`` (Bessel, ``ddof=1``) plus ``1e-8``: the update is
  ``sigma**2 / (sigma_b + 1e-8) * delta_s``, not ``sigma * delta_s``
  (preset :data:`sigma_ref.POST`).
* :func:`dapo_advantage` returns ``None`` for a silent group instead of a mask.
* :func:`min_group_size` is the closed-form law ``ceil(1 / (8 eps p (1 - p)))``;
  :func:`corpus_audit` prints the audit (the numbers the post shows for p = 0.3 and
  p >= 0.08 are not what this code prints).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "grpo_advantage",
    "dr_grpo_advantage",
    "dapo_advantage",
    "silent_group_rate",
    "min_group_size",
    "corpus_audit",
]


def grpo_advantage(rewards: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """The post's GRPO: ``(R - mean(R)) / (R.std() + eps)`` over the whole tensor (one group).

    >>> grpo_advantage(torch.tensor([1.0, 0.0, 0.0, 0.0]))
    tensor([ 1.5000, -0.5000, -0.5000, -0.5000])
    """
    mean_r = rewards.float().mean()
    std_r = rewards.float().std() + eps
    return (rewards.float() - mean_r) / std_r


def dr_grpo_advantage(rewards: torch.Tensor) -> torch.Tensor:
    """The post's Dr. GRPO: ``R - mean(R)`` over the whole tensor.

    >>> dr_grpo_advantage(torch.tensor([1.0, 0.0]))
    tensor([ 0.5000, -0.5000])
    """
    return rewards.float() - rewards.float().mean()


def dapo_advantage(rewards: torch.Tensor, eps: float = 1e-8) -> torch.Tensor | None:
    """The post's DAPO: ``None`` when ``k in {0, G}`` (a silent group), else its GRPO.

    >>> dapo_advantage(torch.tensor([1.0, 1.0])) is None
    True
    """
    k = rewards.sum().item()
    G = rewards.shape[0]
    if k == 0 or k == G:
        return None  # Caller should skip this batch
    return grpo_advantage(rewards, eps)


def silent_group_rate(p: float, G: int) -> float:
    """The post's silent-group rate ``p**G + (1 - p)**G``.

    >>> round(silent_group_rate(0.05, 8), 4)
    0.6634
    """
    return p**G + (1 - p) ** G


def min_group_size(p: float, epsilon: float = 0.05) -> int:
    """The post's group-size law ``ceil(1 / (8 epsilon p (1 - p)))``.

    >>> min_group_size(0.3)
    12
    """
    return int(np.ceil(1 / (8 * epsilon * p * (1 - p))))


def corpus_audit(pass_rates: list[float], G: int = 8) -> None:
    """The post's corpus audit, printing its table (the post's printed numbers differ).

    >>> corpus_audit([0.5, 0.3], G=8)
    <BLANKLINE>
    === Corpus Audit (G=8) ===
    ✅ p=0.50: waste=0.8%, recommended G≥10
    ✅ p=0.30: waste=5.8%, recommended G≥12
    <BLANKLINE>
    Average wasted compute: 3.3%
    Effective learning budget: 96.7%
    """
    print(f"\n=== Corpus Audit (G={G}) ===")
    for p in pass_rates:
        waste = silent_group_rate(p, G)
        g_rec = min_group_size(p)
        status = "✅" if waste < 0.1 else "⚠️" if waste < 0.3 else "🚨"
        print(f"{status} p={p:.2f}: waste={waste:.1%}, recommended G≥{g_rec}")

    avg_waste = np.mean([silent_group_rate(p, G) for p in pass_rates])
    print(f"\nAverage wasted compute: {avg_waste:.1%}")
    print(f"Effective learning budget: {1 - avg_waste:.1%}")
