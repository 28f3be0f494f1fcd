"""Per-client persistent state (SCAFFOLD's c_i, the `local` baseline's own models, a wire
transform's error feedback) for many clients.

A store keeps a client's state as one name → tensor dict: the algorithm's entries under their
own names, each stage's under "<stage>/<key>" (e.g. "wire/upload.fp16/net.0.weight"); the
pipelines read and write it as a typed `fedlight.core.messages.ClientState`.

A round reads and writes the state of its participants only, one client at a time (`get`, `put`),
so a store never has to hold every client's tensors at once. `fl.client_state` picks the store:

- `auto` (the default): a state in RAM when `fl.num_clients` states of its size fit in
  `fl.client_state_memory_mb`, on disk otherwise. Small models keep the memory store's speed;
  large ones (SCAFFOLD's c_i of the CIFAR-10 CNN for 100 clients: 420 MB) keep RAM flat as
  clients accumulate state. The choice depends on the state's size alone, so every worker and a
  resumed run make the same one, and either place gives the same numbers.
- `memory`: every state in RAM and in checkpoint.pt (the simplest; fine while all states fit).
- `disk`: one file per client state version under `<run dir>/client_states/<client>/<round>.pt`;
  RAM and the checkpoint hold only the index {client: round of its newest version}, so memory is
  O(clients per round). Versions make resume exact: the checkpoint of round r names versions
  written up to round r, and later rounds write new files beside them instead of overwriting them.
  Exactly the versions a resume could still need are kept (the last saved checkpoint's and the
  newest), so disk use stays within twice the size of the states that exist.

With several workers (`fl.workers`), a new state is stored in two steps: the worker that trained
the client `write`s it, and every worker `commit`s what that write returned, in participant order.
The memory store replicates: `write` returns the tensors, which travel to every worker. The disk
store shares files: `write` saves the version file and returns its round, and `commit` points each
worker's index at it. Only one worker (rank 0, `owns_files`) removes replaced versions and links a
resumed run's files, at points where no other worker can still read them.
"""

import hashlib
import os
import shutil
from abc import abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from fedlight.core.errors import ConfigError
from fedlight.core.settings import FLSettings
from fedlight.core.tensors import StateDict
from fedlight.store.checkpoint import save_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME

CLIENT_STATES_DIR = "client_states"  # the disk store's folder inside a run directory


@dataclass(frozen=True)
class VersionFile:
    """One version file of a client's state: the round that wrote it, and its size and SHA-256,
    which the checkpoint records so that a resume uses only the very bytes the run wrote. Older
    checkpoints recorded the round alone (`size`, `sha256` None)."""

    round_index: int
    size: int | None = None
    sha256: str | None = None

    @classmethod
    def of(cls, path: Path, round_index: int) -> "VersionFile":
        """The record of the file just written at `path`."""
        with path.open("rb") as file:
            digest = hashlib.file_digest(file, "sha256").hexdigest()
        return cls(round_index, path.stat().st_size, digest)

    @classmethod
    def from_entry(cls, entry: int | list[Any] | tuple[Any, ...]) -> "VersionFile":
        """A checkpoint's entry: [round, size, sha256], or an older checkpoint's round."""
        if isinstance(entry, int):
            return cls(entry)
        round_index, size, sha256 = entry
        return cls(int(round_index), int(size), str(sha256))

    def entry(self) -> int | list[Any]:
        """What the checkpoint holds: [round, size, sha256]; an older checkpoint's version, kept
        until its client trains again, its round alone as before."""
        if self.sha256 is None:
            return self.round_index
        return [self.round_index, self.size, self.sha256]


# What `write` returns for `commit`: the tensors (memory) or the version file's record (disk).
Written = StateDict | VersionFile


class ClientStateLostError(RuntimeError):
    """A version file the run wrote has gone from under it (removed by another process)."""


class ClientStates(Mapping[int, StateDict]):
    """Client id → its persistent state, for the clients that have one."""

    def put(self, client: int, round_index: int, state: StateDict) -> None:
        """Store `state` as `client`'s state after round `round_index` (one worker's write and
        commit)."""
        self.commit(client, round_index, self.write(client, round_index, state))

    @abstractmethod
    def write(self, client: int, round_index: int, state: StateDict) -> Written:
        """The first step of `put`, on the worker that trained `client`."""

    @abstractmethod
    def commit(self, client: int, round_index: int, written: Written) -> None:
        """The second step of `put`, on every worker: `written` is what `write` returned."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """What checkpoint.pt holds of the states (weights-only-safe types)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any], run_dir: Path) -> None:
        """Restore `state_dict()` as saved by the run in `run_dir` (the run being resumed)."""

    def checkpoint_saved(self) -> None:
        """The last `state_dict()` is now safely in checkpoint.pt: what only the previous
        checkpoint needed may go. Called by the loop after each checkpoint, with no `put` between
        the `state_dict()` and this call."""


