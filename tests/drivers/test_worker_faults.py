"""Worker processes (`fl.workers`) live and die with their run: a killed or terminated parent
leaves none behind, they hold the run directory's lock while they live, a killed worker ends the
run with exit code 4 and one line, and a stopped one ends it after `fl.worker_timeout`, named."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedlight.core.errors import ConfigError
from fedlight.core.settings import FLSettings, RunSettings
from fedlight.drivers.workers import WorkerError, WorkerLostError
from fedlight.runs import run_dir
from fedlight.runs.launch import spawn_workers
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY
from tests.helpers import worker_targets
from tests.runs.test_hardening import cli_exit

# A worker waits this long for the others: long enough that the healthy worker's first round
# always comes on a loaded machine (a CI runner, tests in parallel; at 2 s it once did not, and
# the run named it instead of the stopped one), short enough for a test.
TIMEOUT = 20
GROUP = RunSettings(
    fl=FLSettings(workers=2, threads_per_worker=1, worker_timeout=TIMEOUT), device="cpu"
)
TWO_WORKERS = [*TINY, "fl.workers=2", "fl.threads_per_worker=1"]
MARKER = "FEDLIGHT_TEST_RUN"


def processes_marked(marker: str) -> list[int]:
    """The live processes whose environment holds `MARKER=marker` (a run's parent, its workers
    and their helpers inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            environment = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # not a process, gone meanwhile, or a zombie
            continue
        if f"{MARKER}={marker}".encode() in environment:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def marked_run(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[subprocess.Popen, Path, str]]:
    """A long 2-worker CLI run (with the overrides of the test's parameter `extra`, if any),
    started with an environment marker, once its first checkpoint exists (the workers run
    rounds); whatever of it is left is killed afterwards."""
    marker, directory = uuid.uuid4().hex, tmp_path / "run"
    extra = getattr(request, "param", [])
    args = [*TWO_WORKERS, *extra, "fl.rounds=100000", f"hydra.run.dir={directory}"]
    process = subprocess.Popen(
        [sys.executable, "-m", "fedlight", *args],
        cwd=tmp_path,
        env={**os.environ, "WANDB_MODE": "disabled", MARKER: marker},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # As a shell starts a job in the background (`&`, nohup): with SIGINT ignored, which torch
        # asks its spawned workers to get when their parent dies.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    deadline = time.monotonic() + 300
    while not (directory / CHECKPOINT_NAME).exists() and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1]
        time.sleep(0.2)
    yield process, directory, marker
    for pid in processes_marked(marker):
        os.kill(pid, signal.SIGKILL)
    process.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    ("signum", "marked_run", "code", "last_line"),
    [
        (signal.SIGKILL, [], -signal.SIGKILL, None),
        # a preemption notice (the default): the round ends, the checkpoint, exit 75
        (signal.SIGTERM, [], 75, "fedlight: preempted (SIGTERM) after round "),
        (
            signal.SIGTERM,
            ["preemption.signals=[]"],
            143,
            "fedlight: terminated; continue from its last checkpoint with: python -m fedlight ",
        ),
    ],
    ids=["kill", "term", "term-not-a-preemption"],
    indirect=["marked_run"],
)
def test_a_killed_or_terminated_parent_leaves_no_process_of_the_run(
    marked_run: tuple[subprocess.Popen, Path, str],
    signum: int,
    code: int,
    last_line: str | None,
    capsys,
) -> None:
    process, directory, marker = marked_run
    workers = [pid for pid in processes_marked(marker) if pid != process.pid]
    assert len(workers) >= 2  # the two workers (and multiprocessing's resource tracker)
    with pytest.raises(ConfigError, match=r"is being written by another fedlight run"):
        run_dir.acquire(directory, "hydra.run.dir")
    process.send_signal(signum)
    signalled = time.monotonic()
    # 30 s: on a loaded machine (a test suite beside other work) a worker's exit can take
    # seconds; it is never meant to survive its parent
    while any(alive(pid) for pid in workers) and time.monotonic() < signalled + 30:
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)], "workers outlived their parent by 30 s"
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code
    if last_line is not None:  # the parent stopped its workers, said how to go on, unlocked
        assert stderr.strip().splitlines()[-1].startswith(last_line)
        assert not (directory / run_dir.LOCK_NAME).exists()
    # No process of the run holds the lock any more: a resume in place takes it over.
    with run_dir.locked(directory, "hydra.run.dir"):
        pass
    if signum == signal.SIGKILL:
        assert f"locked by process {process.pid}, which has ended" in capsys.readouterr().err


