"""How a run's worker processes start (`fl.workers`, `fl.threads_per_worker`, `fl.backend`), and
what `fl.workers=auto` chooses; what they exchange once started is `fedlight.drivers.workers`.

How workers start (`fedlight.runs.experiment.run_job` picks):
- inside a process group that exists or that torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR,
  MASTER_PORT in the environment): this process is one rank of it (`join_workers`);
- `fl.workers=N > 1` otherwise: N fresh processes on this machine (`spawn_workers`), which meet
  at a TCP store on 127.0.0.1 that this process holds on a free port;
- else this process alone (`OneWorker`, where share and gather are the identity).

Spawned workers live and die with the run: each one asks the kernel for SIGKILL when its parent
dies (Linux `prctl(PR_SET_PDEATHSIG)`; torch asks for SIGINT, which a process started with SIGINT
ignored, as in a background job, never acts on) and ends at once if the parent died before it
asked; they share the parent's run-directory locks (`fedlight.runs.run_dir`), so a directory stays
locked until the last process of its run has ended; SIGTERM to the parent stops them first. A
worker that is killed or lost ends the run with exit code 4 (`WorkerLostError`); one that raised
an unexpected error with exit code 1, below its traceback.
"""

import atexit
import ctypes
import gc
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from multiprocessing import reduction
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp
from torch.multiprocessing.spawn import ProcessException, ProcessRaisedException

from fedlight.core.allocator import fix_mmap_threshold
from fedlight.core.errors import one_line, require
from fedlight.core.settings import FLSettings, RunSettings, check_nccl
from fedlight.core.signals import installed
from fedlight.drivers.preemption import (
    PREEMPTED_EXIT_CODE,
    Preempted,
    forget_inherited_watches,
    forwarded_to,
    watched,
    watching,
)
from fedlight.drivers.workers import (
    ProcessGroupWorkers,
    WorkerError,
    WorkerLostError,
)
from fedlight.runs import run_dir
from fedlight.runs.parallelism import worker_device

GRACE_SECONDS = 1.0  # after a worker failed, how long the others may take to end by themselves


PR_SET_PDEATHSIG = 1  # prctl(2)


class Terminated(BaseException):
    """This process got SIGTERM while its workers ran (they are stopped before it ends)."""


@contextmanager
def threads_of(fl: FLSettings) -> Iterator[None]:
    """This process runs alone with `fl.threads_per_worker` torch threads where it is set (so 1
    and 2 workers compare at equal threads per worker, bit for bit); restored afterwards."""
    before = torch.get_num_threads()
    if fl.threads_per_worker is not None:
        torch.set_num_threads(fl.threads_per_worker)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def resolve_backend(setting: str, device: torch.device) -> str:
    """`fl.backend` with `auto` resolved: NCCL between GPUs, gloo between CPUs."""
    backend = ("nccl" if device.type == "cuda" else "gloo") if setting == "auto" else setting
    check_nccl(backend, device.type == "cuda", f"this run's device is {device}")
    return backend


def join_workers(settings: RunSettings) -> ProcessGroupWorkers:
    """This process as one rank of the existing process group, or of the one torchrun describes
    (initialized here, and kept for the rest of the process: a sweep's jobs reuse it)."""
    world = dist.get_world_size() if dist.is_initialized() else int(os.environ["WORLD_SIZE"])
    require(
        settings.fl.workers in (1, world),
        f"fl.workers={settings.fl.workers} but this process group has {world} processes; "
        "under torchrun leave fl.workers=1 (the world size sets the workers) or make them equal",
    )
    require(
        world <= settings.fl.clients_per_round,
        f"{world} workers exceed fl.clients_per_round={settings.fl.clients_per_round}: "
        "some would never train; start fewer processes",
    )
    local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank() if dist.is_initialized() else 0))
    local_count = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    device = worker_device(settings, local_rank, local_count)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        timeout = timedelta(seconds=settings.fl.worker_timeout)
        dist.init_process_group(resolve_backend(settings.fl.backend, device), timeout=timeout)
        # Ended before the interpreter exits: a group left to teardown can abort the process
        # after the run ("terminate called without an active exception", exit −6).
        atexit.register(destroy_if_initialized)
    if settings.fl.threads_per_worker is not None:
        torch.set_num_threads(settings.fl.threads_per_worker)
    return ProcessGroupWorkers(device, settings.fl.worker_timeout)


