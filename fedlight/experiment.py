"""One job from typed parts to files: load data, partition, build the loop, run, write outputs.

A job runs in this process alone, on `fl.workers` processes it spawns on this machine, or as one
rank of a process group torchrun started (see `fedlight.workers`); every worker builds the same
loop, and the main worker (rank 0) writes the run directory's files.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytorch_lightning as pl
import torch

from fedlight.algorithms.base import Algorithm
from fedlight.checkpoint import CHECKPOINT_NAME, load_checkpoint
from fedlight.client_states import client_state_store
from fedlight.config import ConfigError, RunSettings
from fedlight.data.base import DataError, TensorDataset
from fedlight.loggers.base import RoundLogger, RunInfo
from fedlight.loggers.console import ConsoleProgress
from fedlight.loop import FederatedLoop, History
from fedlight.lr_schedules.base import LRSchedule
from fedlight.outputs import label_histogram, summarize, write_curves, write_label_histogram
from fedlight.partitions.base import Partition
from fedlight.rng import Stream, derive_seed, numpy_generator
from fedlight.selection.base import Selection
from fedlight.stages import Stages
from fedlight.workers import (
    OneWorker,
    Workers,
    in_process_group,
    join_workers,
    resolve_device,
    spawn_workers,
)

# Settings that may differ between a run and its resumption without changing any number (dotted
# for nested keys): a run may continue on another number of workers.
RESUME_FREE_KEYS = ("resume", "logger", "fl.workers", "fl.threads_per_worker", "fl.backend")
SUMMARY_NAME = "summary.json"


class DataSource(Protocol):
    def load(self) -> TensorDataset: ...


@dataclass
class Job:
    """A fully built experiment: what `fedlight.cli` makes out of the composed Hydra config."""

    settings: RunSettings
    data: DataSource
    model: Callable[..., pl.LightningModule]
    partition: Partition
    stages: Stages
    loggers: list[RoundLogger]
    choices: dict[str, str]
    config: dict[str, Any]
    sweep_group: str | None = None

    @property
    def algorithm(self) -> Algorithm:
        return self.stages.algorithm

    @property
    def selection(self) -> Selection:
        return self.stages.selection

    @property
    def lr_schedule(self) -> LRSchedule:
        return self.stages.lr_schedule


def first_difference(saved: Any, current: Any, path: str = "") -> str | None:
    """Dotted key of the first value that differs between two nested config dicts."""
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(set(saved) | set(current)):
            found = first_difference(saved.get(key), current.get(key), f"{path}{key}.")
            if found:
                return found
        return None
    return (
        None if saved == current else f"{path.rstrip('.')} (checkpoint {saved!r}, now {current!r})"
    )


def comparable_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The config without the RESUME_FREE_KEYS."""
    return {
        key: comparable_config(value, f"{prefix}{key}.") if isinstance(value, dict) else value
        for key, value in config.items()
        if f"{prefix}{key}" not in RESUME_FREE_KEYS
    }


def run_job(job: Job, output_dir: Path) -> dict[str, Any]:
    """Run the job into `output_dir` and return its summary: as one rank of this process's
    (or torchrun's) process group, on `fl.workers` new processes, or in this process alone."""
    if in_process_group():
        return run_worker(join_workers(job.settings), job, output_dir)
    if job.settings.fl.workers > 1:
        spawn_workers(job.settings, run_worker, (job, output_dir), (ConfigError, DataError))
        return json.loads((output_dir / SUMMARY_NAME).read_text())
    return run_worker(OneWorker(resolve_device(job.settings.device)), job, output_dir)


def run_worker(workers: Workers, job: Job, output_dir: Path) -> dict[str, Any]:
    """This worker's part of the job; every worker returns the main worker's summary."""
    settings = job.settings
    output_dir = workers.broadcast(output_dir)  # torchrun: each rank's Hydra chose its own
    output_dir.mkdir(parents=True, exist_ok=True)
    device = workers.device
    data = job.data.load().to(device)

    labels = data.train_y.cpu().numpy()
    client_sets = job.partition(
        labels, settings.fl.num_clients, numpy_generator(settings.seed, Stream.PARTITION)
    )
    if workers.main:
        histogram = label_histogram(client_sets, labels, data.num_classes)
        write_label_histogram(output_dir, histogram)
    client_indices = [torch.as_tensor(s, dtype=torch.int64, device=device) for s in client_sets]

    torch.manual_seed(derive_seed(settings.seed, Stream.MODEL_INIT))
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes).to(device)
    loop = FederatedLoop(
        settings,
        data,
        client_indices,
        module,
        job.stages.algorithm,
        job.stages.selection,
        job.stages.lr_schedule,
        client_state_store(settings.fl.client_state, output_dir, device, workers.main),
        workers,
        job.stages.wire,
    )
    if settings.resume is not None:
        resumed_dir = Path(settings.resume)
        checkpoint = load_checkpoint(resumed_dir / CHECKPOINT_NAME)
        difference = first_difference(
            json.loads(checkpoint["config"]), comparable_config(job.config)
        )
        if difference:
            raise ConfigError(
                f"resume={settings.resume}: config differs at {difference}; resume with the "
                "original run's overrides plus resume=<run dir>"
            )
        loop.load_state_dict(checkpoint, resumed_dir)
    workers.barrier()  # the main worker has linked a disk store's resumed files: now they are read

    loggers = [*job.loggers, ConsoleProgress()] if workers.main else []
    run_info = RunInfo(output_dir, job.config, job.choices, job.sweep_group, settings.fl.rounds)
    for logger in loggers:
        logger.start(run_info)
    history = loop.run(
        loggers,
        output_dir / CHECKPOINT_NAME,
        {"config": json.dumps(comparable_config(job.config), sort_keys=True)},
    )
    summary = write_summary(job, output_dir, history, loggers) if workers.main else {}
    return workers.broadcast(summary)


def write_summary(
    job: Job, output_dir: Path, history: History, loggers: list[RoundLogger]
) -> dict[str, Any]:
    """summary.json and curves.png of a finished run; the loggers' last word."""
    settings = job.settings
    summary = summarize(
        history.rows,
        target_accuracy=settings.eval.target_accuracy,
        total_bytes=history.bytes_up + history.bytes_down,
        wall_seconds=history.wall_seconds,
        client_seconds=history.client_seconds,
        rounds=history.completed_rounds,
        seed=settings.seed,
        choices=job.choices,
    )
    (output_dir / SUMMARY_NAME).write_text(json.dumps(summary, indent=2))
    write_curves(output_dir, history.rows)
    for logger in loggers:
        logger.finish(summary)
    return summary
