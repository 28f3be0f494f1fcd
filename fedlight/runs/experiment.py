"""One job from typed parts to files: load data, partition, build the loop, run, write outputs.

A job runs in this process alone, on `fl.workers` processes it spawns on this machine, or as one
rank of a process group torchrun started (see `fedlight.drivers.workers`); every worker builds the
same loop, and the main worker (rank 0) writes the run directory's files.
"""

import gc
import json
import os
import sys
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from fedlight.core.allocator import fix_mmap_threshold
from fedlight.core.errors import ConfigError, require
from fedlight.core.layout import LayoutChoice, layout_for
from fedlight.core.rng import Stream, derive_seed
from fedlight.core.settings import FLSettings, RunSettings
from fedlight.data.base import DataError, TensorDataset
from fedlight.data.validation import split_validation
from fedlight.drivers.asynchronous import AsynchronousLoop
from fedlight.drivers.base import Driver
from fedlight.drivers.checkpoint_checks import check_server_weights, check_state
from fedlight.drivers.history import STATE_KEYS
from fedlight.drivers.preemption import Preempted
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.drivers.workers import OneWorker, Workers
from fedlight.engines.lightning import setup_module
from fedlight.engines.trainer_standin import TrainerStandIn, attach
from fedlight.loggers.base import (
    RoundLogger,
    RoundProgress,
    RunInfo,
    SilentProgress,
    default_run_name,
)
from fedlight.loggers.console import ConsoleProgress
from fedlight.runs.environment import float_environment, resumed_environment
from fedlight.runs.export import write_model
from fedlight.runs.federation import check_federation_size, federation
from fedlight.runs.job import DivergenceError, Job, Ran
from fedlight.runs.launch import join_workers, spawn_workers, threads_of, workers_start_method
from fedlight.runs.objective import ObjectiveCheck
from fedlight.runs.outputs import (
    Chance,
)
from fedlight.runs.parallelism import in_process_group, resolve_device
from fedlight.runs.run_summary import write_summary
from fedlight.runs.same_config import comparable_config, first_difference
from fedlight.store.checkpoint import load_checkpoint, resumable_checkpoint
from fedlight.store.client_state_checks import check_state_files
from fedlight.store.client_states import ClientStateLostError, client_state_store
from fedlight.store.run_files import CHECKPOINT_NAME, SUMMARY_NAME

CHECKPOINT_KEYS = (*STATE_KEYS, "config", "rounds")


def resumed_checkpoint(
    job: Job, mmap: bool = False, check_files: bool = True
) -> dict[str, Any] | None:
    """The checkpoint `resume=` names, once it is known to continue this job's run (None without
    `resume=`); refused in one line otherwise. Checked before any data is loaded, with every
    client-state file it names (`check_files`: one worker of a run reads them)."""
    settings = job.settings
    if settings.resume is None:
        return None
    checkpoint = resumable_checkpoint(settings.resume, CHECKPOINT_KEYS, mmap)
    try:
        saved = json.loads(checkpoint["config"])
        if not isinstance(saved, dict):
            raise TypeError(f"a {type(saved).__name__}, not a config")
    except (TypeError, ValueError):
        raise ConfigError(
            f"resume={settings.resume}: its {CHECKPOINT_NAME} holds no readable config; it cannot "
            "be resumed: start the run again without resume="
        ) from None
    old_groups = [g for g in ("wire", "compression", "download_compression") if g in saved]
    require(
        not old_groups,
        f"resume={settings.resume}: its {CHECKPOINT_NAME} was written before the groups upload "
        f"and download replaced {', '.join(old_groups)} (its clients' codec state is named by "
        "them); continue it with the fedlight that wrote it, or start the run again",
    )
    difference = first_difference(saved, comparable_config(job.config), job.derived_keys)
    if difference:
        raise ConfigError(
            f"resume={settings.resume}: config differs at {difference}; resume with the "
            "original run's overrides plus resume=<run dir>"
        )
    done, planned = int(checkpoint["completed_rounds"]), int(checkpoint["rounds"])
    require(
        settings.fl.rounds == planned or not job.lr_schedule.depends_on_total_rounds,
        f"fl.rounds={settings.fl.rounds} but resume={settings.resume} was planned for {planned} "
        f"rounds and lr_schedule={job.choices['lr_schedule']} depends on the total: its rounds "
        f"so far would not be those of a {settings.fl.rounds}-round run; keep fl.rounds={planned}",
    )
    require(
        settings.fl.rounds >= done,
        f"fl.rounds={settings.fl.rounds} but resume={settings.resume} has completed {done} "
        f"rounds; give fl.rounds >= {done} (a run can be extended, not shortened)",
    )
    check_state(checkpoint, settings.resume)
    if check_files:
        check_state_files(settings.resume, checkpoint)
    return checkpoint


