"""The conformance machinery behind ``spec/``: adapters, references, detection, the runner.

Each property is written once, in ``spec/test_<level>.py`` (installed as ``sigma_ref.spec``),
under :func:`~.core.conformance_property`; :mod:`.core` holds the machinery (findings, the
context, the registry, :func:`~.core.run_suite`) and :mod:`.inputs` the inputs several
properties share. The runner's names load on first use, so importing this package (as the
pytest plugin does in every session) imports no hypothesis.
"""

from typing import Any

from .adapter import LAYOUTS, Adapter, Batch, load_adapter, load_object, oracle_adapter
from .detect import Detection, detect_convention
from .reference import REFERENCE_NAMES, Reference, reference_for

#: Names of :mod:`.core`, imported on first access.
_CORE = (
    "conformance_property",
    "load_properties",
    "run_suite",
    "Context",
    "Finding",
    "PropertyFailure",
    "Outcome",
)

__all__ = [
    "Adapter",
    "Batch",
    "LAYOUTS",
    "load_adapter",
    "load_object",
    "oracle_adapter",
    "Detection",
    "detect_convention",
    "Reference",
    "reference_for",
    "REFERENCE_NAMES",
    *_CORE,
]


def __getattr__(name: str) -> Any:
    if name in _CORE:
        from . import core

        return getattr(core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
