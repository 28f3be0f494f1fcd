"""Several worker processes inside one run (`fl.workers`, `fl.threads_per_worker`, `fl.backend`).

Every worker runs the same FederatedLoop on the same data and config, so each one draws the same
selection, participants and server state. Per round, `Workers.share` assigns each participant to
one worker, which trains it, encodes its upload and writes its new client state;
`Workers.gather` then brings every participant's outcome to every worker in participant order.
With `fl.exchange=uploads` the outcomes carry the encoded uploads and every worker aggregates
them all in the same order: the arithmetic of one worker, so a run's numbers do not depend on the
number of workers (bit for bit with the sequential engine at equal threads per worker; see README
"Several workers"). With `fl.exchange=sums` each worker aggregates its own share and one partial
sum per worker is gathered (in rank order), which moves one model per worker instead of one per
client and agrees with one worker to float rounding.

How participants are shared: largest first (by number of training examples), each to the worker
with the least work so far, ties to the lowest rank; clients of equal size thus go round-robin.
The assignment is a pure function of the round's participants, so every worker computes it alone.

How workers start (`fedlight.experiment.run_job` picks):
- inside a process group that exists or that torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR,
  MASTER_PORT in the environment): this process is one rank of it (`join_workers`);
- `fl.workers=N > 1` otherwise: N fresh processes on this machine (`spawn_workers`), which meet
  at a TCP store on 127.0.0.1 that this process holds on a free port;
- else this process alone (`OneWorker`, where share and gather are the identity).
"""

import atexit
import io
import math
import os
import pickle
import sys
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp
from torch import Tensor
from torch.multiprocessing.spawn import ProcessException

from fedlight.config import FLSettings, RunSettings, check_nccl, one_line, require

Item = TypeVar("Item")
Value = TypeVar("Value")
# The environment torchrun (and `srun torchrun`) gives each process it starts.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class WorkerError(RuntimeError):
    """A worker process failed; the message names the worker and its error on one line."""


def resolve_device(name: str) -> torch.device:
    """`device` with `auto` resolved: CUDA where there is a GPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


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


def pack(items: Sequence[Any], device: torch.device) -> tuple[Packed, Tensor]:
    """Items as pickled bytes plus all their tensors' bytes, one after another, on `device`."""
    file = io.BytesIO()
    pickler = TensorPickler(file)
    pickler.dump(list(items))
    tensors = pickler.tensors
    parts = [t.detach().to(device).contiguous().reshape(-1).view(torch.uint8) for t in tensors]
    flat = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8, device=device)
    specs = [(t.dtype, tuple(t.shape)) for t in tensors]
    return Packed(file.getvalue(), specs, flat.numel()), flat


def unpack(packed: Packed, flat: Tensor, device: torch.device) -> list[Any]:
    """`pack` undone; every tensor gets storage of its own (no view pins the buffer)."""
    tensors, offset = [], 0
    for dtype, shape in packed.specs:
        size = math.prod(shape) * dtype.itemsize
        raw = flat[offset : offset + size].clone()
        tensors.append(raw.view(dtype).reshape(shape).to(device))
        offset += size
    return TensorUnpickler(io.BytesIO(packed.pickled), tensors).load()


class ProcessGroupWorkers(Workers):
    """The ranks of torch.distributed's default process group."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(dist.get_rank(), dist.get_world_size(), device)
        # NCCL moves GPU tensors; gloo moves CPU tensors (it has no all_gather for CUDA).
        self.transport = device if dist.get_backend() == "nccl" else torch.device("cpu")

    def gather(self, share: Share, mine: Sequence[Item]) -> list[Item]:
        """Two collectives: the pickled items without tensors (all_gather_object), then all
        tensor bytes (all_gather of one padded uint8 buffer per worker)."""
        packed, flat = pack(mine, self.transport)
        everyone: list[Packed | None] = [None] * self.count
        dist.all_gather_object(everyone, packed)
        packs = [p for p in everyone if p is not None]
        longest = max(p.nbytes for p in packs)
        buffers = [flat] * self.count
        if longest:
            padded = torch.zeros(longest, dtype=torch.uint8, device=self.transport)
            padded[: flat.numel()] = flat
            buffers = [torch.empty_like(padded) for _ in range(self.count)]
            dist.all_gather(buffers, padded)
        items: list[Any] = [None] * sum(len(positions) for positions in share.positions)
        for rank, positions in enumerate(share.positions):
            theirs = mine if rank == self.rank else unpack(packs[rank], buffers[rank], self.device)
            for position, item in zip(positions, theirs, strict=True):
                items[position] = item
        return items

    def broadcast(self, value: Value) -> Value:
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        dist.barrier()


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
        dist.init_process_group(resolve_backend(settings.fl.backend, device))
        # Ended before the interpreter exits: a group left to teardown can abort the process
        # after the run ("terminate called without an active exception", exit −6).
        atexit.register(destroy_if_initialized)
    if settings.fl.threads_per_worker is not None:
        torch.set_num_threads(settings.fl.threads_per_worker)
    return ProcessGroupWorkers(device)


def destroy_if_initialized() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def spawned_threads(fl: FLSettings) -> int:
    """Torch threads of each spawned worker: `fl.threads_per_worker`, else this process's share."""
    if fl.threads_per_worker is not None:
        return fl.threads_per_worker
    return max(1, torch.get_num_threads() // fl.workers)


def spawn_workers(
    settings: RunSettings,
    target: Callable[..., Any],
    args: tuple[Any, ...],
    passed_on: tuple[type[Exception], ...],
) -> None:
    """Runs `target(workers, *args)` in `fl.workers` new processes of this machine and waits.

    A worker's failure stops them all (torch terminates the others) and is raised here: errors of
    the `passed_on` types as they are (a user's one-line config or data error), anything else as a
    one-line `WorkerError` after the worker has printed its traceback.
    """
    count = settings.fl.workers
    resolve_backend(settings.fl.backend, worker_device(settings, 0, count))  # refused: no spawn
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    errors = torch_mp.get_context("spawn").SimpleQueue()
    worker_args = (count, store.port, spawned_threads(settings.fl), errors, passed_on)
    try:
        torch_mp.start_processes(
            run_spawned,
            args=(*worker_args, settings, target, args),
            nprocs=count,
            start_method="spawn",
        )
    except ProcessException as failure:
        if errors.empty():
            raise WorkerError(
                f"fl.workers={count}: worker {failure.error_index} died "
                f"(exit {getattr(failure, 'exit_code', '?')}); see its output above"
            ) from None
        raise errors.get() from None


def run_spawned(
    rank: int,
    count: int,
    port: int,
    threads: int,
    errors: Any,
    passed_on: tuple[type[Exception], ...],
    settings: RunSettings,
    target: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    """One spawned worker: join the others at the parent's TCP store, run, leave the group.

    An error is reported before the group is left: leaving makes the others fail too, and the
    parent raises the first error reported.
    """
    torch.set_num_threads(threads)
    try:
        device = worker_device(settings, rank, count)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        store = dist.TCPStore("127.0.0.1", port, is_master=False)
        dist.init_process_group(
            resolve_backend(settings.fl.backend, device), store=store, rank=rank, world_size=count
        )
        target(ProcessGroupWorkers(device), *args)
    except passed_on as error:
        errors.put(error)
        raise
    except Exception as error:
        traceback.print_exc(file=sys.stderr)
        summary = one_line(error, separator=" ", limit=300)
        errors.put(WorkerError(f"worker {rank} failed: {type(error).__name__}: {summary}"))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
