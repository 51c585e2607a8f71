"""End to end: ``pytest spec --sigma-ref-impl ...`` and ``sigma-ref check/detect`` in subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), CI="true", HYPOTHESIS_PROFILE="ci")
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _pytest_spec(impl: str, *options: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``pytest spec --sigma-ref-impl IMPL OPTIONS...`` from the clone, in a subprocess."""
    argv = [sys.executable, "-m", "pytest", "spec", "-q", "-p", "no:cacheprovider", "--sigma-ref-impl", impl]
    return _run([*argv, *options], tmp_path)


def test_pytest_spec_correct_and_wrong(tmp_path: Path) -> None:
    """A correct implementation passes (exit 0); a wrong one fails (exit 1) with the cause."""
    report = tmp_path / "ok.json"
    ok = _pytest_spec(
        "tests.gallery.correct:openrlhf_contiguous",
        "--sigma-ref-layout",
        "contiguous",
        "--sigma-ref-report",
        str(report),
        tmp_path=tmp_path,
    )
    assert ok.returncode == 0, ok.stdout[-3000:]
    assert "result: CONFORMANT" in ok.stdout
    data = json.loads(report.read_text())
    assert data["conformant"] and data["convention"]["detected"]["preset"] == "openrlhf"
    bad = _pytest_spec(
        "tests.gallery.wrong:batch_mean_centering",
        "--sigma-ref-layout",
        "contiguous",
        "--sigma-ref-convention",
        "paper",
        tmp_path=tmp_path,
    )
    assert bad.returncode == 1, bad.stdout[-3000:]
    assert "FAIL test_group_centering" in bad.stdout
    assert "centered on the batch mean, not the group mean" in bad.stdout
    assert "result: NOT CONFORMANT" in bad.stdout


def test_sigma_ref_check_and_detect(tmp_path: Path) -> None:
    """``sigma-ref check`` exits 0 only when every required property passes, and writes JSON."""
    report = tmp_path / "bad.json"
    bad = _run(
        [
            str(BIN / "sigma-ref"),
            "check",
            "tests.gallery.wrong:nan_on_silent",
            "--layout",
            "contiguous",
            "--convention",
            "paper",
            "--report",
            str(report),
        ],
        tmp_path,
    )
    assert bad.returncode == 1, bad.stdout[-3000:] + bad.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["conformant"] is False
    outcome = {p["test"]: p for p in data["properties"]}
    assert outcome["test_silent_group_zero"]["verdict"] == "FAIL"
    assert "silent groups" in outcome["test_silent_group_zero"]["message"]
    assert outcome["test_silent_group_zero"]["finding"]["confirmed"] is True
    assert data["counts"]["FAIL"] >= 1 and data["implementation"] == "tests.gallery.wrong:nan_on_silent"
    good = _run([str(BIN / "sigma-ref"), "check", "tests.gallery.correct:dapo_adapter"], tmp_path)
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-2000:]
    assert "result: CONFORMANT" in good.stdout
    detect = _run(
        [str(BIN / "sigma-ref"), "detect", "tests.gallery.correct:rloo_contiguous", "--layout", "contiguous"],
        tmp_path,
    )
    assert detect.returncode == 0
    assert detect.stdout.strip().splitlines() == [detect.stdout.strip()]
    assert detect.stdout.startswith("rloo (")


def test_bad_options_fail_at_once(tmp_path: Path) -> None:
    """A plain function without --layout, or an unknown module, stops the run with the fix."""
    no_layout = _run([str(BIN / "sigma-ref"), "check", "tests.gallery.correct:trl_contiguous"], tmp_path)
    assert no_layout.returncode == 2
    assert "--layout" in no_layout.stdout + no_layout.stderr
    missing = _pytest_spec("no_such_module:fn", "--sigma-ref-layout", "index", tmp_path=tmp_path)
    assert missing.returncode != 0
    assert "cannot import 'no_such_module'" in missing.stdout + missing.stderr


