"""The command line's `resume=`: a run continued with the overrides it was started with
(`with_saved_overrides`), and what each job does with its directory (`resume=auto`, decided by
`fedlight.runs.resume`).
"""

from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException

from fedlight.cli.jobs import Command, given_value
from fedlight.core.errors import ConfigError, one_line, require
from fedlight.reports.model import plural
from fedlight.runs.job import Job
from fedlight.runs.recorded_code import vetted
from fedlight.runs.resume import Decision, decide
from fedlight.runs.same_config import RESUME_FREE_KEYS, comparable_config, first_difference


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


def with_saved_overrides(command: Command) -> Command:
    """`resume=<run dir>` continues that run as it was started: the run's recorded overrides
    (`.hydra/overrides.yaml`) come first, the command's own after them. A setting the command
    gives another value than the run had is refused naming the key, unless it is one a resume
    may change (`RESUME_FREE_KEYS`: more `fl.rounds`, another `fl.workers`, ...). A recorded
    override that names code to run is refused unless the command gives it
    (`fedlight.runs.recorded_code`)."""
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
    vetted(kept, recorded, (), f"resume={directory}")  # none names code: the run dir's word
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
    except HydraException as error:  # its parse errors, the grammar's lexer's too
        raise ConfigError(
            f"resume={directory}: {recorded} holds an override Hydra cannot parse "
            f"({one_line(error, limit=80)}); {fix}"
        ) from None
