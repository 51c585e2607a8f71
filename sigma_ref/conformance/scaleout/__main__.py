"""``python -m sigma_ref.conformance.scaleout``: the level-5 check (:func:`~.run.main`)."""

import sys

from .run import main

sys.exit(main())
