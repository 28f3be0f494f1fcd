"""One writer per run directory: a run holds an exclusive lock on its directory while it writes.

Two processes writing one directory interleave their metrics.csv rows and share one
`checkpoint.tmp`. Each run therefore takes a `flock` on `<run dir>/.fedlight.lock` (holding its
pid) before it writes anything of its own; a second writer is refused naming the holder. The
kernel drops the lock when the holder dies, even by `kill -9`, so a crashed run's lock is stale
by construction: the next run takes it over and says so. A finished run removes the file.
"""

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fedlight.config import ConfigError

LOCK_NAME = ".fedlight.lock"

# The locks this process holds: directory (resolved) -> the open lock file's descriptor.
held: dict[Path, int] = {}


def unusable(directory: Path, setting: str, error: OSError) -> ConfigError:
    reason = error.strerror or type(error).__name__
    where = f" ({error.filename})" if error.filename else ""
    return ConfigError(
        f"{setting}={directory} cannot be written: {reason}{where}; choose a writable directory"
    )


def writable_dir(directory: Path, setting: str) -> Path:
    """`directory`, created if need be; refused in one line where it cannot be written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise unusable(directory, setting, error) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise unusable(directory, setting, PermissionError(13, "Permission denied"))
    return directory.resolve()


def acquire(directory: Path, setting: str) -> None:
    """Take this process's exclusive lock on `directory` (a no-op if it holds it already)."""
    directory = writable_dir(directory, setting)
    if directory in held:
        return
    path = directory / LOCK_NAME
    while True:
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise unusable(directory, setting, error) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(descriptor)
            raise ConfigError(
                f"{setting}={directory} is being written by another fedlight run (pid {holder}, "
                f"lock {path}); wait for it to end, or choose another directory"
            ) from None
        if same_file(descriptor, path):  # not removed by a holder that finished meanwhile
            break
        os.close(descriptor)
    stale = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    if stale:
        print(
            f"fedlight: {directory} was left locked by process {stale}, which has ended; "
            "taking it over",
            file=sys.stderr,
            flush=True,
        )
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    held[directory] = descriptor


def same_file(descriptor: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(descriptor), os.stat(path))
    except FileNotFoundError:
        return False


def release(directory: Path) -> None:
    """Remove the lock file and drop the lock (in that order, so a waiting run never locks a
    removed file: `acquire` checks it locked the file that is there)."""
    descriptor = held.pop(directory.resolve(), None)
    if descriptor is None:
        return
    (directory / LOCK_NAME).unlink(missing_ok=True)
    os.close(descriptor)


@contextmanager
def locked(directory: Path, setting: str) -> Iterator[None]:
    """`directory` locked for the duration, then released (also when the run fails)."""
    acquire(directory, setting)
    try:
        yield
    finally:
        release(directory)