def restore(loop: Driver, checkpoint: dict[str, Any], resume: str) -> None:
    """The loop continues from `checkpoint`, once its server weights are known to be the
    model's (`check_server_weights`: the model is built only now, from the data)."""
    check_server_weights(checkpoint, loop.server.weights, resume)
    loop.load_state_dict(checkpoint, Path(resume))


def run_job(job: Job, output_dir: Path) -> dict[str, Any]:
    """Run the job into `output_dir` and return its summary: as one rank of this process's
    (or torchrun's) process group, on `fl.workers` new processes, or in this process alone."""
    warn_of_oversubscription(job.settings.fl)
    fix_mmap_threshold(job.settings.fl.mmap_threshold_mb)  # before workers fork: theirs too
    if job.parallelism is not None and job.parallelism.chosen:
        print(f"fedlight: fl.workers=auto: {job.parallelism.chosen}", flush=True)
    if in_process_group():
        summary = run_worker(join_workers(job.settings), job, output_dir)
    elif job.settings.fl.workers > 1:
        # one-line errors, as in one process
        passed_on = (ConfigError, DataError, OSError, ClientStateLostError, Preempted)
        spawn_workers(job.settings, run_worker, (loaded_once(job), output_dir), passed_on)
        summary = json.loads((output_dir / SUMMARY_NAME).read_text())
    else:
        with threads_of(job.settings.fl):
            summary = run_worker(OneWorker(resolve_device(job.settings.device)), job, output_dir)
    stop_if_diverged(job.settings, summary, output_dir / CHECKPOINT_NAME)
    return summary


@dataclass(frozen=True)
class Loaded:
    """A data source that was loaded: every forked worker shares its tensors (copy-on-write
    pages that nobody writes) instead of loading its own copy."""

    dataset: TensorDataset

    def load(self) -> TensorDataset:
        return self.dataset


def loaded_once(job: Job) -> Job:
    """The job with its data loaded here where its workers are forked from this process."""
    if workers_start_method(job.settings) != "fork":
        return job
    return replace(job, data=Loaded(job.data.load()))


def stop_if_diverged(settings: RunSettings, summary: dict[str, Any], checkpoint: Path) -> None:
    """A run that diverged with `fl.on_divergence=stop` ends in a `DivergenceError` (its files are
    written: metrics.csv shows the round, `checkpoint` holds the last good one if the run
    saved one before it)."""
    round_index = summary.get("diverged_at_round")
    if round_index is None or settings.fl.on_divergence != "stop":
        return
    if checkpoint.exists():
        good = load_checkpoint(checkpoint, mmap=True)["completed_rounds"]
        kept = f"{CHECKPOINT_NAME} keeps round {good}, the last good one"
    else:
        every = settings.checkpoint.every
        kept = f"no {CHECKPOINT_NAME} was written before it (checkpoint.every={every})"
    raise DivergenceError(
        f"the run diverged at round {round_index} ({summary['divergence']}) and stopped; {kept}: "
        "lower optim.lr, or set fl.on_divergence=continue to keep training"
    )


