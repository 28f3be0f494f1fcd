"""The `fedlight` command: the subcommands that need neither torch nor Lightning answer without
importing them (`fedlight report` reads files; `--version` reads package metadata; Hydra's
`--help`, `--cfg`, `--info` and tab completion read fedlight's configs), the rest is
`fedlight.cli.main` (a run or a sweep)."""

import shlex
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import fedlight

REPORTED_PACKAGES = ("hydra-core", "torch", "pytorch-lightning")
# Hydra's flags that print something from the configs and run no job
ANSWERING_FLAGS = (
    "--help",
    "-h",
    "--hydra-help",
    "--cfg",
    "-c",
    "--info",
    "-i",
    "--shell-completion",
    "-sc",
)


def shadowing_folder() -> str | None:
    """The folder that `import fedlight` found instead of the package, as a namespace package: a
    folder named fedlight without `__init__.py` (the clone, seen from the folder above it) earlier
    on Python's path than an editable install's finder; None where fedlight is the package."""
    if getattr(fedlight, "__file__", None) is not None:
        return None
    return ", ".join(fedlight.__path__)


def version_line() -> str:
    """fedlight's version and those of the packages that decide what a run does."""
    found = []
    for package in REPORTED_PACKAGES:
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} not installed")
    return f"fedlight {fedlight.__version__} ({', '.join(found)})"


def resume_main(args: list[str]) -> int:
    """`fedlight resume <dir> [overrides]`: the command that made the sweep (or run) in `dir`
    again, with `resume=auto` (`fedlight.runs.resume`) and any further overrides."""
    from fedlight.runs.resume import resume_command

    usage = "fedlight resume <sweep or run dir> [overrides]: continue it (resume=auto)"
    return rerun("resume", resume_command, usage, args)


def tuned_main(args: list[str]) -> int:
    """`fedlight tuned <study dir> [overrides]`: a study's best configuration with three seeds,
    tested (`fedlight.runs.tuned`)."""
    from fedlight.runs.tuned import tuned_command

    usage = "fedlight tuned <study dir> [overrides]: test its best configuration, seeds 0,1,2"
    return rerun("tuned", tuned_command, usage, args)


def rerun(name: str, command_of: Callable[..., list[str]], usage: str, args: list[str]) -> int:
    """Run `python -m fedlight` with the arguments `command_of` makes of the directory in
    `args` (given the user's own further arguments: what the directory's records name of code
    runs only where the user gives it too), and those further arguments but any it holds."""
    if not args or args[0].startswith("-"):
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    from fedlight.core.errors import ConfigError

    try:
        command = command_of(Path(args[0]), given=args[1:])
    except ConfigError as error:
        print(f"fedlight: error: {error}", file=sys.stderr)
        return 2
    # an override that vouched for the record's own is given once, where the record has it
    command += [a for a in args[1:] if a.startswith("-") or "=" not in a or a not in command]
    shown = shlex.join(["python", "-m", "fedlight", *command])
    print(f"fedlight: {name}: {shown}", file=sys.stderr)
    sys.argv = [sys.argv[0], *command]
    run_cli()
    return 0


def answer_flag() -> None:
    """Hydra's answer to a flag that runs no job, from fedlight's configs alone: torch and
    Lightning are not imported, so that `--help` and each press of Tab (Hydra's completion runs
    `fedlight -sc query=bash` per press) answer in well under a second."""
    import hydra

    from fedlight.cli.schema import CONF_DIR, register_configs
    from fedlight.core.errors import ConfigError, fail

    try:
        register_configs()  # an installed package's stage kind fedlight may refuse
        check_flag_overrides(sys.argv[1:])
    except ConfigError as error:
        fail(str(error), 2)
    hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")(no_job)()


def check_flag_overrides(args: list[str]) -> None:
    """The overrides beside `--help`, `--cfg` or `--info` compose, or the one line a run gives
    instead of Hydra's traceback (tab completion's query is Hydra's to read)."""
    from hydra._internal.utils import get_args_parser
    from hydra.types import RunMode

    from fedlight.cli.jobs import Command, command_hydra
    from fedlight.core.errors import ConfigError, one_line

    given = get_args_parser().parse_args(args)
    if not given.overrides or given.shell_completion:
        return
    name, mode = given.config_name or "config", RunMode.MULTIRUN if given.multirun else RunMode.RUN
    command = Command(given.overrides, given.multirun, name, given.config_dir)
    with command_hydra(command) as loader:
        try:
            loader.load_configuration(name, given.overrides, mode)
        except Exception as error:  # noqa: BLE001 - Hydra's composition errors, in one line
            raise ConfigError(one_line(error)) from None


def no_job(cfg: object) -> None:
    """The task function of `answer_flag`'s Hydra, which those flags never call."""
    raise AssertionError(f"Hydra ran a job for flags that run none: {sys.argv[1:]}")


def run_cli() -> None:
    """fedlight's Hydra command line (`fedlight.cli.main`)."""
    from fedlight.cli.main import main as run_main

    run_main()


def main() -> None:
    """`fedlight [overrides]` runs (Hydra); `fedlight report <sweep dir>` summarizes a sweep;
    `fedlight resume <dir>` continues a sweep or run; `fedlight tuned <study dir>` tests a
    study's best configuration."""
    shadow = shadowing_folder()
    if shadow is not None:
        print(
            f"fedlight: error: Python took the folder {shadow} for the fedlight package (a folder "
            "named fedlight in the directory you run from, e.g. a clone of fedlight, hides the "
            f"installed one); run from another directory (cd {shadow}) or use the fedlight "
            "command",
            file=sys.stderr,
        )
        sys.exit(2)
    args = sys.argv[1:]
    if args[:1] == ["report"]:
        from fedlight.reports.cli import main as report_main

        sys.exit(report_main(args[1:]))
    if args[:1] == ["resume"]:
        sys.exit(resume_main(args[1:]))
    if args[:1] == ["tuned"]:
        sys.exit(tuned_main(args[1:]))
    if args == ["--version"]:
        print(version_line())
        sys.exit(0)
    if any(arg.partition("=")[0] in ANSWERING_FLAGS for arg in args):
        answer_flag()
        return
    run_cli()
