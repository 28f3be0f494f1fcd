"""What a run has done so far (`History`) and how a checkpoint stores it: everything a resumed
run needs to reproduce the rows and totals of the uninterrupted run.
"""

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedlight.core.settings import EvalSettings
from fedlight.loggers.base import SPLIT_ACCURACY, MetricsRow, is_evaluated

STATE_FORMAT = 3  # 3: a row per round (2: rows of evaluated rounds only, no test_columns)


@dataclass
class RoundStats:
    """What one round did, as a driver reports it to the history."""

    # nan when no participant held data, every update was rejected, or secure aggregation could
    # not unmask the round (it reveals nothing of the participants)
    train_loss: float
    num_samples: int  # trained on by the participants whose updates were accepted (and revealed)
    lr: float
    bytes_up: int
    bytes_down: int
    client_seconds: float  # summed local-training time of the round's participants
    metrics: dict[str, float] = field(default_factory=dict)  # the stages' reported numbers
    every_update_rejected: bool = False  # clients trained, and none sent finite numbers
    virtual_seconds: float = 0.0  # how long the round lasted on the system's clock
    # what the client module logged in training (`self.log`), its mean over the round's local
    # steps (weighted by examples, see fedlight.engines.module_logs.TrainingLogs)
    logged: dict[str, float] = field(default_factory=dict)
    # one row per participant, for the loggers that show clients (fedlight.loggers.clients)
    clients: list[MetricsRow] = field(default_factory=list)


@dataclass
class History:
    """Everything a resumed run needs to reproduce the rows and totals of the uninterrupted run."""

    completed_rounds: int = 0
    rows: list[MetricsRow] = field(default_factory=list)  # one per round, as logged
    # the columns evaluations filled so far (test metrics): what a round not evaluated lacks
    test_columns: list[str] = field(default_factory=list)
    validation_columns: list[str] = field(default_factory=list)  # the same of the validation set
    bytes_up: int = 0
    bytes_down: int = 0
    wall_seconds: float = 0.0
    client_seconds: float = 0.0
    diverged_at_round: int | None = None  # the first round whose loss or weights were not finite
    divergence: str | None = None  # what was not finite then, in words
    participation: list[int] = field(default_factory=list)  # rounds each client trained in
    # [bytes up, bytes down] sent until the first evaluated round reaching eval.target_accuracy
    bytes_to_target: list[int] | None = None
    stopped: str | None = None  # why the run ended before fl.rounds (the privacy budget)
    # each client's accuracy on its local test set at the last evaluation (nan: no test data)
    local_accuracies: list[float] = field(default_factory=list)
    virtual_time: float = 0.0  # seconds on the system's clock (`system`), all rounds so far
    split: str = "test"  # the split that evaluates a round and decides the target (`eval.split`)

    def add(self, round_index: int, stats: RoundStats, wall_seconds: float) -> None:
        """Round `round_index` done: its totals added."""
        self.completed_rounds = round_index
        self.bytes_up += stats.bytes_up
        self.bytes_down += stats.bytes_down
        self.client_seconds += stats.client_seconds
        self.virtual_time += stats.virtual_seconds
        self.wall_seconds = wall_seconds

    def add_row(self, row: MetricsRow, tested: Iterable[str], target: float | None) -> None:
        """A round's row, `tested` the names of its test metrics (none if it was not tested);
        the bytes sent so far if it is the first evaluation to reach `target` on the split."""
        self.rows.append(row)
        self.test_columns += [name for name in tested if name not in self.test_columns]
        accuracy = row.get(SPLIT_ACCURACY[self.split])
        reached = target is not None and accuracy is not None and accuracy >= target
        if reached and self.bytes_to_target is None:
            self.bytes_to_target = [self.bytes_up, self.bytes_down]

    def add_validation(self, validated: Iterable[str]) -> None:
        """The names of the validation metrics of the round just added (none without them)."""
        known = self.validation_columns
        self.validation_columns += [name for name in validated if name not in known]

    def last_evaluated_time(self) -> float:
        """The virtual time of the last evaluated round (0 before any)."""
        return next(
            (float(r["virtual_time"]) for r in reversed(self.rows) if is_evaluated(r, self.split)),
            0.0,
        )


