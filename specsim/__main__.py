"""``python -m specsim``: the ``specsim`` command (layer 5, entry points)."""
import sys

from specsim.cli import main

sys.exit(main())
