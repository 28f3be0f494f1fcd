"""Entry point: Hydra composes the config; it is validated, turned into typed objects, and run.

This is the only module that sees a `DictConfig`. Bad settings are caught before any work, for every
job of a sweep, and reported on one line that names the key and what is allowed.
"""

import re
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from fedlight.config import (
    CONFIG_GROUPS,
    SETTING_KEYS,
    ConfigError,
    RunSettings,
    error_chain,
    one_line,
    register_schema,
)
from fedlight.data.base import DataError
from fedlight.experiment import Job, run_job
from fedlight.stages import CONF_DIR as STAGES_CONF_DIR
from fedlight.stages import build_stages, instantiate_group
from fedlight.workers import WorkerError

CONF_DIR = str(STAGES_CONF_DIR)
MULTIRUN_FLAGS = ("-m", "--multirun")


def build_job(cfg: DictConfig, choices: dict[str, str], sweep_group: str | None = None) -> Job:
    """Typed settings and instantiated components out of a composed config."""
    settings_node = OmegaConf.merge(
        OmegaConf.structured(RunSettings), OmegaConf.masked_copy(cfg, list(SETTING_KEYS))
    )
    settings: RunSettings = OmegaConf.to_object(settings_node)  # type: ignore[assignment]
    return Job(
        settings=settings,
        data=instantiate_group(cfg, "data"),
        model=instantiate_group(cfg, "model"),
        partition=instantiate_group(cfg, "partition"),
        stages=build_stages(cfg, choices),
        loggers=[instantiate_group(cfg, f"logger.{name}") for name in cfg.logger],
        choices=choices,
        config=OmegaConf.to_container(cfg, resolve=True),  # type: ignore[arg-type]
        sweep_group=sweep_group,
    )


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def unknown_key_message(key: str, group_overrides: list[str]) -> str:
    parent, _, _ = key.rpartition(".")
    base = hydra.compose("config", overrides=group_overrides)
    node = OmegaConf.select(base, parent) if parent else base
    allowed = (
        ", ".join(k for k in node if not str(k).startswith("_"))
        if isinstance(node, DictConfig)
        else ""
    )
    where = parent or "the top level"
    return f"unknown key {key}; {where} has: {allowed or 'no settable keys'}"


def check_group_choices(overrides: list[str]) -> None:
    for override in OverridesParser.create().parse_overrides(overrides):
        group = override.key_or_group
        if group not in CONFIG_GROUPS or override.is_delete():
            continue
        values = (
            [str(v) for v in override.sweep_string_iterator()]
            if override.is_sweep_override()
            else [str(override.value())]
        )
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
            choices = {g: str(cfg.hydra.runtime.choices[g]) for g in CONFIG_GROUPS}
            with open_dict(cfg):
                del cfg["hydra"]
            try:
                build_job(cfg, choices)
            except ConfigError:
                raise
            except Exception as error:  # noqa: BLE001 - OmegaConf validation errors
                raise ConfigError(one_line(error)) from None
    return jobs


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def hydra_entry(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    choices = {g: str(hydra_cfg.runtime.choices[g]) for g in CONFIG_GROUPS}
    sweep_group = hydra_cfg.sweep.dir if hydra_cfg.mode == RunMode.MULTIRUN else None
    try:
        run_job(build_job(cfg, choices, sweep_group), Path(hydra_cfg.runtime.output_dir))
    except (ConfigError, DataError, WorkerError) as error:
        print(f"fedlight: error: {error}", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    """`fedlight [overrides]` runs (Hydra); `fedlight report <sweep dir>` summarizes a sweep."""
    args = sys.argv[1:]
    if args[:1] == ["report"]:
        from fedlight.report import main as report_main

        sys.exit(report_main(args[1:]))
    register_schema()
    hydra_flags = [a for a in args if a.startswith("-") and a not in MULTIRUN_FLAGS]
    if not hydra_flags:
        try:
            validate_command_line(args)
        except ConfigError as error:
            print(f"fedlight: error: {error}", file=sys.stderr)
            sys.exit(2)
    hydra_entry()
