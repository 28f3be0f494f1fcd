"""fedlight: reproducible federated-learning research on Lightning modules and Hydra configs."""

import os
import time

__version__ = "0.1.0"
STARTED = time.time()  # this process's start (as near as Python lets us see it)
STARTED_VARIABLE = "FEDLIGHT_STARTED"  # the command's start, inherited by its workers


def command_seconds() -> float:
    """Seconds since the command started (`fedlight.cli.main` sets `STARTED_VARIABLE`), start-up
    included: imports, the config checks of every job, data loading."""
    return time.time() - float(os.environ.get(STARTED_VARIABLE, STARTED))
