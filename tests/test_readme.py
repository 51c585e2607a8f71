"""The README's quick generated blocks match what their commands print today.

The README's gallery tables are checked in ``test_readme_gallery.py`` and ``docs/matrix.md`` in
``test_readme_matrix.py``: three files, so that ``pytest -n 2 --dist loadfile`` runs them side by side.
"""

from __future__ import annotations

import pytest

from tests import readme_blocks

#: The generated blocks re-run the CLI: the slow tier (make test-all, CI).
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "command,body",
    readme_blocks.params(readme_blocks.README, lambda command: not readme_blocks.runs_the_gallery(command)),
)
def test_generated_block_is_current(command: str, body: str) -> None:
    """Each ``<!-- generated: CMD -->`` block equals CMD's output; ``make readme`` refreshes."""
    readme_blocks.check(command, body)


def test_readme_has_generated_blocks() -> None:
    """The README's tables and outputs are generated (the conventions table at least)."""
    commands = [c for c, _ in readme_blocks.blocks(readme_blocks.README.read_text(encoding="utf-8"))]
    assert "sigma-ref conventions --markdown" in commands
    assert any(c.startswith("sigma-ref audit") for c in commands)


def test_every_block_is_checked_by_one_file() -> None:
    """The three files together check every generated block of every document, each once."""
    readme = readme_blocks.README.read_text(encoding="utf-8")
    matrix = readme_blocks.MATRIX.read_text(encoding="utf-8")
    quick = readme_blocks.params(readme_blocks.README, lambda c: not readme_blocks.runs_the_gallery(c))
    gallery = readme_blocks.params(readme_blocks.README, readme_blocks.runs_the_gallery)
    assert len(quick) + len(gallery) == len(readme_blocks.blocks(readme)) > 0
    assert len(gallery) >= 1
    assert len(readme_blocks.params(readme_blocks.MATRIX)) == len(readme_blocks.blocks(matrix)) == 1


def test_full_matrix_lives_in_docs_matrix() -> None:
    """The full peer matrix is generated in docs/matrix.md; the README links it and holds no copy."""
    matrix = [c for c, _ in readme_blocks.blocks(readme_blocks.MATRIX.read_text(encoding="utf-8"))]
    readme = readme_blocks.README.read_text(encoding="utf-8")
    assert "sigma-ref matrix --markdown" in matrix
    assert not any(c.startswith("sigma-ref matrix") for c, _ in readme_blocks.blocks(readme))
    assert "docs/matrix.md" in readme
