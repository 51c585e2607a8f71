"""The sigma-ref conformance suite (docs/spec.md §7): one module per level, one test per property.

Each property is written once, as ``test_<name>`` in ``test_<level>.py`` under
``@conformance_property`` (``sigma_ref.conformance.core``): the test is the check, its
docstring the statement. Shipped inside the package as ``sigma_ref.spec`` so ``sigma-ref
check``, the matrix and ``load_properties()`` run the same modules from an install. See
``spec/README.md``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence
from pathlib import Path


class _SameFiles(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``spec.<name>`` to the module ``sigma_ref.spec.<name>`` (the same file), so that a
    clone's ``pytest spec`` (which imports ``spec/test_x.py`` as ``spec.test_x``) and the registry
    (which imports ``sigma_ref.spec.test_x``) share one module: each spec module is executed once,
    and its classes (``PeerUnavailableError``, the properties) exist once."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("spec."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(f"sigma_ref.{spec.name}")

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing: the module was executed once, under its package name."""


def _one_name() -> None:
    """Imported as ``spec`` from a clone whose ``sigma_ref.spec`` is this very directory (an editable
    install, or the source tree on ``sys.path``): become ``sigma_ref.spec`` and resolve every
    ``spec.<name>`` to ``sigma_ref.spec.<name>``. Ahead of pytest's assertion rewriter, which would
    otherwise load the file a second time; ``sigma_ref.spec.<name>`` is still rewritten."""
    found = importlib.util.find_spec("sigma_ref.spec")
    if found is None or found.origin is None or Path(found.origin).resolve() != Path(__file__).resolve():
        return  # another copy of the suite (an installed sigma-ref, a clone beside it): two files
    if not any(isinstance(finder, _SameFiles) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SameFiles())
    sys.modules["spec"] = importlib.import_module("sigma_ref.spec")


if __name__ == "spec":
    _one_name()
