"""Files fedlight writes into a run directory, never through a symbolic link.

A run directory may be writable by others (a shared /tmp): a link planted there as
`checkpoint.tmp` or `metrics.csv` must not make fedlight overwrite the file it points to. Each file
is therefore written under a temporary name that is created exclusively (`O_CREAT | O_EXCL |
O_NOFOLLOW`: nothing may be there, a link included) and then renamed over the final name, which
replaces a link there instead of following it; a file kept open for appending is opened with
`O_NOFOLLOW`. A link in the way is refused in one line that names it.

A Ctrl-C or SIGTERM that arrives while a file is written is taken once it is whole: a handler that
raises (KeyboardInterrupt, `fedlight.runs.launch.Terminated`) inside `torch.save` leaves torch's
zip writer half-written, which torch reports as its own RuntimeError or by aborting the process.
"""

import errno
import os
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

from fedlight.core.errors import ConfigError
from fedlight.core.signals import installed

DEFERRED = (signal.SIGINT, signal.SIGTERM)
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def linked(path: Path) -> ConfigError:
    """The refusal of a link (or another non-regular file) where fedlight writes a file."""
    what = f"a symbolic link to {os.readlink(path)}" if path.is_symlink() else "not a regular file"
    return ConfigError(
        f"{path} is {what}; fedlight writes no file of a run directory through a link: remove "
        "it, or choose another directory"
    )


def regular_or_gone(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True


def create_new(partial: Path) -> int:
    """A new, empty file at `partial`; a regular file there (left by a killed run) is removed
    first, anything else (a link) is refused."""
    try:
        return os.open(partial, NEW_FILE, 0o644)
    except FileExistsError:
        if not regular_or_gone(partial):
            raise linked(partial) from None
    partial.unlink(missing_ok=True)
    try:
        return os.open(partial, NEW_FILE, 0o644)
    except FileExistsError:  # made again meanwhile: not by this run, which holds the lock
        raise linked(partial) from None


@contextmanager
def replaced(path: Path) -> Iterator[BinaryIO]:
    """A binary file whose content replaces `path` as a whole when the block ends; `path` is left
    as it was (and no temporary `<stem>.tmp` is left) when the block fails, an `OSError` (a full
    disk) then naming `path`."""
    partial = path.with_suffix(".tmp")
    with signals_deferred():
        file = os.fdopen(create_new(partial), "wb")
        try:
            with file:
                yield file
            os.replace(partial, path)
        except BaseException as error:
            partial.unlink(missing_ok=True)
            if isinstance(error, OSError):  # a full disk: named by the file it was for
                raise OSError(error.errno, error.strerror, str(path)) from None
            raise


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM received in the block are raised again once it has ended and the
    handlers before are back (`fedlight.core.signals.installed`): each kind once, in the order
    they came (a handler that raises, as Ctrl-C's does, ends that). Off the main thread nothing
    changes. A write that hangs is stopped by SIGKILL only."""
    received: list[int] = []
    try:
        with installed({n: lambda taken, _: received.append(taken) for n in DEFERRED}):
            yield
    finally:  # a block that failed still passes on what was received
        for number in dict.fromkeys(received):
            signal.raise_signal(number)


def write_bytes(path: Path, content: bytes) -> None:
    with replaced(path) as file:
        file.write(content)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


def open_to_append(path: Path) -> TextIO:
    """`path` (a regular file fedlight makes) opened to append text, made if it is missing,
    refused if it is a link."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise linked(path) from None
        raise
    return os.fdopen(descriptor, "a", newline="", encoding="utf-8")
