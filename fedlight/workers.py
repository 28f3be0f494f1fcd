"""Several worker processes inside one run (`fl.workers`, `fl.threads_per_worker`, `fl.backend`).

Every worker runs the same FederatedLoop on the same data and config, so each one draws the same
selection, participants and server state. Per round, `Workers.share` assigns each participant to
one worker, which trains it, encodes its upload and writes its new client state;
`Workers.gather` then brings every participant's outcome to every worker in participant order.
With `fl.exchange=uploads` the outcomes carry the encoded uploads and every worker aggregates
them all in the same order: the arithmetic of one worker, so a run's numbers do not depend on the
number of workers (bit for bit with the sequential engine at equal threads per worker; see
docs/concepts/workers.md). With `fl.exchange=sums` each worker aggregates its own share and one
partial sum per worker is gathered (in rank order), which moves one model per worker instead of one
per client and agrees with one worker to float rounding.

How participants are shared: largest first (by number of training examples), each to the worker
with the least work so far, ties to the lowest rank; clients of equal size thus go round-robin.
The assignment is a pure function of the round's participants, so every worker computes it alone.

How workers start (`fedlight.experiment.run_job` picks):
- inside a process group that exists or that torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR,
  MASTER_PORT in the environment): this process is one rank of it (`join_workers`);
- `fl.workers=N > 1` otherwise: N fresh processes on this machine (`spawn_workers`), which meet
  at a TCP store on 127.0.0.1 that this process holds on a free port;
- else this process alone (`OneWorker`, where share and gather are the identity).

Spawned workers live and die with the run: each one asks the kernel for SIGKILL when its parent
dies (Linux `prctl(PR_SET_PDEATHSIG)`; torch asks for SIGINT, which a process started with SIGINT
ignored, as in a background job, never acts on) and ends at once if the parent died before it
asked; they share the parent's run-directory locks (`fedlight.run_dir`), so a directory stays
locked until the last process of its run has ended; SIGTERM to the parent stops them first. At
every exchange a worker waits at most `fl.worker_timeout` seconds for the others, then ends the
run naming the worker that did not come (a stopped or hung process). A worker that is killed or
lost ends the run with exit code 4 (`WorkerLostError`); one that raised an unexpected error with
exit code 1, below its traceback.
"""

import atexit
import ctypes
import gc
import io
import itertools
import os
import pickle
import signal
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing import reduction
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp
from torch import Tensor
from torch.multiprocessing.spawn import ProcessException, ProcessRaisedException

from fedlight import run_dir
from fedlight.allocator import fix_mmap_threshold
from fedlight.config import FLSettings, RunSettings, check_nccl
from fedlight.errors import one_line, require
from fedlight.preemption import (
    PREEMPTED_EXIT_CODE,
    Preempted,
    forget_inherited_watches,
    forwarded_to,
    watched,
    watching,
)

Item = TypeVar("Item")
Value = TypeVar("Value")
# The environment torchrun (and `srun torchrun`) gives each process it starts.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


TIMEOUT_SETTING = "fl.worker_timeout"
GRACE_SECONDS = 1.0  # after a worker failed, how long the others may take to end by themselves
LAST_CALL_SECONDS = 10.0  # how long workers wait for each other after a collective timed out
PR_SET_PDEATHSIG = 1  # prctl(2)
# Each ProcessGroupWorkers of a process gets the next number; every process makes them in the
# same order, so the numbers name the same exchanges in every process.
GENERATIONS = itertools.count()
GATHER_CHUNK_BYTES = 8 * 2**20  # each worker's share of one collective of a gather


class WorkerError(RuntimeError):
    """A worker process failed; the message names the worker and its error on one line."""

    exit_code = 1  # an unexpected error, as in one process: its traceback is printed above


class WorkerLostError(WorkerError):
    """A worker process was killed by a signal, or did not come to an exchange in time."""

    exit_code = 4


class Terminated(BaseException):
    """This process got SIGTERM while its workers ran (they are stopped before it ends)."""


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


def assign(costs: Sequence[int], count: int) -> tuple[tuple[int, ...], ...]:
    """Positions (ascending) of the items each of `count` workers takes: largest cost first, each
    to the least loaded worker (ties: lowest rank)."""
    loads = [0] * count
    positions: list[list[int]] = [[] for _ in range(count)]
    for position in sorted(range(len(costs)), key=lambda p: (-costs[p], p)):
        worker = min(range(count), key=lambda w: (loads[w], w))
        loads[worker] += costs[position]
        positions[worker].append(position)
    return tuple(tuple(sorted(mine)) for mine in positions)


@dataclass(frozen=True)
class Share:
    """Which of a round's items each worker takes, and which worker this is."""

    rank: int
    positions: tuple[tuple[int, ...], ...]  # per worker: positions in the round's list

    def mine(self, items: Sequence[Item]) -> list[Item]:
        return [items[position] for position in self.positions[self.rank]]


