"""What a job of the command line writes and says: its run or sweep directory locked and prepared,
its console kept in `console.log`, the settings it changes, and how it ends (a failed job's line
and `error.txt`, what to type after Ctrl-C or a preemption).
"""

import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.errors import CompactHydraException
from omegaconf import DictConfig, OmegaConf, open_dict

from fedlight.cli.job import group_choices, interpolated_keys
from fedlight.cli.jobs import given_value
from fedlight.cli.validate import LIST_GROUPS, list_text
from fedlight.core.errors import ConfigError, fail
from fedlight.core.settings import RunSettings
from fedlight.loggers.console import Tee
from fedlight.runs import run_dir
from fedlight.runs.resume import hydra_override
from fedlight.runs.run_dir import CONSOLE_NAME
from fedlight.store.checkpoint import CHECKPOINT_NAME
from fedlight.store.files import open_to_append, write_text
from fedlight.store.run_files import ERROR_NAME, lock_holder

FEDLIGHT_CONFIG = "config"  # fedlight's primary config: what the settings line says changes


def continue_command(output_dir: Path, sweep_group: str | None) -> str:
    """The shell command that continues a preempted run: `fedlight resume` of its sweep, or the
    run resumed in place (its directory quoted for Hydra and the shell, whatever its name)."""
    if sweep_group is not None:
        return shlex.join(["fedlight", "resume", sweep_group])
    place = [hydra_override(key, str(output_dir)) for key in ("resume", "hydra.run.dir")]
    return shlex.join(["python", "-m", "fedlight", *place])


def non_default_settings(
    cfg: DictConfig, ran: dict[str, Any], choices: dict[str, str], search_path: list[str]
) -> list[str]:
    """What the run sets otherwise than fedlight's own config (a primary config of one's own,
    `--config-name`, sets it too): each group whose option differs from the one the other
    options leave it (`model=mlp` with `data=mnist`, whose model is cnn), then each setting that
    differs from those options' defaults (presets' included); `ran`: the composed config as
    given (`fl.workers=auto`, not what it chose), resolved. The `report` node, which only
    `fedlight report` reads, is left out."""
    options: dict[str, str] = {}  # by group
    while True:  # each pass adds the groups that the options so far leave at another option
        default = hydra.compose(
            FEDLIGHT_CONFIG, overrides=[*search_path, *options.values()], return_hydra_config=True
        )
        default_choices = group_choices(default, default.hydra.runtime.choices)
        changed = {
            g: c for g, c in choices.items() if default_choices.get(g) != c and g not in options
        }
        if not changed:
            break
        listed = {*default.hydra.runtime.choices, *LIST_GROUPS}  # the defaults list's groups
        options |= {g: option_override(g, c, listed) for g, c in changed.items()}
    with open_dict(default):
        del default["hydra"]
    derived = set(interpolated_keys(OmegaConf.to_container(cfg, resolve=False)))
    defaults = flattened(OmegaConf.to_container(default, resolve=True))
    differing = [
        f"{key}={value}"
        for key, value in flattened(ran).items()
        if key not in derived
        and not key.startswith("report.")
        and defaults.get(key, object()) != value
    ]
    return [*options.values(), *differing]


def option_override(group: str, choice: str, listed: set[str]) -> str:
    """The override that chooses `choice` of `group`: a list for several options
    (`logger=[csv,wandb]`), `+` for a plugged-in kind's group, absent from the defaults list."""
    if group in LIST_GROUPS or "+" in choice:
        return f"{group}={list_text([] if choice == 'none' else choice.split('+'))}"
    return f"{'' if group in listed else '+'}{group}={choice}"


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
