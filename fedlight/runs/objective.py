"""`objective`: the number a job returns to Hydra's sweeper. One of summary.json's numbers
(`fedlight.core.settings.OBJECTIVES`, whose directions are known), or any column of the round rows
the run logs (a module's own `test_mse`, an autoencoder's `test_loss`): its last logged value,
kept in summary.json under its name so that a finished job returns it again, and checked at the
first evaluated round, so that a misspelt name stops the run after one round, not at its end.
"""

from collections.abc import Sequence
from typing import Any

from fedlight.core.errors import ConfigError
from fedlight.core.objectives import OBJECTIVES
from fedlight.loggers.base import MetricsRow, RunInfo, is_evaluated


class ObjectiveCheck:
    """A round logger that refuses, in one line, an `objective` that names neither a summary
    number nor a column of the first evaluated round's row."""

    def __init__(self, objective: str) -> None:
        self.objective = objective
        self.checked = objective in OBJECTIVES

    def start(self, run: RunInfo) -> None:
        pass

    def log_round(self, row: MetricsRow) -> None:
        if self.checked or not is_evaluated(row):
            return
        self.checked = True
        if self.objective not in row:
            raise ConfigError(
                f"objective={self.objective} is neither a summary.json number nor a column this "
                f"run logs; choose from: {', '.join(OBJECTIVES)}, or a column: "
                f"{', '.join(sorted(set(row) - set(OBJECTIVES)))}"
            )

    def shows_clients(self) -> bool:
        return False

    def log_clients(self, round_index: int, clients: Sequence[MetricsRow]) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        pass


def objective_summary(
    rows: Sequence[MetricsRow], objective: str, numbers: dict[str, Any]
) -> dict[str, Any]:
    """`objective`'s value where it names a column rather than a summary number: the column's
    last logged value, under its name (nothing where the summary has it already)."""
    if objective in numbers:
        return {}
    values = [row[objective] for row in rows if objective in row]
    return {objective: values[-1]} if values else {}
