"""The command line checked before any job works: its overrides parse, each group's option
exists (a group that is no more names how it is said now), and every job it describes composes
and builds (`checked_jobs`); Hydra's reason a job does not compose, on one line.
"""

import re
from collections.abc import Callable
from pathlib import Path

import hydra
from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from fedlight.cli.job import build_job, group_choices
from fedlight.cli.jobs import (
    Command,
    ComposedJob,
    JobCompositionError,
    Jobs,
    command_hydra,
    compose_command,
)
from fedlight.cli.resume import decided, resume_decision
from fedlight.cli.schema import CONF_DIR, CONFIG_GROUPS, PLUGIN_STAGE_DEFAULTS
from fedlight.core.errors import ConfigError, error_chain, one_line, require
from fedlight.core.settings import RunSettings
from fedlight.runs.experiment import resumed_checkpoint
from fedlight.runs.resume import Decision

LIST_GROUPS = ("upload", "download")  # groups whose options form a chain, in list order


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


def check_group_choices(
    overrides: list[str], options_of: Callable[[str], list[str]], parser: OverridesParser
) -> None:
    """Each option a command line names exists (`options_of`: a group's options on Hydra's
    search path), or the group's options are listed in one line; `parser` has Hydra's config
    loader, which a `glob()` sweep lists the group's options with."""
    parsed = parser.parse_overrides(overrides)
    for override in parsed:
        if (renamed := renamed_setting(override, parsed)) is not None:
            raise ConfigError(renamed)
        group = override.key_or_group
        if group not in CONFIG_GROUPS:
            continue
        if override.is_delete():
            raise ConfigError(
                f"{override.input_line} removes the {group} group, which a run reads; choose an "
                f"option instead ({group}=<option>, or {group}=[] where it takes a list): "
                f"{', '.join(options_of(group))}"
            )
        value = override.value()
        # A list selects several options of the group (logger=[csv,wandb]), a sweep may go over
        # lists (upload=[topk],[qsgd]).
        choices = list(override.sweep_iterator()) if override.is_sweep_override() else [value]
        if not choices:  # glob(zzz*): a sweep of no job
            raise ConfigError(
                f"{override.input_line} names no option of {group}; choose from: "
                f"{', '.join(options_of(group))}"
            )
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


def checked_jobs(
    command: Command,
) -> tuple[Jobs, list[tuple[ComposedJob, RunSettings, Decision]]]:
    """The command's jobs (`fedlight.cli.jobs`), each composed by Hydra and built, so that a bad
    setting of any of them is refused in one line before any job works; with its settings and
    what it does with its directory (`resume=auto`, `fedlight.runs.resume`; decided again when it
    runs, for jobs that a sweeper lists in advance)."""
    check_overrides(command.overrides)
    checked = []
    with command_hydra(command) as loader:
        search_path = [o for o in command.overrides if o.startswith("hydra.searchpath=")]

        def options(group: str) -> list[str]:
            return sorted(
                loader.get_group_options(
                    group, config_name=command.config_name, overrides=search_path
                )
            )

        check_primary_config(command.config_name, search_path, loader)
        parser = OverridesParser.create(config_loader=loader)
        check_group_choices(command.overrides, options, parser)

        def master(overrides: list[str], mode: RunMode) -> DictConfig:
            return loader.load_configuration(command.config_name, overrides, mode)

        try:
            jobs = compose_command(command, master)
        except JobCompositionError as failed:
            raise ConfigError(composition_message(failed)) from None
        for job in jobs.jobs:
            try:
                checked.append((job, *checked_job(job, command.multirun, jobs.complete)))
            except ConfigError as error:
                if not command.list_jobs:
                    raise
                job.refused = str(error)  # `--list-jobs` lists it with its reason
    return jobs, checked


