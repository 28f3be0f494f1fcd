"""`fedlight report <sweep dir>`: a Hydra multirun turned into the tables a paper needs.

Jobs that differ only in their seed form a group, and every cell is mean ± std over that group's
seeds, so a gap between methods can be read against the seed-to-seed spread. Unfinished jobs are
listed, never averaged in.
"""

import argparse
import csv
import json
import re
import shlex
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from fedlight import curves
from fedlight.curves import Line, Panel
from fedlight.loggers.base import MetricsRow

ERROR_PREFIX = "fedlight report: error: "
PASS_INSTEAD = "pass the sweep directory that `fedlight -m ...` wrote, e.g. multirun/<date>/<time>"
OVERRIDE_PREFIXES = ("++", "+", "~")
DEFAULT_METRICS = (
    "final_accuracy",
    "best_accuracy",
    "rounds_to_target",
    "comm_mb",
    "client_seconds_per_round",
    "wall_seconds",
)
METRIC_TITLES = {
    "final_accuracy": "Final accuracy (%)",
    "best_accuracy": "Best accuracy (%)",
    "comm_mb": "Communication (MB)",
    "wall_seconds": "Wall time (s)",
    "client_seconds_per_round": "Client compute (s/round)",
}
ACCURACY_AT = re.compile(r"accuracy_at_(\d+)")
MISSING = "—"
# Overrides that do not make a different experiment: the seed varies within a group, and a run
# resumed from a checkpoint gives the uninterrupted run's numbers.
NOT_GROUPED = ("seed", "resume")


class ReportError(Exception):
    """The sweep directory cannot be reported on; the message says what to pass instead."""


@dataclass(frozen=True)
class Layout:
    """How a preset wants its table laid out (`report:` in its config); None fields are derived."""

    title: str | None = None
    rows: tuple[str, ...] | None = None
    columns: tuple[str, ...] = ()
    metrics: tuple[str, ...] = DEFAULT_METRICS
    transpose: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    reference: str | None = None

    @classmethod
    def from_config(cls, section: dict[str, Any] | None) -> "Layout":
        if not section:
            return cls()
        rows = section.get("rows")
        return cls(
            title=section.get("title"),
            rows=None if rows is None else as_keys(rows),
            columns=as_keys(section.get("columns")),
            metrics=as_keys(section.get("metrics")) or DEFAULT_METRICS,
            transpose=bool(section.get("transpose", False)),
            labels={str(k): str(v) for k, v in (section.get("labels") or {}).items()},
            reference=section.get("reference"),
        )


def as_keys(value: str | list[str] | None) -> tuple[str, ...]:
    """A YAML key list, also accepting a single key written without brackets."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


@dataclass
class JobResult:
    """One job directory of the sweep; `summary` is None until the job has finished."""

    name: str
    directory: Path
    overrides: dict[str, str]
    raw_overrides: list[str]
    summary: dict[str, Any] | None
    rows: list[MetricsRow]
    layout: Layout
    target_accuracy: float | None = None

    @property
    def finished(self) -> bool:
        return self.summary is not None

    def setting(self, key: str) -> str | None:
        """A key's value from the command line, else the config group it chose, else None."""
        if key in self.overrides:
            return self.overrides[key]
        value = (self.summary or {}).get(key)
        return None if value is None else str(value)


@dataclass
class Group:
    """Finished jobs with the same overrides apart from the seed."""

    overrides: dict[str, str]
    jobs: list[JobResult]

    @property
    def n(self) -> int:
        return len(self.jobs)

    def setting(self, key: str) -> str | None:
        return self.jobs[0].setting(key)


