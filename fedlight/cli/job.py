"""A composed config (a `DictConfig`) into a typed `Job`: the run's settings, its data, model,
partition, stages and loggers, with the settings the config leaves open (`fl.workers=auto`, a
partition's own number of clients, `console.progress=auto`) settled.
"""

import copy
import functools
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from fedlight.algorithms.base import Algorithm
from fedlight.cli.build import build_stages, instantiate_group
from fedlight.cli.schema import (
    CONF_DIR,
    CONFIG_GROUPS,
    DATA_SETTING_KEYS,
    SETTING_KEYS,
    require_finite,
)
from fedlight.core.errors import require
from fedlight.core.moved import check_targets
from fedlight.core.settings import RunSettings, check_device_name
from fedlight.data.base import DataSource
from fedlight.data.source import check_data_target
from fedlight.engines.lightning import ModelFactory
from fedlight.partitions.base import ClientCount
from fedlight.runs.job import Job
from fedlight.runs.parallelism import Parallelism, auto_parallelism
from fedlight.stages.base import Plan


def build_job(
    cfg: DictConfig,
    choices: dict[str, str],
    sweep_group: str | None = None,
    announce: bool = False,
    name: str = "",
) -> Job:
    """Typed settings and instantiated components out of a composed config; `announce`: say a
    number of clients the partition gives; `name`: the job's, for the loggers that name runs."""
    require_finite(OmegaConf.to_container(cfg, resolve=True))
    check_targets(OmegaConf.to_container(cfg, resolve=False))
    check_data_target(OmegaConf.select(cfg, "data._target_"))
    data, partition = data_source(cfg), instantiate_group(cfg, "partition")
    settle_num_clients(cfg, partition.client_count(data), choices["partition"], announce)
    config = OmegaConf.to_container(cfg, resolve=True)
    derived = frozenset(interpolated_keys(OmegaConf.to_container(cfg, resolve=False)))
    stages = build_stages(cfg, choices)
    parallelism = settle_workers(cfg, choices, stages.algorithm)
    settings_node = OmegaConf.merge(
        OmegaConf.structured(RunSettings),
        OmegaConf.masked_copy(cfg, list(SETTING_KEYS)),
        {"data": {key: cfg.data[key] for key in DATA_SETTING_KEYS if key in cfg.data}},
    )
    settings: RunSettings = OmegaConf.to_object(settings_node)  # type: ignore[assignment]
    settings.check_splits(own_validation=getattr(data, "own_validation", False))
    most_epochs = stages.local_work.most_epochs(settings.local.epochs)
    plan = Plan(settings, choices, stages.algorithm, stages.selection, stages.upload, most_epochs)
    for stage in stages.upload:
        stage.check_run(plan)
    return Job(
        settings=settings,
        data=data,
        model=model_factory(cfg),
        partition=partition,
        stages=stages,
        loggers=[instantiate_group(cfg, f"logger.{name}") for name in cfg.logger],
        choices=ran_choices(cfg, choices),
        config=config,  # type: ignore[arg-type]
        sweep_group=sweep_group,
        name=name,
        derived_keys=derived,
        parallelism=parallelism,
    )


def model_factory(cfg: DictConfig) -> ModelFactory:
    """The model group's option as a `ModelFactory`: its settings interpolated from other groups
    (`lr: ${optim.lr}`) are fedlight's offers, passed where the constructor takes them; the
    settings it names itself are passed as they are."""
    offered = {key for key in cfg.model if OmegaConf.is_interpolation(cfg.model, key)}
    node = OmegaConf.to_container(cfg.model, resolve=True)
    assert isinstance(node, dict)
    settings = {str(k): v for k, v in node.items() if k not in ("_target_", "_partial_")}
    return ModelFactory(
        target=str(node["_target_"]),
        given={key: v for key, v in settings.items() if key not in offered},
        offered={key: v for key, v in settings.items() if key in offered},
    )


def data_source(cfg: DictConfig) -> DataSource:
    """The data group's source, built without the run's own data settings (`DataSettings`):
    the run applies them to whatever `load()` gives, so no source needs a field for them."""
    source = copy.deepcopy(cfg)
    with open_dict(source):
        for key in DATA_SETTING_KEYS:
            source.data.pop(key, None)
    return instantiate_group(source, "data")


