"""Console output: a progress bar over rounds (plain lines when not a terminal), then a summary."""

import sys
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from fedlight.loggers.base import METRIC_COLUMNS, MetricsRow, RunInfo, is_evaluated


@dataclass
class ConsoleProgress:
    console: Console = field(default_factory=lambda: Console(stderr=True))
    _progress: Progress | None = field(default=None, init=False)
    _task: Any = field(default=None, init=False)

    def start(self, run: RunInfo) -> None:
        if self.console.is_terminal:
            self._progress = Progress(
                TextColumn("round"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self._task = self._progress.add_task("rounds", total=run.total_rounds, status="")
            self._progress.start()

    def log_round(self, row: MetricsRow) -> None:
        """An evaluated round's test accuracy and loss and the other numbers it reported; a round
        not evaluated moves the progress bar, or without one says its train loss alone."""
        if not is_evaluated(row):
            self.advance_to(int(row["round"]))
            if self._progress is None:
                line = f"round {row['round']}: train_loss {row['train_loss']:.4f}"
                print(line, file=sys.stderr, flush=True)
            return
        reported = "".join(
            f"  {name} {row[name]:.4g}" for name in row if name not in METRIC_COLUMNS
        )
        status = f"acc {row['test_accuracy']:.4f}  loss {row['test_loss']:.4f}{reported}"
        if self._progress is not None:
            self._progress.update(self._task, completed=row["round"], status=status)
        else:
            print(f"round {row['round']}: {status}", file=sys.stderr, flush=True)

    def advance_to(self, round_index: int) -> None:
        """The bar at `round_index`, its status (the last evaluation's) kept."""
        if self._progress is not None:
            self._progress.update(self._task, completed=round_index)

    def finish(self, summary: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress.stop()
        target = summary["rounds_to_target"]
        self.console.print(
            f"fedlight: {summary['rounds']} rounds  final acc {summary['final_accuracy']:.4f}  "
            f"best {summary['best_accuracy']:.4f}  rounds to target "
            f"{'-' if target is None else target}  comm {summary['comm_mb']:.2f} MB  "
            f"{summary['wall_seconds']:.1f} s",
            highlight=False,
            soft_wrap=True,
        )
        collapsed = summary.get("collapsed_at_round")
        if collapsed is not None:
            self.console.print(
                f"fedlight: warning: test accuracy fell to chance at round {collapsed} and stayed "
                "there (collapsed_at_round in summary.json)",
                highlight=False,
                soft_wrap=True,
            )
