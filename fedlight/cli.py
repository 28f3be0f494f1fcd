"""Entry point: Hydra composes the config; it is validated, turned into typed objects, and run.

This is the only module that sees a `DictConfig`. Bad settings are caught before any work, for every
job of a sweep, and reported on one line that names the key and what is allowed.
"""

import os
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from fedlight import run_dir
from fedlight.checkpoint import CHECKPOINT_NAME
from fedlight.client_states import ClientStateLostError
from fedlight.config import (
    CONFIG_GROUPS,
    SETTING_KEYS,
    RunSettings,
    register_schema,
    require_finite,
)
from fedlight.data.base import DataError
from fedlight.errors import ConfigError, error_chain, one_line
from fedlight.experiment import DivergenceError, Job, resumed_checkpoint, run_job
from fedlight.loggers.base import job_name
from fedlight.pipeline.stage import Plan
from fedlight.stages import CONF_DIR as STAGES_CONF_DIR
from fedlight.stages import build_stages, instantiate_group
from fedlight.workers import Terminated, WorkerError

CONF_DIR = str(STAGES_CONF_DIR)
MULTIRUN_FLAGS = ("-m", "--multirun")
LIST_GROUPS = ("upload", "download")  # groups whose options form a chain, in list order


def build_job(
    cfg: DictConfig, choices: dict[str, str], sweep_group: str | None = None, name: str = ""
) -> Job:
    """Typed settings and instantiated components out of a composed config; `name`: the job's,
    for the loggers that name runs."""
    config = OmegaConf.to_container(cfg, resolve=True)
    require_finite(config)
    derived = frozenset(interpolated_keys(OmegaConf.to_container(cfg, resolve=False)))
    settings_node = OmegaConf.merge(
        OmegaConf.structured(RunSettings), OmegaConf.masked_copy(cfg, list(SETTING_KEYS))
    )
    settings: RunSettings = OmegaConf.to_object(settings_node)  # type: ignore[assignment]
    stages = build_stages(cfg, choices)
    plan = Plan(settings, choices, stages.algorithm, stages.selection, stages.upload)
    for stage in stages.upload:
        stage.check_run(plan)
    return Job(
        settings=settings,
        data=instantiate_group(cfg, "data"),
        model=instantiate_group(cfg, "model"),
        partition=instantiate_group(cfg, "partition"),
        stages=stages,
        loggers=[instantiate_group(cfg, f"logger.{name}") for name in cfg.logger],
        choices=choices,
        config=config,  # type: ignore[arg-type]
        sweep_group=sweep_group,
        name=name,
        derived_keys=derived,
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
    none for an empty list (`upload=[]`, the default)."""
    return {
        group: str(runtime_choices[group])
        if group in runtime_choices
        else "+".join(cfg[group]) or "none"
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


def check_group_choices(overrides: list[str]) -> None:
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
        options = group_options(group)
        for value in values:
            if value not in options:
                raise ConfigError(
                    f"{group}={value} is not an option; choose {group} from: {', '.join(options)}"
                )


def job_override_lists(overrides: list[str], multirun: bool) -> list[list[str]]:
    if not multirun:
        return [overrides]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def preset_sweep(job: list[str]) -> list[str]:
    """The sweep an experiment preset declares in `hydra.sweeper.params`, as overrides that the
    command line's own overrides then replace key by key (as Hydra's basic sweeper does)."""
    try:
        composed = hydra.compose("config", overrides=job, return_hydra_config=True)
    except Exception:  # noqa: BLE001 - the job is composed again below, which reports the error
        return []
    return [f"{key}={value}" for key, value in (composed.hydra.sweeper.params or {}).items()]


def validate_command_line(args: list[str]) -> list[list[str]]:
    """Compose and build every job the command line describes, without running any of them;
    returns each job's overrides."""
    return [overrides for overrides, _ in validated_jobs(args)]