def warn_of_oversubscription(fl: FLSettings) -> None:
    """One warning when `fl.threads_per_worker` × `fl.workers` torch threads exceed the CPUs this
    process may use: the run goes on, slower (1,000 threads on 2 cores: a 512×512 matmul 4.5×
    slower), with the numbers of a machine that has them (the thread count changes float
    results, so reproducing a number may need it)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = (fl.threads_per_worker or 0) * fl.workers
    if cpus and threads > cpus:
        print(
            f"fedlight: warning: fl.threads_per_worker={fl.threads_per_worker} × "
            f"fl.workers={fl.workers} = {threads} torch threads on the {cpus} CPUs this process "
            "may use: they share them, slower; lower fl.threads_per_worker unless you reproduce "
            "numbers computed with that many threads",
            file=sys.stderr,
            flush=True,
        )


def resumed_words(settings: RunSettings, checkpoint: dict[str, Any]) -> str:
    """What a resume continues: "resumed from round 17 of 50 (checkpoint of <its time>)"."""
    written = (Path(str(settings.resume)) / CHECKPOINT_NAME).stat().st_mtime
    when = datetime.fromtimestamp(written).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    done = int(checkpoint["completed_rounds"])
    return f"resumed from round {done} of {settings.fl.rounds} (checkpoint of {when})"


def run_worker(workers: Workers, job: Job, output_dir: Path) -> dict[str, Any]:
    """This worker's part of the job; every worker returns the main worker's summary. The
    summary and its figures are written once the rounds' data, models and client states are
    released, so that plotting reuses their memory instead of adding to the run's peak."""
    workers.barrier()  # a resumed checkpoint is complete: its writer has left the job before
    checkpoint = resumed_checkpoint(job, check_files=workers.main)
    if checkpoint is not None and workers.main:
        print(f"fedlight: {resumed_words(job.settings, checkpoint)}", flush=True)
    output_dir = workers.broadcast(output_dir)  # torchrun: each rank's Hydra chose its own
    output_dir.mkdir(parents=True, exist_ok=True)
    console = ConsoleProgress(job.settings.console.progress)
    checked = ObjectiveCheck(job.settings.objective)  # after the others: the row is logged
    loggers = [*job.loggers, console, checked] if workers.main else []
    progress = console if workers.main else SilentProgress()
    try:
        ran = run_rounds(workers, job, output_dir, checkpoint, loggers, progress)
        del checkpoint
        gc.collect()  # the loop's reference cycles hold the data and models until collected
        summary = write_summary(job, output_dir, ran, loggers) if workers.main else {}
    finally:  # a failed run's error is printed plainly, not above a live bar
        console.close()
    return workers.broadcast(summary)


def run_rounds(
    workers: Workers,
    job: Job,
    output_dir: Path,
    checkpoint: dict[str, Any] | None,
    loggers: list[RoundLogger],
    progress: RoundProgress,
) -> Ran:
    """Load the data, build the loop (resumed from `checkpoint`, if any) and run its rounds,
    telling `progress` how each goes."""
    settings, device = job.settings, workers.device
    data, module, chance = prepared(job, workers)
    clients = federation(job.settings, job.partition, data, output_dir, workers)
    driver = AsynchronousLoop if job.stages.algorithm.asynchronous else FederatedLoop
    loop = driver(
        settings,
        clients,
        module,
        job.stages,
        client_state_store(settings.fl, output_dir, device, workers.main),
        workers,
        progress,
    )
    if checkpoint is not None:
        restore(loop, checkpoint, str(settings.resume))
    workers.barrier()  # the main worker has linked a disk store's resumed files: now they are read

    environment = run_environment(workers, loop, checkpoint)
    resumes = 0 if checkpoint is None else int(checkpoint.get("resumes", 0)) + 1
    run_info = RunInfo(
        output_dir,
        job.config,
        job.choices,
        job.sweep_group,
        settings.fl.rounds,
        job.name or default_run_name(output_dir),
        None if checkpoint is None else Path(str(settings.resume)),
    )
    for logger in loggers:
        logger.start(run_info)
    history = loop.run(
        loggers,
        output_dir / CHECKPOINT_NAME,
        {
            "config": json.dumps(comparable_config(job.config), sort_keys=True),
            "rounds": settings.fl.rounds,
            "environment": json.dumps(environment),
            "resumes": resumes,
        },
    )
    if workers.main:
        write_model(output_dir, module, loop.final_model())
    privacy = job.stages.privacy.summary(loop.privacy_state(), history.completed_rounds)
    return Ran(history, chance, environment, resumes, privacy)


