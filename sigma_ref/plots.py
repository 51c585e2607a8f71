"""Figures of the audit and of ``sigma-ref reproduce`` (matplotlib, Agg backend; the ``audit`` extra).

Every figure is ``FIGSIZE`` inches at ``DPI`` (``PNG_SIZE`` pixels as PNG); the format
follows the file name (``.png`` or ``.svg``).

* :func:`plot_pass_rates` and :func:`plot_rollouts`: the silent-group rate against ``G``
  (closed form ``mean p**G + (1-p)**G``; for a log also the unbiased subsampled estimate up to
  the fewest rollouts a prompt has, the empirical-Bayes estimate, the range beyond the log
  shaded, and the observed fraction at the logged ``G``, which is marked), the pass rates (one
  bar per distinct value where they are few, as a log's ``k/n`` are), and the fidelity against
  ``G`` at the 10%, 50% and 90% quantiles of the corpus's own ``min(p, 1-p)``.
* :func:`plot_experiment`: the controlled experiment's measured silent fraction per step
  against the forecast.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["FIGSIZE", "DPI", "PNG_SIZE", "plot_kind", "plot_pass_rates", "plot_rollouts", "plot_experiment"]

FIGSIZE = (13.0, 3.8)
DPI = 100
PNG_SIZE = (1300, 380)


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - the audit extra is installed in tests
        raise ImportError("--plot needs matplotlib", name="matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_kind(path: str) -> str:
    """``png`` or ``svg`` from ``path``'s extension; ``ValueError`` for another (checked before a run).

    >>> plot_kind("fig.SVG")
    'svg'
    """
    ext = os.path.splitext(path)[1].lower()
    if ext not in {".png", ".svg"}:
        raise ValueError(f"--plot {path}: use a .png or .svg file name")
    return ext[1:]


def _save(fig: Any, path: str) -> None:
    ext = "." + plot_kind(path)
    from ._files import write_atomic

    metadata = {"Date": None} if ext == ".svg" else None
    write_atomic(path, lambda fh: fig.savefig(fh, dpi=DPI, format=ext[1:], metadata=metadata))
    import matplotlib.pyplot as plt

    plt.close(fig)


def _sizes(top: int) -> np.ndarray:
    return np.unique(np.round(np.geomspace(2, max(top, 4), 40)).astype(int))


#: Quantiles of the distance ``min(p, 1-p)`` from the edge drawn in the fidelity panel.
FIDELITY_QUANTILES = (0.1, 0.5, 0.9)


def _fidelity_panel(ax: Any, logged: int | None, edge_distance: np.ndarray, source: str) -> None:
    """Fidelity against ``G`` at the corpus's own ``min(p, 1-p)``: ``edge_distance[i]`` is the value
    with a share ``FIDELITY_QUANTILES[i]`` of the prompts at or above it (so that share of the prompts
    has a fidelity at least the curve's, the fidelity being increasing in ``min(p, 1-p)``)."""
    from .difficulty import fidelity

    Gs = _sizes(512)
    for share, m in zip(FIDELITY_QUANTILES, edge_distance, strict=True):
        if 0 < m <= 0.5:
            ax.plot(
                Gs,
                np.asarray(fidelity(float(m), Gs)),
                label=f"p = {m:.3g}: {share:.0%} of prompts at or above",
            )
    if logged:
        ax.axvline(logged, color="grey", ls=":", lw=1)
    ax.set(xscale="log", xlabel="group size G", ylabel="fidelity E[g] / sqrt(p(1-p))", title="Fidelity")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, title=f"min(p, 1-p) of the corpus ({source})", title_fontsize=7)


def _hist_panel(ax: Any, p: np.ndarray) -> None:
    """The pass rates: one bar per distinct value where there are at most 101 (a log's ``k/n`` take
    ``n + 1`` values: equal-width bins would alias into a comb), else 40 equal bins."""
    values, counts = np.unique(p, return_counts=True)
    if values.size <= 101:
        gap = float(np.diff(values).min()) if values.size > 1 else 0.02
        ax.bar(values, counts, width=0.8 * min(gap, 0.05), color="tab:blue")
    else:
        ax.hist(p, bins=np.linspace(0, 1, 41), color="tab:blue")
    ax.set(xlabel="pass rate p", ylabel="prompts", title=f"Pass rates ({p.size:,} prompts)")
    ax.set_xlim(-0.03, 1.03)


def _silent_closed(p: np.ndarray, Gs: np.ndarray) -> npt.NDArray[np.float64]:
    from .difficulty import silent_group_rate

    values, counts = np.unique(p, return_counts=True)
    rates = np.asarray(silent_group_rate(values[:, None], Gs[None, :]))
    total: npt.NDArray[np.float64] = (rates * counts[:, None]).sum(axis=0)  # per G, over prompts
    return total / int(counts.sum())