@dataclass
class Section:
    """The groups that share one layout, with that layout's row/column keys resolved."""

    layout: Layout
    groups: list[Group]
    extra_keys: list[str]

    @property
    def row_keys(self) -> list[str]:
        return [*(self.layout.rows or ()), *self.extra_keys]

    def display(self, group: Group, key: str) -> str:
        """The value's label, or the value itself."""
        value = group.setting(key)
        return MISSING if value is None else self.layout.labels.get(value, value)

    def described(self, group: Group, key: str) -> str:
        """`key=value`, or the value's label when the layout names it."""
        value = group.setting(key)
        if value is None:
            return f"{key}={MISSING}"
        return self.layout.labels.get(value, f"{key}={value}")

    def row_label(self, group: Group) -> str:
        if not self.row_keys:
            return "all"
        named = ", ".join(self.display(group, k) for k in self.layout.rows or ())
        extra = ", ".join(f"{k}={group.setting(k) or MISSING}" for k in self.extra_keys)
        if named and extra:
            return f"{named} ({extra})"
        return named or extra

    def column_label(self, group: Group) -> str:
        return ", ".join(self.described(group, k) for k in self.layout.columns)

    def group_label(self, group: Group) -> str:
        keys = [*self.row_keys, *self.layout.columns]
        return ", ".join(self.described(group, k) for k in keys) or "all"


def normalize_override(override: str) -> tuple[str, str]:
    """`+key=value`, `++key=value` and `~key` as (key, value): the prefix says how, not what."""
    key, _, value = override.partition("=")
    for prefix in OVERRIDE_PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    return key, value if "=" in override else "(removed)"


def load_yaml(path: Path) -> Any:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False) if path.exists() else None


def read_metrics(path: Path) -> list[MetricsRow]:
    """metrics.csv as numbers; a line a killed job left cut short (or garbled) is skipped."""
    if not path.exists():
        return []
    rows: list[MetricsRow] = []
    with path.open(newline="") as f:
        for line in csv.DictReader(f):
            if None in line or None in line.values():
                continue
            try:
                rows.append({k: float(v) for k, v in line.items() if v})
            except ValueError:
                continue
    return [r for r in rows if "round" in r and "test_accuracy" in r]


