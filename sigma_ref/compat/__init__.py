"""Reproductions of code that sigma-ref checks but does not endorse.

``sigma_ref.compat.post``: the code printed in the seed blog post, as published, so its
documented behaviour can be run through the conformance suite and the errata ledger.
"""
