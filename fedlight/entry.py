"""The `fedlight` command: the subcommands that need neither torch nor Lightning answer without
importing them (`fedlight report` reads files; `--version` reads package metadata), the rest is
`fedlight.cli` (a run or a sweep)."""

import sys
from importlib.metadata import PackageNotFoundError, version

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


def main() -> None:
    """`fedlight [overrides]` runs (Hydra); `fedlight report <sweep dir>` summarizes a sweep."""
    args = sys.argv[1:]
    if args[:1] == ["report"]:
        from fedlight.report import main as report_main

        sys.exit(report_main(args[1:]))
    if args == ["--version"]:
        print(version_line())
        sys.exit(0)
    from fedlight.cli import main as run_main

    run_main()