# What a checkpoint holds besides the caller's meta data (`FederatedLoop.state_dict`).
STATE_KEYS = (
    "state_format",
    "server_weights",
    "server_extras",
    "stage_states",
    "client_states",
    "completed_rounds",
    "rows",
    "bytes_up",
    "bytes_down",
    "wall_seconds",
    "client_seconds",
    "diverged_at_round",
    "divergence",
    "participation",
    "bytes_to_target",
    "local_accuracies",
    "virtual_time",
    "torch_rng",
)


def passed_multiple(before: float, now: float, period: float) -> bool:
    """Whether the clock passed a multiple of `period` in (before, now]."""
    return math.floor(now / period) > math.floor(before / period)


def due_rows(
    rows: Sequence[MetricsRow],
    every: int,
    every_seconds: float | None,
    kept: tuple[Any, ...],
    columns: tuple[Sequence[str], Sequence[str]] | None,
    tested: tuple[Any, ...] | None = None,
) -> list[MetricsRow]:
    """The checkpoint's rows as the uninterrupted run logs them: evaluation metrics in those it
    evaluates, on the grid of `eval.every` (or of `eval.every_seconds` on the virtual clock) and
    the rounds in `kept`, and in no others; test metrics only in the rounds in `tested`, where
    given (`eval.test=final`). `columns`: the test and the validation columns the run filled;
    None: a checkpoint of the older format, whose rows are the evaluated rounds' alone; one not
    due is left out."""
    due: list[MetricsRow] = []
    previous = 0.0  # the virtual time of the last round due
    test_columns, validation_columns = columns or ((), ())
    for row in rows:
        if every_seconds is None:
            on_grid = row["round"] % every == 0
        else:
            on_grid = passed_multiple(previous, float(row["virtual_time"]), every_seconds)
        if on_grid or row["round"] in kept:
            untested = tested is not None and row["round"] not in tested
            due.append(without(row, test_columns if untested else ()))
            if every_seconds is not None:
                previous = float(row["virtual_time"])
        elif columns is not None:
            due.append(without(row, [*test_columns, *validation_columns]))
    return due


def without(row: MetricsRow, columns: Collection[str]) -> MetricsRow:
    """`row` without the `columns`."""
    return {name: value for name, value in row.items() if name not in columns}


def history_state(history: History) -> dict[str, Any]:
    """The history as a checkpoint holds it (weights-only-safe types)."""
    return {
        "completed_rounds": history.completed_rounds,
        "rows": history.rows,
        "test_columns": history.test_columns,
        "validation_columns": history.validation_columns,
        "bytes_up": history.bytes_up,
        "bytes_down": history.bytes_down,
        "wall_seconds": history.wall_seconds,
        "client_seconds": history.client_seconds,
        "diverged_at_round": history.diverged_at_round,
        "divergence": history.divergence,
        "participation": history.participation,
        "bytes_to_target": history.bytes_to_target,
        "local_accuracies": history.local_accuracies,
        "virtual_time": history.virtual_time,
    }


def restored_history(
    state: Mapping[str, Any], rounds: int, evaluation: EvalSettings, stops: bool
) -> History:
    """The history of a checkpoint's `state`, its rows with evaluation metrics where the run
    evaluates (`due_rows`) with `fl.rounds=rounds`: a finished run's last round was evaluated
    (and tested) because it was last; extended, it is not. `stops`: a diverged round ends the
    run (`fl.on_divergence=stop`), so it was tested as the last."""
    diverged = state["diverged_at_round"]
    test_columns = state.get("test_columns")  # absent in older checkpoints
    validation_columns = state.get("validation_columns", [])  # absent before validation sets
    columns = None if test_columns is None else (test_columns, validation_columns)
    tested = None if evaluation.test == "every_round" else (rounds, diverged if stops else None)
    return History(
        completed_rounds=state["completed_rounds"],
        rows=due_rows(
            state["rows"],
            evaluation.every,
            evaluation.every_seconds,
            (rounds, diverged),
            columns,
            tested,
        ),
        test_columns=list(test_columns or ()),
        validation_columns=list(validation_columns),
        bytes_up=state["bytes_up"],
        bytes_down=state["bytes_down"],
        wall_seconds=state["wall_seconds"],
        client_seconds=state["client_seconds"],
        diverged_at_round=diverged,
        divergence=state["divergence"],
        participation=list(state["participation"]),
        bytes_to_target=state.get("bytes_to_target"),  # absent in older checkpoints
        local_accuracies=list(state.get("local_accuracies", [])),
        virtual_time=state.get("virtual_time", 0.0),
        split=evaluation.split,
    )
