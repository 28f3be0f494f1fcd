"""The share/gather protocol of several worker processes inside one run (`fl.workers`,
`fl.backend`); how they start is `fedlight.runs.launch`.

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
At every exchange a worker waits at most `fl.worker_timeout` seconds for the others, then ends the
run naming the worker that did not come (a stopped or hung process, `WorkerLostError`).
"""

import io
import itertools
import os
import pickle
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

Item = TypeVar("Item")
Value = TypeVar("Value")
TIMEOUT_SETTING = "fl.worker_timeout"
LAST_CALL_SECONDS = 10.0  # how long workers wait for each other after a collective timed out
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
