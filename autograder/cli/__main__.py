"""``python -m autograder.cli``: the command line, as the console script runs it."""

import sys

from .commands import main

sys.exit(main())