def settle_workers(cfg: DictConfig, choices: dict[str, str], algorithm: Algorithm) -> Parallelism:
    """`fl.workers` and `fl.threads_per_worker` as numbers: what `fl.workers=auto` chooses for
    this run on the torch threads of this process (`fedlight.runs.launch.auto_parallelism`)."""
    check_device_name(str(cfg.device))  # before `fl.workers=auto` asks torch about it
    one_process = None
    if algorithm.asynchronous:
        one_process = f"algo={choices['algo']} runs its event queue in one process"
    elif algorithm.pools_data:
        one_process = f"algo={choices['algo']} trains one participant per round"
    parallelism = auto_parallelism(
        cfg.fl.workers,
        cfg.fl.threads_per_worker,
        cfg.fl.clients_per_round,
        cfg.device,
        one_process,
        torch.get_num_threads(),
    )
    cfg.fl.workers, cfg.fl.threads_per_worker = parallelism.workers, parallelism.threads_per_worker
    return parallelism


def settle_progress(cfg: DictConfig) -> None:
    """`console.progress=auto` is off where the job's logging, as Hydra has configured it, is
    quiet: a run's progress is information, and `hydra/job_logging=disabled` (root level ERROR),
    or any job_logging that sets the `fedlight` logger above INFO, asks for none."""
    logger = logging.getLogger("fedlight")
    quiet = logger.disabled or not logger.isEnabledFor(logging.INFO)
    if cfg.console.progress == "auto" and quiet:
        cfg.console.progress = "off"


def settle_num_clients(
    cfg: DictConfig, count: ClientCount | None, partition: str, announce: bool
) -> None:
    """`fl.num_clients` where the partition gives the number of clients (`partition=natural`,
    `from_file`): null (their YAML's) becomes it, said when `announce`; a different number is
    refused naming both. Null is refused where the partition needs a number."""
    given = cfg.fl.num_clients
    if count is None:
        require(
            given is not None,
            f"fl.num_clients=null but partition={partition} splits into a number of clients you "
            "give; set fl.num_clients (only partition=natural and from_file count their clients)",
        )
        return
    require(
        given in (None, count.number),
        f"fl.num_clients={given} but partition={partition} gives {count.number} clients, the "
        f"number of {count.counted}; leave fl.num_clients out (it is taken from there)",
    )
    cfg.fl.num_clients = count.number
    if announce and given is None:
        print(
            f"fedlight: fl.num_clients={count.number}, the number of {count.counted} "
            f"(partition={partition})",
            file=sys.stderr,
            flush=True,
        )


def interpolated_keys(config: Any, path: str = "") -> Iterator[str]:
    """Dotted keys whose value interpolates another (`model.lr: ${optim.lr}`)."""
    if isinstance(config, dict):
        for key, value in config.items():
            yield from interpolated_keys(value, f"{path}{key}.")
    elif isinstance(config, str) and "${" in config:
        yield path.rstrip(".")


def group_choices(cfg: DictConfig, runtime_choices: DictConfig) -> dict[str, str]:
    """Each group's option; a group given several options (`logger=[csv,wandb]`,
    `upload=[topk,fp16]`), which Hydra records no choice for, as their names joined by '+', and
    none for an empty list (`upload=[]`, the default) or a plugged-in stage kind's default."""
    return {
        group: str(runtime_choices[group])
        if group in runtime_choices
        else "+".join(cfg[group] or []) or "none"
        for group in CONFIG_GROUPS
    }


def ran_choices(cfg: DictConfig, choices: dict[str, str]) -> dict[str, str]:
    """`choices` as what ran, for the run's records (summary.json, W&B's tags, TensorBoard's
    hparams, reports): a group whose node names another `_target_` than its option's own YAML
    (`model._target_=mypkg.MyModule` with data=mnist, whose option is cnn) by that target."""
    return {
        group: replaced_target(cfg, group, choice) or choice for group, choice in choices.items()
    }


def replaced_target(cfg: DictConfig, group: str, choice: str) -> str | None:
    """The `_target_` of the group's node where it is not its option's (None where it is, or
    where the option's own is not known: another package's option, or one that takes its
    target from its defaults)."""
    node = cfg.get(group)
    target = node.get("_target_") if isinstance(node, DictConfig) else None
    own = option_target(group, choice)
    return None if target is None or own is None or str(target) == own else str(target)


@functools.cache
def option_target(group: str, choice: str) -> str | None:
    """The `_target_` that fedlight's YAML of the option names, if it names one."""
    path = Path(CONF_DIR) / group / f"{choice}.yaml"
    target = OmegaConf.load(path).get("_target_") if path.is_file() else None
    return None if target is None else str(target)
