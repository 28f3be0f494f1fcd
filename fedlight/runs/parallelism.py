"""How a run uses this machine's cores: `Parallelism` (worker processes and torch threads each),
what `fl.workers=auto` chooses and why, and the device a name or a worker's rank means."""

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from fedlight.core.errors import require
from fedlight.core.settings import RunSettings

# The environment torchrun (and `srun torchrun`) gives each process it starts.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def resolve_device(name: str) -> torch.device:
    """`device` with `auto` resolved: CUDA where there is a GPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass(frozen=True)
class Parallelism:
    """How a run uses this machine's cores: worker processes, torch threads per worker (None:
    this process's threads shared among them), and, where `fl.workers=auto` chose them, why."""

    workers: int
    threads_per_worker: int | None
    chosen: str = ""  # empty: set by hand

    def summary(self) -> dict[str, Any]:
        """summary.json's `parallelism`."""
        return {
            "workers": self.workers,
            "threads_per_worker": self.threads_per_worker,
            "chosen_by": "auto" if self.chosen else "settings",
            "why": self.chosen or "fl.workers and fl.threads_per_worker as given",
        }


def auto_parallelism(
    setting: Any,
    threads_per_worker: int | None,
    clients_per_round: int,
    device: str,
    one_process: str | None,
    cpus: int,
) -> Parallelism:
    """The workers of `fl.workers=setting` with `cpus` torch threads for the run (the process's:
    OMP_NUM_THREADS or torch's default, its cores). `auto` uses them the fastest way measured
    here: one single-threaded worker per thread when a round has at least as many clients (two
    single-threaded processes train small models faster than one process with two threads:
    docs/concepts/workers.md), else one worker with all the threads; one worker on a GPU, under
    torchrun (the world size decides) and where the algorithm needs one process (`one_process`
    says why). With one thread per worker the numbers do not depend on the machine's cores."""
    if setting != "auto":
        require(
            isinstance(setting, int) and not isinstance(setting, bool),
            f"fl.workers={setting} is not a number of workers; use auto or a count >= 1",
        )
        return Parallelism(setting, threads_per_worker)
    threads = threads_per_worker or 1
    count = cpus // threads
    reason = (
        one_process
        or (None if resolve_device(device).type == "cpu" else f"device={device}")
        or ("under torchrun the world size decides" if in_process_group() else None)
        or (f"{cpus} CPU thread{'s' * (cpus > 1)}" if count < 2 else None)
        or (
            f"{clients_per_round} clients per round < {count}"
            if clients_per_round < count
            else None
        )
    )
    if reason is not None:
        return Parallelism(1, threads_per_worker, f"1 worker ({reason})")
    return Parallelism(
        count,
        threads,
        f"{count} workers × {threads} torch thread{'s' * (threads > 1)} ({clients_per_round} "
        f"clients per round on {cpus} CPU threads)",
    )


def worker_device(settings: RunSettings, local_rank: int, local_count: int) -> torch.device:
    """The device of the worker with this local rank: cuda:<local rank> on GPUs."""
    device = resolve_device(settings.device)
    if device.type != "cuda" or (local_count == 1 and device.index is not None):
        return device
    available = torch.cuda.device_count()
    require(
        local_count <= available,
        f"fl.workers={local_count} on this machine needs as many GPUs and it has {available}; "
        "lower fl.workers (or torchrun --nproc-per-node)",
    )
    return torch.device("cuda", local_rank)


def in_process_group() -> bool:
    """Whether this process is one rank of a group: an initialized one, or torchrun's."""
    return dist.is_initialized() or all(name in os.environ for name in TORCHRUN_VARIABLES)
