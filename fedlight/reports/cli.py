"""`fedlight report <sweep dir>`: a Hydra multirun turned into the tables a paper needs.

Jobs that differ only in their seed (and in settings that only say how a run is written or
shown: `output_only`) form a group, and every cell is mean ± std over that group's
seeds, so a gap between methods can be read against the seed-to-seed spread. Unfinished jobs are
listed, never averaged in; a seed that diverged (`diverged_at_round` in its summary.json) is left
out of its cell's mean ± std and marked `† <d> of <n> diverged`, with a footnote naming it. A seed
that collapsed to chance accuracy (`collapsed_at_round`) is a result and stays in, marked
`‡ <c> of <n> collapsed` with its own footnote. One line gives the environment the jobs ran in
(`environment` in summary.json: what decides float rounding), and a table whose jobs differ in
it says so under it.
"""

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from fedlight.core.errors import ConfigError
from fedlight.reports.analysis import Analysis, analyse
from fedlight.reports.cells import build_sections, group_jobs
from fedlight.reports.computed import computed
from fedlight.reports.load import load_jobs, normalize_override
from fedlight.reports.model import (
    DEFAULT_METRICS,
    ROUND_KEYS,
    Group,
    JobResult,
    ReportError,
    Section,
    plural,
    reason,
)
from fedlight.reports.more_seeds import more_seeds_commands
from fedlight.reports.notes import environment_warning
from fedlight.reports.stats import CI_METHODS
from fedlight.reports.write import (
    csv_metrics,
    curve_jobs,
    write_csv,
    write_curves,
    write_markdown,
)

ERROR_PREFIX = "fedlight report: error: "
# Numbers in summary.json that describe the run rather than measure it.
NOT_METRICS = ("seed", "target_accuracy", *ROUND_KEYS)


def parse_where(conditions: list[str]) -> dict[str, str]:
    pairs = [normalize_override(c) for c in conditions]
    bad = [c for c, (_, value) in zip(conditions, pairs, strict=True) if "=" not in c or not value]
    if bad:
        raise ReportError(f"--where {bad[0]} is not KEY=VALUE; e.g. --where partition=shards")
    return dict(pairs)


def select_jobs(args: argparse.Namespace) -> list[JobResult]:
    """The jobs of every sweep directory that match all `--where` conditions; a killed job that
    another one resumed (`resume=<its directory>`) is left out, its resumption counts instead."""
    where = parse_where(args.where)
    several = len(args.sweep_dirs) > 1
    jobs = []
    for sweep_dir in args.sweep_dirs:
        for job in load_jobs(sweep_dir):
            if all(job.setting(key) == value for key, value in where.items()):
                jobs.append(replace(job, name=f"{sweep_dir.name}/{job.name}") if several else job)
    if not jobs:
        raise ReportError(f"no job matches --where {' '.join(args.where)}; check the values")
    resumed = {Path(j.overrides["resume"]).resolve() for j in jobs if "resume" in j.overrides}
    return [j for j in jobs if j.finished or j.directory.resolve() not in resumed]


def shown_path(sweep_dir: Path, output_dir: Path) -> str:
    """A sweep directory as a report names it: relative to the report's directory where it lies
    inside it, else by its name (never a machine's absolute path)."""
    relative = os.path.relpath(sweep_dir.resolve(), output_dir.resolve())
    return sweep_dir.resolve().name if relative.startswith("..") or relative == "." else relative


def output_dir_of(args: argparse.Namespace) -> Path:
    """Where the report goes, made if missing and checked writable before any work."""
    if args.output is None and len(args.sweep_dirs) > 1:
        raise ReportError("several sweep directories need --output DIR for the report files")
    if args.output is None:
        where = f"the sweep directory {args.sweep_dirs[0]}"
        fix = "pass -o DIR to write the report elsewhere"
    else:
        where = f"-o {args.output}"
        fix = "pass -o with a directory you can write to (it is made if missing)"
    output_dir = args.sweep_dirs[0] if args.output is None else args.output
    if output_dir.exists() and not output_dir.is_dir():
        raise ReportError(f"{where} is a file, not a directory; {fix}")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        # The directory on the way that could not be made, when it is not the last one.
        blocker = f": {error.filename}" if error.filename not in (None, str(output_dir)) else ""
        raise ReportError(f"cannot make {where} ({reason(error)}{blocker}); {fix}") from error
    try:
        with tempfile.NamedTemporaryFile(dir=output_dir, prefix=".fedlight-report-"):
            pass
    except OSError as error:
        raise ReportError(f"cannot write to {where} ({reason(error)}); {fix}") from error
    return output_dir