def prepared(job: Job, workers: Workers) -> tuple[TensorDataset, pl.LightningModule, Chance]:
    """The run's data (its validation part split off) and client module, both in the memory
    layout `fl.memory_format` chose, on the workers' device; and the chance level of the split
    that decides the run."""
    settings, device = job.settings, workers.device
    fraction = settings.data.validation_fraction
    data = split_validation(job.data.load(), fraction, settings.seed).to(device)
    check_federation_size(settings.fl.num_clients, len(data.train_y), job.choices, workers.main)
    if workers.main and data.batch_size not in (None, settings.local.batch_size):
        print(
            f"fedlight: the data's own loaders batch {data.batch_size} examples; fedlight forms "
            f"each client's batches of local.batch_size={settings.local.batch_size} (set "
            f"local.batch_size={data.batch_size} to train in the data's batches)",
            flush=True,
        )
    chance = Chance.of(split_labels(data, settings.eval.split).cpu().numpy())
    module = build_module(job, data, device)
    chosen = chosen_layout(settings.fl.memory_format, module, data, settings.local.batch_size)
    if workers.main and settings.fl.memory_format == "auto":
        said = f"{chosen.layout.name} ({chosen.reason})"
        print(f"fedlight: fl.memory_format=auto: {said}", flush=True)
    module, data = chosen.layout.apply(module), replace(data, layout=chosen.layout)
    return data, module, chance


def chosen_layout(
    setting: str, module: pl.LightningModule, data: TensorDataset, batch_size: int | None
) -> LayoutChoice:
    """`fl.memory_format`'s layout for the module, tried on the first training batch."""
    count = min(max(batch_size or 2, 2), len(data.train_y))  # BatchNorm refuses a batch of one
    batch = data.prepare(data.train_x[:count]), data.train_y[:count]
    return layout_for(setting, module, next(module.parameters()).device, batch)


def split_labels(data: TensorDataset, split: str) -> torch.Tensor:
    """The labels of `split` (`eval.split`): the test set's or the validation set's."""
    labels = {"test": data.test_y, "validation": data.val_y}[split]
    require(labels is not None, f"eval.split={split} but the run has no {split} set")
    assert labels is not None
    return labels


def run_environment(
    workers: Workers, loop: Driver, checkpoint: dict[str, Any] | None
) -> dict[str, Any]:
    """What decides this run's float results (`fedlight.runs.environment`), with the values of the
    run it resumes; on the main worker only, which writes the files."""
    if not workers.main:
        return {}
    now = float_environment(workers.device, loop.engine.name, workers.count, loop.data.layout.name)
    return now if checkpoint is None else resumed_environment(checkpoint.get("environment"), now)


def build_module(job: Job, data: TensorDataset, device: torch.device) -> pl.LightningModule:
    """The client module, initialized from the seed and set up as a Trainer would before
    fitting (`setup("fit")`, `configure_model()`: `fedlight.engines.lightning`); one without
    parameters (nothing to train or average) is refused in one line."""
    torch.manual_seed(derive_seed(job.settings.seed, Stream.MODEL_INIT))
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    local = job.settings.local
    mean_client = max(1, len(data.train_y) // job.settings.fl.num_clients)
    offered = job.model.offer(data.input_shape, data.num_classes)
    attach(module, TrainerStandIn(module, local.epochs, local.batch_size, mean_client, offered))
    setup_module(module)
    module = module.to(device)
    target = job.config.get("model", {}).get("_target_", type(module).__name__)
    require(
        next(module.parameters(), None) is not None,
        f"model._target_={target} has no parameters: federated training trains and averages "
        "them; give the model at least one trainable layer",
    )
    return module