class MemoryClientStates(ClientStates):
    """Every state as tensors in RAM (on the client module's device) and in the checkpoint."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.states: dict[int, StateDict] = {}

    def __getitem__(self, client: int) -> StateDict:
        return self.states[client]

    def __iter__(self) -> Iterator[int]:
        return iter(self.states)

    def __len__(self) -> int:
        return len(self.states)

    def write(self, client: int, round_index: int, state: StateDict) -> Written:
        return state

    def commit(self, client: int, round_index: int, written: Written) -> None:
        self.states[client] = cast(StateDict, written)  # what `write` returned: the tensors

    def state_dict(self) -> dict[str, Any]:
        """Client id (as text) → its tensors."""
        return {str(client): state for client, state in self.states.items()}

    def load_state_dict(self, state: dict[str, Any], run_dir: Path) -> None:
        self.states = {
            int(client): {name: t.to(self.device) for name, t in tensors.items()}
            for client, tensors in state.items()
        }


class DiskClientStates(ClientStates):
    """One file per client state version in `directory`; in RAM only which version is newest.

    `owns_files`: this worker removes replaced versions and links a resumed run's versions (one
    worker of a run; the others only write the versions of the clients they train).
    """

    def __init__(self, directory: Path, device: torch.device, owns_files: bool = True) -> None:
        self.directory = directory
        self.device = device
        self.owns_files = owns_files
        self.newest: dict[int, VersionFile] = {}  # client → its newest version
        self.saved: dict[int, int] = {}  # the index the last saved checkpoint holds: rounds
        # Versions the saved checkpoint names that are no longer newest: deleted once the next
        # checkpoint is saved, since a resume from the saved one still needs them until then.
        self.superseded: dict[int, int] = {}

    def path(self, client: int, round_index: int) -> Path:
        return self.directory / str(client) / f"{round_index}.pt"

    def __getitem__(self, client: int) -> StateDict:
        """Read from the file; memory-mapped, so only the pages the caller touches are read."""
        path = self.path(client, self.newest[client].round_index)
        try:
            return torch.load(path, map_location=self.device, weights_only=True, mmap=True)
        except FileNotFoundError:
            raise ClientStateLostError(
                f"{path}, client {client}'s state, was deleted while the run used it (by another "
                "process in the run directory?); the run cannot go on without it: resume from "
                f"the last {CHECKPOINT_NAME} with resume=<run dir>, and let no other process "
                "write there"
            ) from None

    def __iter__(self) -> Iterator[int]:
        return iter(self.newest)

    def __len__(self) -> int:
        return len(self.newest)

    def __contains__(self, client: object) -> bool:
        return client in self.newest

    def write(self, client: int, round_index: int, state: StateDict) -> Written:
        """Write a new version atomically (a new file: nobody reads it before `commit`); its
        record carries its SHA-256, read back from the page cache (cost:
        docs/concepts/client-state.md, "Many clients")."""
        path = self.path(client, round_index)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(path, state)
        return VersionFile.of(path, round_index)

    def commit(self, client: int, round_index: int, written: Written) -> None:
        """Make the written version the newest; the one it replaces goes unless a checkpoint
        names it. Every worker has finished the round then, so no one still reads that one."""
        previous = self.newest.get(client)
        self.newest[client] = cast(VersionFile, written)  # what `write` returned: the record
        if previous is not None and previous.round_index != round_index:
            self.release(client, previous.round_index)

    def forget(self, client: int) -> None:
        """`client`'s state now lives elsewhere: its newest version goes like a replaced one."""
        previous = self.newest.pop(client, None)
        if previous is not None:
            self.release(client, previous.round_index)

    def release(self, client: int, round_index: int) -> None:
        """A version no longer newest: deleted now, or after the next checkpoint if the saved
        checkpoint names it."""
        if self.saved.get(client) == round_index:
            self.superseded[client] = round_index
        elif self.owns_files:
            self.path(client, round_index).unlink()

    def state_dict(self) -> dict[str, Any]:
        """Client id (as text) → [round, size, SHA-256] of its newest version (`entry`): no
        tensors."""
        return {str(client): version.entry() for client, version in self.newest.items()}

    def checkpoint_saved(self) -> None:
        if self.owns_files:  # the worker that saved the checkpoint
            for client, round_index in self.superseded.items():
                self.path(client, round_index).unlink()
        self.superseded = {}
        self.saved = {client: version.round_index for client, version in self.newest.items()}

    def load_state_dict(self, state: dict[str, Any], run_dir: Path) -> None:
        """Bring the versions the checkpoint names from `run_dir` into this run's directory (hard
        links where possible, copies otherwise), so that this run is self-contained and the
        resumed run's files are never changed. Other workers wait for this one before they read
        (`run_job`). The files were checked against the checkpoint before any work
        (`check_state_files`)."""
        source = run_dir / CLIENT_STATES_DIR
        self.newest = {int(key): VersionFile.from_entry(entry) for key, entry in state.items()}
        if self.owns_files:
            for client, version in self.newest.items():
                origin = source / str(client) / f"{version.round_index}.pt"
                if not origin.is_file():
                    raise ConfigError(
                        f"resume={run_dir}: {origin} is missing; resume from a complete run "
                        "directory (fl.client_state=disk keeps client states in its "
                        "client_states/)"
                    )
                link_or_copy(origin, self.path(client, version.round_index))
        # Kept like a saved checkpoint's versions until this run's first checkpoint: a run resumed
        # into its own directory still has that checkpoint there.
        self.saved = {client: version.round_index for client, version in self.newest.items()}
        self.superseded = {}