def test_sigma_ref_check_shows_the_declarations(tmp_path: Path) -> None:
    """The token layout with --output, --returns, a dr_grpo loss with its --aggregation and constant C,
    and --clip: every declaration is checked (no FAIL) and shown as declared in the summary."""
    loss = "tests.gallery.losses:seq_mean_token_sum_norm"  # C = 16 (TRL's max_completion_length)
    argv = [str(BIN / "sigma-ref"), "check", "tests.gallery.shapes:verl_token", "--layout", "token"]
    argv += ["--output", "0", "--returns", "advantages", "--loss", loss, "--clip", "0.2,0.28"]
    argv += ["--aggregation", "dr_grpo", "--aggregation-constant", "16"]
    run = _run(argv, tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    declared = "declared:   output 0, aggregation seq-mean-token-sum-norm (dr_grpo), C = 16, clip 0.2,0.28, "
    assert declared + "returns advantages" in run.stdout, run.stdout[-3000:]
    assert "aggregation: seq-mean-token-sum-norm [declared, measured]" in run.stdout
    assert "result: CONFORMANT" in run.stdout


def test_sigma_ref_check_with_a_declared_objective(tmp_path: Path) -> None:
    """``sigma-ref check --objective ppo --clip --aggregation --kl k3 --kl-coef``: TRL's k3 term in the loss
    (gallery ``kl_k3_loss``, which takes ``ref_logp=``) matches the declared objective at ratios != 1, and
    the NOTE says that k3 in the loss follows the forward KL's gradient, with its size on the probe."""
    report = tmp_path / "objective.json"
    done = _run(
        [
            *(
                str(BIN / "sigma-ref"),
                "check",
                "tests.gallery.correct:trl_contiguous",
                "--layout",
                "contiguous",
            ),
            *("--loss", "tests.gallery.losses:kl_k3_loss", "--aggregation", "token-mean"),
            *("--objective", "ppo", "--clip", "0.2,0.28", "--kl", "k3", "--kl-coef", "0.04"),
            *("--report", str(report)),
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "result: CONFORMANT" in done.stdout
    outcome = {p["test"]: p for p in json.loads(report.read_text())["properties"]}
    note = outcome["test_loss_objective"]
    assert note["verdict"] == "NOTE", note
    assert (
        "kind='ppo'" in note["message"] and "kl='k3'" in note["message"] and "kl_coef=0.04" in note["message"]
    )
    assert "k3 in the loss: its expected gradient is the forward KL's" in note["message"]
    # the ratio-1 loss properties ran too, with neutral reference log-probs (ref_logp = logp)
    assert outcome["test_loss_clipped_surrogate"]["verdict"] == "NOTE", outcome["test_loss_clipped_surrogate"]
    assert outcome["test_loss_is_policy_gradient"]["verdict"] == "pass"
    bad = _run(
        [
            *(
                str(BIN / "sigma-ref"),
                "check",
                "tests.gallery.correct:trl_contiguous",
                "--layout",
                "contiguous",
            ),
            *("--loss", "tests.gallery.losses:kl_k3_loss", "--objective", "ppo", "--kl", "k3"),
        ],
        tmp_path,
    )
    assert bad.returncode == 2, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert "--objective ppo needs --aggregation" in bad.stdout + bad.stderr


def test_sigma_ref_check_at_scale(tmp_path: Path) -> None:
    """``sigma-ref check --world-size 2 --micro-batches 2``: levels 0 to 4 call a scale-out loss with one
    process's globals (its token count all-reduced over a one-rank group), level 5 runs on two real
    processes; a loss that normalises by the rank's own token count passes levels 0 to 4 and FAILs
    level 5 with the bug class and its factor."""
    argv = [str(BIN / "sigma-ref"), "check", "tests.gallery.correct:verl_index", "--layout", "index"]
    scale = ["--aggregation", "token-mean", "--world-size", "2", "--micro-batches", "2"]
    good = _run([*argv, "--loss", "tests.gallery.scaleout_losses:token_mean_all_reduce", *scale], tmp_path)
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-2000:]
    assert "aggregation: token-mean [declared, measured]" in good.stdout
    assert re.search(r"^scale-out\s+3\s+0\s+0\s+0\s+0$", good.stdout, flags=re.MULTILINE), good.stdout[-3000:]
    assert "result: CONFORMANT" in good.stdout
    bad = _run([*argv, "--loss", "tests.gallery.scaleout_losses:token_mean_rank", *scale], tmp_path)
    assert bad.returncode == 1, bad.stdout[-3000:] + bad.stderr[-2000:]
    lines = [line for line in bad.stdout.splitlines() if line.startswith("FAIL ")]
    assert lines and all("scaleout" in line for line in lines), bad.stdout[-3000:]
    assert "token count not gathered across ranks" in bad.stdout
    assert "result: NOT CONFORMANT" in bad.stdout