def validated_jobs(args: list[str]) -> list[tuple[list[str], RunSettings]]:
    """`validate_command_line`'s jobs, each with its settings."""
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    overrides = [
        a for a in args if a not in MULTIRUN_FLAGS and not a.startswith(("hydra.", "hydra/"))
    ]
    try:
        check_group_choices(overrides)
        jobs = job_override_lists(overrides, multirun)
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - Hydra's parser errors become one line
        raise ConfigError(one_line(error)) from None
    validated = []
    with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        if multirun:
            jobs = job_override_lists([*preset_sweep(jobs[0]), *overrides], multirun)
        for job in jobs:
            try:
                cfg = hydra.compose("config", overrides=job, return_hydra_config=True)
            except Exception as error:  # noqa: BLE001
                text = "\n".join(str(e) for e in error_chain(error))
                missing = re.search(r"Could not override '([^']+)'", text)
                if missing and re.search(r"Key '[^']+' (is )?not in", text):
                    groups = [o for o in job if o.split("=")[0] in CONFIG_GROUPS]
                    raise ConfigError(unknown_key_message(missing.group(1), groups)) from None
                raise ConfigError(one_line(error)) from None
            choices = group_choices(cfg, cfg.hydra.runtime.choices)
            with open_dict(cfg):
                del cfg["hydra"]
            try:
                built = build_job(cfg, choices)
                resumed_checkpoint(built, mmap=True)
            except ConfigError:
                raise
            except Exception as error:  # noqa: BLE001 - OmegaConf validation errors
                raise ConfigError(one_line(error)) from None
            validated.append((job, built.settings))
    return validated


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def hydra_entry(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    choices = group_choices(cfg, hydra_cfg.runtime.choices)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    sweep_group = hydra_cfg.sweep.dir if multirun else None
    output_dir = Path(hydra_cfg.runtime.output_dir)
    setting = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        name = job_name(list(hydra_cfg.overrides.task), output_dir)
        job = build_job(cfg, choices, sweep_group, name)
        with writing(output_dir, setting, job.settings):
            run_job(job, output_dir)
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
    except KeyboardInterrupt:
        print(interrupted(output_dir, list(hydra_cfg.overrides.task)), file=sys.stderr)
        sys.exit(130)
    except Terminated:  # SIGTERM while workers ran: they are stopped
        overrides = list(hydra_cfg.overrides.task)
        print(interrupted(output_dir, overrides, "terminated"), file=sys.stderr)
        sys.exit(143)
    except OSError as error:
        job_failed(cannot_write(error, output_dir), 1, multirun, output_dir)


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
    """The run directory locked for this run and prepared for it (`fedlight.run_dir.prepare`)
    while it runs, where this process writes it."""
    if not writes_run_dir():
        yield
        return
    with run_dir.locked(output_dir, setting):
        run_dir.prepare(output_dir, setting, settings)
        yield


def fail(message: str, code: int) -> NoReturn:
    print(f"fedlight: error: {message}", file=sys.stderr)
    sys.exit(code)


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
    on, as with a diverged job, but ends with the job's code."""
    if not multirun:
        fail(message, code)
    print(f"fedlight: {output_dir}: error: {message}", file=sys.stderr, flush=True)
    raise JobFailedError(code)


def writes_run_dir() -> bool:
    """Whether this process writes the run directory: not the other ranks under torchrun."""
    return int(os.environ.get("RANK", "0")) == 0


def interrupted(output_dir: Path, overrides: list[str], event: str = "interrupted") -> str:
    """What to type to go on after Ctrl-C (or SIGTERM): continue from the run's own checkpoint,
    in place, or start again there, replacing the rows it logged."""
    if (output_dir / CHECKPOINT_NAME).exists():
        kept = [o for o in overrides if not o.startswith("resume=")]
        command = ["python", "-m", "fedlight", *kept, f"resume={output_dir}"]
        what = "continue from its last checkpoint"
    else:
        replaces = ["overwrite=true"] if run_dir.results_in(output_dir) else []
        command = ["python", "-m", "fedlight", *overrides, *replaces]
        what = "no checkpoint yet (see checkpoint.every); start again"
    command.append(f"hydra.run.dir={output_dir}")
    return f"fedlight: {event}; {what} with: {shlex.join(command)}"


def check_overrides(args: list[str]) -> None:
    """Every override, Hydra's own (`hydra.run.dir=...`) included, parses in Hydra's grammar,
    or is refused in one line naming it and how to quote it (a path with spaces and brackets,
    `hydra.run.dir=my run (1)`, is Hydra's lexer traceback otherwise)."""
    parser = OverridesParser.create()
    for arg in args:
        if arg in MULTIRUN_FLAGS:
            continue
        try:
            parser.parse_overrides([arg])
        except Exception as error:  # noqa: BLE001 - the grammar's errors become one line
            key, _, value = arg.partition("=")
            quote = '"' if "'" in value else "'"
            raise ConfigError(
                f"{arg}: Hydra cannot parse it ({one_line(error, separator=' ', limit=80)}); "
                f"quote the value: {key}={quote}{value}{quote} (in a shell, quote it all again)"
            ) from None


def check_output_dir(args: list[str], multirun: bool, jobs: list[RunSettings]) -> Path | None:
    """The run or sweep directory given on the command line, locked for this run (or sweep)
    alone and prepared for it (no links, no other run's results: see `fedlight.run_dir`) before
    Hydra writes into it; None where none is given or this process does not write it."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = [a for a in args if a.startswith(f"{key}=")]
    if not given or not writes_run_dir():
        return None
    value = str(OverridesParser.create().parse_overrides(given[-1:])[0].value())
    if "${" in value:
        return None
    directory = Path(value)
    run_dir.acquire(directory, key)
    try:
        if multirun:
            run_dir.prepare_sweep(directory, key, jobs)
        else:
            run_dir.prepare(directory, key, jobs[0])
    except ConfigError:
        run_dir.release(directory)
        raise
    return directory


def main() -> None:
    """`fedlight [overrides]` runs (Hydra); `fedlight report <sweep dir>` summarizes a sweep."""
    args = sys.argv[1:]
    if args[:1] == ["report"]:
        from fedlight.report import main as report_main

        sys.exit(report_main(args[1:]))
    register_schema()
    hydra_flags = [a for a in args if a.startswith("-") and a not in MULTIRUN_FLAGS]
    locked = None
    if not hydra_flags:
        try:
            check_overrides(args)
            jobs = [settings for _, settings in validated_jobs(args)]
            locked = check_output_dir(args, any(a in MULTIRUN_FLAGS for a in args), jobs)
        except ConfigError as error:
            fail(str(error), 2)
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
