"""docs/matrix.md's peer matrix is what ``sigma-ref matrix --markdown`` prints with the named versions."""

from __future__ import annotations

import pytest

from tests import readme_blocks

#: The matrix runs every peer's configurations at every level: the slow tier (make test-all, CI).
pytestmark = pytest.mark.slow


def _missing_peers() -> list[str]:
    """The peers the matrix block was generated with that this environment lacks."""
    from sigma_ref.conformance.matrix import PEERS, adapter_module

    modules = [adapter_module(peer) for peer in PEERS]
    return [module.PEER.title for module in modules if not module.available()]


@pytest.mark.parametrize("command,body", readme_blocks.params(readme_blocks.MATRIX))
def test_matrix_block_is_current(command: str, body: str) -> None:
    """The ``sigma-ref matrix --markdown`` block equals its output; ``make readme`` refreshes."""
    missing = _missing_peers()
    if missing:
        pytest.skip(f"the peer matrix needs {', '.join(missing)} (`make peers`; CI installs them)")
    readme_blocks.check(command, body)
