"""What an installed sigma-ref carries: ``docs/spec.md``, which the code cites ("docs/spec.md §N")
about 40 times, ships inside the package as ``sigma_ref/docs/spec.md`` (a link to the repository's
one ``docs/spec.md``, copied into the wheel and the sdist), so every citation resolves from an
install too: ``importlib.resources.files("sigma_ref") / "docs/spec.md"``."""

from __future__ import annotations

import importlib.resources
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_has_the_spec() -> None:
    """The package resource is the repository's ``docs/spec.md`` (one source: the package's copy is a
    link to it), with the sections the citations name."""
    shipped = importlib.resources.files("sigma_ref").joinpath("docs/spec.md")
    assert shipped.is_file()
    text = shipped.read_text(encoding="utf-8")
    assert text == (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    assert (ROOT / "sigma_ref" / "docs" / "spec.md").is_symlink()
    assert re.search(r"^## §7\b", text, flags=re.MULTILINE), "no §7 in the shipped spec"


@pytest.mark.slow
def test_the_wheel_ships_the_spec(tmp_path: Path) -> None:
    """A wheel built from the project holds ``sigma_ref/docs/spec.md`` as a file with the text of
    ``docs/spec.md`` (built from a copy of the tree in ``tmp_path``: the checkout gets no ``build/``)."""
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", ".*")
    for name in ("sigma_ref", "spec", "docs"):
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    offline = ("--no-deps", "--no-build-isolation", "--no-index", "-q")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *offline, "-w", str(tmp_path / "wheel"), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read("sigma_ref/docs/spec.md").decode("utf-8")
    assert shipped == (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
