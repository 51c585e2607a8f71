"""Installing sigma-ref changes nothing in other projects' pytest runs (its pytest11 plugin loads
in every session): hypothesis not imported, no hypothesis profile loaded, no setting touched,
mpmath's precision left at 15 digits, and every option it adds carries the ``--sigma-ref-`` prefix."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

_PROJECT_TEST = """
import mpmath
from hypothesis import settings


def test_untouched():
    import sigma_ref

    assert sigma_ref.silent_group_rate(0.5, 8) > 0
    print("PROFILE", settings.get_current_profile_name(), settings.default.max_examples,
          settings.default.derandomize, settings.default.deadline)
    print("DPS", mpmath.mp.dps)
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HYPOTHESIS_PROFILE", "PYTHONPATH")}
    env["CI"] = "true"  # the old plugin loaded the derandomized ci profile in every project under CI
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_throwaway_project_keeps_hypothesis_settings(tmp_path: Path) -> None:
    """The same hypothesis profile and settings as with the plugin disabled (hypothesis loads its
    own ``ci`` profile under ``CI``; the old plugin replaced it), and mpmath at 15 digits."""
    (tmp_path / "test_other.py").write_text(_PROJECT_TEST)
    seen = []
    for extra in ((), ("-p", "no:sigma_ref")):
        done = _run(tmp_path, "-s", "-q", *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        profile = re.search(r"^PROFILE .*$", done.stdout, flags=re.MULTILINE)
        assert profile is not None, done.stdout
        seen.append(profile.group(0))
        assert "DPS 15" in done.stdout
    assert seen[0] == seen[1]
    assert not seen[0].startswith("PROFILE sigma-ref"), seen[0]


def test_help_shows_only_prefixed_options(tmp_path: Path) -> None:
    """The plugin's group in ``pytest --help`` holds only ``--sigma-ref-*`` options."""
    (tmp_path / "test_other.py").write_text("def test_nothing():\n    pass\n")
    done = _run(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "sigma-ref conformance suite" in text
    section = text.split("sigma-ref conformance suite", 1)[1].split("\n\n", 1)[0]
    options = re.findall(r"^\s+(--[a-z][\w-]*)", section, flags=re.MULTILINE)
    assert options and all(o.startswith("--sigma-ref-") for o in options), options
    for bare in ("--impl", "--layout", "--loss", "--convention", "--report"):
        assert not re.search(rf"^\s+{bare}\b", text, flags=re.MULTILINE), bare


_MODULES_TEST = """
import sys


def test_modules():
    names = ("hypothesis", "torch", "sigma_ref.pytest_plugin")
    print("MODULES", {name: name in sys.modules for name in names})
"""


def test_a_throwaway_project_does_not_import_hypothesis(tmp_path: Path) -> None:
    """The plugin loads (its module is in ``sys.modules``) but imports neither hypothesis nor torch in
    a session that does not run the suite, as hypothesis' own plugin avoids importing hypothesis; a
    session that names one of the suite's profiles gets it registered (and so hypothesis imported)."""
    (tmp_path / "test_other.py").write_text(_MODULES_TEST)
    done = _run(tmp_path, "-s", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "MODULES {'hypothesis': False, 'torch': False, 'sigma_ref.pytest_plugin': True}" in done.stdout
    named = _run(tmp_path, "-s", "-q", "--hypothesis-profile", "sigma-ref-ci")
    assert named.returncode == 0, named.stdout + named.stderr
    assert "'hypothesis': True" in named.stdout
