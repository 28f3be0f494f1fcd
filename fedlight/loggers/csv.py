"""metrics.csv: one row per evaluated round, flushed at once so a killed run loses nothing."""

import csv
from dataclasses import dataclass, field
from typing import IO, Any

from fedlight.loggers.base import METRIC_COLUMNS, MetricsRow, RunInfo


@dataclass
class CSVLogger:
    filename: str = "metrics.csv"
    _file: IO[str] | None = field(default=None, init=False, repr=False)
    _writer: Any = field(default=None, init=False, repr=False)

    def start(self, run: RunInfo) -> None:
        self._file = (run.output_dir / self.filename).open("w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=METRIC_COLUMNS, extrasaction="ignore")
        self._writer.writeheader()
        self._file.flush()

    def log_round(self, row: MetricsRow) -> None:
        self._writer.writerow(row)
        self._file.flush()

    def finish(self, summary: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.close()
