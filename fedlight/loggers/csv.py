"""metrics.csv: one row per round, flushed at once so a killed run loses nothing; the test columns
of a round not evaluated (`eval.every`) are empty cells.

The columns are the fixed ones (`METRIC_COLUMNS`) followed by every other name a stage reported,
in the order they first appeared (sorted within a round). A name that appears after the first row
rewrites the file with the wider header (atomically, from the rows so far), so the file always
has one header that covers every row; a resumed run replays its rows and gets the same header.
The file is made by a rename and reopened without following links (`fedlight.store.files`).
"""

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fedlight.loggers.base import METRIC_COLUMNS, MetricsRow, RunInfo
from fedlight.store.files import open_to_append, write_text


@dataclass
class CSVLogger:
    filename: str = "metrics.csv"
    _path: Path | None = field(default=None, init=False, repr=False)
    _file: IO[str] | None = field(default=None, init=False, repr=False)
    _writer: Any = field(default=None, init=False, repr=False)
    _columns: list[str] = field(default_factory=list, init=False, repr=False)
    _rows: list[MetricsRow] = field(default_factory=list, init=False, repr=False)

    def start(self, run: RunInfo) -> None:
        self._path = run.output_dir / self.filename
        self._columns, self._rows = list(METRIC_COLUMNS), []
        self._rewrite()

    def log_round(self, row: MetricsRow) -> None:
        self._rows.append(row)
        new = [name for name in row if name not in self._columns]
        if new:
            self._columns += new
            self._rewrite()
        else:
            self._writer.writerow(row)
            self._file.flush()

    def shows_clients(self) -> bool:
        return False  # metrics.csv is one row per round

    def log_clients(self, round_index: int, clients: Sequence[MetricsRow]) -> None:
        pass

    def _rewrite(self) -> None:
        """The whole file again (the header and the rows so far), replacing the old one
        atomically, then open to append the next rows."""
        assert self._path is not None
        if self._file is not None:
            self._file.close()
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self._columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(self._rows)
        write_text(self._path, text.getvalue())
        self._file = open_to_append(self._path)
        self._writer = csv.DictWriter(self._file, fieldnames=self._columns, extrasaction="ignore")

    def finish(self, summary: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.close()
