"""One writer per run directory: a run holds an exclusive lock on its directory while it writes.

Two processes writing one directory interleave their metrics.csv rows and share one
`checkpoint.tmp`. Each run therefore takes a `flock` on `<run dir>/.fedlight.lock` (holding its
pid) before it writes anything of its own; a second writer is refused naming the holder. The
kernel drops the lock when the holder dies, even by `kill -9`, so a crashed run's lock is stale
by construction: the next run takes it over and says so. A finished run removes the file. Worker
processes a run spawns share the open lock (`fedlight.drivers.workers`), so it stays held while any
process of the run lives. A sweep holds the lock of its sweep directory the same way, from before
Hydra writes `multirun.yaml` until its last job ends.

Nothing is read or written through a symbolic link: the lock file is opened with `O_NOFOLLOW` and
must be a regular file of one link, and a run directory holding a link where fedlight or Hydra
writes is refused before anything is written (see `fedlight.store.files` for the files themselves).

A new run never replaces the results of another: a directory that holds a checkpoint, metrics or
summary is refused unless the run resumes from it in place or the user says `overwrite=true`,
which removes them first.
"""

import fcntl
import os
import shutil
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fedlight.core.errors import ConfigError
from fedlight.core.settings import RunSettings
from fedlight.loggers.mlflow import MLRUNS_DIR
from fedlight.loggers.tensorboard import TENSORBOARD_DIR
from fedlight.store.client_states import CLIENT_STATES_DIR
from fedlight.store.files import linked
from fedlight.store.run_files import (
    CHECKPOINT_NAME,
    ERROR_NAME,
    LIGHTNING_CHECKPOINT_NAME,
    LOCK_NAME,
    MODEL_NAME,
    PREEMPTED_NAME,
    SUMMARY_NAME,
    lock_holder,
)

# What a run leaves that a new run into its directory would replace (metrics.csv: the csv
# logger's default name; model.pt and model.ckpt: the final model, `fedlight.runs.export`).
RESULTS = (CHECKPOINT_NAME, SUMMARY_NAME, "metrics.csv", MODEL_NAME, LIGHTNING_CHECKPOINT_NAME)
# Folders of a run's results that `overwrite=true` removes with them: the disk store's client
# states, and the stores of the loggers that keep theirs in the run directory.
RESULT_FOLDERS = (CLIENT_STATES_DIR, TENSORBOARD_DIR, MLRUNS_DIR)
CONSOLE_NAME = "console.log"  # what the run printed (appended to by a resume in place)
LOCK_TRIES = 5
LOCK_RETRY_SECONDS = 0.05
# The folders of a run directory that fedlight and Hydra write into, searched for links.
WRITTEN_FOLDERS = (".hydra", CLIENT_STATES_DIR)

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
        descriptor = open_lock(path, setting)
        if not locked_soon(descriptor):
            holder = written_pid(descriptor) or "unknown"
            os.close(descriptor)
            raise ConfigError(
                f"{setting}={directory} is being written by another fedlight run (pid {holder}, "
                f"lock {path}); wait for it to end, or choose another directory"
            )
        if same_file(descriptor, path):  # not removed by a holder that finished meanwhile
            break
        os.close(descriptor)
    stale = written_pid(descriptor)
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


def locked_soon(descriptor: int) -> bool:
    """Whether this process got the exclusive lock within a few tries: a probe of who holds it
    (`fedlight.store.run_files.lock_holder`, e.g. a sweep's progress line) holds it for an
    instant."""
    for attempt in range(LOCK_TRIES):
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < LOCK_TRIES:
                time.sleep(LOCK_RETRY_SECONDS)
    return False


