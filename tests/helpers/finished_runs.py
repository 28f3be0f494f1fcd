"""A finished run made once per test module through the CLI, and copies of it to damage: what
the resume and record tests start from."""

import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch

from fedlight.cli import main as cli


def finished_run(factory: pytest.TempPathFactory, name: str, args: Sequence[str]) -> Path:
    """A run of `args` to its end through the CLI, in a new folder `name`."""
    directory = factory.mktemp(name) / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "disabled")
        patch.setattr(sys, "argv", ["fedlight", *args, f"hydra.run.dir={directory}"])
        cli.main()
    return directory


def copy_of(finished: Path, tmp_path: Path, stopped: bool = False) -> Path:
    """A copy of the finished run nobody holds; `stopped`: as a killed run leaves it (its
    checkpoint, no summary)."""
    run = tmp_path / "copy"
    shutil.copytree(finished, run)
    (run / ".fedlight.lock").unlink(missing_ok=True)
    if stopped:
        (run / "summary.json").unlink()
    return run


def one_thread() -> Iterator[None]:
    """torch on one thread while a module's tests run (tiny models on a shared CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