def parse_metrics(text: str | None) -> tuple[str, ...] | None:
    """`--metrics a,b` as names; None (each layout's own) when not given."""
    return parse_names(text, "--metrics", "final_accuracy,comm_mb")


def parse_names(text: str | None, flag: str, example: str) -> tuple[str, ...] | None:
    """A comma-separated flag's names; None (each layout's own) when not given."""
    if not text:
        return None
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise ReportError(f"{flag} {text} has an empty name; e.g. {flag} {example}")
    return names


def available_metrics(jobs: list[JobResult]) -> tuple[list[str], list[int]]:
    """The summary.json numbers the finished jobs have (the defaults first), and the rounds their
    metrics.csv evaluated (for accuracy_at_<R>)."""
    finished = [job for job in jobs if job.finished]
    numeric = [
        key
        for job in finished
        for key, value in (job.summary or {}).items()
        if key not in NOT_METRICS
        and (value is None or (isinstance(value, int | float) and not isinstance(value, bool)))
    ]
    present = [m for m in DEFAULT_METRICS if m in numeric]
    names = list(dict.fromkeys([*present, *numeric]))
    rounds = sorted({int(row["round"]) for job in finished for row in job.evaluated_rows})
    return names, rounds


def rounds_text(rounds: list[int]) -> str:
    if rounds == list(range(rounds[0], rounds[-1] + 1)) and len(rounds) > 2:
        return f"{rounds[0]}..{rounds[-1]}"
    if len(rounds) <= 4:
        return ", ".join(map(str, rounds))
    return f"{rounds[0]}, {rounds[1]}, …, {rounds[-1]}"


def check_metrics(metrics: tuple[str, ...] | None, jobs: list[JobResult]) -> None:
    """Refuses a `--metrics` name that no finished job has (it would be a column of dashes)."""
    if metrics is None or not any(job.finished for job in jobs):
        return
    names, rounds = available_metrics(jobs)
    choices = ", ".join(names)
    if rounds:
        choices += (
            f", accuracy_at_<R> and loss_at_<R> (R = {rounds_text(rounds)}), rounds_to_<percent>, "
            "rounds_to_<percent>_interpolated, rounds_to_target_interpolated, "
            "last<k>_accuracy, accuracy_auc"
        )
    for metric in metrics:
        found = computed(metric)
        if found is not None and found[0].names_round and int(found[1][1]) not in rounds:
            raise ReportError(
                f"--metrics {metric}: no job evaluated round {found[1][1]} (a test_accuracy "
                "in its metrics.csv); "
                f"the sweep's jobs have {choices}"
            )
        known = (found is not None and rounds) or metric in DEFAULT_METRICS or metric in names
        if not known:
            raise ReportError(
                f"--metrics {metric}: no job of the sweep has this metric; "
                f"the sweep's jobs have {choices}"
            )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fedlight report",
        description="Tables (mean ± std over seeds), report.csv and curves.png for sweeps.",
    )
    parser.add_argument("sweep_dirs", type=Path, nargs="+", help="Hydra multirun directories")
    parser.add_argument("-o", "--output", type=Path, help="where to write (default: the sweep)")
    parser.add_argument(
        "--where", action="append", default=[], metavar="KEY=VALUE", help="keep matching jobs"
    )
    parser.add_argument("--metrics", help="comma-separated metrics instead of the layout's")
    parser.add_argument(
        "--title", help="the tables' title (instead of the preset's, or 'Sweep <directory>')"
    )
    parser.add_argument(
        "--curves", help="comma-separated metrics.csv columns drawn, one panel each (test_loss)"
    )
    parser.add_argument(
        "--x",
        choices=("round", "virtual_time"),
        help="the curves' x axis instead of the layout's (virtual_time: runs with a system model)",
    )
    add_statistics_arguments(parser)
    args = parser.parse_args(argv)
    try:
        report(args)
    except (ReportError, ConfigError) as error:  # ConfigError: a study's storage (study_report)
        print(f"{ERROR_PREFIX}{error}", file=sys.stderr)
        return 2
    return 0


