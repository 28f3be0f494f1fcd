"""What decides a run's float results besides its config and seed: `environment` in summary.json.

The same config and seed give bit-identical numbers only where these agree too. Torch's threads
change the order in which a reduction (a matrix product's sums, a gradient over the batch) adds
its parts, so float rounding, so the numbers, and a run's threads default to its share of the
machine's cores (`fl.threads_per_worker=null`); the device and its kernels (a GPU model, a CPU's
vector instructions), the libraries' versions, the engine that trained the clients, the layout
of its tensors (`fl.memory_format`), and torch's switches for deterministic or faster-but-rounder
kernels (TF32 on NVIDIA GPUs) do the same.

A resumed run may continue under other values (`fl.workers` and `fl.threads_per_worker` may
change on a resume): a value that changed is kept as the list of its values, oldest first,
`unknown` for a checkpoint written before fedlight recorded them.
"""

import json
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedlight

UNKNOWN = "unknown"
GIT_SECONDS = 10  # a git that does not answer by then leaves the commit unknown


def source_commit() -> str | None:
    """The newest git commit that changed fedlight's package (its code and configs), with
    `-dirty` when its files differ from it; None when it does not run from a git checkout (an
    installed wheel: its version says which)."""
    package = Path(fedlight.__file__).parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(package), *args],
            capture_output=True,
            text=True,
            timeout=GIT_SECONDS,
            check=True,
        ).stdout.strip()

    try:
        commit = git("log", "-1", "--format=%H", "--", ".")
        changed = git("status", "--porcelain", "--", ".") if commit else ""
    except (OSError, subprocess.SubprocessError):
        return None
    return (f"{commit}-dirty" if changed else commit) or None


def float_environment(
    device: torch.device, engine: str, workers: int, memory_format: str
) -> dict[str, Any]:
    """This process's values of what decides float rounding (its torch threads are each
    worker's; `memory_format`: the client module's layout, `fedlight.core.layout`); the CUDA entries
    are null on other devices."""
    cuda = device.type == "cuda"
    return {
        "torch_threads": torch.get_num_threads(),
        "workers": workers,
        "engine": engine,
        "memory_format": memory_format,
        "device": device.type,
        "gpu": torch.cuda.get_device_name(device) if cuda else None,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "fedlight": fedlight.__version__,
        "fedlight_commit": source_commit(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_tf32": torch.backends.cuda.matmul.allow_tf32 if cuda else None,
        "cudnn_tf32": torch.backends.cudnn.allow_tf32 if cuda else None,
        "cudnn_benchmark": torch.backends.cudnn.benchmark if cuda else None,
        "cudnn_deterministic": torch.backends.cudnn.deterministic if cuda else None,
    }


def resumed_environment(saved: str | None, now: dict[str, Any]) -> dict[str, Any]:
    """The environment of a run that continues one whose checkpoint recorded `saved` (its JSON;
    None: a checkpoint older than the record, every value unknown): a value that changed becomes
    the list of its values, oldest first."""
    earlier = {} if saved is None else json.loads(saved)
    merged = {}
    for key, value in now.items():
        before = earlier.get(key, UNKNOWN)
        values = before if isinstance(before, list) else [before]
        if values[-1] != value:
            values = [*values, value]
        merged[key] = values[0] if len(values) == 1 else values
    return merged
