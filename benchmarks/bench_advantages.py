"""Baselines for the advantage rows of ``benchmarks/run.py`` (the benchmark; it times them).

Written here from their definitions (no trainer code is copied):

* the plain view formula: ``(r - r.mean(1, keepdim=True)) / r.std(1, keepdim=True)`` on
  ``r.view(-1, G)``, in the input's dtype;
* verl-style vectorised grouping by integer ids: ``torch.unique(index, return_inverse=True)``,
  then ``bincount``/``scatter_add`` for counts, sums and sums of squares, Bessel std + 1e-6.
"""

from __future__ import annotations

import torch


def plain_view_formula(r: torch.Tensor, G: int) -> torch.Tensor:
    """The formula most trainers write: per-row mean and (Bessel) std of ``r.view(-1, G)``."""
    x = r.view(-1, G)
    return (x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)


def verl_style(scores: torch.Tensor, index: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Vectorised grouping by integer ids: unique + scatter sums; Bessel std + eps."""
    _, inverse = torch.unique(index, return_inverse=True)
    n = int(inverse.max()) + 1
    counts = torch.bincount(inverse, minlength=n).to(scores.dtype)
    sums = torch.zeros(n, dtype=scores.dtype).scatter_add_(0, inverse, scores)
    mean = sums / counts
    squares = torch.zeros(n, dtype=scores.dtype).scatter_add_(0, inverse, scores * scores)
    var = (squares - counts * mean * mean) / (counts - 1).clamp(min=1)
    return (scores - mean[inverse]) / (var.clamp(min=0).sqrt()[inverse] + eps)