def add_statistics_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of the statistics and verdicts (docs/statistics.md)."""
    parser.add_argument(
        "--ci",
        choices=tuple(CI_METHODS),
        help="the cells' 95%% interval: t (Student, the default) or bootstrap (seeded)",
    )
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="KEY=A,B",
        help="paired per-seed differences A - B of the cells that differ only in KEY",
    )
    parser.add_argument(
        "--published",
        metavar="FILE[#SECTION]",
        help="a YAML file of published numbers: each cell decided reproduced/refuted/inconclusive",
    )
    parser.add_argument(
        "--more-seeds",
        action="store_true",
        help="print the commands that add seeds to only the inconclusive cells",
    )


def report_sections(
    args: argparse.Namespace, jobs: list[JobResult], metrics: tuple[str, ...] | None
) -> list[Section]:
    """The report's tables, one per layout; `--title` names them all (the run the user made),
    else a preset's title does, else the sweeps' directories."""
    title = args.title or "Sweep " + " + ".join(d.resolve().name for d in args.sweep_dirs)
    curves = parse_names(args.curves, "--curves", "test_accuracy,test_loss")
    sections = build_sections(group_jobs(jobs), title, metrics, args.x, curves)
    if args.title:
        sections = [replace(s, layout=replace(s.layout, title=args.title)) for s in sections]
    return sections


def report(args: argparse.Namespace) -> None:
    """The report of the parsed command line; every fault of the input is a ReportError."""
    metrics = parse_metrics(args.metrics)
    jobs = select_jobs(args)
    check_metrics(metrics, jobs)
    output_dir = output_dir_of(args)
    shown = [shown_path(d, output_dir) for d in args.sweep_dirs]
    if len(set(shown)) < len(shown):  # several `tested` sweeps: each with its study's name
        shown = [
            f"{d.resolve().parent.name}/{name}"
            for d, name in zip(args.sweep_dirs, shown, strict=True)
        ]
    display_name = " + ".join(shown)
    sections = report_sections(args, jobs, metrics)
    unclocked = [
        job.directory
        for section in sections
        if section.layout.x == "virtual_time"
        for group in section.groups
        for job in curve_jobs(group)
        if any("virtual_time" not in row for row in job.rows)
    ]
    if unclocked:
        raise ReportError(
            f"{unclocked[0]} has no virtual_time column (it ran without a system model); "
            "draw its curves against rounds (--x round)"
        )
    analysis = analyse(sections, csv_metrics(sections), args.ci, args.compare, args.published)
    path = write_report(args, output_dir, display_name, jobs, sections, analysis)
    finished = sum(job.finished for job in jobs)
    groups = [g for s in sections for g in s.groups]
    marked = [(sum(len(g.diverged) for g in groups), "diverged")]
    marked.append((sum(len(g.collapsed) for g in groups), "collapsed"))
    marked.append((sum(len(g.never_learned) for g in groups), "never left chance"))
    print(path)
    print(
        f"{plural(finished, 'job')} in {plural(len(groups), 'group')}, "
        f"{len(jobs) - finished} incomplete"
        + "".join(f", {count} {what}" for count, what in marked if count)
    )
    for section in sections:
        if environment_warning(section):
            print(
                f"fedlight report: warning: the jobs of table {section.layout.title!r} differ "
                "in what decides float rounding (see report.md)",
                file=sys.stderr,
            )
    print_undecided(analysis, args.sweep_dirs[0], args.more_seeds, groups)


def write_report(
    args: argparse.Namespace,
    output_dir: Path,
    display_name: str,
    jobs: list[JobResult],
    sections: list[Section],
    analysis: Analysis,
) -> Path:
    """report.md, report.csv, seeds.csv (paired.csv, verdicts.csv) and curves.png; a file that
    cannot be written is a ReportError naming it."""
    shown_metrics = tuple(dict.fromkeys(m for s in sections for m in s.layout.metrics))
    statistics = analysis.markdown(shown_metrics)
    try:
        path = write_markdown(
            output_dir, display_name, args.sweep_dirs, jobs, sections, analysis.method, statistics
        )
        write_csv(output_dir, sections, analysis.method)
        if sections:
            analysis.write(output_dir, sections, csv_metrics(sections))
            write_curves(output_dir, args.title or display_name, sections)
    except OSError as error:
        written = error.filename or output_dir
        raise ReportError(f"cannot write {written} ({reason(error)}); pass -o DIR") from error
    return path


def print_undecided(analysis: Analysis, base: Path, commands: bool, groups: list[Group]) -> None:
    """The inconclusive verdicts with the seeds that would decide them, and with `commands`
    (--more-seeds) the sweeps that add those seeds to only their cells."""
    for line in analysis.printed():
        print(line)
    if not commands:
        return
    if not analysis.decided:
        raise ReportError(
            "--more-seeds needs verdicts: give --published FILE (or a preset's report.published)"
        )
    planned = more_seeds_commands(analysis.undecided(), base, groups)
    print(
        f"{plural(len(planned), 'cell')} to add seeds to, one sweep each (resume=auto: the same "
        "command again continues it):"
    )
    for command in planned:
        print(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
