"""Entry point: Hydra composes the config; it is validated, turned into typed objects, and run.

This is the only module that sees a `DictConfig`. Bad settings are caught before any work, for every
job of a sweep, and reported on one line that names the key and what is allowed.
"""

import copy
import json
import logging
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import hydra
import torch
import yaml
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.errors import CompactHydraException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from fedlight import STARTED, STARTED_VARIABLE
from fedlight.algorithms.base import Algorithm
from fedlight.cli.jobs import (
    Command,
    ComposedJob,
    JobCompositionError,
    Jobs,
    compose_command,
    job_lines,
    parse_command,
    with_config_dirs,
)
from fedlight.cli.optuna_configs import register_config as register_optuna_config
from fedlight.core.config import (
    CONFIG_GROUPS,
    DATA_SETTING_KEYS,
    PLUGIN_STAGE_DEFAULTS,
    SETTING_KEYS,
    RunSettings,
    register_schema,
    require_finite,
)
from fedlight.core.errors import ConfigError, error_chain, fail, one_line, require
from fedlight.core.moved import check_targets
from fedlight.data.base import DataError, DataSource
from fedlight.data.source import check_data_target
from fedlight.drivers.preemption import (
    PREEMPTED_EXIT_CODE,
    Preempted,
    requeue_on_slurm,
    watched,
)
from fedlight.drivers.workers import WorkerError
from fedlight.engines.lightning import ModelFactory
from fedlight.loggers.base import job_name
from fedlight.loggers.console import Tee, sweep_line
from fedlight.partitions.base import ClientCount
from fedlight.reports.report import plural
from fedlight.round.stages import CONF_DIR as STAGES_CONF_DIR
from fedlight.round.stages import build_stages, instantiate_group
from fedlight.runs import run_dir
from fedlight.runs.experiment import (
    RESUME_FREE_KEYS,
    DivergenceError,
    Job,
    comparable_config,
    first_difference,
    resumed_checkpoint,
    run_job,
)
from fedlight.runs.launch import Parallelism, Terminated, auto_parallelism
from fedlight.runs.resume import Decision, decide, hydra_override
from fedlight.runs.run_dir import CONSOLE_NAME
from fedlight.stages.base import Plan
from fedlight.store.client_states import ClientStateLostError
from fedlight.store.files import open_to_append, write_text
from fedlight.store.run_files import CHECKPOINT_NAME, ERROR_NAME, PREEMPTED_NAME, lock_holder
from fedlight.store.sweeps import (
    COMMAND_VARIABLE,
    SWEEP_JOBS_VARIABLE,
    command_value,
    end_with_command,
    expected_jobs,
)

CONF_DIR = str(STAGES_CONF_DIR)
LIST_GROUPS = ("upload", "download")  # groups whose options form a chain, in list order


