"""``sigma-ref reproduce`` and ``--plot`` (issue 13, items 2 and 3)."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from sigma_ref import exact_group_size, group_sigma, grpo_advantage, min_group_size, policy_gradient
from sigma_ref.cli import main
from sigma_ref.reproduce import TABLE_P, TABLE_TARGETS, controlled_experiment, group_size_table

pytest.importorskip("matplotlib")
from sigma_ref.plots import PNG_SIZE


def test_table_is_exact_group_size() -> None:
    """12 cells, each ``exact_group_size(p, 1 - target)``, equal at ``1 - p``, above the closed form."""
    cells = group_size_table()
    assert len(cells) == len(TABLE_P) * len(TABLE_TARGETS) == 12
    for c in cells:
        eps = 1 - c.target
        assert (
            c.exact
            == exact_group_size(c.p, epsilon=eps)
            == c.exact_mirror
            == exact_group_size(1 - c.p, epsilon=eps)
        )
        assert np.ceil(c.closed_form) == min_group_size(c.p, epsilon=eps)
        assert c.exact > c.closed_form


def test_reduced_experiment_forecast() -> None:
    """A reduced run (1,500 prompts, 40 steps): the forecast explains the measured fraction."""
    run = controlled_experiment(prompts=1500, steps=40, seed=2)
    assert run.measured.shape == run.forecast.shape == (40,)
    assert run.r_squared > 0.99
    noise = np.sqrt(run.forecast * (1 - run.forecast) / 1500)
    assert np.all(np.abs(run.measured - run.forecast) < 5 * noise)
    assert run.mass_share["start"]["GRPO"] > run.mass_share["start"]["Dr. GRPO"]


def test_experiment_step_is_the_oracle_update() -> None:
    """The numpy step ``g = group_sigma(k, G)`` equals ``policy_gradient(grpo_advantage(y), y - p)``."""
    rng = np.random.default_rng(0)
    p = rng.random(200)
    y = (rng.random((200, 8)) < p[:, None]).astype(np.float64)
    oracle = np.asarray(policy_gradient(grpo_advantage(y), (y - p[:, None])[..., None]))[:, 0]
    np.testing.assert_allclose(oracle, group_sigma(y.sum(axis=1), 8), rtol=1e-12, atol=1e-15)


def test_cli_reproduce(tmp_path: Path, capsys) -> None:
    path = tmp_path / "experiment.png"
    assert main(["reproduce", "--prompts", "800", "--steps", "30", "--plot", str(path)]) == 0
    out = capsys.readouterr().out
    assert "R^2 = " in out and "0.05 | 0.95" in out and " 11 (10.0)" in out
    _check_png(path)


def _check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == PNG_SIZE


def test_audit_plots_png_and_svg(tmp_path: Path, capsys) -> None:
    """``--plot`` writes a PNG of the expected size or an SVG that parses; other names exit 2."""
    png, svg = tmp_path / "audit.png", tmp_path / "audit.svg"
    assert main(["audit", "0.5", "0.3", "0.03", "--plot", str(png)]) == 0
    _check_png(png)
    assert main(["audit", "0.5", "0.3", "0.03", "--plot", str(svg)]) == 0
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and root.get("width", "").startswith("936")  # 13 in x 72 pt
    capsys.readouterr()
    assert main(["audit", "0.5", "--plot", str(tmp_path / "x.gif")]) == 2
    assert "use a .png or .svg" in capsys.readouterr().err


def test_rollout_plot(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from benchmarks.make_rollout_log import make_log

    log = tmp_path / "log.parquet"
    pq.write_table(pa.table(make_log(8_000, G=8, groups=4, seed=1)), log)
    png = tmp_path / "rollouts.png"
    assert main(["audit", "--rollouts", str(log), "--plot", str(png)]) == 0
    _check_png(png)
