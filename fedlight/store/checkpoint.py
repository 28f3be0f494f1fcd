"""Checkpoints: written atomically, read with weights-only `torch.load` (no pickled code runs).

A write that fails (a full disk) leaves the previous checkpoint as it was and no temporary file,
and is reported as the `OSError` it was, naming the file: torch reports it as its own
`RuntimeError` ("enforce fail ... unexpected pos"), raised while handling the OSError.

A resume is checked before any data is loaded or any file written: the directory, the file, its
readability and its keys, each fault refused in one line that says what to give instead.
"""

import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from fedlight.core.errors import ConfigError, one_line
from fedlight.store.files import replaced
from fedlight.store.run_files import CHECKPOINT_NAME


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """`state` in `path`, written whole or not at all, never through a link
    (`fedlight.store.files`)."""
    try:
        with replaced(path) as file:
            torch.save(state, file)
    except RuntimeError as error:  # torch's report of a write that failed with an OSError
        cause = error.__context__
        if not isinstance(cause, OSError):
            raise
        raise OSError(cause.errno, cause.strerror, str(path)) from None


def load_checkpoint(path: Path, mmap: bool = False) -> dict[str, Any]:
    """The checkpoint's state; `mmap` maps tensors instead of reading them (a cheap look)."""
    return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


def resumable_checkpoint(resume: str, required: Collection[str], mmap: bool) -> dict[str, Any]:
    """The checkpoint `resume=<run dir>` names, refused in one line unless it can be resumed:
    a directory that holds a readable checkpoint.pt with every key in `required`."""
    directory = Path(resume)
    path = directory / CHECKPOINT_NAME
    if not directory.exists():
        raise ConfigError(
            f"resume={resume}: no such directory; give the run directory that holds "
            f"{CHECKPOINT_NAME}"
        )
    if directory.is_file():
        fix = (
            f"give its directory: resume={directory.parent}"
            if directory.name == CHECKPOINT_NAME
            else f"give the run directory that holds {CHECKPOINT_NAME}"
        )
        raise ConfigError(f"resume={resume} is a file, not a run directory; {fix}")
    if not path.is_file():
        raise ConfigError(
            f"resume={resume}: {path} does not exist (the run ended before its first checkpoint, "
            "see checkpoint.every); start the run again without resume="
        )
    damaged = "it is damaged or not a fedlight checkpoint: start the run again without resume="
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive, whole or not at all
        size = path.stat().st_size
        raise ConfigError(
            f"resume={resume}: {path} is not a complete checkpoint ({size} bytes, no torch "
            f"archive); {damaged}"
        )
    try:
        state = load_checkpoint(path, mmap=mmap)
    except Exception as error:  # noqa: BLE001 - any unreadable file is one fault for the user
        reason = one_line(error, separator=" ", limit=160)
        raise ConfigError(
            f"resume={resume}: {path} cannot be read ({type(error).__name__}: {reason}); {damaged}"
        ) from None
    missing = sorted(set(required) - set(state)) if isinstance(state, dict) else ["everything"]
    if missing:
        raise ConfigError(
            f"resume={resume}: {path} lacks {', '.join(missing)} (written by an older fedlight "
            "or another program); it cannot be resumed: start the run again without resume="
        )
    return state
