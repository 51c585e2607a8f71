"""The sigma-ref pytest plugin (registered under ``pytest11``).

Loaded by every pytest run in an environment where sigma-ref is installed; it only
registers names and changes nothing unless its options are given.

Hypothesis profiles, chosen by the environment variable ``HYPOTHESIS_PROFILE`` (or
hypothesis' own ``--hypothesis-profile``):

* ``ci`` (the default when ``CI`` is set): derandomized, 25 examples a test, so a CI
  run is reproducible and fast;
* ``dev`` (the default otherwise): 100 random examples a test;
* ``thorough``: 1000 examples a test, for a deep check before a release.

Failing examples are saved in hypothesis' example database, ``.hypothesis/`` in the
directory pytest runs from, and replayed first on the next run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SLOW_DATA = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "ci",
    max_examples=25,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=_SLOW_DATA,
)
settings.register_profile("dev", max_examples=100, deadline=None, print_blob=True)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    print_blob=True,
    suppress_health_check=_SLOW_DATA,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
