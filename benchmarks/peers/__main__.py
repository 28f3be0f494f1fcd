"""`python -m benchmarks.peers setup|run|page`: see benchmarks/peers/__init__.py."""

import sys

from benchmarks.peers.cli import main

sys.exit(main())
