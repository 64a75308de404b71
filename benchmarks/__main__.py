"""``python -m benchmarks``: the whole benchmark suite (see benchmarks/suite.py); ``fairctl bench``
runs it with its own name in PROG_VARIABLE, for the usage lines."""

import os
import sys

from .suite import main

PROG_VARIABLE = "BENCHMARKS_PROG"

sys.exit(main(prog=os.environ.get(PROG_VARIABLE, "python -m benchmarks")))
