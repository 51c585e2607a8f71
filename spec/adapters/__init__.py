"""Adapters that plug real trainers' code into the suite (``sigma_ref.conformance.Adapter``).

Each module imports the installed package it adapts and exposes ``Adapter`` instances;
run one with ``pytest spec --sigma-ref-impl sigma_ref.spec.adapters.<module>:<adapter>``
(from an install) or ``--sigma-ref-impl spec.adapters.<module>:<adapter>`` (from a clone).

The modules: ``post`` (the seed post's code, ``sigma_ref.compat.post``, always there),
``trl`` (TRL 1.16.0), ``verl`` (verl 0.9.1), ``openrlhf`` (OpenRLHF 0.11.2), ``areal``
(AReaL 1.0.4), ``swift`` (ms-swift 4.6.0, advantages only), ``skyrl`` (SkyRL 0.3.0) and
``unsloth`` (Unsloth 2026.10.9, its loss; the advantages are TRL's). Each
exposes ``PEER``, ``ADAPTERS`` (``{mode: Adapter}``), ``NOT_APPLICABLE`` (``{mode:
reason}``) and ``available()`` / ``unavailable()``; the peer itself is imported on first
use, so importing a module never needs the peer (shared plumbing: ``_peers.py``).
``make peers`` installs the seven peers on CPU (``install_peers.sh``), ``sigma-ref matrix``
runs the suite on every mode; ``docs/matrix.md`` holds the full table and the README says what
it finds, input by input.
"""
