"""What the worker processes of tests/drivers/test_workers.py run (a spawned process imports them by
name). Only light imports at the top, so that the failure tests' workers start quickly; running
jobs imports fedlight's experiment when the jobs arrive anyway."""

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from fedlight.drivers.workers import ProcessGroupWorkers, Workers


def fail_on_rank_one(workers: Workers, error: Exception) -> None:
    """Rank 1 raises `error`; rank 0 waits at a barrier that only its termination can end."""
    if workers.rank == 1:
        raise error
    workers.barrier()


def run_jobs(workers: Workers, runs: list[tuple[Any, Path, int | None]]) -> None:
    """Each (job, run directory, round to kill it in or None) as the ranks of one process group,
    as torchrun would run them: `run_job` joins the existing group."""
    from fedlight.runs.experiment import run_job
    from tests.conftest import run_killed_in_round

    for job, run_dir, kill_round in runs:
        if kill_round is None:
            run_job(job, run_dir)
        else:
            run_killed_in_round(job, run_dir, kill_round, pytest.MonkeyPatch())


def hold_until(workers: Workers, ready: Path, go: Path) -> None:
    """Each worker says it runs (a file named by its rank in `ready`), then waits for `go`."""
    (ready / str(workers.rank)).touch()
    while not go.exists():
        time.sleep(0.05)


def fail_quietly_on_rank_one(workers: ProcessGroupWorkers, how: str) -> None:
    """Rank 1 ends without a word (`exit`: exit code 3) or stops (`stop_in_collective`: SIGSTOP
    once both workers have met, inside the collective that rank 0 then waits in)."""
    import torch.distributed as dist

    if how == "exit" and workers.rank == 1:
        os._exit(3)
    with workers.exchange():
        if workers.rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        dist.barrier()
