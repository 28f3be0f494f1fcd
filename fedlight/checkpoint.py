"""Checkpoints: written atomically, read with weights-only `torch.load` (no pickled code runs)."""

import os
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_NAME = "checkpoint.pt"


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    partial = path.with_suffix(".tmp")
    torch.save(state, partial)
    os.replace(partial, path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)
