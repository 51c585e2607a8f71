"""pytest configuration for ``proofs/``.

The proof scripts ``NN_topic.py`` are notebooks in jupytext's percent format, not
modules: ``--doctest-modules`` must not import them (they would run every derivation a
second time). ``build.py`` is the ``make proofs`` script, not a module either (and its
generic name could clash with an installed ``build`` package). What pytest runs here
are the executed ``.ipynb`` twins, through nbval (``--nbval --nbval-current-env``, set
in ``pyproject.toml``).
"""

collect_ignore = ["build.py"]
collect_ignore_glob = ["[0-9][0-9]_*.py"]