class Workers(ABC):
    """The processes of one run; rank 0 (`main`) evaluates, logs and writes the run's files."""

    def __init__(self, rank: int, count: int, device: torch.device) -> None:
        self.rank = rank
        self.count = count
        self.device = device  # where this worker trains: cuda:<local rank> on GPUs

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, costs: Sequence[int]) -> Share:
        """This round's assignment of items of the given costs (e.g. training examples)."""
        return Share(self.rank, assign(costs, self.count))

    @abstractmethod
    def gather(self, share: Share, mine: Sequence[Item]) -> list[Item]:
        """Every worker's items (`mine`: this worker's, in the order of its share) in the order
        of the round's list; tensors arrive bit-identical on this worker's device."""

    def each(self, item: Item) -> list[Item]:
        """Every worker's `item`, in rank order."""
        return self.gather(Share(self.rank, tuple((r,) for r in range(self.count))), [item])

    @abstractmethod
    def broadcast(self, value: Value) -> Value:
        """Rank 0's `value`, on every worker."""

    @abstractmethod
    def barrier(self) -> None:
        """Returns once every worker has called it."""


class OneWorker(Workers):
    """This process alone: every item is its own."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(0, 1, device)

    def gather(self, share: Share, mine: Sequence[Item]) -> list[Item]:
        return list(mine)

    def broadcast(self, value: Value) -> Value:
        return value

    def barrier(self) -> None:
        """Nobody to wait for."""


class TensorPickler(pickle.Pickler):
    """Pickles everything but tensors, which it collects for one flat transfer."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors: list[Tensor] = []

    def persistent_id(self, obj: Any) -> int | None:
        if isinstance(obj, Tensor):
            self.tensors.append(obj)
            return len(self.tensors) - 1
        return None


class TensorUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, tensors: list[Tensor]) -> None:
        super().__init__(file)
        self.tensors = tensors

    def persistent_load(self, pid: Any) -> Tensor:
        return self.tensors[pid]


@dataclass
class Packed:
    """Items without their tensors, and each tensor's dtype and shape in the flat byte buffer."""

    pickled: bytes
    specs: list[tuple[torch.dtype, tuple[int, ...]]]
    nbytes: int


def describe(items: Sequence[Any]) -> tuple[Packed, list[Tensor]]:
    """Items as pickled bytes without their tensors, and the tensors (`exchange_bytes` moves
    them)."""
    file = io.BytesIO()
    pickler = TensorPickler(file)
    pickler.dump(list(items))
    tensors = pickler.tensors
    specs = [(t.dtype, tuple(t.shape)) for t in tensors]
    return Packed(file.getvalue(), specs, sum(t.nbytes for t in tensors)), tensors


