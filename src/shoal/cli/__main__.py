"""`python -m shoal.cli`: the same as the `shoal` console script."""

import sys

from shoal.cli import main

sys.exit(main())