def checked_job(job: ComposedJob, multirun: bool, listed: bool) -> tuple[RunSettings, Decision]:
    """One job built from its composed config (its `hydra` node dropped): its settings and what
    it does with its directory (decided now where the sweeper `listed` every job); a bad
    setting is one line."""
    cfg = job.config
    choices = group_choices(cfg, cfg.hydra.runtime.choices)
    directory = job.directory(multirun)
    with open_dict(cfg):
        del cfg["hydra"]
    try:
        built = build_job(cfg, choices)
        decision = Decision(built.settings.resume)
        if listed:
            decision = resume_decision(built, directory)
            built = decided(built, decision)
        if built.settings.resume != "auto":  # else each job decides as it runs
            resumed_checkpoint(built, mmap=True)
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - OmegaConf validation errors
        raise ConfigError(one_line(error)) from None
    return built.settings, decision


def check_primary_config(name: str, search_path: list[str], loader: ConfigLoader) -> None:
    """A primary config of one's own (`--config-name`) holds every node of fedlight's (it starts
    from fedlight's config), or it is refused in one line naming what it lacks."""
    if name == "config":
        return
    try:
        own = loader.load_configuration(name, search_path, RunMode.RUN)
    except Exception:  # noqa: BLE001 - composing the command's jobs says why, in one line
        return
    missing = [
        key for key in loader.load_configuration("config", [], RunMode.RUN) if key not in own
    ]
    require(
        not missing,
        f"--config-name {name}: it lacks fedlight's {', '.join(missing[:4])}"
        f"{', ...' if len(missing) > 4 else ''}; start its defaults list with fedlight's "
        "config (defaults: [config, _self_])",
    )


# The configs of Hydra plugins that an extra of fedlight installs, by the extra
PLUGIN_EXTRAS = {
    "hydra/launcher/ray": "ray",
    "hydra/launcher/ray_aws": "ray",
    "hydra/launcher/submitit_slurm": "slurm",
    "hydra/launcher/submitit_local": "slurm",
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
    if "of type 'float' could not be converted to Integer" in text:
        return (
            f"{one_line(error)}; an integer setting takes a whole number (searched by "
            "hydra/sweeper=optuna: tag(int,interval(a,b)))"
        )
    if "BasicSweeper does not support sweep type" in text:
        return basic_sweep_message(failed.overrides, one_line(error))
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


def basic_sweep_message(overrides: list[str], said: str) -> str:
    """Hydra's basic sweeper (the default) refusing `interval()`, a range only an optimizing
    sweeper searches: one line naming it and both ways on."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    found = [o for o in parsed if o.is_sweep_override() and o.is_interval_sweep()]
    if not found:  # a preset's own hydra.sweeper.params
        return f"{said}; interval() is searched by hydra/sweeper=optuna: add it to the command"
    value = found[0].value()
    key = found[0].get_key_element()
    return (
        f"{found[0].input_line}: interval() is a range for an optimizing sweeper to search, and "
        "Hydra's basic sweeper (the default) runs listed values: add hydra/sweeper=optuna (and "
        f"hydra.sweeper.n_trials=20), or list the values: {key}={value.start:g},{value.end:g}"
    )


def check_overrides(args: list[str]) -> None:
    """Every override, Hydra's own (`hydra.run.dir=...`) included, parses in Hydra's grammar,
    or is refused in one line naming it and how to quote it (a path with spaces and brackets,
    `hydra.run.dir=my run (1)`, is Hydra's lexer traceback otherwise)."""
    parser = OverridesParser.create()
    for arg in args:
        try:
            (parsed,) = parser.parse_overrides([arg])
        except Exception as error:  # noqa: BLE001 - the grammar's errors become one line
            key, _, value = arg.partition("=")
            quote = '"' if "'" in value else "'"
            raise ConfigError(
                f"{arg}: Hydra cannot parse it ({one_line(error, separator=' ', limit=80)}); "
                f"quote the value: {key}={quote}{value}{quote} (in a shell, quote it all again)"
            ) from None
        if parsed.get_key_element() == "hydra.job.name" and not parsed.is_delete():
            name = parsed.get_value_element_as_str()
            require(
                Path(name).name == name and name not in ("", ".", ".."),
                f"{arg}: Hydra names the run directory's log file after the job "
                "(<hydra.job.name>.log), so the name cannot hold a folder; give a plain name",
            )
