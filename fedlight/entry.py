"""The `fedlight` command: the subcommands that need neither torch nor Lightning answer without
importing them (`fedlight report` reads files; `--version` reads package metadata), the rest is
`fedlight.cli` (a run or a sweep)."""

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import fedlight

REPORTED_PACKAGES = ("hydra-core", "torch", "pytorch-lightning")


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
    again, with `resume=auto` (`fedlight.resume`) and any further overrides."""
    if not args or args[0].startswith("-"):
        print(
            "usage: fedlight resume <sweep or run dir> [overrides]: continue it (resume=auto)",
            file=sys.stderr,
        )
        return 2
    from fedlight.errors import ConfigError
    from fedlight.resume import resume_command

    try:
        command = resume_command(Path(args[0]))
    except ConfigError as error:
        print(f"fedlight: error: {error}", file=sys.stderr)
        return 2
    print(
        f"fedlight: resume: python -m fedlight {' '.join([*command, *args[1:]])}", file=sys.stderr
    )
    sys.argv = [sys.argv[0], *command, *args[1:]]
    from fedlight.cli import main as run_main

    run_main()
    return 0


def main() -> None:
    """`fedlight [overrides]` runs (Hydra); `fedlight report <sweep dir>` summarizes a sweep;
    `fedlight resume <dir>` continues a sweep or run."""
    args = sys.argv[1:]
    if args[:1] == ["report"]:
        from fedlight.report import main as report_main

        sys.exit(report_main(args[1:]))
    if args[:1] == ["resume"]:
        sys.exit(resume_main(args[1:]))
    if args == ["--version"]:
        print(version_line())
        sys.exit(0)
    from fedlight.cli import main as run_main

    run_main()
