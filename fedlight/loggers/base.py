"""The interface every metrics sink implements."""

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

MetricsRow = dict[str, float | int]


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