def read_summary(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def load_job(sweep_dir: Path, job_dir: Path) -> JobResult:
    raw_overrides = [str(o) for o in load_yaml(job_dir / ".hydra" / "overrides.yaml") or []]
    config = load_yaml(job_dir / ".hydra" / "config.yaml") or {}
    return JobResult(
        name=job_dir.relative_to(sweep_dir).as_posix(),
        directory=job_dir,
        overrides=dict(normalize_override(o) for o in raw_overrides),
        raw_overrides=raw_overrides,
        summary=read_summary(job_dir / "summary.json"),
        rows=read_metrics(job_dir / "metrics.csv"),
        layout=Layout.from_config(config.get("report")),
        target_accuracy=(config.get("eval") or {}).get("target_accuracy"),
    )


def job_order(name: str) -> tuple[tuple[int, int | str], ...]:
    """Job directories in number order (2 before 10), other names after, alphabetically."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in name.split("/"))


def load_jobs(sweep_dir: Path) -> list[JobResult]:
    if not sweep_dir.exists():
        raise ReportError(f"{sweep_dir} does not exist; {PASS_INSTEAD}")
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir} is not a directory; {PASS_INSTEAD}")
    job_dirs = [p.parent.parent for p in sweep_dir.glob("**/.hydra/overrides.yaml")]
    if not job_dirs:
        raise ReportError(f"{sweep_dir} has no jobs (no */.hydra/overrides.yaml); {PASS_INSTEAD}")
    jobs = [load_job(sweep_dir, d) for d in job_dirs]
    return sorted(jobs, key=lambda job: job_order(job.name))


def group_jobs(jobs: list[JobResult]) -> list[Group]:
    """Finished jobs grouped by their overrides other than seed and resume, in job order."""
    groups: dict[tuple[tuple[str, str], ...], Group] = {}
    for job in jobs:
        if not job.finished:
            continue
        settings = {k: v for k, v in job.overrides.items() if k not in NOT_GROUPED}
        key = tuple(sorted(settings.items()))
        groups.setdefault(key, Group(settings, [])).jobs.append(job)
    return list(groups.values())


def varying_keys(groups: list[Group], exclude: tuple[str, ...] = ()) -> list[str]:
    """Override keys, in first-seen order, whose value is not the same in every group (a group
    that did not override a config group's choice has it in summary.json)."""
    keys = dict.fromkeys(k for g in groups for k in g.overrides if k not in exclude)
    return [k for k in keys if len({g.setting(k) for g in groups}) > 1]


def build_sections(
    groups: list[Group], title: str, metrics: tuple[str, ...] | None = None
) -> list[Section]:
    """One section per distinct layout, its rows defaulting to the keys the sweep varies;
    `metrics` (from the command line) replaces every layout's."""
    layouts: list[Layout] = []
    for group in groups:
        if group.jobs[0].layout not in layouts:
            layouts.append(group.jobs[0].layout)
    sections = []
    for layout in layouts:
        members = [g for g in groups if g.jobs[0].layout == layout]
        resolved = replace(
            layout,
            title=layout.title or title,
            rows=tuple(varying_keys(members)) if layout.rows is None else layout.rows,
            metrics=metrics or layout.metrics,
        )
        extra = varying_keys(members, exclude=(*resolved.rows, *resolved.columns))
        sections.append(Section(resolved, members, extra))
    return sections


def metric_value(job: JobResult, metric: str) -> float | None:
    """A job's number for a metric: from metrics.csv for accuracy_at_<R>, else summary.json."""
    at_round = ACCURACY_AT.fullmatch(metric)
    if at_round:
        matches = [r["test_accuracy"] for r in job.rows if r["round"] == int(at_round.group(1))]
        return matches[0] if matches else None
    value = (job.summary or {}).get(metric)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def metric_values(group: Group, metric: str) -> list[float]:
    values = (metric_value(job, metric) for job in group.jobs)
    return [v for v in values if v is not None]


def is_accuracy(metric: str) -> bool:
    return metric in ("final_accuracy", "best_accuracy") or bool(ACCURACY_AT.fullmatch(metric))


def metric_title(metric: str, groups: list[Group]) -> str:
    at_round = ACCURACY_AT.fullmatch(metric)
    if at_round:
        return f"Accuracy at round {at_round.group(1)} (%)"
    if metric == "rounds_to_target":
        targets = {j.target_accuracy for g in groups for j in g.jobs}
        if len(targets) == 1 and None not in targets:
            return f"Rounds to {100 * float(targets.pop()):g}%"
        return "Rounds to target"
    return METRIC_TITLES.get(metric, metric)


def mean_and_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample std (ddof=1); std is None below two values."""
    if not values:
        return None, None
    std = statistics.stdev(values) if len(values) >= 2 else None
    return statistics.fmean(values), std


def format_cell(values: list[float], n: int, metric: str) -> str:
    """`mean ± std`, accuracies in percent; `(k/n)` when only k of the n seeds have a value."""
    if not values:
        return MISSING
    scale = 100.0 if is_accuracy(metric) else 1.0
    mean, std = mean_and_std([v * scale for v in values])
    decimals = 0 if metric == "rounds_to_target" and len(values) == 1 else 1
    text = f"{mean:.{decimals}f}" + ("" if std is None else f" ± {std:.{decimals}f}")
    return text if len(values) == n else f"{text} ({len(values)}/{n})"


def cell(group: Group | None, metric: str) -> str:
    return MISSING if group is None else format_cell(metric_values(group, metric), group.n, metric)


def markdown_table(header: list[str], body: list[list[str]], text_columns: int = 1) -> list[str]:
    """A GitHub table; columns after the first `text_columns` hold numbers and align right."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    align = ["---"] * text_columns + ["---:"] * (len(header) - text_columns)
    return [line(header), line(align), *(line(r) for r in body)]


def row_header(section: Section) -> str:
    return ", ".join(section.row_keys) or "group"


def plain_table(section: Section) -> list[str]:
    metrics = section.layout.metrics
    header = [row_header(section), *(metric_title(m, section.groups) for m in metrics)]
    body = [[section.row_label(g), *(cell(g, m) for m in metrics)] for g in section.groups]
    return markdown_table(header, body)


def transposed_table(section: Section) -> list[str]:
    header = ["Metric", *(section.group_label(g) for g in section.groups)]
    body = [
        [metric_title(m, section.groups), *(cell(g, m) for g in section.groups)]
        for m in section.layout.metrics
    ]
    return markdown_table(header, body)


def pivot_table(section: Section, metric: str) -> list[str]:
    """Rows by the layout's `rows` keys, one column per value of its `columns` keys."""
    row_labels = list(dict.fromkeys(section.row_label(g) for g in section.groups))
    column_labels = list(dict.fromkeys(section.column_label(g) for g in section.groups))
    by_cell = {(section.row_label(g), section.column_label(g)): g for g in section.groups}
    body = [[r, *(cell(by_cell.get((r, c)), metric) for c in column_labels)] for r in row_labels]
    return markdown_table([row_header(section), *column_labels], body)


def seeds_note(section: Section) -> str:
    """Says how many seeds each cell averages, naming the groups that differ from the rest."""
    counts = Counter(g.n for g in section.groups)
    usual = counts.most_common(1)[0][0]
    others = [f"{section.group_label(g)}: n = {g.n}" for g in section.groups if g.n != usual]
    exceptions = f" (except {'; '.join(others)})" if others else ""
    return f"mean ± std over seeds; n = {plural(usual, 'seed')} per cell{exceptions}"


def section_markdown(section: Section) -> list[str]:
    layout = section.layout
    if layout.columns and not layout.transpose:
        tables = [
            (f"{layout.title}: {metric_title(m, section.groups)}", pivot_table(section, m))
            for m in layout.metrics
        ]
    else:
        table = transposed_table(section) if layout.transpose else plain_table(section)
        tables = [(layout.title or "", table)]
    lines = []
    for title, table in tables:
        lines += [f"### {title}", "", seeds_note(section), "", *table, ""]
    if layout.reference:
        lines += [f"Reference: {layout.reference}", ""]
    return lines


def sweep_command(sweep_dir: Path) -> str | None:
    """The command that made the sweep (or the single run), rebuilt from Hydra's record of its
    task overrides."""
    for record, command in (
        (sweep_dir / "multirun.yaml", "python -m fedlight -m"),
        (sweep_dir / ".hydra" / "hydra.yaml", "python -m fedlight"),
    ):
        config = load_yaml(record)
        if config is not None:
            overrides = (config.get("hydra") or {}).get("overrides", {}).get("task") or []
            return " ".join([command, *(shlex.quote(str(o)) for o in overrides)])
    return None


def incomplete_markdown(jobs: list[JobResult]) -> list[str]:
    """Unfinished jobs with the overrides that set them apart and how far they got."""
    shared = set.intersection(*(set(j.raw_overrides) for j in jobs)) if len(jobs) > 1 else set()
    unfinished = [j for j in jobs if not j.finished]
    body = []
    for job in unfinished:
        own = [o for o in job.raw_overrides if o not in shared] or job.raw_overrides
        last_round = str(int(job.rows[-1]["round"])) if job.rows else "none logged"
        body.append([job.name, " ".join(own), last_round])
    header = ["job", "overrides", "last round in metrics.csv"]
    return ["### Incomplete jobs", "", *markdown_table(header, body, text_columns=2), ""]


def write_markdown(
    output_dir: Path,
    display_name: str,
    sweep_dirs: list[Path],
    jobs: list[JobResult],
    sections: list[Section],
) -> Path:
    lines = [f"# Report: {display_name}", ""]
    for sweep_dir in sweep_dirs:
        command = sweep_command(sweep_dir)
        if command is None:
            lines += [f"Command: unknown (no multirun.yaml or .hydra/ in {sweep_dir}).", ""]
        else:
            lines += ["```bash", command, "```", ""]
    for section in sections:
        lines += section_markdown(section)
    if not sections:
        lines += ["No job has finished yet.", ""]
    if any(not j.finished for j in jobs):
        lines += incomplete_markdown(jobs)
    if sections:
        lines += ["![curves](curves.png)", ""]
    path = output_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def write_csv(output_dir: Path, sections: list[Section]) -> None:
    """One row per group: its overrides, n, and mean/std of every metric in raw units."""
    groups = [(s, g) for s in sections for g in s.groups]
    keys = list(dict.fromkeys(k for _, g in groups for k in g.overrides))
    metrics = list(
        dict.fromkeys([*DEFAULT_METRICS, *(m for s in sections for m in s.layout.metrics)])
    )
    stats = [f"{m}_{part}" for m in metrics for part in ("mean", "std")]
    with (output_dir / "report.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["group", *keys, "n", *stats])
        writer.writeheader()
        for section, group in groups:
            row: dict[str, Any] = {"group": section.group_label(group), **group.overrides}
            row["n"] = group.n
            for metric in metrics:
                mean, std = mean_and_std(metric_values(group, metric))
                row[f"{metric}_mean"] = "" if mean is None else mean
                row[f"{metric}_std"] = "" if std is None else std
            writer.writerow(row)


def accuracy_curve(group: Group) -> tuple[list[int], list[list[float]]]:
    """The rounds every seed of the group evaluated, and each seed's accuracy there (percent)."""
    per_job = [{int(r["round"]): 100 * r["test_accuracy"] for r in job.rows} for job in group.jobs]
    rounds = sorted(set.intersection(*(set(acc) for acc in per_job)))
    return rounds, [[acc[r] for acc in per_job] for r in rounds]


def write_curves(output_dir: Path, title: str, sections: list[Section]) -> None:
    """Each group's mean accuracy over its seeds, with a ± std band where it has several."""
    lines = []
    for section in sections:
        for group in section.groups:
            rounds, values = accuracy_curve(group)
            means = [statistics.fmean(v) for v in values]
            band = None
            if group.n >= 2:
                stds = [statistics.stdev(v) for v in values]
                # Clipped to the possible accuracies: a diverged seed makes the std huge.
                band = (
                    [max(0.0, m - s) for m, s in zip(means, stds, strict=True)],
                    [min(100.0, m + s) for m, s in zip(means, stds, strict=True)],
                )
            lines.append(Line(section.group_label(group), rounds, means, band))
    banded = any(g.n >= 2 for s in sections for g in s.groups)
    panel = Panel(
        "test accuracy (%)", lines, title, "mean over seeds, band ± std" if banded else None
    )
    curves.write_curves(output_dir / "curves.png", [panel], width=7, dpi=120)


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


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


def output_dir_of(args: argparse.Namespace) -> Path:
    if args.output is not None:
        args.output.mkdir(parents=True, exist_ok=True)
        return args.output
    if len(args.sweep_dirs) > 1:
        raise ReportError("several sweep directories need --output DIR for the report files")
    return args.sweep_dirs[0]


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
    parser.add_argument("--title", help="table title when the sweep has no preset layout")
    args = parser.parse_args(argv)
    try:
        jobs = select_jobs(args)
        output_dir = output_dir_of(args)
    except ReportError as error:
        print(f"{ERROR_PREFIX}{error}", file=sys.stderr)
        return 2
    names = [
        # `.` or `..` would say nothing in a heading; any other path reads as the user typed it.
        str(d.resolve() if d.name in ("", "..") else d)
        for d in args.sweep_dirs
    ]
    display_name = " + ".join(names)
    title = args.title or "Sweep " + " + ".join(d.resolve().name for d in args.sweep_dirs)
    metrics = as_keys(args.metrics.split(",")) if args.metrics else None
    sections = build_sections(group_jobs(jobs), title, metrics)
    report = write_markdown(output_dir, display_name, args.sweep_dirs, jobs, sections)
    write_csv(output_dir, sections)
    if sections:
        write_curves(output_dir, args.title or display_name, sections)
    finished = sum(job.finished for job in jobs)
    group_count = sum(len(s.groups) for s in sections)
    print(report)
    print(
        f"{plural(finished, 'job')} in {plural(group_count, 'group')}, "
        f"{len(jobs) - finished} incomplete"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