class AutoClientStates(ClientStates):
    """`fl.client_state=auto`: each state in `memory` when `num_clients` states of its size fit
    in `memory_bytes`, else in `disk`. The checkpoint holds one mapping with both kinds of entry:
    tensors, or the round of a version file."""

    def __init__(
        self,
        memory: MemoryClientStates,
        disk: DiskClientStates,
        num_clients: int,
        memory_bytes: int,
    ) -> None:
        self.memory = memory
        self.disk = disk
        self.num_clients = num_clients
        self.memory_bytes = memory_bytes

    def __getitem__(self, client: int) -> StateDict:
        return self.memory[client] if client in self.memory.states else self.disk[client]

    def __iter__(self) -> Iterator[int]:
        yield from self.memory
        yield from self.disk

    def __len__(self) -> int:
        return len(self.memory) + len(self.disk)

    def __contains__(self, client: object) -> bool:
        return client in self.memory.states or client in self.disk

    def write(self, client: int, round_index: int, state: StateDict) -> Written:
        size = sum(t.numel() * t.element_size() for t in state.values())
        if self.num_clients * size <= self.memory_bytes:
            return self.memory.write(client, round_index, state)
        return self.disk.write(client, round_index, state)

    def commit(self, client: int, round_index: int, written: Written) -> None:
        if isinstance(written, VersionFile):  # the disk store wrote a version file
            self.memory.states.pop(client, None)
            self.disk.commit(client, round_index, written)
        else:
            self.disk.forget(client)
            self.memory.commit(client, round_index, written)

    def state_dict(self) -> dict[str, Any]:
        """Client id (as text) → its tensors (in RAM) or the record of its version file."""
        return self.memory.state_dict() | self.disk.state_dict()

    def load_state_dict(self, state: dict[str, Any], run_dir: Path) -> None:
        in_memory = {client: entry for client, entry in state.items() if isinstance(entry, dict)}
        on_disk = {client: entry for client, entry in state.items() if client not in in_memory}
        self.memory.load_state_dict(in_memory, run_dir)
        self.disk.load_state_dict(on_disk, run_dir)

    def checkpoint_saved(self) -> None:
        self.disk.checkpoint_saved()


def link_or_copy(origin: Path, destination: Path) -> None:
    """A hard link (no bytes copied; safe because versions are replaced, never written in place),
    or a copy where the file system cannot link."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    if destination.exists():
        if destination.samefile(origin):  # resumed into its own run directory
            return
        destination.unlink()
    try:
        os.link(origin, destination)
    except OSError:
        shutil.copyfile(origin, destination)


def client_state_store(
    settings: FLSettings, run_dir: Path, device: torch.device, owns_files: bool = True
) -> ClientStates:
    """The store `settings.client_state` names, for a run writing into `run_dir`; `owns_files`
    on one worker of the run."""
    if settings.client_state == "memory":
        return MemoryClientStates(device)
    disk = DiskClientStates(run_dir / CLIENT_STATES_DIR, device, owns_files)
    if settings.client_state == "disk":
        return disk
    memory_bytes = int(settings.client_state_memory_mb * 2**20)
    return AutoClientStates(MemoryClientStates(device), disk, settings.num_clients, memory_bytes)
