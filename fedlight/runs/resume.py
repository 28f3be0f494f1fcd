"""`resume=auto`: each job decides from what its own directory holds (`fedlight.store.sweeps`)
whether it runs, so that rerunning a sweep's command with `resume=auto` (or `fedlight resume <sweep
dir>`) skips the jobs that finished with the same config, continues those that stopped from their
last
checkpoint (bit-exact, as `resume=<dir>` does) and starts those that never ran, under any
launcher, whose jobs may run on other machines long after the command was typed.

A run stopped by a preemption signal (`fedlight.drivers.preemption`) leaves `preempted.json` beside
its checkpoint, and its directory is treated as with `resume=auto` even without it: a job that SLURM
or submitit requeues reruns the same command and continues on its own.

A directory whose run had another config is refused in one line (its results are never replaced
unless `overwrite=true`); what counts as the same config is what `resume=<dir>` checks (the
settings a resume may change, `RESUME_FREE_KEYS`, aside). So is one whose checkpoint.pt cannot be
read: starting its run again would replace the rounds it holds.
"""

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException

from fedlight.core.errors import ConfigError
from fedlight.runs.recorded_code import vetted, vetted_flags
from fedlight.runs.run_dir import results_in
from fedlight.store.checkpoint import load_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME
from fedlight.store.sweeps import JobState, command_flags, job_state

AUTO = "auto"

# The first key at which a saved config differs from the job's (None: the same config).
Difference = Callable[[dict[str, Any]], str | None]


@dataclass(frozen=True)
class Decision:
    """What a job does with its directory."""

    resume: str | None  # the run directory it continues in place; None: it starts
    overwrite: bool = False  # it starts over files an attempt left without a checkpoint
    summary: dict[str, Any] | None = None  # finished with this config: not run again
    said: str | None = None  # the decision in words, for the console
    finished_in: Path | None = None  # the directory of the finished run it leaves alone

    @property
    def skips(self) -> bool:
        return self.summary is not None


def decide(given: str | None, directory: Path, difference: Difference, rounds: int) -> Decision:
    """The job's decision for `resume=given` in `directory` (see the module docstring); `rounds`:
    the job's `fl.rounds`. A run directory given as `resume=` is that run's business. A directory
    another run is writing is decided by its files: taking its lock then refuses the job."""
    if given is not None and given != AUTO:
        return given_run(Path(given), rounds)
    state = job_state(directory, mine=True)
    if given is None and not state.preempted:
        return Decision(None)
    saved = saved_config(state)
    checkpoint = directory / CHECKPOINT_NAME
    if saved is None and checkpoint.is_file():  # its rounds are there, but cannot be continued
        raise ConfigError(
            f"resume={AUTO}: {checkpoint} cannot be read (damaged, or not a fedlight "
            "checkpoint), so its run cannot continue from it; move the file away to start the "
            "job again, or restore it"
        )
    if saved is None:  # nothing it could continue: what an attempt left is replaced
        leftover = bool(results_in(directory))
        return Decision(None, overwrite=leftover, said="starts" + " again" * leftover)
    found = difference(saved)
    if found is not None:
        raise ConfigError(
            f"resume={AUTO}: {directory} holds a run of another config (differs at {found}); "
            "choose another directory (hydra.sweep.dir or hydra.run.dir), or give "
            "overwrite=true to replace its results"
        )
    if state.done and not extends(state, rounds):
        return Decision(
            None, summary=state.summary, said=finished_words(state), finished_in=directory
        )
    if checkpoint.is_file():
        why = "was preempted" if state.preempted else f"is {state.status}"
        return Decision(str(directory), said=f"{why}: resumes from its checkpoint")
    return Decision(None, overwrite=True, said="starts again (no checkpoint was written)")


def given_run(directory: Path, rounds: int) -> Decision:
    """`resume=<run dir>`: the run continues, unless it is finished and `fl.rounds` asks for no
    more rounds than it ran: then there is nothing to do, and nothing is written."""
    state = job_state(directory, mine=True)
    summary = state.summary or {}
    if state.done and not ended_early(summary) and state.rounds_logged >= rounds:
        ran = summary.get("rounds", rounds)
        return Decision(
            None,
            summary=state.summary,
            said=f"finished ({ran} of {ran} rounds): nothing to resume; give fl.rounds > {ran} "
            "to continue it",
            finished_in=directory,
        )
    return Decision(str(directory))


