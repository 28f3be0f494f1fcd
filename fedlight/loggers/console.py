"""Console output of a run: its progress as `console.progress` says, then a summary line.

`bar` is rich's live `Progress`: round r/R, the clients trained this round k/K, the round's
elapsed time, the run's ETA and the last evaluation. rich's own thread redraws it
REFRESH_PER_SECOND times a second; the loop only sets numbers (a trained client: one counter),
so the display costs training nothing measurable (docs/speed-and-memory.md). With several workers
only the main worker prints, and until the round's gather it knows only its own share of the round:
the bar then counts that share and says so (`clients 2/5 (this worker; 10 in round)`). What the run
prints meanwhile goes above the bar, and console.log gets the plain lines, not the frames.

`lines` is one plain line per round (`round 3: acc ...`, `round 4: train_loss ...`), for logs,
CI and SLURM: `auto` picks it where stderr is not a terminal, and `off` where the job's logging
is quiet (`fedlight.cli.job.settle_progress`).
"""

import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.file_proxy import FileProxy
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

from fedlight.loggers.base import METRIC_COLUMNS, MetricsRow, RunInfo, is_evaluated
from fedlight.store.run_files import SUMMARY_NAME
from fedlight.store.sweeps import JobState, JobStatus, sweep_states

REFRESH_PER_SECOND = 2  # the bar's redraws: live enough, and nothing a round would notice


class Tee:
    """A text stream shown on a `screen` and kept in a file (console.log: `fedlight.cli.output`)."""

    def __init__(self, screen: TextIO, kept: TextIO) -> None:
        self.screen, self.kept = screen, kept

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.screen.write(text)

    def flush(self) -> None:
        self.kept.flush()
        self.screen.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, encoding, fileno: the screen's
        return getattr(self.screen, name)


def screen_of(stream: TextIO) -> TextIO:
    """Where a live display draws: the screen of a Tee (its frames kept out of console.log)."""
    return getattr(stream, "screen", stream)


def kept_of(stream: TextIO) -> TextIO | None:
    """The file a Tee keeps what it is given in (console.log); None for a plain stream."""
    return getattr(stream, "kept", None)


def duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 12 min`: a sweep's ETA as one reads it."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def clock(seconds: float) -> str:
    """`0:05`, `12:34`, `1:12:05`: a time on the bar, short enough for 80 columns."""
    minutes, secs = divmod(max(0, round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def clients_text(fields: Mapping[str, Any]) -> str:
    """The clients trained this round: k/K, of this worker's share where it has one (K is
    unknown before an asynchronous server update: k alone)."""
    done, mine, total = fields["clients"], fields["mine"], fields["participants"]
    if mine is None:
        return f"clients {done}"
    if mine == total:
        return f"clients {done}/{total}"
    return f"clients {done}/{mine} (this worker; {total} in round)"


def clock_text(fields: Mapping[str, Any], now: float) -> str:
    """The round's elapsed time and the run's ETA at `now`: the mean time of the rounds run so
    far (in this process: a resume's replayed rounds do not count) for every round left, less
    what the round under way has taken."""
    started, per_round = fields["round_started"], fields["seconds_per_round"]
    elapsed = 0.0 if started is None else now - started
    shown = "" if started is None else f"{clock(elapsed)} in round, "
    if per_round is None:
        return f"{shown}ETA -"
    return f"{shown}ETA {clock(per_round * fields['rounds_left'] - elapsed)}"


class ClientsColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(clients_text(task.fields))


class ClockColumn(ProgressColumn):
    """Computed at each redraw, so that the round's clock runs between the loop's updates."""

    def render(self, task: Task) -> Text:
        return Text(clock_text(task.fields, time.monotonic()))


def bar(console: Console) -> Progress:
    return Progress(
        TextColumn("round"),
        BarColumn(bar_width=10),
        MofNCompleteColumn(),
        TextColumn("·"),
        ClientsColumn(),
        TextColumn("·"),
        ClockColumn(),
        TextColumn("{task.fields[status]}"),  # `· acc 0.8123` from the first evaluation on
        console=console,
        refresh_per_second=REFRESH_PER_SECOND,
        redirect_stdout=False,  # `ConsoleProgress.redirect`: above the bar and into console.log
        redirect_stderr=False,
    )


def accuracy_text(accuracy: float | None) -> str:
    """An accuracy of the summary, or "-" where the run has none (a model that is no classifier)."""
    return "-" if accuracy is None else f"{accuracy:.4f}"


@dataclass
class ConsoleProgress:
    """A run's console: `mode` is `console.progress` (`auto`: `bar` where `stream`, the process's
    stderr by default, is a terminal, else `lines`); a RoundLogger and the loop's RoundProgress."""

    mode: str = "auto"
    stream: TextIO | None = None
    _progress: Progress | None = field(default=None, init=False)
    _task: Any = field(default=None, init=False)
    _total: int = field(default=0, init=False)
    _first: tuple[int, float] | None = field(default=None, init=False)  # (round, its start)
    _streams: tuple[TextIO, TextIO] | None = field(default=None, init=False)

    def start(self, run: RunInfo) -> None:
        stream = sys.stderr if self.stream is None else self.stream
        self.stream, self._total = stream, run.total_rounds  # lines and the summary go there
        console = Console(file=screen_of(stream), force_terminal=self.mode == "bar" or None)
        if self.mode == "auto":
            self.mode = "bar" if console.is_terminal else "lines"
        if self.mode != "bar":
            return
        self._progress = bar(console)
        self._task = self._progress.add_task(
            "rounds",
            total=run.total_rounds,
            status="",
            clients=0,
            mine=None,
            participants=None,
            round_started=None,
            seconds_per_round=None,
            rounds_left=run.total_rounds,
        )
        self._progress.start()
        self.redirect(console)

    def redirect(self, console: Console) -> None:
        """While the bar is shown, what the process prints goes above it (rich's FileProxy)
        and still into the file a Tee kept it in (console.log)."""
        self._streams = sys.stdout, sys.stderr

        def above(stream: TextIO) -> TextIO:
            shown = FileProxy(console, screen_of(stream))
            kept = kept_of(stream)
            return shown if kept is None else Tee(shown, kept)  # type: ignore[return-value]

        sys.stdout, sys.stderr = above(sys.stdout), above(sys.stderr)

    def round_started(self, round_index: int) -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = (round_index, now)
        self.update(
            round_started=now,
            clients=0,
            mine=None,
            participants=None,
            rounds_left=self._total - round_index + 1,
        )

    def clients_chosen(self, mine: int, participants: int) -> None:
        self.update(mine=mine, participants=participants)

    def client_trained(self) -> None:
        if self._progress is not None:
            task = self._progress.tasks[0]
            task.fields["clients"] += 1  # rich's next redraw shows it

    def update(self, completed: int | None = None, **fields: Any) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, **fields)

    def shows_clients(self) -> bool:
        return False  # one line per round

    def log_clients(self, round_index: int, clients: Sequence[MetricsRow]) -> None:
        pass

    def log_round(self, row: MetricsRow) -> None:
        """A round's line: its test accuracy and loss and the other numbers it reported where it
        was evaluated, else its train loss alone; on the bar, the round done and its status."""
        round_index = int(row["round"])
        if self.mode == "off":
            return
        if not is_evaluated(row) and not is_evaluated(row, "validation"):
            line = f"round {row['round']}: train_loss {row['train_loss']:.4f}"
            self.show(round_index, None, line)
            return
        reported = "".join(
            f"  {name} {row[name]:.4g}" for name in row if name not in METRIC_COLUMNS
        )
        if not is_evaluated(row):  # the validation set alone (eval.test=final)
            line = f"round {row['round']}: {reported.lstrip()}"
            self.show(round_index, f"· val acc {row['val_accuracy']:.4f}", line)
            return
        # a model that is not a classifier has no accuracy (nan): its loss is its evaluation
        accuracy, loss = float(row["test_accuracy"]), f"loss {row['test_loss']:.4f}"
        shown = f"acc {accuracy:.4f}" if math.isfinite(accuracy) else loss
        tested = f"acc {accuracy:.4f}  {loss}" if math.isfinite(accuracy) else loss
        self.show(round_index, f"· {shown}", f"round {row['round']}: {tested}{reported}")

    def show(self, round_index: int, status: str | None, line: str) -> None:
        """`line` printed, or on the bar the round done (its `status`, None: the last one kept)
        and `line` kept in console.log alone."""
        if self._progress is None:
            print(line, file=self.stream, flush=True)
            return
        kept = kept_of(self._streams[1]) if self._streams else None
        if kept is not None:
            kept.write(f"{line}\n")
            kept.flush()
        timing: dict[str, Any] = {}
        if self._first is not None:  # a round run here, not one a resume replays
            first, since = self._first
            timing["seconds_per_round"] = (time.monotonic() - since) / (round_index - first + 1)
        self.update(
            completed=round_index,
            round_started=None,
            rounds_left=self._total - round_index,
            **({} if status is None else {"status": status}),
            **timing,
        )

    def close(self) -> None:
        """The bar stopped (its last frame stays) and the streams given back; also after a
        failed run, so that its error is printed plainly."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._streams is not None:
            sys.stdout, sys.stderr = self._streams
            self._streams = None

    def finish(self, summary: dict[str, Any]) -> None:
        self.close()
        console = Console(file=self.stream) if self.stream is not None else Console(stderr=True)
        target = summary["rounds_to_target"]
        split = summary.get("splits", {}).get("best_accuracy", "test")
        best = "best" if split == "test" else "best val"  # and the target's round
        final, best_accuracy = summary["final_accuracy"], summary["best_accuracy"]
        console.print(
            f"fedlight: {summary['rounds']} rounds  final acc {accuracy_text(final)}  "
            f"{best} {accuracy_text(best_accuracy)}  rounds to target "
            f"{'-' if target is None else target}  comm {summary['comm_mb']:.2f} MB  "
            f"{summary['wall_seconds']:.1f} s",
            highlight=False,
            soft_wrap=True,
        )
        collapsed = summary.get("collapsed_at_round")
        if collapsed is not None:
            console.print(
                f"fedlight: warning: {split} accuracy fell to chance at round {collapsed} and "
                "stayed there (collapsed_at_round in summary.json)",
                highlight=False,
                soft_wrap=True,
            )


def sweep_line(sweep_dir: Path, expected: int | None) -> str:
    """Where the sweep in `sweep_dir` stands, from its job directories' files
    (`fedlight.store.sweeps`),
    so that the jobs of any launcher (basic, joblib's processes, SLURM's nodes) count alike;
    `expected`: its number of jobs where known (not for a sweeper that picks them as it goes)."""
    states = sweep_states(sweep_dir)
    count = Counter(state.status for state in states)
    failed, diverged = count[JobStatus.FAILED], count[JobStatus.DIVERGED]
    done = count[JobStatus.FINISHED] + diverged + failed
    running, stopped = count[JobStatus.RUNNING], count[JobStatus.STOPPED]
    line = f"fedlight: sweep {sweep_dir}: {done}"
    if expected is not None:
        line += f" of {max(expected, len(states))}"
    line += f" done ({failed} failed, {diverged} diverged), {running} running"
    if expected is None:
        return line
    left = max(expected, len(states)) - done - running
    if stopped:
        line += f", {left} left ({stopped} stopped half-way)"
    else:
        line += f", {left} left"
    seconds = [job_seconds(state) for state in states if state.summary is not None]
    if not seconds:
        return f"{line}, ETA -"
    # the jobs running now taken as the sweep's parallelism (joblib's n_jobs, SLURM's array)
    eta = statistics.mean(seconds) * (left + running) / max(running, 1)
    return f"{line}, ETA {duration(eta)}"


def job_seconds(state: JobState) -> float:
    """How long a finished job took as its launcher ran it: from Hydra's writing its `.hydra/`
    (the job's start) to its summary.json (data loading, set-up and outputs included, which the
    summary's wall_seconds leaves out; its command_seconds counts from the sweep's start)."""
    config = state.directory / ".hydra" / "config.yaml"
    try:
        return (state.directory / SUMMARY_NAME).stat().st_mtime - config.stat().st_mtime
    except OSError:
        return float((state.summary or {}).get("wall_seconds") or 0.0)
