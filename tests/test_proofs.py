"""The proofs' plumbing: scripts and notebooks in step, a broken proof fails, quotes are verbatim.

The notebooks themselves are executed by nbval in the same ``pytest`` run
(``--nbval --nbval-current-env`` in ``pyproject.toml``; ``proofs`` is a testpath).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
PROOFS = ROOT / "proofs"
SCRIPTS = sorted(PROOFS.glob("[0-9][0-9]_*.py"))
SEEDS = Path(os.environ.get("SIGMA_REF_SEEDS", ROOT.parent / "shared" / "seeds"))


def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("proofs_build", PROOFS / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _build_module()


def cell_drift(script: Path, notebook: Path) -> list[str]:
    """Differences between the cells of a percent script and its notebook (empty: in step)."""
    src = jupytext.read(script, fmt="py:percent").cells
    nb = nbformat.read(notebook, as_version=4).cells
    problems = []
    if len(src) != len(nb):
        problems.append(f"{script.name} has {len(src)} cells, {notebook.name} has {len(nb)}")
    for i, (a, b) in enumerate(zip(src, nb, strict=False)):
        if a.cell_type != b.cell_type or a.source != b.source:
            problems.append(f"cell {i}: {a.cell_type} {a.source[:60]!r} != {b.cell_type} {b.source[:60]!r}")
    return problems


def test_every_script_has_a_notebook_and_back() -> None:
    """``proofs/NN_topic.py`` and ``proofs/NN_topic.ipynb`` come in pairs, and there are proofs."""
    notebooks = sorted(PROOFS.glob("[0-9][0-9]_*.ipynb"))
    assert len(SCRIPTS) >= 9
    assert [s.stem for s in SCRIPTS] == [n.stem for n in notebooks]


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_notebook_matches_script(script: Path) -> None:
    """The committed notebook has the script's cells (type and source), executed, no volatile metadata.

    Fix a failure with ``make proofs`` (re-executes every script into its notebook).
    """
    notebook = script.with_suffix(".ipynb")
    problems = cell_drift(script, notebook)
    assert not problems, f"{notebook.name} drifted from {script.name}; run `make proofs`:\n" + "\n".join(
        problems
    )
    nb = nbformat.read(notebook, as_version=4)
    expected = build.notebook_from_script(script)
    assert nb.metadata == expected.metadata, "notebook metadata differs from what proofs/build.py writes"
    assert [c.id for c in nb.cells] == [c.id for c in expected.cells], "cell ids are not build.py's"
    for cell in nb.cells:
        assert cell.metadata == {}, f"cell {cell.id} carries metadata {dict(cell.metadata)}"
        if cell.cell_type == "code":
            assert cell.execution_count is not None, f"cell {cell.id} was never executed; run `make proofs`"
            assert not [o for o in cell.outputs if o.output_type == "error"], f"cell {cell.id} has an error"


def test_drift_check_detects_an_edit(tmp_path: Path) -> None:
    """The drift check is not vacuous: one changed character in a code cell is reported."""
    script = SCRIPTS[0]
    edited = tmp_path / script.name
    text = script.read_text(encoding="utf-8")
    assert "== 0" in text
    edited.write_text(text.replace("== 0", "== 1", 1), encoding="utf-8")
    assert cell_drift(script, script.with_suffix(".ipynb")) == []
    assert len(cell_drift(edited, script.with_suffix(".ipynb"))) == 1


def test_unexecuted_build_is_deterministic() -> None:
    """``build.notebook_from_script`` gives byte-identical notebooks on two calls (ids, metadata)."""
    for script in SCRIPTS:
        a = nbformat.writes(build.notebook_from_script(script))
        b = nbformat.writes(build.notebook_from_script(script))
        assert a == b


def test_a_broken_assertion_fails_the_notebook(tmp_path: Path) -> None:
    """Copy a proof notebook, negate its first assertion, run it with nbval: the run must fail there."""
    source = PROOFS / "03_rloo.ipynb"
    nb = json.loads(source.read_text(encoding="utf-8"))
    broken_cell = None
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "code" and "\nassert " in "\n" + text:
            lines = text.split("\n")
            first = next(i for i, line in enumerate(lines) if line.startswith("assert "))
            lines[first] = "assert not " + lines[first][len("assert ") :]
            cell["source"] = "\n".join(lines)
            broken_cell = cell["source"]
            break
    assert broken_cell is not None, "no top-level assert found in 03_rloo.ipynb"
    copy = tmp_path / "broken_rloo.ipynb"
    copy.write_text(json.dumps(nb), encoding="utf-8")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",  # stop at the broken cell
            "-p",
            "no:cacheprovider",
            "--nbval",
            "--nbval-current-env",
            str(copy),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "AssertionError" in output and "1 failed" in output, output
    assert "assert not " in output, output  # the failure is the cell we broke


POST = "000_746ca1fd4cb7717b.txt"


@pytest.mark.skipif(not (SEEDS / POST).exists(), reason=f"seed post not found at {SEEDS / POST}")
def test_errata_quotes_the_post_verbatim() -> None:
    """``POST_OUTPUT`` in ``proofs/09_errata.py`` is a verbatim extract of the seed post."""
    cells = jupytext.read(PROOFS / "09_errata.py", fmt="py:percent").cells
    (quote_cell,) = [c for c in cells if c.source.startswith("POST_OUTPUT = ")]
    namespace: dict[str, str] = {}
    exec(quote_cell.source, namespace)
    seed = (SEEDS / POST).read_text(encoding="utf-8")
    assert namespace["POST_OUTPUT"] in seed
    assert namespace["POST_OUTPUT"].startswith("=== Corpus Audit (G=8) ===")
    assert namespace["POST_OUTPUT"].endswith("Effective learning budget: 67.1%")
