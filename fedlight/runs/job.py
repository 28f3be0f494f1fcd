"""What a run is made of before it runs and what it leaves: `Job` (a fully built experiment, as
fedlight.cli.job builds it from the composed config), `Ran` (what the rounds leave for the
summary), the workers and threads it runs with, and `DivergenceError`."""

from dataclasses import dataclass
from typing import Any

from fedlight.algorithms.base import Algorithm
from fedlight.core.settings import RunSettings
from fedlight.data.base import DataSource
from fedlight.drivers.history import History
from fedlight.engines.lightning import ModelFactory
from fedlight.loggers.base import (
    RoundLogger,
)
from fedlight.lr_schedules.base import LRSchedule
from fedlight.partitions.base import Partition
from fedlight.round.stages import Stages
from fedlight.runs.outputs import (
    Chance,
)
from fedlight.runs.parallelism import Parallelism
from fedlight.stages.selection.base import Selection


class DivergenceError(RuntimeError):
    """The run stopped at a round whose loss or weights were not finite (`fl.on_divergence`)."""


@dataclass(frozen=True)
class Ran:
    """What the rounds leave for the summary: the history, the test set's chance accuracy, the
    environment that decided the float results (the main worker's; empty on the others), how
    many times the run was resumed and the privacy mechanism's record. Nothing of it holds the
    data, released before the figures are drawn."""

    history: History
    chance: Chance
    environment: dict[str, Any]
    resumes: int
    privacy: dict[str, Any]  # the privacy mechanism's own record (`Privacy.summary`)


@dataclass
class Job:
    """A fully built experiment: what `fedlight.cli.job` makes out of the composed Hydra config."""

    settings: RunSettings
    data: DataSource
    model: ModelFactory
    partition: Partition
    stages: Stages
    loggers: list[RoundLogger]
    choices: dict[str, str]
    config: dict[str, Any]
    sweep_group: str | None = None
    name: str = ""  # the job's name in loggers that name runs (`job_name`); "": its directory's
    derived_keys: frozenset[str] = frozenset()  # dotted keys whose value interpolates another
    # what `fl.workers=auto` chose (None: settings.fl's workers and threads as given)
    parallelism: Parallelism | None = None

    @property
    def algorithm(self) -> Algorithm:
        return self.stages.algorithm

    @property
    def selection(self) -> Selection:
        return self.stages.selection

    @property
    def lr_schedule(self) -> LRSchedule:
        return self.stages.lr_schedule


def parallelism_of(job: Job) -> Parallelism:
    """What `fl.workers=auto` chose, or the workers and threads the settings give."""
    fl = job.settings.fl
    return job.parallelism or Parallelism(fl.workers, fl.threads_per_worker)