def destroy_if_initialized() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def spawned_threads(fl: FLSettings) -> int:
    """Torch threads of each spawned worker: `fl.threads_per_worker`, else this process's share."""
    if fl.threads_per_worker is not None:
        return fl.threads_per_worker
    return max(1, torch.get_num_threads() // fl.workers)


def workers_start_method(settings: RunSettings) -> str:
    """How `spawn_workers` starts this run's workers (`start_method`)."""
    device = worker_device(settings, 0, settings.fl.workers)
    return start_method(device, spawned_threads(settings.fl))


def start_method(device: torch.device, threads: int) -> str:
    """How a worker process starts: forked where it trains on the CPU with one torch thread (in
    milliseconds, sharing this process's imported modules and loaded pages), else spawned (a
    fresh interpreter that imports torch again: seconds). A forked process must not run OpenMP
    with several threads: GNU OpenMP's thread pool, which this process may have started, does
    not survive a fork (the child hangs), and CUDA cannot be used after one."""
    forkable = "fork" in torch_mp.get_all_start_methods()
    return "fork" if forkable and device.type == "cpu" and threads == 1 else "spawn"


def spawn_workers(
    settings: RunSettings,
    target: Callable[..., Any],
    args: tuple[Any, ...],
    passed_on: tuple[type[BaseException], ...],
) -> None:
    """Runs `target(workers, *args)` in `fl.workers` new processes of this machine and waits.

    A worker's failure stops them all and is raised here: errors of the `passed_on` types as
    they are (a user's one-line config or data error), a worker killed or lost as a
    `WorkerLostError`, anything else as a one-line `WorkerError` below the worker's traceback.
    """
    count, threads = settings.fl.workers, spawned_threads(settings.fl)
    resolve_backend(settings.fl.backend, worker_device(settings, 0, count))  # refused: no spawn
    method = workers_start_method(settings)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    errors = torch_mp.get_context(method).SimpleQueue()
    # a forked worker holds this process's open files, its run-directory locks among them
    locks = InheritedFds(run_dir.held.values() if method == "spawn" else ())
    worker_args = (count, store.port, threads, errors, passed_on, locks)
    with sigterm_raises_terminated():
        with frozen_for_fork(method == "fork"):
            context = torch_mp.start_processes(
                run_spawned,
                args=(*worker_args, os.getpid(), settings, target, args),
                nprocs=count,
                start_method=method,
                join=False,
            )
        try:
            with forwarded_to([p.pid for p in context.processes if p.pid is not None]):
                while not context.join(grace_period=GRACE_SECONDS):
                    pass
        except ProcessException as failure:
            raise reported_failure(failure, errors, count) from None
        finally:  # interrupted (Ctrl-C, SIGTERM): no worker outlives this process
            for process in context.processes:
                process.kill()
                process.join()


@contextmanager
def frozen_for_fork(forking: bool) -> Iterator[None]:
    """While workers are forked, this process's objects are out of the collector's reach, and so
    they stay in every forked worker: a worker must never destroy a copy of an object whose
    threads it does not have (a TCP store's destructor waits for its server thread forever), and
    a collector that never visits the inherited objects leaves their pages shared instead of
    copying them (CPython's `gc.freeze` advice for forking servers). Garbage dies first, here."""
    if not forking:
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def sigterm_raises_terminated() -> Iterator[None]:
    """SIGTERM raises `Terminated` in this (main) thread for the duration, so that the workers
    are stopped before this process ends."""

    def terminated(signum: int, frame: Any) -> None:
        raise Terminated

    # only the main thread handles signals; a preemption watch has SIGTERM stop the workers at
    # the end of their round instead (`fedlight.drivers.preemption`)
    if watching(signal.SIGTERM):
        yield
        return
    with installed({signal.SIGTERM: terminated}):  # off the main thread: nothing installed
        yield


def reported_failure(failure: ProcessException, errors: Any, count: int) -> BaseException:
    """The error to raise for the worker that failed first: what it reported, or how it ended."""
    reported: dict[int, tuple[BaseException, bool]] = {}
    while not errors.empty():
        rank, error, traced = errors.get()
        reported.setdefault(rank, (error, traced))
    worker = f"fl.workers={count}: worker {failure.error_index} (pid {failure.error_pid})"
    if failure.error_index in reported:
        error, traced = reported[failure.error_index]
        if traced and isinstance(failure, ProcessRaisedException):
            print(failure.msg.strip(), file=sys.stderr, flush=True)
        return error
    signal_name = getattr(failure, "signal_name", None)
    if signal_name is not None:
        return WorkerLostError(
            f"{worker} was killed by {signal_name}; the run stopped: resume from its last "
            "checkpoint"
        )
    return WorkerError(
        f"{worker} ended with exit code {getattr(failure, 'exit_code', '?')} without reporting "
        "an error"
    )


class InheritedFds:
    """File descriptors a spawned worker inherits (the same open files: a lock held on them is
    held by the worker too). Pickled while a process is spawned, they join the descriptors it
    passes to the new process."""

    def __init__(self, descriptors: Iterable[int]) -> None:
        self.descriptors = tuple(descriptors)

    def __reduce__(self) -> tuple[Any, ...]:
        return (inherited_fds, (tuple(reduction.DupFd(fd) for fd in self.descriptors),))


def inherited_fds(wrappers: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(wrapper.detach() for wrapper in wrappers)


def die_with_parent(parent: int) -> None:
    """SIGKILL for this process when its parent dies (Linux), and its end now if the parent died
    already (this process was then given to another parent before it asked)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def run_spawned(
    rank: int,
    count: int,
    port: int,
    threads: int,
    errors: Any,
    passed_on: tuple[type[BaseException], ...],
    locks: tuple[int, ...],
    parent: int,
    settings: RunSettings,
    target: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    """One spawned worker: join the others at the parent's TCP store, run, leave the group.

    An error is reported (rank, error, whether its traceback should be shown) before the group is
    left: leaving makes the others fail too, and the parent raises the error of the worker that
    failed first. `locks`, the parent's run-directory locks, are open in this process until it
    ends (inherited as it started): nothing is done with them.
    """
    die_with_parent(parent)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker had the parent's handler
    forget_inherited_watches()
    torch.set_num_threads(threads)
    fix_mmap_threshold(settings.fl.mmap_threshold_mb)  # a spawned worker's C library is new
    with watched(settings.preemption.signals, insist=False):  # the parent insists, not workers
        try:
            run_in_group(rank, count, port, errors, passed_on, settings, target, args)
        except Preempted:  # reported to the parent, which ends the run
            sys.exit(PREEMPTED_EXIT_CODE)


def run_in_group(
    rank: int,
    count: int,
    port: int,
    errors: Any,
    passed_on: tuple[type[BaseException], ...],
    settings: RunSettings,
    target: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    """`run_spawned`'s worker in the process group: errors reported before the group is left."""
    try:
        device = worker_device(settings, rank, count)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        store = dist.TCPStore("127.0.0.1", port, is_master=False)
        dist.init_process_group(
            resolve_backend(settings.fl.backend, device),
            store=store,
            rank=rank,
            world_size=count,
            timeout=timedelta(seconds=settings.fl.worker_timeout),
        )
        target(ProcessGroupWorkers(device, settings.fl.worker_timeout), *args)
    except (*passed_on, WorkerLostError) as error:
        errors.put((rank, error, False))
        raise
    except Exception as error:
        summary = one_line(error, separator=" ", limit=300)
        failed = WorkerError(f"worker {rank} failed: {type(error).__name__}: {summary}")
        errors.put((rank, failed, True))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
