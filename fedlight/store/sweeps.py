"""Where each job of a sweep stands, read from the files its run leaves in its directory (see
`fedlight.store.run_files`), so that the jobs of any launcher (basic, joblib, SLURM, Ray: processes
on other machines that share the filesystem) are counted, resumed and reported the same way.

A job is *finished* once its run wrote summary.json (a diverged run and one the privacy budget
stopped write it too: each is a result), *running* while a process holds its directory's lock,
*stopped* when it left a checkpoint or logged rounds and nobody writes it (killed, out of time,
preempted: it resumes from its checkpoint, or starts again without one), *failed* when fedlight
ended it with an error (error.txt holds the line it printed), and *not started* otherwise (no
directory yet, or one without any of these files).
"""

import functools
import json
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from fedlight.store.run_files import (
    CHECKPOINT_NAME,
    ERROR_NAME,
    PREEMPTED_NAME,
    SUMMARY_NAME,
    lock_holder,
)

# Set by `fedlight` for the jobs of a sweep whose jobs are known before it runs (Hydra's basic
# sweeper): how many there are, so that a job can say how many are left.
SWEEP_JOBS_VARIABLE = "FEDLIGHT_SWEEP_JOBS"
# Set by `fedlight` to `<host>:<pid>` of its own process: a job whose process is a child of it
# (a joblib worker) ends when it dies (`end_with_command`).
COMMAND_VARIABLE = "FEDLIGHT_COMMAND"
PARENT_POLL_SECONDS = 0.5


class JobStatus(StrEnum):
    FINISHED = "finished"
    DIVERGED = "diverged"
    RUNNING = "running"
    STOPPED = "stopped"
    FAILED = "failed"
    NOT_STARTED = "not started"


@dataclass(frozen=True)
class JobState:
    """One job directory as its files describe it."""

    directory: Path
    status: JobStatus
    rounds_logged: int  # rows in metrics.csv (a stopped run may have logged past its checkpoint)
    preempted: bool  # it stopped on a preemption signal (preempted.json) and resumes on its own
    summary: dict[str, Any] | None  # summary.json of a finished job
    holder: str | None = None  # the pid holding the lock of a running job

    @property
    def done(self) -> bool:
        """Finished or diverged: a result of the sweep, not run again by `resume=auto`."""
        return self.status in (JobStatus.FINISHED, JobStatus.DIVERGED)


def job_state(directory: Path, mine: bool = False) -> JobState:
    """What `directory` holds (see the module docstring). `mine`: the caller is the job's own
    process deciding on it, so a lock this process holds is not another run's (a sweep's
    progress, counted in the same process, does see its running job)."""
    rows = logged_rounds(directory / "metrics.csv")
    preempted = (directory / PREEMPTED_NAME).is_file()
    holder = lock_holder(directory)
    if mine and holder == str(os.getpid()):
        holder = None
    summary = read_json(directory / SUMMARY_NAME)
    if holder is not None:
        status = JobStatus.RUNNING
    elif summary is not None:
        diverged = summary.get("diverged_at_round") is not None
        status = JobStatus.DIVERGED if diverged else JobStatus.FINISHED
    elif (directory / ERROR_NAME).is_file():
        status = JobStatus.FAILED
    elif (directory / CHECKPOINT_NAME).is_file() or rows:
        status = JobStatus.STOPPED
    else:
        status = JobStatus.NOT_STARTED
    return JobState(directory, status, rows, preempted, summary, holder)


def sweep_states(sweep_dir: Path) -> list[JobState]:
    """Every job directory of the sweep in `sweep_dir`, in job order."""
    return [job_state(d) for d in job_dirs(sweep_dir)]


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The directories Hydra made for the sweep's jobs (those holding `.hydra/`), not those of
    another sweep inside it (a folder with its own multirun.yaml: a study's `tested` sweep), in job
    order, not the order the file system lists them in."""
    nested = {p.parent for p in sweep_dir.glob("*/**/multirun.yaml")}
    found = [p.parent for p in sweep_dir.glob("**/.hydra") if p.is_dir()]
    jobs = [d for d in found if not any(n == d or n in d.parents for n in nested)]
    return sorted(jobs, key=lambda d: job_order(d.relative_to(sweep_dir).as_posix()))


def job_order(name: str) -> tuple[tuple[int, int | str], ...]:
    """Job directories (names relative to the sweep's) in number order (2 before 10), other names
    after, alphabetically."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in name.split("/"))


def command_value() -> str:
    """`<host>:<pid>` of this process, for COMMAND_VARIABLE."""
    return f"{socket.gethostname()}:{os.getpid()}"


@functools.cache
def end_with_command() -> None:
    """Where this process runs jobs for a `fedlight` command of this host that started it
    (joblib's worker processes; checked once per process), it ends when that command's process
    has died (a `kill -9` of it alone): at once if it is gone already, else within a second of
    its death. Left running, a job holds its directory and its memory while the sweep's
    `fedlight resume` cannot continue it. Its last checkpoint stays, and its own workers die with
    it (`fedlight.drivers.workers`), as when the sweep's process group is killed. A job on another
    host (SLURM, Ray) is not the command's child, whatever its environment says."""
    host, _, pid = os.environ.get(COMMAND_VARIABLE, "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return
    if os.getppid() == int(pid):
        threading.Thread(target=watch_command, args=(int(pid),), daemon=True).start()
    elif not alive(int(pid)):
        end_for_command(int(pid))


def alive(pid: int) -> bool:
    """Whether a process `pid` exists (a reused pid counts: the job then runs on, as before)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user has it
        pass
    return True


def watch_command(command: int) -> None:
    """Polled in a daemon thread: a dead parent leaves this process to another (init)."""
    while os.getppid() == command:
        time.sleep(PARENT_POLL_SECONDS)
    end_for_command(command)


def end_for_command(command: int) -> None:
    """SIGKILL, as `kill -9` of the sweep's process group would have: nothing half-written, the
    lock dropped by the kernel."""
    print(
        f"fedlight: process {os.getpid()}: the fedlight command {command} that started it has "
        "ended; it ends too (`fedlight resume <sweep dir>` continues its job)",
        file=sys.stderr,
        flush=True,
    )
    os.kill(os.getpid(), signal.SIGKILL)


def expected_jobs() -> int | None:
    """The number of jobs of the sweep this process runs a job of, where fedlight knew it."""
    value = os.environ.get(SWEEP_JOBS_VARIABLE, "")
    return int(value) if value.isdigit() else None


def logged_rounds(path: Path) -> int:
    """Data rows of a metrics.csv (0 without one)."""
    try:
        with path.open("rb") as file:
            return max(sum(1 for line in file if line.strip()) - 1, 0)
    except OSError:
        return 0


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`; None where there is none or it is not one (cut short)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def command_flags(hydra: dict[str, Any]) -> list[str]:
    """The flags of the command Hydra recorded (the `hydra` node of multirun.yaml or
    .hydra/hydra.yaml) that are not overrides: -m, --config-name, --config-dir."""
    flags = ["-m"] if hydra.get("mode") in ("MULTIRUN", "RunMode.MULTIRUN") else []
    name = (hydra.get("job") or {}).get("config_name")
    if name and name != "config":
        flags += ["--config-name", str(name)]
    for source in (hydra.get("runtime") or {}).get("config_sources") or []:
        if source.get("provider") == "command-line" and source.get("schema") == "file":
            flags += ["--config-dir", str(source["path"])]
    return flags
