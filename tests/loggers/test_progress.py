"""A run's progress on the console (`console.progress`): one plain line per round where the
output is not a terminal, a live bar that redraws a few times a second on one, nothing where the
job's logging is quiet."""

import io
import re
import time
from pathlib import Path

from fedlight.loggers.base import RunInfo
from fedlight.loggers.console import ConsoleProgress, clients_text, clock_text
from tests.conftest import TINY, run_cli

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_output_that_is_no_terminal_gets_one_plain_line_per_round(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = run_cli(*TINY, "fl.rounds=4", "eval.every=2", f"hydra.run.dir={run}", cwd=tmp_path)
    rounds = [line for line in result.stderr.splitlines() if line.startswith("round ")]
    assert [line.split(":")[0] for line in rounds] == [f"round {r}" for r in (1, 2, 3, 4)]
    assert rounds[0].startswith("round 1: train_loss ") and rounds[1].startswith("round 2: acc ")
    assert "\r" not in result.stderr and not ANSI.search(result.stderr)  # no bar, no colours
    kept = (run / "console.log").read_text().splitlines()
    assert [line for line in kept if line.startswith("round ")] == rounds


def test_hydras_quiet_job_logging_silences_the_progress(tmp_path: Path) -> None:
    result = run_cli(
        *TINY, "hydra/job_logging=disabled", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path
    )
    assert not [line for line in result.stderr.splitlines() if line.startswith("round ")]
    assert "fedlight: settings " in result.stdout and "console.progress=off" in result.stdout
    assert "fedlight: 4 rounds  final acc" in result.stderr  # the result is no progress


class Frames(io.StringIO):
    """A terminal's stream that keeps each write with its time."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((time.monotonic(), text))
        return super().write(text)


def run_info(rounds: int) -> RunInfo:
    return RunInfo(Path("."), {}, {}, None, rounds)


def test_the_bar_shows_round_clients_clock_eta_and_accuracy_a_few_times_a_second() -> None:
    stream = Frames()
    progress = ConsoleProgress("bar", stream)
    progress.start(run_info(3))
    started = time.monotonic()
    for round_index in (1, 2):
        progress.round_started(round_index)
        progress.clients_chosen(4, 4)
        for _ in range(4):
            for _ in range(2000):  # far more updates than redraws: rich's thread draws
                progress.client_trained()
            time.sleep(0.05)
        row = {"round": round_index, "test_accuracy": 0.5, "test_loss": 1.0, "train_loss": 1.0}
        progress.log_round(row)
    progress.round_started(3)
    progress.clients_chosen(4, 4)
    progress.client_trained()
    progress.client_trained()
    time.sleep(1.1)  # two redraws at least, with the round's clock past a second
    drawn = [ANSI.sub("", text) for _, text in stream.writes if "round" in text]
    last = drawn[-1]
    assert "2/3" in last and "clients 2/4" in last and "acc 0.5000" in last
    assert re.search(r"0:0[12] in round", last) and re.search(r"ETA 0:0\d", last)
    seconds = time.monotonic() - started
    assert len(drawn) <= 2 * seconds + 3, (len(drawn), seconds)  # refresh_per_second=2
    progress.log_round({"round": 3, "train_loss": 1.0})
    progress.finish(
        {
            "rounds": 3,
            "final_accuracy": 0.5,
            "best_accuracy": 0.5,
            "rounds_to_target": None,
            "comm_mb": 1.0,
            "wall_seconds": seconds,
        }
    )
    assert stream.getvalue().rstrip().endswith("s") and "fedlight: 3 rounds" in stream.getvalue()


def test_several_workers_count_the_main_workers_share_and_say_so() -> None:
    fields = {"clients": 2, "mine": 5, "participants": 10}
    assert clients_text(fields) == "clients 2/5 (this worker; 10 in round)"
    assert clients_text(fields | {"mine": 10}) == "clients 2/10"
    assert clients_text(fields | {"mine": None}) == "clients 2"  # asynchronous: K unknown
    timing = {"round_started": 100.0, "seconds_per_round": 60.0, "rounds_left": 3}
    assert clock_text(timing, now=110.0) == "0:10 in round, ETA 2:50"
    assert clock_text(timing | {"seconds_per_round": None}, now=110.0) == "0:10 in round, ETA -"


def test_off_prints_no_progress() -> None:
    stream = io.StringIO()
    progress = ConsoleProgress("off", stream)
    progress.start(run_info(2))
    progress.round_started(1)
    progress.client_trained()
    progress.log_round({"round": 1, "train_loss": 1.0})
    progress.close()
    assert stream.getvalue() == ""


def test_each_job_of_a_sweep_says_where_the_sweep_stands_as_it_starts_and_ends(
    tmp_path: Path,
) -> None:
    """Three jobs, the second diverging (`optim.lr=1e6`): counted from their directories."""
    sweep = tmp_path / "sweep"
    result = run_cli(
        "-m",
        *TINY,
        "fl.rounds=2",
        "fl.workers=1",
        "optim.lr=0.05,1e6,0.05",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    said = [
        line.removeprefix(f"fedlight: sweep {sweep}: ")
        for line in result.stderr.splitlines()
        if line.startswith("fedlight: sweep ")
    ]
    counts = [line.rpartition(", ETA ")[0] for line in said]
    assert counts == [
        "0 of 3 done (0 failed, 0 diverged), 1 running, 2 left",
        "1 of 3 done (0 failed, 0 diverged), 0 running, 2 left",
        "1 of 3 done (0 failed, 0 diverged), 1 running, 1 left",
        "2 of 3 done (0 failed, 1 diverged), 0 running, 1 left",
        "2 of 3 done (0 failed, 1 diverged), 1 running, 0 left",
        "3 of 3 done (0 failed, 1 diverged), 0 running, 0 left",
    ]
    etas = [line.rpartition(", ETA ")[2] for line in said]
    assert etas[0] == "-" and etas[-1] == "0 s"  # none finished yet; none left
    assert all(re.fullmatch(r"\d+ s|\d+ min \d\d s", eta) for eta in etas[1:])


def test_quiet_sweeps_say_nothing_of_the_sweep(tmp_path: Path) -> None:
    result = run_cli(
        "-m",
        *TINY,
        "fl.rounds=1",
        "fl.workers=1",
        "console.progress=off",
        "seed=0,1",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    assert "fedlight: sweep " not in result.stderr and "round 1:" not in result.stderr
