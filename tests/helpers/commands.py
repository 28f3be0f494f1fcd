"""A command line checked as `fedlight` checks it before any job works, without running a job."""

import shlex

from fedlight.cli.jobs import parse_command
from fedlight.cli.validate import checked_jobs
from fedlight.core.errors import ConfigError


def validate_command_line(args: list[str]) -> list[list[str]]:
    """Compose and build every job the command line describes, without running any of them;
    returns each job's overrides."""
    command = parse_command(args)
    if command is None:
        raise ConfigError(f"{shlex.join(args)}: a Hydra flag that runs no job")
    return [job.overrides for job, _, _ in checked_jobs(command)[1]]
