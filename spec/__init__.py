"""The sigma-ref conformance suite (docs/spec.md §7): one module per level, one test per property.

Each property is written once, as ``test_<name>`` in ``test_<level>.py`` under
``@conformance_property`` (``sigma_ref.conformance.core``): the test is the check, its
docstring the statement. Shipped inside the package as ``sigma_ref.spec`` so ``sigma-ref
check``, the matrix and ``load_properties()`` run the same modules from an install. See
``spec/README.md``.
"""
