"""The objective options (``--objective``, ``--kl``, ``--tis-cap`` and their terms): declared once in
``sigma_ref._options``, parsed by ``sigma-ref check`` and the pytest plugin, turned into the adapter's
:class:`~sigma_ref.objectives.Objective` by ``build_context``; a bad combination stops the run with an
error naming the options and the fix."""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any

import pytest

from sigma_ref._options import OBJECTIVE_OPTIONS, OPTIONS, pytest_argv
from sigma_ref.cli import build_parser
from sigma_ref.conformance import Adapter
from sigma_ref.conformance.cli import _pytest_argv
from sigma_ref.conformance.session import build_context
from sigma_ref.objectives import Objective

from .gallery import correct, losses

_CHECK = ["check", "m:f", "--layout", "contiguous"]


def test_objective_options_are_suite_options_and_reach_the_child(tmp_path: Path) -> None:
    """Each objective option is a suite option (``--<name>`` on check, ``--sigma-ref-<name>`` in pytest),
    and check passes what it was given on to the child pytest, exactly."""
    names = [o.name for o in OPTIONS]
    assert set(OBJECTIVE_OPTIONS) <= set(names)
    assert all(next(o for o in OPTIONS if o.name == n).group == "suite" for n in OBJECTIVE_OPTIONS)
    args = build_parser().parse_args(
        [
            *_CHECK,
            *("--objective", "gspo", "--kl", "k3", "--kl-coef", "0.04", "--kl-placement", "loss"),
            *("--tis-cap", "2", "--tis-level", "sequence", "--tis-mode", "mask"),
        ]
    )
    text = " ".join(_pytest_argv(args, tmp_path, "ini", "progress.jsonl"))
    for part in (
        "--sigma-ref-objective gspo",
        "--sigma-ref-kl k3",
        "--sigma-ref-kl-coef 0.04",
        "--sigma-ref-kl-placement loss",
        "--sigma-ref-tis-cap 2.0",
        "--sigma-ref-tis-level sequence",
        "--sigma-ref-tis-mode mask",
    ):
        assert part in text, text
    assert "--sigma-ref-dual-clip" not in text  # not given: not passed
    assert pytest_argv(argparse.Namespace(dual_clip=3.0)) == ["--sigma-ref-dual-clip", "3.0"]


@pytest.mark.parametrize(
    "bad",
    [
        ["--objective", "ppo2"],
        ["--kl", "k4"],
        ["--kl-coef", "-0.1"],
        ["--kl-coef", "nan"],
        ["--tis-cap", "0"],
        ["--tis-cap", "inf"],
        ["--dual-clip", "1"],
        ["--tis-level", "batch"],
        ["--tis-mode", "clip"],
        ["--kl-placement", "advantage"],
    ],
)
def test_bad_values_are_usage_errors(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*_CHECK, *bad])
    assert e.value.code == 2
    assert bad[0] in capsys.readouterr().err


def _loss_adapter(loss: Any = losses.token_mean, **kw: Any) -> Adapter:
    return Adapter(correct.post_contiguous, "contiguous", loss=loss, convention="post", **kw)


def test_declared_options_build_the_objective() -> None:
    """The options give the oracle's Objective; PPO also declares its clip and dual clip to the clip
    property; CISPO takes TRL's unbounded form; the aggregation constant is the adapter's."""
    ctx = build_context(
        _loss_adapter(losses.kl_k3_loss, aggregation="token-mean"),
        objective="ppo",
        clip="0.2,0.28",
        dual_clip=3.0,
        kl="k3",
        kl_coef=0.04,
    )
    want = Objective("ppo", eps_low=0.2, eps_high=0.28, dual_clip=3.0, kl="k3", kl_coef=0.04)
    assert ctx.adapter.objective == want
    assert (ctx.adapter.clip, ctx.adapter.dual_clip) == ((0.2, 0.28), 3.0)
    ctx = build_context(
        _loss_adapter(losses.tis_sequence, aggregation="dapo"),
        objective="ppo",
        clip="0.2,0.28",
        tis_cap=2.0,
        tis_level="sequence",
    )
    assert ctx.adapter.objective == Objective(
        "ppo", eps_low=0.2, eps_high=0.28, tis_cap=2.0, tis_level="sequence", aggregation="dapo"
    )
    ctx = build_context(
        _loss_adapter(losses.cispo_trl, aggregation="token-mean"), objective="cispo", clip="inf,4"
    )
    assert ctx.adapter.objective == Objective("cispo", eps_low=math.inf, eps_high=4.0)
    assert ctx.adapter.clip is None  # not a PPO clip: loss_clipped_surrogate reads it off the gradient
    ctx = build_context(
        _loss_adapter(losses.seq_mean_token_sum_norm, aggregation="dr_grpo", aggregation_constant=16),
        objective="ppo",
        clip="0.2,0.28",
    )
    assert ctx.adapter.objective.constant == 16


@pytest.mark.parametrize(
    ("loss", "adapter_kw", "options", "message"),
    [
        (losses.token_mean, {}, {"kl": "k3", "kl_coef": 0.04}, "--kl, --kl-coef declare a term"),
        (losses.token_mean, {}, {"objective": "ppo", "clip": "0.2"}, "--objective ppo needs --aggregation"),
        (losses.token_mean, {"aggregation": "token-mean"}, {"objective": "ppo"}, "needs --clip EPS_LOW"),
        (
            losses.token_mean,
            {"aggregation": "token-mean"},
            {"objective": "gspo", "clip": "0.2", "dual_clip": 3.0},
            "--dual-clip 3 applies to --objective ppo only",
        ),
        (
            losses.kl_k3_loss,
            {"aggregation": "token-mean"},
            {"objective": "ppo", "clip": "0.2", "kl": "k3"},
            "--kl k3 needs --kl-coef BETA",
        ),
        (
            losses.kl_k3_loss,
            {"aggregation": "token-mean"},
            {"objective": "ppo", "clip": "0.2", "kl_coef": 0.04},
            "--kl-coef needs --kl k1, k2 or k3",
        ),
        (
            losses.token_mean,
            {"aggregation": "token-mean"},
            {"objective": "ppo", "clip": "0.2", "kl": "k2", "kl_coef": 0.1},
            "in the loss needs a loss that takes ref_logp=",
        ),
        (
            losses.token_mean,
            {"aggregation": "token-mean"},
            {"objective": "ppo", "clip": "0.2", "tis_cap": 2.0},
            "needs a loss that takes rollout_logp=",
        ),
        (
            losses.tis_token,
            {"aggregation": "token-mean"},
            {"objective": "ppo", "clip": "0.2", "tis_mode": "mask"},
            "--tis-mode needs --tis-cap C",
        ),
        (
            losses.token_mean,
            {"aggregation": "token-mean"},
            {"objective": "ppo", "clip": "0.2,1.5"},
            "each of EPS_LOW, EPS_HIGH must be in [0, 1)",
        ),
        (
            losses.token_mean,
            {"aggregation": "token-mean"},
            {"objective": "ppo", "clip": "inf,0.2"},
            "--clip inf,0.2: each of EPS_LOW",
        ),
        (
            losses.token_mean,
            {"aggregation": "token-mean", "objective": Objective()},
            {"objective": "ppo", "clip": "0.2"},
            "declares its objective",
        ),
        (losses.token_mean, {}, {"clip": "inf"}, "an infinite bound needs --objective cispo"),
    ],
)
def test_bad_combinations_name_the_options_and_the_fix(
    loss: Any, adapter_kw: dict[str, Any], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build_context(_loss_adapter(loss, **adapter_kw), **options)