def byte_views(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Each tensor's bytes as a flat uint8 tensor sharing its storage (a copy if not contiguous)."""
    return [t.detach().contiguous().reshape(-1).view(torch.uint8) for t in tensors]


def received(packed: Packed, device: torch.device) -> list[Tensor]:
    """Empty tensors of `packed`'s dtypes and shapes, for `exchange_bytes` to fill."""
    return [torch.empty(shape, dtype=dtype, device=device) for dtype, shape in packed.specs]


def rebuild(packed: Packed, tensors: Sequence[Tensor], device: torch.device) -> list[Any]:
    """The items `describe` took apart, with `tensors` (moved to `device`) in their places."""
    return TensorUnpickler(io.BytesIO(packed.pickled), [t.to(device) for t in tensors]).load()


def spans(parts: Sequence[Tensor], start: int, stop: int) -> Iterator[tuple[Tensor, int]]:
    """The pieces of the parts' bytes, laid end to end, that fall in [start, stop): each piece
    with its offset from `start`."""
    offset = 0
    for part in parts:
        end = offset + part.numel()
        low, high = max(start, offset), min(stop, end)
        if low < high:
            yield part[low - offset : high - offset], low - start
        offset = end


AllGather = Callable[[list[Tensor], Tensor], Any]


def exchange_bytes(
    mine: Sequence[Tensor],
    theirs: Sequence[Sequence[Tensor] | None],
    longest: int,
    all_gather: AllGather,
    device: torch.device,
) -> None:
    """Every other worker's tensor bytes into `theirs` (per rank; None: this worker), through
    `device`, `GATHER_CHUNK_BYTES` per worker and collective: what is in flight stays a few
    chunks, not a copy of the round's uploads (a worker's largest memory otherwise)."""
    sources = byte_views(mine)
    targets = [None if tensors is None else byte_views(tensors) for tensors in theirs]
    for start in range(0, longest, GATHER_CHUNK_BYTES):
        stop = min(start + GATHER_CHUNK_BYTES, longest)
        outgoing = torch.zeros(stop - start, dtype=torch.uint8, device=device)
        for piece, at in spans(sources, start, stop):
            outgoing[at : at + piece.numel()] = piece
        incoming = [torch.empty_like(outgoing) for _ in targets]
        all_gather(incoming, outgoing)
        for parts, buffer in zip(targets, incoming, strict=True):
            for piece, at in spans(parts or [], start, stop):
                piece.copy_(buffer[at : at + piece.numel()])


class ProcessGroupWorkers(Workers):
    """The ranks of torch.distributed's default process group.

    Before each collective the workers meet at the group's store: each sets its key and waits
    for the others' for at most `timeout` seconds, so that a worker that never comes (stopped,
    hung) ends the run with a `WorkerLostError` naming it instead of a silent wait. A collective
    that times out (gloo's timeout is `timeout` too: a worker stopped during it) is followed by a
    last meeting that names the worker that did not come to it.
    """

    def __init__(self, device: torch.device, timeout: float) -> None:
        super().__init__(dist.get_rank(), dist.get_world_size(), device)
        # NCCL moves GPU tensors; gloo moves CPU tensors (it has no all_gather for CUDA).
        self.transport = device if dist.get_backend() == "nccl" else torch.device("cpu")
        self.timeout = timeout
        self.store = dist.PrefixStore(
            f"fedlight/{next(GENERATIONS)}/", dist.distributed_c10d._get_default_store()
        )
        self.store.set(f"pid/{self.rank}", str(os.getpid()))
        self.exchanges = 0

    @contextmanager
    def exchange(self) -> Iterator[None]:
        """The block's collectives, once every worker has come to them."""
        self.exchanges += 1
        self.meet(f"exchange/{self.exchanges}", self.timeout)
        if self.exchanges > 1:  # everyone passed the previous meeting: its keys are done with
            self.store.delete_key(f"exchange/{self.exchanges - 1}/{self.rank}")
        started = time.monotonic()
        try:
            yield
        except RuntimeError:
            if time.monotonic() - started >= self.timeout:  # timed out, not a local error
                self.meet("last", min(self.timeout, LAST_CALL_SECONDS))
            raise

    def meet(self, name: str, timeout: float) -> None:
        """Returns once every worker has come to the meeting `name`; raises `WorkerLostError`
        naming the workers that did not come within `timeout` seconds."""
        keys = [f"{name}/{rank}" for rank in range(self.count)]
        self.store.set(keys[self.rank], "")
        try:
            self.store.wait(keys, timedelta(seconds=timeout))
        except dist.DistStoreError:
            missing = [rank for rank, key in enumerate(keys) if not self.store.check([key])]
            if missing:
                raise WorkerLostError(self.lost(missing)) from None

    def lost(self, missing: list[int]) -> str:
        named = ", ".join(
            f"{rank} (pid {self.store.get(f'pid/{rank}').decode()})"
            if self.store.check([f"pid/{rank}"])
            else str(rank)
            for rank in missing
        )
        return (
            f"worker {named} did not come to an exchange of the {self.count} workers within "
            f"{TIMEOUT_SETTING}={self.timeout:g} s (stopped or hung); the run stopped: resume "
            f"from its last checkpoint, with a larger {TIMEOUT_SETTING} if a worker needs longer"
        )

    def gather(self, share: Share, mine: Sequence[Item]) -> list[Item]:
        """The pickled items without tensors (all_gather_object), then the tensors' bytes
        (`exchange_bytes`, straight into tensors of their own)."""
        packed, tensors = describe(mine)
        everyone: list[Packed | None] = [None] * self.count
        with self.exchange():
            dist.all_gather_object(everyone, packed)
            packs = [p for p in everyone if p is not None]
            theirs = [
                None if rank == self.rank else received(p, self.transport)
                for rank, p in enumerate(packs)
            ]
            longest = max(p.nbytes for p in packs)
            exchange_bytes(tensors, theirs, longest, dist.all_gather, self.transport)
        items: list[Any] = [None] * sum(len(positions) for positions in share.positions)
        for rank, (positions, bytes_of) in enumerate(zip(share.positions, theirs, strict=True)):
            got = mine if bytes_of is None else rebuild(packs[rank], bytes_of, self.device)
            for position, item in zip(positions, got, strict=True):
                items[position] = item
        return items

    def broadcast(self, value: Value) -> Value:
        box = [value]
        with self.exchange():
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        with self.exchange():
            pass  # the meeting is the barrier


def resolve_backend(setting: str, device: torch.device) -> str:
    """`fl.backend` with `auto` resolved: NCCL between GPUs, gloo between CPUs."""
    backend = ("nccl" if device.type == "cuda" else "gloo") if setting == "auto" else setting
    check_nccl(backend, device.type == "cuda", f"this run's device is {device}")
    return backend


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
    # the end of their round instead (`fedlight.preemption`)
    if threading.current_thread() is not threading.main_thread() or watching(signal.SIGTERM):
        yield
        return
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
