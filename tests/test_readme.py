"""The generated blocks of the README and docs/matrix.md match what their commands print today."""

from __future__ import annotations

import pytest

from tests import readme_blocks

#: The generated blocks re-run the peer matrix and the CLI: the slow tier (make test-all, CI).
pytestmark = pytest.mark.slow


def _missing_peers() -> list[str]:
    """The peers the matrix block was generated with that this environment lacks."""
    from sigma_ref.conformance.matrix import PEERS, adapter_module

    modules = [adapter_module(peer) for peer in PEERS]
    return [module.PEER.title for module in modules if not module.available()]


@pytest.mark.parametrize(
    "command,body",
    [
        pytest.param(command, body, id=f"{path.name}: {command}")
        for path in readme_blocks.DOCUMENTS
        for command, body in readme_blocks.blocks(path.read_text(encoding="utf-8"))
    ],
)
def test_generated_block_is_current(command: str, body: str) -> None:
    """Each ``<!-- generated: CMD -->`` block equals CMD's output; ``make readme`` refreshes."""
    if command.startswith("sigma-ref matrix"):
        missing = _missing_peers()
        if missing:
            pytest.skip(f"the peer matrix needs {', '.join(missing)} (`make peers`; CI installs them)")
    expected = readme_blocks.render(command, readme_blocks.run(command))
    assert readme_blocks.normalise(body) == readme_blocks.normalise(expected), (
        f"README block for `{command}` is stale; run `make readme`"
    )


def test_readme_has_generated_blocks() -> None:
    """The README's tables and outputs are generated (the conventions table at least)."""
    commands = [c for c, _ in readme_blocks.blocks(readme_blocks.README.read_text(encoding="utf-8"))]
    assert "sigma-ref conventions --markdown" in commands
    assert any(c.startswith("sigma-ref audit") for c in commands)


def test_full_matrix_lives_in_docs_matrix() -> None:
    """The full peer matrix is generated in docs/matrix.md; the README links it and holds no copy."""
    matrix = [c for c, _ in readme_blocks.blocks(readme_blocks.MATRIX.read_text(encoding="utf-8"))]
    readme = readme_blocks.README.read_text(encoding="utf-8")
    assert "sigma-ref matrix --markdown" in matrix
    assert not any(c.startswith("sigma-ref matrix") for c, _ in readme_blocks.blocks(readme))
    assert "docs/matrix.md" in readme
