"""The checks of a disk client-state store's files before a resume loads any data: each version
file a checkpoint names is present, a regular file, of the recorded size and SHA-256 (an older
checkpoint's: weights of the model's keys, shapes and dtypes, finite unless the run diverged); a
fault is one line naming the file."""

import zipfile
from pathlib import Path
from typing import Any

import torch

from fedlight.core.errors import ConfigError, one_line
from fedlight.core.tensors import StateDict
from fedlight.store.client_states import CLIENT_STATES_DIR, VersionFile
from fedlight.store.run_files import CHECKPOINT_NAME


def check_state_files(resume: str, checkpoint: dict[str, Any]) -> None:
    """Every client-state file the checkpoint of `resume=<run dir>` names is the one the run
    wrote, checked before any work and refused in one line naming the file: present, a regular
    file (a FIFO or a device would block or never end), of the recorded size and SHA-256. An
    older checkpoint recorded rounds only: its files must load weights-only as a non-empty dict
    of tensors whose every entry has the shape and dtype of the model's (the checkpoint's server
    weights) and, unless the run had diverged, finite values."""
    weights: StateDict = checkpoint["server_weights"]
    may_be_nan = checkpoint.get("diverged_at_round") is not None
    for client, entry in checkpoint["client_states"].items():
        if isinstance(entry, dict):  # kept in checkpoint.pt itself (the memory store)
            continue
        version = VersionFile.from_entry(entry)
        path = Path(resume) / CLIENT_STATES_DIR / client / f"{version.round_index}.pt"
        fault = file_fault(path, version, weights, may_be_nan)
        if fault is not None:
            raise ConfigError(
                f"resume={resume}: {path}, client {client}'s state, {fault}; it cannot be "
                "resumed: restore the file as the run wrote it, or start the run again without "
                "resume="
            )


def file_fault(
    path: Path, version: VersionFile, weights: StateDict, may_be_nan: bool
) -> str | None:
    """What is wrong with a version file, in words; None if it is the one recorded."""
    if not path.exists():
        return "is missing"
    if not path.is_file():
        return "is not a regular file (a FIFO, a device or a folder)"
    size = path.stat().st_size
    if version.sha256 is None:  # an older checkpoint: what the file holds is all there is to check
        return content_fault(path, weights, may_be_nan)
    if size != version.size:
        found = content_fault(path, weights, may_be_nan) or "other content"
        return f"is {size} bytes where {CHECKPOINT_NAME} recorded {version.size} ({found})"
    if VersionFile.of(path, version.round_index) != version:
        found = content_fault(path, weights, may_be_nan) or "bytes changed"
        return f"differs from the version {CHECKPOINT_NAME} recorded: SHA-256 mismatch ({found})"
    return None


def content_fault(path: Path, weights: StateDict, may_be_nan: bool) -> str | None:
    """What makes a file no client state of this model, in words (None: nothing found): no
    archive, unreadable without running code, not a non-empty dict of tensors, an entry whose
    shape or dtype is not the model's (an entry is named "<stage namespace>/<model key>" or by
    its model key), or NaN/Inf values."""
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive, whole or not at all
        return "is no torch archive (cut short, or other bytes)"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # noqa: BLE001 - any unreadable file is one fault for the user
        reason = one_line(error, separator=" ", limit=120)
        return f"cannot be read as weights ({type(error).__name__}: {reason})"
    if not isinstance(state, dict):
        return f"holds a {type(state).__name__}, not a dict of tensors"
    if not state:
        return "holds no tensors (an empty dict)"
    for key, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            return f"holds a {type(tensor).__name__} under {key}"
        model = weights.get(str(key).rpartition("/")[2])
        if model is not None and (tensor.shape, tensor.dtype) != (model.shape, model.dtype):
            shape = "x".join(map(str, tensor.shape))
            return (
                f"holds {key} as {shape} {tensor.dtype}, the model's is "
                f"{'x'.join(map(str, model.shape))} {model.dtype}"
            )
        if not may_be_nan and tensor.is_floating_point() and not tensor.isfinite().all():
            return f"holds NaN or Inf in {key}"
    return None
