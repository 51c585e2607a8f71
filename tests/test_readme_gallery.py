"""The README's gallery tables (kill tables, verdicts of the trainer and shape galleries) are current."""

from __future__ import annotations

import pytest

from tests import readme_blocks

#: Each block re-runs a gallery: minutes, the slow tier (make test-all, CI).
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "command,body", readme_blocks.params(readme_blocks.README, readme_blocks.runs_the_gallery)
)
def test_gallery_block_is_current(command: str, body: str) -> None:
    """Each gallery block equals its command's output; ``make readme`` refreshes."""
    readme_blocks.check(command, body)
