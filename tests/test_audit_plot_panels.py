"""The audit figure's panels (issue 24, item 10): the pass-rate histogram has one bar per distinct
``k/n`` (40 equal bins over ``k/16`` and ``k/32`` made a comb), and the fidelity panel draws the
corpus's own ``min(p, 1-p)`` quantiles, not fixed ``p``; the range beyond the log is shaded."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from sigma_ref import plots
from sigma_ref.audit import rollout_audit
from sigma_ref.rollouts import Rollouts


def _axes():  # type: ignore[no-untyped-def]
    plt = plots._pyplot()
    fig, ax = plt.subplots()
    return plt, fig, ax


def test_histogram_has_one_bar_per_distinct_rate() -> None:
    p = np.r_[np.arange(17) / 16, np.arange(33) / 32]
    plt, fig, ax = _axes()
    plots._hist_panel(ax, p)
    assert len(ax.patches) == np.unique(p).size == 33
    heights = sorted(patch.get_height() for patch in ax.patches)
    assert heights[0] >= 1  # no empty bins between the values: no comb
    plt.close(fig)


def test_histogram_of_many_distinct_rates_uses_40_bins() -> None:
    p = np.random.default_rng(0).uniform(size=500)
    plt, fig, ax = _axes()
    plots._hist_panel(ax, p)
    assert len(ax.patches) == 40
    plt.close(fig)


def test_rollout_figure_uses_the_logs_own_rates(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    n = np.full(300, 8)
    k = rng.binomial(8, rng.beta(0.5, 1.5, 300))
    log = Rollouts("log", 2400, np.arange(300), n, k, n, k, np.arange(300), "consecutive rows")
    result = rollout_audit(log, G=(8, 64))
    captured = {}
    original = plots._fidelity_panel

    def spy(ax, logged, edge, source):  # type: ignore[no-untyped-def]
        captured["edge"] = np.asarray(edge)
        original(ax, logged, edge, source)
        captured["labels"] = [line.get_label() for line in ax.get_lines()]

    plots._fidelity_panel = spy  # type: ignore[assignment]
    try:
        plots.plot_rollouts(log, result, str(tmp_path / "fig.png"))
    finally:
        plots._fidelity_panel = original  # type: ignore[assignment]
    edge = captured["edge"]
    assert edge.shape == (3,) and (np.diff(edge) < 0).all()  # 10%, 50%, 90% of prompts at or above
    assert any(f"p = {edge[1]:.3g}" in label for label in captured["labels"])