def plot_pass_rates(p: Any, G: int, path: str) -> None:
    """The audit's figure for pass rates ``p`` at group size ``G``, written to ``path``."""
    plt = _pyplot()
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    fig, axes = plt.subplots(1, 3, figsize=FIGSIZE)
    Gs = _sizes(max(256, 4 * G))
    axes[0].plot(Gs, _silent_closed(p, Gs), label="p^G + (1-p)^G")
    axes[0].axvline(G, color="grey", ls=":", lw=1, label=f"G = {G}")
    axes[0].set(xscale="log", xlabel="group size G", ylabel="silent-group rate", title="Silent groups")
    axes[0].set_ylim(0, 1)
    axes[0].legend(fontsize=7)
    _hist_panel(axes[1], p)
    m = np.minimum(p, 1 - p)
    _fidelity_panel(axes[2], G, np.quantile(m, [1 - q for q in FIDELITY_QUANTILES]), "the given rates")
    fig.tight_layout()
    _save(fig, path)


def plot_rollouts(log: Any, result: Any, path: str) -> None:
    """The audit's figure for a rollout log (:func:`sigma_ref.rollouts.read_rollouts`): the silent
    rate three ways with the range the log cannot support shaded, the pass rates, the fidelity
    at the corpus's own quantiles."""
    from . import corpus_prior as cp
    from .rollouts import subsampled_silent_rate

    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=FIGSIZE)
    p = log.k / log.n
    Gs = _sizes(max(256, int(log.n.max())))
    ax = axes[0]
    ax.plot(Gs, _silent_closed(p, Gs), ":", color="tab:grey", label="plug-in p^G + (1-p)^G, p = k/n (biased)")
    supported = int(log.n.min())
    sub_G = Gs[Gs <= supported]
    sub = [float(np.mean(subsampled_silent_rate(log.n, log.k, int(g)))) for g in sub_G]
    ax.plot(sub_G, sub, "-", color="tab:blue", label="subsampled (C(k,G)+C(n-k,G))/C(n,G), unbiased")
    prior = cp.BetaPrior(result.prior[0], result.prior[1], int(log.n.size))
    model_G = Gs[Gs <= 1024]
    model = [float(cp.posterior(log.n, log.k, int(g), cp.silent, prior, sd=False)[0].mean()) for g in model_G]
    ax.plot(model_G, model, "--", color="tab:orange", label="empirical Bayes (fitted Beta)")
    ax.axvspan(
        supported,
        float(Gs.max()),
        color="tab:orange",
        alpha=0.08,
        label=f"beyond the log (G > n = {supported})",
    )
    logged = result.logged_G
    row = next((r for r in result.silent if r.G == logged and r.observed is not None), None)
    if row is not None:
        ax.errorbar(
            [logged], [row.observed], yerr=[2 * row.observed_se], fmt="o", color="k", label="observed"
        )
    if logged:
        ax.axvline(logged, color="grey", ls=":", lw=1, label=f"logged G = {logged}")
    ax.set(xscale="log", xlabel="group size G", ylabel="silent-group rate", title="Silent groups")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    _hist_panel(axes[1], p)
    edge, _, _ = cp.mixture_quantile(log.n, log.k, prior, [1 - q for q in FIDELITY_QUANTILES])
    _fidelity_panel(axes[2], logged, edge, "posterior mixture")
    fig.tight_layout()
    _save(fig, path)


def plot_experiment(experiment: Any, path: str) -> None:
    """The controlled experiment: measured silent fraction per step against the forecast."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=FIGSIZE, gridspec_kw={"width_ratios": [2, 1]})
    steps = np.arange(experiment.steps)
    axes[0].plot(steps, experiment.measured, ".", ms=4, label="measured (silent groups / prompts)")
    axes[0].plot(steps, experiment.forecast, "-", label="forecast mean_x p_x^G + (1-p_x)^G")
    axes[0].set(
        xlabel="GRPO step",
        ylabel="silent fraction",
        title=f"{experiment.prompts:,} prompts, G = {experiment.G}",
    )
    axes[0].legend(fontsize=8)
    lo, hi = float(min(experiment.forecast.min(), experiment.measured.min())), 1.0
    axes[1].plot([lo, hi], [lo, hi], color="grey", lw=1)
    axes[1].plot(experiment.forecast, experiment.measured, ".", ms=4)
    axes[1].set(xlabel="forecast", ylabel="measured", title=f"R^2 = {experiment.r_squared:.4f}")
    fig.tight_layout()
    _save(fig, path)
