"""Level 5 as a level like the others: one property system, every call shape, outcomes on the reports.

* the level-5 properties run through the one runner (``run_suite``) from a context that carries
  level 5's options, and a configuration level 5 cannot run is a FAIL or a skip with its reason;
* tried as a new user would (``sigma-ref check --world-size 2 --micro-batches 2,3``): a verl-style
  token-level advantage function, a dict-in/dict-out function through an Adapter's hooks, and a
  PPO-clip + TIS + k3 loss taking ``ref_logp`` and ``rollout_logp``, each correct, are CONFORMANT
  with a scale-out row in the summary;
* ``pytest -n 2`` and ``pytest -n 0`` over ``spec`` give the same summary and the same JSON report;
* the ranks listen on the loopback interface only, unless a multi-host run asks for more.

The ``sigma-ref check`` runs and the two runs of ``spec`` start whole suites (12 to 50 s each on
two shared cores) and are ``@pytest.mark.slow``; the rest start at most two launches of two ranks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sigma_ref.conformance.core import run_suite
from sigma_ref.conformance.launch import NOT_ASKED, ScaleoutOptions, scaleout_report
from sigma_ref.conformance.scaleout import run_scaleout
from sigma_ref.conformance.session import build_context, summary

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LEVEL5 = ("scaleout_advantages", "scaleout_gradient", "scaleout_prediction")
SHAPES = "tests.gallery.scaleout_shapes"


def _env() -> dict[str, str]:
    env = dict(os.environ, CI="true", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("HYPOTHESIS_PROFILE", None)
    return env


def _check(*argv: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(BIN / "sigma-ref"), "check", *argv, "--world-size", "2", "--micro-batches", "2,3"]
    return subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)


# ---------------------------------------------------------------------------
# the one runner


def test_level5_runs_through_run_suite_once_per_context() -> None:
    """``run_suite`` runs the three level-5 properties like any other: skipped with the reason when
    level 5 was not asked for; with the options on the context, one launch serves all three (the
    report is kept in the context's memo), and the summary has a scale-out row."""
    ctx = build_context()  # the oracle and its token-mean reference loss
    skipped = run_suite(ctx, names=LEVEL5)
    assert [(o.name, o.verdict, o.message) for o in skipped] == [(n, "skip", NOT_ASKED) for n in LEVEL5]

    asked = dataclasses.replace(ctx, scaleout=ScaleoutOptions(world_size=2, micro_batches=(2, 3)))
    t0 = time.monotonic()
    outcomes = run_suite(asked, names=LEVEL5)
    elapsed = time.monotonic() - t0
    assert [(o.name, o.level, o.verdict) for o in outcomes] == [(n, "scale-out", "pass") for n in LEVEL5]
    first = asked.memo["scaleout"]
    assert scaleout_report(asked) is first  # launched once for the three properties
    assert [r.property for r in first.results] == [
        "scaleout_advantages[whole-groups,W=2]",
        "scaleout_gradient[W=2,M=2]",
        "scaleout_prediction[token-mean,W=2,M=2]",
        "scaleout_gradient[W=2,M=3]",
        "scaleout_prediction[token-mean,W=2,M=3]",
    ]
    text = summary(asked, outcomes, seed=None, profile="sigma-ref-ci", seconds=elapsed)
    assert re.search(r"^scale-out\s+3\s+0\s+0\s+0\s+0$", text, flags=re.MULTILINE), text
    assert "scale-out:  W=2, M=2,3, whole-groups" in text
    assert elapsed < 60, f"W=2, M=2,3 took {elapsed:.1f} s through run_suite, but the budget is 60 s"


def test_a_configuration_level5_cannot_run_is_a_fail_or_a_skip_with_its_reason() -> None:
    """Options that do not fit FAIL every level-5 property with the reason (no process starts); a
    keep-mask filter, and a run without a loss, skip what they cannot run and say why in the summary."""
    ctx = build_context()
    too_many = dataclasses.replace(ctx, scaleout=ScaleoutOptions(world_size=2, micro_batches=(99,)))
    outcomes = run_suite(too_many, names=LEVEL5)
    assert {o.verdict for o in outcomes} == {"FAIL"}
    assert all("level 5 could not start: micro_batches=99 exceeds" in o.message for o in outcomes)
    text = summary(too_many, outcomes, seed=None, profile="sigma-ref-ci", seconds=0.0)
    assert "FAIL test_scaleout_gradient: level 5 could not start" in text
    assert "result: NOT CONFORMANT (3 FAIL)" in text

    keep = build_context(layout="keep-mask")
    keep = dataclasses.replace(keep, scaleout=ScaleoutOptions(world_size=2, micro_batches=(2,)))
    outcomes = run_suite(keep, names=LEVEL5)
    assert {o.verdict for o in outcomes} == {"skip"}
    text = summary(keep, outcomes, seed=None, profile="sigma-ref-ci", seconds=0.0)
    assert re.search(r"^scale-out\s+0\s+0\s+0\s+0\s+3$", text, flags=re.MULTILINE), text
    assert "skip test_scaleout_advantages: layout 'keep-mask' is a dynamic-sampling filter" in text


# ---------------------------------------------------------------------------
# tried as a new user would


@pytest.mark.slow
def test_verl_style_token_function_is_conformant_at_scale() -> None:
    """``(token_level_rewards, response_mask, index) -> (adv, ret)`` with ``--layout token``: level 5
    calls the token layout on each rank's shard; no loss, so the gradient properties skip with why."""
    run = _check(f"{SHAPES}:verl_token_advantages", "--layout", "token")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert re.search(r"^scale-out\s+1\s+0\s+0\s+0\s+2$", run.stdout, flags=re.MULTILINE), run.stdout[-3000:]
    assert "skip test_scaleout_gradient: no loss given" in run.stdout
    assert "result: CONFORMANT" in run.stdout


@pytest.mark.slow
def test_dict_adapter_with_hooks_is_conformant_at_scale() -> None:
    """A dict-in, dict-out function (string prompt ids) through ``Adapter(inputs=..., output=...)``
    with its token-mean loss: every level-5 property runs and passes; no glue beyond the Adapter."""
    run = _check(f"{SHAPES}:DICT_ADAPTER")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert re.search(r"^scale-out\s+3\s+0\s+0\s+0\s+0$", run.stdout, flags=re.MULTILINE), run.stdout[-3000:]
    assert "result: CONFORMANT" in run.stdout


@pytest.mark.slow
def test_ppo_tis_k3_loss_with_ref_and_rollout_logp_is_conformant_at_scale() -> None:
    """PPO-clip x TIS + k3, taking ``ref_logp=`` and ``rollout_logp=`` and returning ``(loss, metrics)``,
    declared as such: levels 0 to 4 check its objective, level 5 gives each micro-batch its rows of
    both inputs."""
    run = _check(
        "tests.gallery.correct:verl_index",
        *("--layout", "index", "--loss", f"{SHAPES}:ppo_tis_k3_loss", "--aggregation", "token-mean"),
        *("--objective", "ppo", "--clip", "0.2", "--kl", "k3", "--kl-coef", "0.04", "--tis-cap", "2"),
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert re.search(r"^scale-out\s+3\s+0\s+0\s+0\s+0$", run.stdout, flags=re.MULTILINE), run.stdout[-3000:]
    assert "result: CONFORMANT" in run.stdout


def test_a_loss_taking_the_objective_inputs_is_called_with_its_shards() -> None:
    """The ranks pass ``ref_logp``/``rollout_logp`` (required, no default) with the micro-batch's rows:
    a loss that checks their shapes against ``logp``'s runs at W = 2, M = 3 and passes."""
    report = run_scaleout(
        "tests.gallery.correct:verl_index",
        f"{SHAPES}:ppo_tis_k3_loss",
        layout="index",
        aggregation="token-mean",
        world_size=2,
        micro_batches=3,
    )
    assert report.passed, report.summary()
    assert {r.property.split("[")[0] for r in report.results} == set(LEVEL5)


# ---------------------------------------------------------------------------
# the same summary and report with and without pytest-xdist


def _spec_run(workers: str, path: Path) -> tuple[str, dict]:
    argv = [sys.executable, "-m", "pytest", "spec", "-p", "no:cacheprovider", "-q", "-n", workers]
    argv += ["--sigma-ref-impl", "tests.gallery.correct:verl_index", "--sigma-ref-layout", "index"]
    argv += [
        "--sigma-ref-loss",
        "tests.gallery.scaleout_losses:token_mean_all_reduce",
        "--sigma-ref-aggregation",
        "token-mean",
    ]
    argv += ["--sigma-ref-world-size", "2", "--sigma-ref-micro-batches", "2", "--sigma-ref-report", str(path)]
    run = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    text = run.stdout.split("sigma-ref conformance =", 1)[-1].split("report written to", 1)[0]
    text = re.sub(r"; [0-9.]+ s\n", "; <seconds>\n", text)  # the wall time, the one thing that differs
    report = json.loads(path.read_text(encoding="utf-8"))
    report.pop("seconds")
    return text, report


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_xdist_and_serial_runs_give_the_same_summary_and_report(tmp_path: Path) -> None:
    """``pytest -n 2`` and ``pytest -n 0`` over ``spec`` (levels 0 to 5, a correct pair at W = 2, M = 2):
    the outcomes ride on the test reports, so the main process prints the same one-screen summary and
    writes the same JSON (every property, in the suite's order) either way."""
    serial_text, serial = _spec_run("0", tmp_path / "serial.json")
    xdist_text, xdist = _spec_run("2", tmp_path / "xdist.json")
    assert "result: CONFORMANT" in serial_text
    assert re.search(r"^scale-out\s+3\s+0\s+0\s+0\s+0$", serial_text, flags=re.MULTILINE), serial_text
    assert xdist_text == serial_text
    assert xdist == serial
    assert len(serial["properties"]) == serial["counts"]["pass"] + sum(
        serial["counts"][k] for k in ("FAIL", "WARN", "NOTE", "skip")
    )


# ---------------------------------------------------------------------------
# the rendezvous


def _listening_addresses() -> list[str]:
    """The local addresses of the TCP sockets this process listens on (Linux ``/proc``)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table, encoding="ascii") as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    found.append(fields[1].rsplit(":", 1)[0])
    return found


_LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1 as /proc writes them


def loopback_only_loss(logp, old_logp, advantages, mask, *, rank, global_num_tokens, world_size):  # type: ignore[no-untyped-def]
    """A token-mean loss that raises on rank 0 if the rank listens on anything but loopback."""
    if rank == 0:
        wide = [a for a in _listening_addresses() if a not in _LOOPBACK]
        if wide:
            raise RuntimeError(f"rank 0 listens on non-loopback addresses {wide}")
    adv = advantages.to(logp.dtype).unsqueeze(-1)
    return -(torch.exp(logp - old_logp) * adv * mask).sum() / global_num_tokens * world_size


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads the listening sockets from /proc")
def test_ranks_listen_on_loopback_unless_asked() -> None:
    """The rendezvous store (and gloo) listen on 127.0.0.1 only by default (issue 27 item 3); a run
    that asks for every interface (``rendezvous_host="0.0.0.0"``, a multi-host run) gets it."""
    kw = {"layout": "index", "aggregation": "token-mean", "world_size": 2, "micro_batches": 1}
    adv, loss = "tests.gallery.correct:verl_index", "tests.test_scaleout_suite:loopback_only_loss"
    local = run_scaleout(adv, loss, **kw)  # type: ignore[arg-type]
    assert local.passed, local.summary()
    wide = run_scaleout(adv, loss, rendezvous_host="0.0.0.0", **kw)  # type: ignore[arg-type]
    assert not wide.passed
    assert "rank 0 listens on non-loopback addresses" in wide.summary()
    with pytest.raises(ValueError, match="rendezvous_host='' must be an address"):
        run_scaleout(adv, loss, rendezvous_host="", **kw)  # type: ignore[arg-type]


def test_the_matrix_judges_its_launched_reports_through_the_level5_properties() -> None:
    """``run_adapter`` with a row's level-5 report (the matrix launches every row's at once) runs the
    level-5 properties through ``run_suite`` like every other level: no process starts here, and the
    outcomes follow the report's results (a FAIL of the gradient names its configuration)."""
    from types import SimpleNamespace

    from sigma_ref.conformance.adapter import oracle_adapter
    from sigma_ref.conformance.matrix import run_adapter
    from sigma_ref.conformance.scaleout import ScaleoutReport, ScaleoutResult

    report = ScaleoutReport(
        (
            ScaleoutResult("scaleout_advantages[whole-groups,W=2]", "pass", None, "equal"),
            ScaleoutResult("scaleout_gradient[W=2,M=2]", "FAIL", 2.0, "normaliser computed per micro-batch"),
            ScaleoutResult(
                "scaleout_aggregation", "NOTE", None, "no aggregation declared; detected: token-mean"
            ),
        ),
        2,
        (2,),
        "gloo",
        1.0,
    )
    adapter = oracle_adapter("paper").replace(
        loss=lambda logp, old_logp, advantages, mask: (logp * mask).sum()
    )
    results, ctx = run_adapter(adapter, names=(), scaleout=(SimpleNamespace(loss_scale="none"), report))
    assert ctx.memo["scaleout"] is report
    assert [(r["property"], r["verdict"]) for r in results] == [
        ("scaleout_advantages", "pass"),
        ("scaleout_gradient", "FAIL"),
        ("scaleout_prediction", "NOTE"),
    ]
    assert results[1]["message"].startswith("scaleout_gradient[W=2,M=2]: normaliser computed per micro-batch")
