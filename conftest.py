"""Project-wide pytest configuration.

The conformance options (``--sigma-ref-impl``, ``--sigma-ref-layout``, ...) and the hypothesis profiles
live in the ``sigma_ref.pytest_plugin`` plugin, which an installed sigma-ref registers
under ``pytest11`` so that ``sigma-ref check`` works from an install as well as from a
clone. This file only adds what the project's own checkout needs.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

#: Modules that import the optional ``jax`` extra (jax, array-api-strict) at import time or in
#: their doctests: not collected where it is not installed (``make peers`` installs it).
collect_ignore = (
    []
    if importlib.util.find_spec("jax") and importlib.util.find_spec("array_api_strict")
    else ["sigma_ref/_xp.py", "sigma_ref/conformance/frameworks.py", "tests/gallery/jax_functions.py"]
)


def pytest_configure(config: pytest.Config) -> None:
    """The project's own tests use the suite's hypothesis profiles (``ci`` under CI, else ``dev``).

    Under pytest-xdist (``make test``: one worker per core) each worker, and every process it
    starts, runs torch on one intra-op thread: the tests' tensors are tiny, and two workers with a
    thread pool each on two cores made small ops such as ``index_add_`` 100x slower.
    """
    import os

    from sigma_ref.pytest_plugin import load_suite_profile

    load_suite_profile(config)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


#: The files run first, longest first (``pytest --durations``: minutes each on two cores).
_FIRST = {"test_readme_matrix.py": 0, "test_readme_gallery.py": 1, "test_readme.py": 2}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the README's generated blocks first (``make test`` runs pytest-xdist with
    ``--dist loadfile``), and skip ``@pytest.mark.cuda`` tests, with the reason, where no CUDA
    device is present."""
    # the longest files (the peer matrix, then the README's gallery tables and its other generated
    # blocks) first, so that under pytest-xdist they start at once on different workers and the
    # other workers share the rest (a stable sort keeps every other file's order)
    items.sort(key=lambda item: _FIRST.get(item.path.name, len(_FIRST)))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device: torch.cuda.is_available() is False")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
