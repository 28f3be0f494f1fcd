"""A job that is a trial of fedlight's Optuna study (`hydra/sweeper=optuna`) reports each evaluated
round's value of its objective to its trial (`Trial.report`, the round as the step: the study's
learning curves, optuna-dashboard's too) and asks the study's pruner (`hydra/sweeper/pruner`)
whether it goes on. A pruned trial's run stops after that round, its files written as any run's
that stops early (summary.json's `stopped` says why); the trial is marked with the round, and the
sweeper tells it pruned.

The job reaches its trial through the study's storage, in whichever process runs it (the
sweeper's own under Hydra's basic launcher, a joblib worker, a SLURM job on a shared file
system): the trial is the job's number (the sweeper launches each trial as the job of its
number). A resumed trial reports only the rounds its trial lacks, the rounds a resume replays
included. optuna is imported only by a trial.
"""

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedlight.core.errors import one_line
from fedlight.core.objectives import OBJECTIVES
from fedlight.loggers.base import SPLIT_ACCURACY, MetricsRow, RunInfo
from fedlight.reports.study_report import PRUNED_ATTR, journal_storage

# summary.json's numbers that a round's row gives round by round, by `eval.split`: the column,
# and whether the number is the best of it so far (a summary number without one, such as bytes
# or rounds to the target, has no value per round)
ROUND_VALUES = {
    "final_accuracy": lambda split: ("test_accuracy", False),
    "val_accuracy": lambda split: ("val_accuracy", False),
    "best_accuracy": lambda split: (SPLIT_ACCURACY[split], True),
}


def round_value(objective: str, split: str) -> tuple[str, bool] | None:
    """The column of a round's row that is `objective` round by round, and whether its best so
    far is (a logged column: itself); None where the objective has no value per round."""
    if objective not in OBJECTIVES:
        return objective, False
    found = ROUND_VALUES.get(objective)
    return None if found is None else found(split)


@dataclass(frozen=True)
class StudyTrial:
    """The trial of a study that a job runs: its study's storage (a URL, or a journal file's
    path), the study's name, the trial's number, and the pruner that judges its rounds."""

    storage: str
    study_name: str
    number: int
    pruner: Any  # an optuna.pruners.BasePruner


def numbered(study: Any, number: int) -> Any:
    """The study's trial `number` (a FrozenTrial) as its storage has it now."""
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


class TrialReporter:
    """A round logger that reports each evaluated round's value of `objective` to the job's
    trial and, where the pruner prunes it, gives the run its reason to stop after the round
    (`stop_reason`, asked by the driver after each round)."""

    def __init__(self, trial: StudyTrial, objective: str, column: str, running_best: bool) -> None:
        self.link, self.objective = trial, objective
        self.column, self.running_best = column, running_best  # `round_value`'s
        self.trial: Any = None
        self.reported: set[int] = set()
        self.best: float | None = None
        self.verdict: str | None = None

    def start(self, run: RunInfo) -> None:
        """Open the trial in its study's storage; one that is not running (told by then), or a
        storage this process cannot read, is said once and the rounds go unreported."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        where = self.link.storage
        try:
            storage = where if "://" in where else journal_storage(Path(where))
            study = optuna.load_study(
                study_name=self.link.study_name, storage=storage, pruner=self.link.pruner
            )
            frozen = numbered(study, self.link.number)
        except Exception as error:  # noqa: BLE001 - whatever the storage says: the run goes on
            warn(
                f"trial {self.link.number} cannot reach its study in {where} "
                f"({one_line(error, limit=120)}): its rounds are not reported, nor judged"
            )
            return
        if frozen.state != optuna.trial.TrialState.RUNNING:
            warn(f"trial {self.link.number} is {frozen.state.name.lower()} already: not reported")
            return
        self.trial = optuna.trial.Trial(study, frozen._trial_id)  # Optuna opens a trial by id
        self.reported = set(frozen.intermediate_values)

    def log_round(self, row: MetricsRow) -> None:
        value = self.value(row)
        if self.trial is None or value is None:
            return
        step = int(row["round"])
        if step not in self.reported:  # a round a resume replays was reported before the kill
            self.trial.report(value, step)
            self.reported.add(step)
        if self.verdict is None and self.trial.should_prune():
            self.trial.set_user_attr(PRUNED_ATTR, step)
            self.verdict = (
                f"hydra/sweeper/pruner pruned trial {self.link.number} at round {step} "
                f"({self.objective} {value:.4g}, hopeless next to the study's other trials)"
            )

    def value(self, row: MetricsRow) -> float | None:
        """The objective at `row`'s round (None where the round has none, or none finite)."""
        found = row.get(self.column)
        if found is None or not math.isfinite(float(found)):
            return None
        if self.running_best:
            self.best = float(found) if self.best is None else max(self.best, float(found))
            return self.best
        return float(found)

    def stop_reason(self) -> str | None:
        return self.verdict

    def shows_clients(self) -> bool:
        return False

    def log_clients(self, round_index: int, clients: Sequence[MetricsRow]) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        pass


def warn(line: str) -> None:
    print(f"fedlight: warning: optuna: {line}", file=sys.stderr, flush=True)
