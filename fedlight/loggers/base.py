"""The interface every metrics sink implements, and what sinks share: the run's name and its
config as the command line says it."""

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fedlight.core.errors import require
from fedlight.core.settings import output_only

METRIC_COLUMNS = (
    "round",
    "test_accuracy",
    "test_loss",
    "train_loss",
    "lr",
    "bytes_up",
    "bytes_down",
    "wall_seconds",
    "test_accuracy_std",
    "client_seconds",
)

# The virtual clock's columns (`fedlight.system`): seconds of the simulated system, the same in
# every run of the same config and seed, unlike measured time.
VIRTUAL_CLOCK = ("virtual_time", "round_seconds")


def is_timing(column: str) -> bool:
    """Whether a metrics.csv column measures time (`wall_seconds`, `client_seconds`, the wire's
    `wire.<direction>.encode_seconds` and `decode_seconds`, any other name ending in "seconds"
    but the virtual clock's): it differs between runs that are otherwise bit-identical (the
    same command again, a resumed run, another number of workers), so comparisons of runs
    leave it out."""
    return column.endswith("seconds") and column not in VIRTUAL_CLOCK


# A round's row: its training columns always, the test columns (`test_accuracy`, ...) only when
# the round was evaluated (`eval.every`); a column a row lacks is an empty cell of metrics.csv.
MetricsRow = dict[str, float | int]


# Each split's accuracy column (`eval.split`): a row that has it was evaluated on that split.
SPLIT_ACCURACY = {"test": "test_accuracy", "validation": "val_accuracy"}
SPLIT_LOSS = {"test": "test_loss", "validation": "val_loss"}


def is_evaluated(row: MetricsRow, split: str = "test") -> bool:
    """Whether the round of `row` was evaluated on `split` (it has its metrics)."""
    return SPLIT_ACCURACY[split] in row


def evaluated(rows: Sequence[MetricsRow], split: str = "test") -> list[MetricsRow]:
    """The rows of rounds evaluated on `split`, for what needs its metrics."""
    return [row for row in rows if is_evaluated(row, split)]


@dataclass(frozen=True)
class RunInfo:
    """What a sink may need to label a run."""

    output_dir: Path
    config: dict[str, Any]
    choices: dict[str, str]
    sweep_group: str | None
    total_rounds: int
    name: str = ""  # the run's name where a sink names runs (W&B, MLflow)
    # the run directory whose checkpoint this run continues (a resume); None: a new run
    resumed_from: Path | None = None


class RoundLogger(Protocol):
    def start(self, run: RunInfo) -> None: ...

    def log_round(self, row: MetricsRow) -> None: ...

    def shows_clients(self) -> bool:
        """Whether `log_clients` shows the rows: only then does a round compute each client's
        update norm, a float64 pass over its weights that costs as much as a small model's
        training step."""

    def log_clients(self, round_index: int, clients: Sequence[MetricsRow]) -> None:
        """The round's per-client rows (`fedlight.loggers.clients`), after its `log_round`."""

    def finish(self, summary: dict[str, Any]) -> None: ...


@runtime_checkable
class RoundJudge(Protocol):
    """A round logger that may end the run after a round it logged (an Optuna trial's pruner:
    `fedlight.runs.trial_report`)."""

    def stop_reason(self) -> str | None:
        """Why the run ends after the round just logged; None: it goes on."""


def judged_stop(loggers: Sequence[RoundLogger]) -> str | None:
    """The first reason a judging logger among `loggers` gives to end the run now, if any."""
    judges = [logger for logger in loggers if isinstance(logger, RoundJudge)]
    return next((reason for judge in judges if (reason := judge.stop_reason())), None)


class RoundProgress(Protocol):
    """What the drivers tell the console as a round goes (`fedlight.loggers.console`), beside the
    metrics the loggers get once it is done: without it, a round of long local trainings would
    show nothing for minutes."""

    def round_started(self, round_index: int) -> None: ...

    def clients_chosen(self, mine: int, participants: int) -> None:
        """The round's `participants`, `mine` of which this worker trains (all on one worker)."""

    def client_trained(self) -> None: ...


class SilentProgress:
    """The progress of a worker that shows none (not the main worker, or `console.progress=off`)."""

    def round_started(self, round_index: int) -> None:
        pass

    def clients_chosen(self, mine: int, participants: int) -> None:
        pass

    def client_trained(self) -> None:
        pass


def default_run_name(output_dir: Path) -> str:
    """A run's name without overrides: its directory's last two parts (`2024-05-01/12-00-00`, a
    sweep job's `12-00-00/3`)."""
    return f"{output_dir.parent.name}/{output_dir.name}"


def job_name(overrides: Sequence[str], output_dir: Path) -> str:
    """A run's name as a user tells the runs of a project apart: its command-line overrides
    (a sweep job's own, `algo=scaffold,seed=1`, as Hydra's override_dirname joins them) less
    the settings that only say where or how it is written (`output_only`); without any,
    `default_run_name`."""
    named = [override for override in overrides if not output_only(override)]
    return ",".join(named) or default_run_name(output_dir)


def flat_config(config: dict[str, Any], choices: dict[str, str]) -> dict[str, Any]:
    """The resolved config as the command line says it, for a tracker's hyperparameters: each
    group as the name of its option (`algo: scaffold`, `data: fashion_mnist`, as summary.json has
    them) instead of its `_target_` class path, and every setting under its dotted key
    (`algo.mu`, `fl.rounds`); Hydra's `_target_`/`_partial_` keys are left out."""
    flat: dict[str, Any] = dict(choices)

    def add(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if str(key).startswith("_"):
                continue
            dotted = f"{prefix}{key}"
            if isinstance(value, dict):
                add(value, f"{dotted}.")
            else:
                flat[dotted] = value

    add(config, "")
    return flat


def require_module(module: str, option: str, extra: str) -> None:
    """Refuse `logger=<option>` in one line when the package it logs through is not installed."""
    require(
        importlib.util.find_spec(module) is not None,
        f"logger={option} needs the {module} package, which is not installed; install it with "
        f"pip install 'fedlight[{extra}]'",
    )