def test_workers_hold_the_run_directory_lock_while_they_live(tmp_path: Path) -> None:
    """The parent's lock is shared by its workers: with the parent's own descriptor closed (as
    if it had died), the directory stays locked until the workers have ended."""
    directory, ready, go = tmp_path / "run", tmp_path / "ready", tmp_path / "go"
    ready.mkdir()
    run_dir.acquire(directory, "hydra.run.dir")
    spawning = threading.Thread(
        target=spawn_workers,
        args=(GROUP, worker_targets.hold_until, (ready, go), (ConfigError,)),
    )
    spawning.start()
    try:
        while len(list(ready.iterdir())) < 2 and spawning.is_alive():
            time.sleep(0.05)
        os.close(run_dir.held.pop(directory.resolve()))  # the parent's lock descriptor
        with pytest.raises(ConfigError, match=r"is being written by another fedlight run"):
            run_dir.acquire(directory, "hydra.run.dir")
    finally:
        go.touch()
        spawning.join()
    with run_dir.locked(directory, "hydra.run.dir"):  # the workers have ended
        pass


@pytest.mark.parametrize(
    ("how", "expected", "message"),
    [
        (
            "exit",
            WorkerError,
            r"^fl.workers=2: worker 1 \(pid \d+\) ended with exit code 3 without reporting an "
            r"error$",
        ),
        (
            "stop_in_collective",
            WorkerLostError,
            r"^worker 1 \(pid \d+\) did not come to an exchange of the 2 workers within "
            rf"fl.worker_timeout={TIMEOUT} s \(stopped or hung\)",
        ),
    ],
)
def test_a_worker_that_ends_or_stops_without_a_word_is_named(
    how: str, expected: type[Exception], message: str, capsys
) -> None:
    started = time.monotonic()
    with pytest.raises(expected, match=message) as raised:
        spawn_workers(GROUP, worker_targets.fail_quietly_on_rank_one, (how,), (ConfigError,))
    assert type(raised.value) is expected and "see its output" not in str(raised.value)
    assert time.monotonic() - started < 120
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("signal_name", "message"),
    [
        ("KILL", r"fl.workers=2: worker 1 \(pid (\d+)\) was killed by SIGKILL; the run stopped"),
        (
            "STOP",
            r"worker 1 \(pid (\d+)\) did not come to an exchange of the 2 workers within "
            rf"fl.worker_timeout={TIMEOUT} s \(stopped or hung\); the run stopped",
        ),
    ],
)
def test_a_killed_or_stopped_worker_ends_the_run_with_exit_code_4_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, signal_name: str, message: str
) -> None:
    """Through the CLI: worker 1 kills or stops itself in its first training step."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    args = [
        *TWO_WORKERS,
        f"fl.worker_timeout={TIMEOUT}",
        "model._target_=tests.helpers.signaled_module.SignaledMLP",
        f"+model.signal={signal_name}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    code, err = cli_exit(args, monkeypatch, capsys)
    assert code == 4
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("fedlight: error: "), err
    found = re.search(message, errors[0])
    assert found, errors[0]
    assert "Traceback" not in err and "see its output" not in err
    assert not alive(int(found.group(1)))  # the stopped worker was killed with the run
