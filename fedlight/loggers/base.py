"""The interface every metrics sink implements."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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

# A round's row: its training columns always, the test columns (`test_accuracy`, ...) only when
# the round was evaluated (`eval.every`); a column a row lacks is an empty cell of metrics.csv.
MetricsRow = dict[str, float | int]


def is_evaluated(row: MetricsRow) -> bool:
    """Whether the round of `row` was evaluated (it has test metrics)."""
    return "test_accuracy" in row


def evaluated(rows: Sequence[MetricsRow]) -> list[MetricsRow]:
    """The rows of evaluated rounds, for what needs their test metrics."""
    return [row for row in rows if is_evaluated(row)]


@dataclass(frozen=True)
class RunInfo:
    """What a sink may need to label a run."""

    output_dir: Path
    config: dict[str, Any]
    choices: dict[str, str]
    sweep_group: str | None
    total_rounds: int


class RoundLogger(Protocol):
    def start(self, run: RunInfo) -> None: ...

    def log_round(self, row: MetricsRow) -> None: ...

    def finish(self, summary: dict[str, Any]) -> None: ...
