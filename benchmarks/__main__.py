"""``python -m benchmarks``: the whole benchmark suite (see benchmarks/suite.py)."""

import sys

from .suite import main

sys.exit(main())
