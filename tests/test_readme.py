"""The README's generated blocks match what their commands print today."""

from __future__ import annotations

import pytest

from tests import readme_blocks

#: The generated blocks re-run the peer matrix and the CLI: the slow tier (make test-all, CI).
pytestmark = pytest.mark.slow


def _missing_peers() -> list[str]:
    """The peers the matrix block was generated with that this environment lacks."""
    from spec.adapters import openrlhf, trl, verl

    return [module.PEER.title for module in (trl, verl, openrlhf) if not module.available()]


@pytest.mark.parametrize(
    "command,body",
    [
        pytest.param(command, body, id=command)
        for command, body in readme_blocks.blocks(readme_blocks.README.read_text(encoding="utf-8"))
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