def saved_config(state: JobState) -> dict[str, Any] | None:
    """The config the directory's run had: its summary's, else its checkpoint's; None where it
    holds neither (or an unreadable one: nothing to continue)."""
    if state.summary is not None and isinstance(state.summary.get("config"), dict):
        return state.summary["config"]
    path = state.directory / CHECKPOINT_NAME
    if not path.is_file():
        return None
    try:
        saved = json.loads(load_checkpoint(path, mmap=True)["config"])
    except Exception:  # noqa: BLE001 - a damaged checkpoint is one the resume check names
        return None
    return saved if isinstance(saved, dict) else None


def extends(state: JobState, rounds: int) -> bool:
    """Whether a finished run is asked for more rounds than it ran (a resume may add rounds);
    a diverged run and one its privacy budget stopped are done whatever `fl.rounds` says."""
    summary = state.summary or {}
    return not ended_early(summary) and int(summary.get("rounds", rounds)) < rounds


def ended_early(summary: dict[str, Any]) -> bool:
    """Whether a finished run's summary says it stopped before its `fl.rounds`: diverged, or
    stopped by its privacy budget."""
    return summary.get("diverged_at_round") is not None or bool(summary.get("stopped"))


def finished_words(state: JobState) -> str:
    summary = state.summary or {}
    accuracy = summary.get("final_accuracy")
    result = f"final acc {accuracy:.4f}" if isinstance(accuracy, float) else "no accuracy"
    return f"{state.status} with this config ({result}): not run again"


@dataclass(frozen=True)
class RecordedCommand:
    """The command that made a sweep (or run), from Hydra's record of it in its directory."""

    multirun: bool
    flags: list[str]  # -m, --config-name, --config-dir
    own: list[str]  # Hydra's own overrides (hydra/launcher=joblib, ...), the directory's aside
    task: list[str]  # the run's overrides
    record: dict[str, Any]  # the record's `hydra` node


def recorded_command(
    directory: Path, command: str = "resume", given: Collection[str] = ()
) -> RecordedCommand:
    """What `directory`'s multirun.yaml (a sweep's) or .hydra/hydra.yaml (a run's) says of the
    command that made it; refused in one line where neither is there or readable, or where it
    names code to run that the user's own arguments `given` do not (`runs.recorded_code`)."""
    sweep_record, run_record = directory / "multirun.yaml", directory / ".hydra" / "hydra.yaml"
    multirun = sweep_record.is_file()
    record = sweep_record if multirun else run_record
    if not record.is_file():
        raise ConfigError(
            f"fedlight {command} {directory}: neither {sweep_record} (a sweep's) nor {run_record} "
            "(a run's) is there; give the directory a sweep or run wrote"
        )
    try:
        hydra = yaml.safe_load(record.read_text())["hydra"]
        task, own = list(hydra["overrides"]["task"]), list(hydra["overrides"]["hydra"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as error:
        raise ConfigError(
            f"fedlight {command} {directory}: {record} is not Hydra's record of a command "
            f"({error}); rerun the command instead"
        ) from None
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    kept = [o for o in own if str(o).split("=")[0] not in ("hydra.mode", key)]
    flags = ["-m"] if multirun else []
    flags += [f for f in command_flags(hydra) if f != "-m"]
    shown = f"fedlight {command} {directory}"
    return RecordedCommand(
        multirun,
        vetted_flags(flags, record, given, shown),
        vetted(kept, record, given, shown),
        vetted(task, record, given, shown),
        hydra,
    )


def resume_command(directory: Path, given: Collection[str] = ()) -> list[str]:
    """`fedlight resume <dir>`: the arguments of the command that made the sweep (or run) in
    `directory`, from Hydra's record of it, with `resume=auto` and the directory itself; what of
    it names code to run is refused unless the user's own arguments `given` hold it too."""
    recorded = recorded_command(directory, given=given)
    key = "hydra.sweep.dir" if recorded.multirun else "hydra.run.dir"
    arguments = [o for o in recorded.task if o.split("=")[0].lstrip("+~") != "resume"]
    place = hydra_override(key, str(directory))
    return [*recorded.flags, *recorded.own, *arguments, place, f"resume={AUTO}"]


def hydra_override(key: str, value: str) -> str:
    """`key=value` as Hydra reads `value` back, a path say: quoted where its grammar would read
    it otherwise (a comma makes a sweep; a space, a bracket or a non-ASCII letter it cannot
    parse), with a quote escaped and the backslashes before one or at the end doubled."""
    plain = f"{key}={value}"
    try:
        parsed = OverridesParser.create().parse_overrides([plain])[0]
        if not parsed.is_sweep_override() and parsed.value() == value:
            return plain
    except OverrideParseException:
        pass
    escaped = re.sub(r"(\\*)('|$)", lambda m: m[1] * 2 + "\\" * bool(m[2]) + m[2], value)
    return f"{key}='{escaped}'"