def open_lock(path: Path, setting: str) -> int:
    """The lock file, made if missing; a link (not followed), a file of several names or anything
    but a regular file is refused: the lock's pid is written into it."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        if path.is_symlink():
            raise linked(path) from None
        raise unusable(path.parent, setting, error) from None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode) or status.st_nlink != 1:
        os.close(descriptor)
        raise ConfigError(
            f"{path} is not a lock file fedlight made (a special file, or a file with other "
            "names); remove it, or choose another directory"
        )
    return descriptor


def written_pid(descriptor: int) -> str:
    """The pid a lock file holds ("" if it holds none; anything else is not echoed)."""
    text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    return text if text.isdigit() else ""


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


def first_link(directory: Path) -> Path | None:
    """The first symbolic link among `directory`'s entries and in its WRITTEN_FOLDERS (W&B's own
    links in `wandb/` are its business)."""
    if not directory.is_dir():
        return None
    entries = sorted(directory.iterdir())
    for folder in WRITTEN_FOLDERS:
        inside = directory / folder
        if inside.is_dir() and not inside.is_symlink():
            entries += sorted(
                Path(parent, name)
                for parent, dirs, files in os.walk(inside)
                for name in dirs + files
            )
    return next((entry for entry in entries if entry.is_symlink()), None)


def check_no_links(directory: Path) -> None:
    link = first_link(directory)
    if link is not None:
        raise linked(link)


def resumes_in_place(directory: Path, settings: RunSettings) -> bool:
    return settings.resume is not None and Path(settings.resume).resolve() == directory.resolve()


def results_in(directory: Path) -> list[str]:
    return [name for name in RESULTS if (directory / name).exists()]


def refuse_results(directory: Path, setting: str, found: list[str]) -> ConfigError:
    resume = (
        f"continue that run with resume={directory} (and its overrides), "
        if CHECKPOINT_NAME in found
        else ""
    )
    return ConfigError(
        f"{setting}={directory} holds the results of another run ({', '.join(found)}); "
        f"{resume}choose another directory, or give overwrite=true to replace them"
    )


def prepare(directory: Path, setting: str, settings: RunSettings) -> None:
    """A run directory this run may write: no links in it, and no other run's results unless this
    run resumes from it in place or overwrites them (`overwrite=true` removes them now, with
    the RESULT_FOLDERS, so nothing of the other run is left to resume or read)."""
    check_no_links(directory)
    found = results_in(directory)
    if found and not resumes_in_place(directory, settings) and not settings.overwrite:
        raise refuse_results(directory, setting, found)
    if not found:
        return
    if resumes_in_place(directory, settings):  # finished (summary.json) once it has run its rounds
        (directory / SUMMARY_NAME).unlink(missing_ok=True)
        return
    for name in (*RESULTS, CONSOLE_NAME):
        (directory / name).unlink(missing_ok=True)
    for folder in RESULT_FOLDERS:
        if (directory / folder).is_dir():
            shutil.rmtree(directory / folder)


def forget_last_attempt(directory: Path) -> None:
    """How the last attempt in `directory` ended (an error, a preemption), forgotten as this one
    starts: it is said again if this one ends so (`fedlight.store.sweeps` reads these files)."""
    for name in (ERROR_NAME, PREEMPTED_NAME):
        (directory / name).unlink(missing_ok=True)


def check_not_written(folder: Path) -> None:
    """A job folder of a sweep that no live process writes: one that holds its lock is a job of
    an earlier command of the sweep that still runs (a killed sweep's joblib workers, until they
    notice), which this sweep's job would be refused by, or would write beside."""
    holder = lock_holder(folder)
    if holder is not None:
        raise ConfigError(
            f"{folder} is being written by process {holder}, a job of an earlier command of this "
            f"sweep that still runs; wait for it to end (or end it: kill {holder}), then run the "
            "command again"
        )


def prepare_sweep(
    directory: Path, setting: str, jobs: list[RunSettings], decided: bool = False
) -> None:
    """A sweep directory this sweep may write (before Hydra writes into it): no links in it or
    its job folders, and no results of an earlier sweep in them unless every job overwrites or
    each job decides what to do with its own folder (`resume=auto`, `fedlight.runs.resume`:
    `decided` where the sweep's jobs were decided in advance, `resume=auto` where a sweeper picks
    them as it goes); and none that a live process writes (`check_not_written`)."""
    check_no_links(directory)
    folders = sorted(p for p in directory.iterdir() if p.is_dir() and not p.is_symlink())
    for folder in folders:
        check_no_links(folder)
        check_not_written(folder)
    if decided or all(job.overwrite or job.resume == "auto" for job in jobs):
        return
    for folder in folders:
        found = results_in(folder)
        if found:
            raise ConfigError(
                f"{setting}={directory} holds the results of an earlier sweep "
                f"({folder / found[0]}); continue that sweep with resume=auto, choose another "
                "directory, or give overwrite=true to replace them job by job"
            )
