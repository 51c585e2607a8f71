"""The sigma-ref conformance suite (SPEC section 7): one module per level, one test per property.

Shipped inside the package as ``sigma_ref.spec`` so ``sigma-ref check`` runs the same
modules from an install. See ``spec/README.md``.
"""
