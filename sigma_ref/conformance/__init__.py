"""The conformance machinery behind ``spec/``: adapters, references, detection, checks.

The suite's property checks live here as plain functions (:mod:`.properties`), so the
pytest modules in ``spec/`` and the project's own tests call the same code.
"""

from .adapter import LAYOUTS, Adapter, Batch, load_adapter, load_object, oracle_adapter
from .detect import Detection, detect_convention
from .reference import REFERENCE_NAMES, Reference, reference_for

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
]
