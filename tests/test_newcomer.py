"""What a newcomer trips over first: the profile a run uses, and the routes the README shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest_route(
    tmp_path: Path,
    *extra: str,
    module: str = "sigma_ref.spec.test_contract",
    impl: str = "tests.gallery.correct:trl_contiguous",
    **env: str,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            module,
            "--sigma-ref-impl",
            impl,
            "--sigma-ref-layout",
            "contiguous",
            "-q",
            "-p",
            "no:cacheprovider",
            *extra,
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_an_unknown_profile_is_one_clear_error(tmp_path: Path) -> None:
    done = _pytest_route(tmp_path, HYPOTHESIS_PROFILE="bogus")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "HYPOTHESIS_PROFILE='bogus' is not a hypothesis profile: use ci, dev or thorough" in out
    assert "INTERNALERROR" not in out


def test_the_pytest_route_from_an_install_runs_the_suite(tmp_path: Path) -> None:
    """README: `pytest --pyargs sigma_ref.spec ...` works outside a clone's directory."""
    done = _pytest_route(tmp_path, CI="true")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "result: CONFORMANT" in done.stdout
    assert "hypothesis: profile ci, derandomized" in done.stdout  # the name HYPOTHESIS_PROFILE takes


def test_the_summary_names_the_profile_as_it_is_selected(tmp_path: Path) -> None:
    """The report says ``profile ci`` (what HYPOTHESIS_PROFILE and --hypothesis-profile take), and
    ``--hypothesis-profile ci`` in a run of the suite is the suite's ci (derandomized), not hypothesis'."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    given = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "sigma_ref.spec.test_identity",
            "-k",
            "advantage_identity",
            "--sigma-ref-impl",
            "tests.gallery.correct:trl_contiguous",
            "--sigma-ref-layout",
            "contiguous",
            "--hypothesis-profile",
            "ci",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "hypothesis: profile ci, derandomized" in given.stdout, given.stdout[-2000:] + given.stderr[-2000:]


def test_messages_name_the_flags_of_the_pytest_route(tmp_path: Path) -> None:
    """On the pytest route a skip reason and a usage error name ``--sigma-ref-*`` flags, never the
    ``sigma-ref check`` spelling pytest would reject."""
    done = _pytest_route(
        tmp_path, "-rs", "-k", "loss_aggregation", module="sigma_ref.spec.test_identity", CI="true"
    )
    assert "--sigma-ref-loss" in done.stdout, done.stdout[-3000:]
    assert " --loss " not in done.stdout and "(--loss" not in done.stdout
    broken = _pytest_route(tmp_path, impl="no_such_module_here:f", CI="true")
    out = broken.stdout + broken.stderr
    assert broken.returncode != 0 and "--sigma-ref-impl" in out, out[-2000:]
    assert "--impl " not in out and "--impl=" not in out, out[-2000:]