def register_configs() -> None:
    """fedlight's schema, and its Hydra plugins' configs over Hydra's (after Hydra's plugin
    scan, which runs once per process and stores theirs)."""
    register_schema()
    Plugins.instance()
    register_optuna_config()


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
    plan = Plan(settings, choices, stages.algorithm, stages.selection, stages.upload)
    for stage in stages.upload:
        stage.check_run(plan)
    return Job(
        settings=settings,
        data=data,
        model=model_factory(cfg),
        partition=partition,
        stages=stages,
        loggers=[instantiate_group(cfg, f"logger.{name}") for name in cfg.logger],
        choices=choices,
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


def list_text(options: list[str]) -> str:
    return f"[{','.join(options)}]"


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def unknown_key_message(key: str, group_overrides: list[str]) -> str:
    parent, _, _ = key.rpartition(".")
    base = hydra.compose("config", overrides=group_overrides)
    group, _, rest = key.partition(".")
    option = rest.partition(".")[0]
    if group in LIST_GROUPS and option in group_options(group) and option not in base[group]:
        listed = [*base[group], option]
        return (
            f"{key} sets {option}, which {group}={list_text(list(base[group]))} does not list; "
            f"add it: {group}={list_text(listed)} (in the order the sender applies them)"
        )
    node = OmegaConf.select(base, parent) if parent else base
    allowed = (
        ", ".join(k for k in node if not str(k).startswith("_"))
        if isinstance(node, DictConfig)
        else ""
    )
    where = parent or "the top level"
    return f"unknown key {key}; {where} has: {allowed or 'no settable keys'}"


# Groups that are no more, each old option as it is said now: the codec of each direction is one
# group, a list of transforms in the order the sender applies them (`upload=[topk,fp16]`).
CODECS = ("topk", "randk", "qsgd", "int8", "sign")
RENAMED_GROUPS: dict[str, dict[str, str]] = {
    "wire": {
        "none": "upload=[] download=[]",
        "fp16": "upload=[fp16]",
        "bf16": "upload=[bf16]",
        "fp16_both": "upload=[fp16] download=[fp16]",
    },
    "compression": {"none": "upload=[]"} | {c: f"upload=[{c}]" for c in CODECS},
    "download_compression": {"none": "download=[]", "int8": "download=[int8]"},
}
RENAMED_WHY = {
    "wire": "each direction lists its transforms, in the order the sender applies them",
    "compression": "a cast goes after a compressor: upload=[topk,fp16]",
    "download_compression": "the broadcast's transforms, in the order the server applies them",
}


def renamed_setting(override: Override, overrides: list[Override]) -> str | None:
    """The one-line refusal of a setting of a group that is no more (`RENAMED_GROUPS`), naming
    how it is said now; None for any other setting."""
    key = override.key_or_group
    old, _, rest = key.partition(".")
    if old not in RENAMED_GROUPS:
        return None
    text = override.input_line.lstrip("+~")
    value = text.partition("=")[2]
    if not rest:  # wire=fp16, compression=topk,qsgd (a sweep), ~compression
        if override.is_delete():
            return f"{text}: the {old} group is no more; {RENAMED_WHY[old]}"
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [value]
        now = [RENAMED_GROUPS[old].get(v) for v in values]
        if None in now:
            options = ", ".join(f"{old}={o} is {n}" for o, n in RENAMED_GROUPS[old].items())
            return f"{text}: the {old} group is no more ({options}); {RENAMED_WHY[old]}"
        return f"{text} is now {' / '.join(now)}; {RENAMED_WHY[old]}"  # type: ignore[arg-type]
    if old == "wire":  # wire.upload.fp16.error_feedback=true: the chain was already a list
        direction, _, setting = rest.partition(".")
        if direction in ("upload", "download"):
            new = f"{direction}.{setting}" if setting else direction
            return f"{text} is now {new}={value}; {RENAMED_WHY[old]}"
        return f"{text}: the wire group is no more; {RENAMED_WHY[old]}"
    direction = "upload" if old == "compression" else "download"
    chosen = [
        str(o.value())
        for o in overrides
        if o.key_or_group == old and not o.is_delete() and not o.is_sweep_override()
    ]
    setting = rest.split(".")[0]
    names = [c for c in chosen if c in group_options(direction)] or [
        option
        for option in RENAMED_GROUPS[old]
        if option in group_options(direction)
        and setting in OmegaConf.load(Path(CONF_DIR) / direction / f"{option}.yaml")[option]
    ]
    name = names[-1] if len(names) == 1 or chosen else "<option>"
    which = f"; {setting} is a setting of {', '.join(names)}" if name == "<option>" else ""
    return (
        f"{text} is now {direction}.{name}.{rest}={value} (with {direction}=[{name}]{which}); "
        f"{RENAMED_WHY[old]}"
    )


def check_group_choices(overrides: list[str], options_of: Callable[[str], list[str]]) -> None:
    """Each option a command line names exists (`options_of`: a group's options on Hydra's
    search path), or the group's options are listed in one line."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    for override in parsed:
        if (renamed := renamed_setting(override, parsed)) is not None:
            raise ConfigError(renamed)
        group = override.key_or_group
        if group not in CONFIG_GROUPS or override.is_delete():
            continue
        value = override.value()
        # A list selects several options of the group (logger=[csv,wandb]), a sweep may go over
        # lists (upload=[topk],[qsgd]).
        choices = list(override.sweep_iterator()) if override.is_sweep_override() else [value]
        values = []
        for choice in choices:
            listed = [str(v) for v in choice] if isinstance(choice, list) else [str(choice)]
            twice = sorted({v for v in listed if listed.count(v) > 1})
            if twice:
                raise ConfigError(
                    f"{group}={list_text(listed)} names {', '.join(twice)} twice; list each "
                    f"option of {group} once"
                )
            values += listed
        options = options_of(group)
        for value in values:
            if value not in options:
                raise ConfigError(
                    f"{group}={value} is not an option; choose {group} from: {', '.join(options)}"
                )


def validate_command_line(args: list[str]) -> list[list[str]]:
    """Compose and build every job the command line describes, without running any of them;
    returns each job's overrides."""
    command = parse_command(args)
    if command is None:
        raise ConfigError(f"{shlex.join(args)}: a Hydra flag that runs no job")
    return [job.overrides for job, _, _ in checked_jobs(command)[1]]


def checked_jobs(
    command: Command,
) -> tuple[Jobs, list[tuple[ComposedJob, RunSettings, Decision]]]:
    """The command's jobs (`fedlight.cli.jobs`), each composed by Hydra and built, so that a bad
    setting of any of them is refused in one line before any job works; with its settings and
    what it does with its directory (`resume=auto`, `fedlight.runs.resume`; decided again when it
    runs, for jobs that a sweeper lists in advance)."""
    check_overrides(command.overrides)
    checked = []
    with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        searched = with_config_dirs(command.overrides, command.config_dirs)
        search_path = [o for o in searched if o.startswith("hydra.searchpath=")]

        def options(group: str) -> list[str]:
            return sorted(
                loader.get_group_options(
                    group, config_name=command.config_name, overrides=search_path
                )
            )

        check_group_choices(command.overrides, options)

        def master(overrides: list[str], mode: RunMode) -> DictConfig:
            return loader.load_configuration(command.config_name, overrides, mode)

        try:
            jobs = compose_command(command, master)
        except JobCompositionError as failed:
            raise ConfigError(composition_message(failed)) from None
        for job in jobs.jobs:
            cfg = job.config
            choices = group_choices(cfg, cfg.hydra.runtime.choices)
            directory = job.directory(command.multirun)
            with open_dict(cfg):
                del cfg["hydra"]
            try:
                built = build_job(cfg, choices)
                decision = Decision(built.settings.resume)
                if jobs.complete:
                    decision = resume_decision(built, directory)
                    built = decided(built, decision)
                if built.settings.resume != "auto":  # else each job decides as it runs
                    resumed_checkpoint(built, mmap=True)
            except ConfigError:
                raise
            except Exception as error:  # noqa: BLE001 - OmegaConf validation errors
                raise ConfigError(one_line(error)) from None
            checked.append((job, built.settings, decision))
    return jobs, checked


def resume_decision(job: Job, output_dir: Path) -> Decision:
    """What the job does with `output_dir` (`fedlight.runs.resume.decide`): the config it compares
    with a saved one is the one a resume compares."""
    comparable = comparable_config(job.config)

    def difference(saved: dict[str, Any]) -> str | None:
        return first_difference(saved, comparable, job.derived_keys)

    return decide(job.settings.resume, output_dir, difference, job.settings.fl.rounds)


def decided(job: Job, decision: Decision) -> Job:
    """The job with its `resume` and `overwrite` as the decision settles them."""
    settings = job.settings
    overwrite = settings.overwrite or decision.overwrite
    return replace(job, settings=replace(settings, resume=decision.resume, overwrite=overwrite))


def decisions_line(decisions: list[Decision]) -> str | None:
    """How many jobs of a sweep `resume=auto` skips, resumes and starts; None where it decided
    nothing (no `resume=auto`, no preempted job)."""
    if not any(d.said for d in decisions):
        return None
    skipped = sum(d.skips for d in decisions)
    resumed = sum(d.resume is not None for d in decisions)
    started = len(decisions) - skipped - resumed
    return (
        f"fedlight: resume=auto: {plural(len(decisions), 'job')}: {skipped} finished (not run "
        f"again), {resumed} resume from their checkpoints, {started} start"
    )


# The configs of Hydra plugins that an extra of fedlight installs, by the extra
PLUGIN_EXTRAS = {
    "hydra/launcher/ray": "ray",
    "hydra/launcher/ray_aws": "ray",
    "hydra/launcher/submitit_slurm": "slurm",
    "hydra/launcher/submitit_local": "slurm",
    "hydra/sweeper/optuna": "optuna",
}


def composition_message(failed: JobCompositionError) -> str:
    """Hydra's reason a job could not be composed, on one line; an unknown key names the keys
    its parent has, a plugin's config that is not there the extra that installs it."""
    error = failed.__cause__ or failed
    text = "\n".join(str(e) for e in error_chain(error))
    plugin = re.search(r"Could not (?:find|load) '(hydra/\w+/\w+)'", text)
    if plugin and plugin.group(1) in PLUGIN_EXTRAS:
        extra = PLUGIN_EXTRAS[plugin.group(1)]
        return (
            f"{plugin.group(1)} is the config of a Hydra plugin that is not installed: "
            f"pip install 'fedlight[{extra}]' ({one_line(error)})"
        )
    missing = re.search(r"Could not override '([^']+)'", text)
    if missing and (kind := missing.group(1)) in PLUGIN_STAGE_DEFAULTS:
        given = [o for o in failed.overrides if o.split("=")[0] == kind] or [f"{kind}=<option>"]
        return (
            f"{given[0]}: {kind} is a stage kind of another package, not in fedlight's defaults "
            f"list; choose its option with a +: +{given[0]}"
        )
    if missing and re.search(r"Key '[^']+' (is )?not in", text):
        groups = [o for o in failed.overrides if o.split("=")[0] in CONFIG_GROUPS]
        return unknown_key_message(missing.group(1), groups)
    return one_line(error)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def hydra_entry(cfg: DictConfig) -> float | int | None:
    """One job (`run_hydra_job`); a job of a sweep says where the sweep stands as it starts and
    as it ends, however it ends."""
    hydra_cfg = HydraConfig.get()
    end_with_command()
    settle_progress(cfg)
    sweep = shown_sweep(cfg, hydra_cfg)
    try:
        return run_hydra_job(cfg, hydra_cfg, sweep)
    finally:
        if sweep is not None:
            print(sweep_line(sweep, expected_jobs()), file=sys.stderr, flush=True)


def shown_sweep(cfg: DictConfig, hydra_cfg: DictConfig) -> Path | None:
    """The sweep directory of this job, where it shows its progress (and writes its run dir)."""
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if not multirun or not writes_run_dir() or cfg.console.progress == "off":
        return None
    return Path(hydra_cfg.sweep.dir)


def run_hydra_job(cfg: DictConfig, hydra_cfg: DictConfig, sweep: Path | None) -> float | int | None:
    """One job: run, and its `objective` returned to Hydra's sweeper (None where the job
    diverged and the sweep goes on); `sweep`: the sweep directory whose state it says."""
    choices = group_choices(cfg, hydra_cfg.runtime.choices)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    sweep_group = hydra_cfg.sweep.dir if multirun else None
    output_dir = Path(hydra_cfg.runtime.output_dir)
    setting = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        name = job_name(list(hydra_cfg.overrides.task), output_dir)
        job = build_job(cfg, choices, sweep_group, announce=writes_run_dir(), name=name)
        decision = resume_decision(job, output_dir)
        if decision.said:
            print(f"fedlight: {output_dir}: {decision.said}", flush=True)
        if decision.summary is not None:  # its files are left as they are
            return decision.summary.get(job.settings.objective)
        job = decided(job, decision)
        with writing(output_dir, setting, job.settings), console_saved(output_dir):
            if writes_run_dir():
                print(f"fedlight: run directory {output_dir}", flush=True)
                search_path = [
                    o for o in hydra_cfg.overrides.hydra if o.startswith("hydra.searchpath=")
                ]
                changed = non_default_settings(
                    cfg, job.config, choices, hydra_cfg.job.config_name, search_path
                )
                print(f"fedlight: settings {' '.join(changed) or '(all defaults)'}", flush=True)
            if sweep is not None:
                print(sweep_line(sweep, expected_jobs()), file=sys.stderr, flush=True)
            summary = run_until_preempted(job, output_dir)
        return summary.get(job.settings.objective)
    except (ConfigError, DataError) as error:
        job_failed(str(error), 2, multirun, output_dir)
    except WorkerError as error:
        job_failed(str(error), error.exit_code, multirun, output_dir)
    except ClientStateLostError as error:
        job_failed(str(error), 1, multirun, output_dir)
    except DivergenceError as error:
        if not multirun:
            fail(str(error), 3)
        # One diverged job is a result of the sweep, not its end: said, and the next job runs
        # (`fedlight report` marks the job and leaves it out of mean ± std).
        print(f"fedlight: {output_dir}: {error}", file=sys.stderr)
        return None
    except KeyboardInterrupt:
        print(interrupted(output_dir, list(hydra_cfg.overrides.task)), file=sys.stderr)
        sys.exit(130)
    except Terminated:  # SIGTERM while workers ran: they are stopped
        overrides = list(hydra_cfg.overrides.task)
        print(interrupted(output_dir, overrides, "terminated"), file=sys.stderr)
        sys.exit(143)
    except OSError as error:
        job_failed(cannot_write(error, output_dir), 1, multirun, output_dir)


def run_until_preempted(job: Job, output_dir: Path) -> dict[str, Any]:
    """The job's summary; a preemption signal (`fedlight.drivers.preemption`) ends the process with
    PREEMPTED_EXIT_CODE once the checkpoint is written, and the directory is marked to resume
    on its own (`preempted.json`), after the handler that was there before (submitit's
    checkpoint-and-requeue) or SLURM's requeue (`preemption.requeue`)."""
    with watched(job.settings.preemption.signals) as watch:
        try:
            return run_job(job, output_dir)
        except Preempted as stop:
            if writes_run_dir():
                marker = {"signal": stop.signal_name, "after_round": stop.round_index}
                write_text(output_dir / PREEMPTED_NAME, json.dumps(marker) + "\n")
            print(
                f"fedlight: preempted ({stop.signal_name}) after round {stop.round_index}; "
                "checkpoint written: the run continues on its own when its command runs again, "
                f"or with: {continue_command(output_dir, job.sweep_group)}",
                file=sys.stderr,
                flush=True,
            )
            watch.chain()
            requeued = requeue_on_slurm(job.settings.preemption.requeue)
            if requeued:
                print(f"fedlight: {requeued}", file=sys.stderr, flush=True)
            sys.exit(PREEMPTED_EXIT_CODE)


def continue_command(output_dir: Path, sweep_group: str | None) -> str:
    """The shell command that continues a preempted run: `fedlight resume` of its sweep, or the
    run resumed in place (its directory quoted for Hydra and the shell, whatever its name)."""
    if sweep_group is not None:
        return shlex.join(["fedlight", "resume", sweep_group])
    place = [hydra_override(key, str(output_dir)) for key in ("resume", "hydra.run.dir")]
    return shlex.join(["python", "-m", "fedlight", *place])


def non_default_settings(
    cfg: DictConfig,
    ran: dict[str, Any],
    choices: dict[str, str],
    config_name: str,
    search_path: list[str],
) -> list[str]:
    """What the run sets otherwise than `config_name` alone: each group whose option differs,
    then each setting that differs from those options' defaults (presets' included); `ran`: the
    composed config as given (`fl.workers=auto`, not what it chose), resolved. The `report`
    node, which only `fedlight report` reads, is left out."""
    default = hydra.compose(config_name, overrides=search_path, return_hydra_config=True)
    default_choices = group_choices(default, default.hydra.runtime.choices)
    changed = {g: c for g, c in choices.items() if default_choices.get(g) != c}
    listed = {*default.hydra.runtime.choices, *LIST_GROUPS}  # the defaults list's groups
    options = [
        f"{g}={list_text([] if c == 'none' else c.split('+'))}"
        if g in LIST_GROUPS or "+" in c  # several options (logger=[csv,wandb]): a list
        else f"{'' if g in listed else '+'}{g}={c}"  # `+`: a plugged-in kind's option
        for g, c in changed.items()
    ]
    chosen = OmegaConf.to_container(
        hydra.compose(config_name, overrides=[*search_path, *options]), resolve=True
    )
    derived = set(interpolated_keys(OmegaConf.to_container(cfg, resolve=False)))
    defaults = flattened(chosen)
    differing = [
        f"{key}={value}"
        for key, value in flattened(ran).items()
        if key not in derived
        and not key.startswith("report.")
        and defaults.get(key, object()) != value
    ]
    return [*options, *differing]


def flattened(config: Any, path: str = "") -> dict[str, Any]:
    """A nested config's leaves by dotted key."""
    if isinstance(config, dict) and config:
        return {
            k: v
            for key, value in config.items()
            for k, v in flattened(value, f"{path}{key}.").items()
        }
    return {path.rstrip("."): config}


@contextmanager
def console_saved(output_dir: Path) -> Iterator[None]:
    """What this process prints while the run runs, also appended to `console.log` in its run
    directory (a resume in place continues the file)."""
    if not writes_run_dir():
        yield
        return
    with open_to_append(output_dir / CONSOLE_NAME) as file:
        stdout, stderr = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = Tee(stdout, file), Tee(stderr, file)  # type: ignore[assignment]
        try:
            yield
        finally:
            sys.stdout, sys.stderr = stdout, stderr


def cannot_write(error: OSError, output_dir: Path) -> str:
    """A file that could not be written (a full disk), and how to go on: the previous checkpoint
    is intact (written whole or not at all)."""
    kept = (
        f"; {CHECKPOINT_NAME} keeps the last checkpointed round: once that is fixed, continue "
        f"with resume={output_dir} hydra.run.dir={output_dir}"
        if (output_dir / CHECKPOINT_NAME).exists()
        else ""
    )
    return f"{error.filename or 'a file'} cannot be written: {error.strerror}{kept}"


@contextmanager
def writing(output_dir: Path, setting: str, settings: RunSettings) -> Iterator[None]:
    """The run directory locked for this run and prepared for it (`fedlight.runs.run_dir.prepare`)
    while it runs, where this process writes it."""
    if not writes_run_dir():
        yield
        return
    with run_dir.locked(output_dir, setting):
        run_dir.prepare(output_dir, setting, settings)
        run_dir.forget_last_attempt(output_dir)
        yield


class JobFailedError(CompactHydraException):
    """A job of a sweep failed (it said why on its own line): Hydra runs the sweep's other jobs,
    then raises the first such error, prints it and exits; `main` exits with the job's code."""

    def __init__(self, code: int) -> None:
        super().__init__(
            "fedlight: error: some jobs of the sweep failed, each said why above "
            "(fedlight: <job dir>: error: ...); its other jobs ran"
        )
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:  # crosses processes with hydra/launcher=joblib
        return (JobFailedError, (self.code,))


def job_failed(message: str, code: int, multirun: bool, output_dir: Path) -> NoReturn:
    """A run's failure ends it with `code`; a sweep's job says so on one line and the sweep goes
    on, as with a diverged job, but ends with the job's code. The line is also kept in the run
    directory's error.txt (the job is *failed* to `fedlight.store.sweeps`) until the next attempt,
    unless another process holds the directory (the job was refused by that live run)."""
    if writes_run_dir() and output_dir.is_dir() and not written_by_another(output_dir):
        try:
            write_text(output_dir / ERROR_NAME, f"{message}\n")
        except (OSError, ConfigError):  # a full disk, a link: the console has the line
            pass
    if not multirun:
        fail(message, code)
    print(f"fedlight: {output_dir}: error: {message}", file=sys.stderr, flush=True)
    raise JobFailedError(code)


def written_by_another(directory: Path) -> bool:
    """Whether another live process holds `directory`'s lock (`fedlight.runs.run_dir`)."""
    holder = lock_holder(directory)
    return holder is not None and holder != str(os.getpid())


def writes_run_dir() -> bool:
    """Whether this process writes the run directory: not the other ranks under torchrun."""
    return int(os.environ.get("RANK", "0")) == 0


def interrupted(output_dir: Path, overrides: list[str], event: str = "interrupted") -> str:
    """What to type to go on after Ctrl-C (or SIGTERM): continue from the run's own checkpoint,
    in place, or start again there, replacing the rows it logged."""
    if (output_dir / CHECKPOINT_NAME).exists():  # resume= alone reapplies the run's overrides
        command = ["python", "-m", "fedlight", hydra_override("resume", str(output_dir))]
        what = "continue from its last checkpoint"
    else:
        replaces = ["overwrite=true"] if run_dir.results_in(output_dir) else []
        command = ["python", "-m", "fedlight", *overrides, *replaces]
        what = "no checkpoint yet (see checkpoint.every); start again"
    command.append(hydra_override("hydra.run.dir", str(output_dir)))
    return f"fedlight: {event}; {what} with: {shlex.join(command)}"


def check_overrides(args: list[str]) -> None:
    """Every override, Hydra's own (`hydra.run.dir=...`) included, parses in Hydra's grammar,
    or is refused in one line naming it and how to quote it (a path with spaces and brackets,
    `hydra.run.dir=my run (1)`, is Hydra's lexer traceback otherwise)."""
    parser = OverridesParser.create()
    for arg in args:
        try:
            parser.parse_overrides([arg])
        except Exception as error:  # noqa: BLE001 - the grammar's errors become one line
            key, _, value = arg.partition("=")
            quote = '"' if "'" in value else "'"
            raise ConfigError(
                f"{arg}: Hydra cannot parse it ({one_line(error, separator=' ', limit=80)}); "
                f"quote the value: {key}={quote}{value}{quote} (in a shell, quote it all again)"
            ) from None


def given_value(overrides: list[str], key: str) -> str | None:
    """The value the command line gives `key` (its last override), None where none does."""
    given = [o for o in overrides if o.split("=")[0].lstrip("+") == key]
    if not given:
        return None
    return str(OverridesParser.create().parse_overrides(given[-1:])[0].value())


def with_saved_overrides(command: Command) -> Command:
    """`resume=<run dir>` continues that run as it was started: the run's recorded overrides
    (`.hydra/overrides.yaml`) come first, the command's own after them. A setting the command
    gives another value than the run had is refused naming the key, unless it is one a resume
    may change (`RESUME_FREE_KEYS`: more `fl.rounds`, another `fl.workers`, ...)."""
    directory = given_value(command.overrides, "resume")
    if directory is None or command.multirun:
        return command
    recorded = Path(directory) / ".hydra" / "overrides.yaml"
    if not recorded.is_file():
        return command  # the resume's own check says what the directory lacks
    saved = saved_overrides(directory, recorded)
    parser = OverridesParser.create()
    saved_values = {o.key_or_group: o for o in saved}
    for override in parser.parse_overrides(command.overrides):
        key = override.key_or_group
        before = saved_values.get(key)
        if before is None or key in RESUME_FREE_KEYS or key == "resume":
            continue
        if before.input_line.lstrip("+") != override.input_line.lstrip("+"):
            raise ConfigError(
                f"resume={directory}: {override.input_line} differs from the run's "
                f"{before.input_line}; leave it out to continue the run as it was started "
                "(or start a new run without resume=)"
            )
    given = {o.key_or_group for o in parser.parse_overrides(command.overrides)}
    kept = [o.input_line for o in saved if o.key_or_group not in given]
    return replace(command, overrides=[*kept, *command.overrides])


def saved_overrides(directory: str, recorded: Path) -> list[Override]:
    """The overrides a run recorded in `recorded` (Hydra's list of them), `resume=` aside; a
    file that is not such a list (cut short, not YAML, a mapping, an override Hydra cannot
    parse) is refused in one line naming it: the run cannot be continued as it was started."""
    fix = (
        f"restore it from {recorded.parent / 'hydra.yaml'} (hydra.overrides.task), or start a "
        "new run without resume="
    )
    try:
        saved = yaml.safe_load(recorded.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError(
            f"resume={directory}: {recorded} cannot be read ({one_line(error, limit=80)}); {fix}"
        ) from None
    require(
        isinstance(saved, list) and all(isinstance(o, str) for o in saved),
        f"resume={directory}: {recorded} is not a list of overrides; {fix}",
    )
    try:
        return OverridesParser.create().parse_overrides(
            [o for o in saved if not o.startswith("resume=")]
        )
    except OverrideParseException as error:
        raise ConfigError(
            f"resume={directory}: {recorded} holds an override Hydra cannot parse "
            f"({one_line(error, limit=80)}); {fix}"
        ) from None


def check_output_dir(
    args: list[str], multirun: bool, jobs: list[RunSettings], decided: bool = False
) -> Path | None:
    """The run or sweep directory given on the command line, locked for this run (or sweep)
    alone and prepared for it (no links, no other run's results: see `fedlight.runs.run_dir`) before
    Hydra writes into it; None where none is given or this process does not write it.
    `decided`: each job of the sweep decided what to do with its folder (`resume=auto`)."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    value = given_value(args, key)
    if value is None or "${" in value or not writes_run_dir():
        return None
    directory = Path(value)
    run_dir.acquire(directory, key)
    try:
        if multirun:
            run_dir.prepare_sweep(directory, key, jobs, decided)
        else:
            run_dir.prepare(directory, key, jobs[0])
    except ConfigError:
        run_dir.release(directory)
        raise
    return directory


def main() -> None:
    """`fedlight [overrides]`: every job of the command checked, then run by Hydra. From before
    it locks a directory, a preemption signal only takes note (`fedlight.drivers.preemption`): the
    run,
    or each job of the sweep, ends its round, writes its checkpoint and exits 75, and a sweep
    whose jobs run in other processes (joblib's) waits for them to, instead of dying at once."""
    os.environ[STARTED_VARIABLE] = repr(STARTED)
    os.environ[COMMAND_VARIABLE] = command_value()
    register_configs()
    command = parse_command(sys.argv[1:])
    locked = None
    with ExitStack() as noticing:
        if command is not None:  # not a Hydra flag that answers on its own (--help, --cfg job)
            try:
                command = with_saved_overrides(command)
                jobs, checked = checked_jobs(command)
                if command.list_jobs:
                    sweep_dir = given_value(command.overrides, "hydra.sweep.dir")
                    print("\n".join(job_lines(jobs, sweep_dir)))
                    sys.exit(0)
                decisions = [decision for _, _, decision in checked]
                decided_line = decisions_line(decisions)
                os.environ.pop(SWEEP_JOBS_VARIABLE, None)  # a sweep's count, set afresh
                if command.multirun and jobs.complete:
                    os.environ[SWEEP_JOBS_VARIABLE] = str(len(jobs.jobs))
                notices = {n: None for _, s, _ in checked for n in s.preemption.signals}
                noticing.enter_context(watched(list(notices)))
                writing = [job_settings for _, job_settings, d in checked if not d.skips]
                if writing:  # a finished run that resume=auto leaves alone is not prepared
                    locked = check_output_dir(
                        command.overrides, command.multirun, writing, bool(decided_line)
                    )
                if command.multirun and decided_line:  # said once the sweep may go ahead
                    print(decided_line, file=sys.stderr, flush=True)
            except ConfigError as error:
                fail(str(error), 2)
            sys.argv = [sys.argv[0], *command.hydra_args]
        run_hydra(locked)


def run_hydra(locked: Path | None) -> None:
    """Hydra's run of the command's jobs; `locked`: the directory the command locked (released
    once its last job has ended)."""
    try:
        hydra_entry()
    except JobFailedError as failed:  # HYDRA_FULL_ERROR=1: Hydra raises it instead
        print(failed, file=sys.stderr)
        sys.exit(failed.code)
    except SystemExit as exiting:
        # Hydra reports a failed job's error and exits 1 while handling it: exit with its code
        failed = exiting.__context__
        if isinstance(failed, JobFailedError):
            sys.exit(failed.code)
        raise
    finally:  # a sweep's directory: its lock is held until its last job has ended
        if locked is not None:
            run_dir.release(locked)
