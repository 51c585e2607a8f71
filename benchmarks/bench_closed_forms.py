"""The closed-form rows' input and baseline for ``benchmarks/run.py`` (the benchmark; it times them).

The input is 215,608 success rates (Big-Math's size) drawn from a seeded ``Beta(0.7, 1.2)`` plus
points within ``1e-12`` of 0 and 1. The baseline is the sum as the paper's script writes it:
``sum_{k=1}^{G-1} math.comb(G, k) * p**k * (1 - p)**(G - k) * sqrt(k (G - k)) / G``, a Python loop
over ``k``, vectorised over ``p``.
"""

from __future__ import annotations

import math

import numpy as np

N_PROMPTS = 215_608


def corpus(n: int = N_PROMPTS, seed: int = 0) -> np.ndarray:
    """``n`` success rates: a seeded ``Beta(0.7, 1.2)`` draw, its last 8 replaced by edge points."""
    p = np.random.default_rng(seed).beta(0.7, 1.2, n)
    p[-8:] = [1e-12, 3e-12, 1e-9, 1e-6, 1 - 1e-6, 1 - 1e-9, 1 - 3e-12, 1 - 1e-12]
    return p


def dense_expected_gradient(p: np.ndarray, G: int) -> np.ndarray:
    """The paper's dense sum: every ``k``, ``math.comb`` coefficients, powers of ``p`` and ``1 - p``."""
    q = 1 - p
    total = np.zeros_like(p)
    for k in range(1, G):
        total += math.comb(G, k) * p**k * q ** (G - k) * math.sqrt(k * (G - k)) / G
    return total


def dense_fidelity(p: np.ndarray, G: int) -> np.ndarray:
    """The dense sum divided by ``sqrt(p (1 - p))``."""
    out: np.ndarray = dense_expected_gradient(p, G) / np.sqrt(p * (1 - p))
    return out
