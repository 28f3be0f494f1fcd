"""A report's files: report.md (the sweeps' commands, the notes, each section's tables, the
incomplete jobs, a study's report), report.csv (a row per cell) and curves.png (each cell's mean
over its seeds, with a ± std band)."""

import csv
import math
import shlex
import statistics
from pathlib import Path
from typing import Any

from fedlight.reports import curves
from fedlight.reports.cells import (
    cell,
    markers,
    mean_and_std,
    metric_title,
    metric_values,
    observations,
)
from fedlight.reports.computed import STABLE_METRICS, is_censored
from fedlight.reports.curves import Line, Panel
from fedlight.reports.load import load_mapping, portable, recorded_cwd
from fedlight.reports.markdown import markdown_table
from fedlight.reports.model import DEFAULT_METRICS, NEVER_KEY, Group, JobResult, Section
from fedlight.reports.notes import (
    collapsed_footnote,
    diverged_footnote,
    environment_line,
    environment_warning,
    never_footnote,
    reproduction_line,
    resumes_line,
    seeds_note,
)
from fedlight.reports.paired import seed_of, seed_order
from fedlight.reports.per_seed import per_seed_markdown
from fedlight.reports.stats import interval, kaplan_meier_median, log_interval
from fedlight.reports.study_report import studies_markdown
from fedlight.store.sweeps import command_flags, job_state


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
    warning = environment_warning(section)
    lines += [warning, ""] if warning else []
    lines += diverged_footnote(section)
    lines += collapsed_footnote(section)
    lines += never_footnote(section)
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
        fix = "restore it, or delete it to report the command as unknown"
        config = load_mapping(record, fix)
        if config is not None:
            hydra = config.get("hydra") or {}
            overrides = hydra.get("overrides", {}).get("task") or []
            cwd = recorded_cwd(config)
            flags = [portable(f, cwd) for f in command_flags(hydra) if f != "-m"]
            arguments = [*flags, *(portable(str(o), cwd) for o in overrides)]
            return " ".join([command, *(shlex.quote(a) for a in arguments)])
    return None


def incomplete_markdown(jobs: list[JobResult]) -> list[str]:
    """Unfinished jobs with the overrides that set them apart and how far they got."""
    shared = set.intersection(*(set(j.raw_overrides) for j in jobs)) if len(jobs) > 1 else set()
    unfinished = [j for j in jobs if not j.finished]
    body = []
    for job in unfinished:
        own = [o for o in job.raw_overrides if o not in shared] or job.raw_overrides
        last_round = str(int(job.rows[-1]["round"])) if job.rows else "none logged"
        state = job_state(job.directory)
        status = f"{state.status} (preempted)" if state.preempted else str(state.status)
        body.append([job.name, " ".join(own), status, last_round])
    header = ["job", "overrides", "state", "last round in metrics.csv"]
    return [
        "### Incomplete jobs",
        "",
        *markdown_table(header, body, text_columns=3),
        "",
        "Stopped and preempted jobs continue from their checkpoints with `fedlight resume "
        "<sweep dir>` (the sweep's command with `resume=auto`).",
        "",
    ]


def write_markdown(
    output_dir: Path,
    display_name: str,
    sweep_dirs: list[Path],
    jobs: list[JobResult],
    sections: list[Section],
    method: str = "t",
    statistics: list[str] | None = None,
) -> Path:
    """report.md; `method` the cells' interval (per seed), `statistics` the paired differences'
    and the verdicts' lines under the tables."""
    lines = [f"# Report: {display_name}", ""]
    for sweep_dir in sweep_dirs:
        command = sweep_command(sweep_dir)
        if command is None:  # a folder of single runs (its name only: no machine's path)
            lines += [
                f"Commands: `{sweep_dir.name}` is a folder of single runs, each job's command in "
                "its `.hydra/overrides.yaml`.",
                "",
            ]
        else:
            lines += ["```bash", command, "```", ""]
    if sections:
        lines += [environment_line(jobs), "", reproduction_line(jobs), "", resumes_line(jobs), ""]
    for section in sections:
        lines += section_markdown(section)
        lines += per_seed_markdown(section, method)
    lines += statistics or []
    if not sections:
        lines += ["No job has finished yet.", ""]
    if any(not j.finished for j in jobs):
        lines += incomplete_markdown(jobs)
    if sections:
        lines += ["![curves](curves.png)", ""]
    lines += studies_markdown(sweep_dirs, output_dir)
    path = output_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def csv_metrics(sections: list[Section]) -> list[str]:
    """The metrics of report.csv, seeds.csv and paired.csv: the defaults, the layouts' and the
    stable ones."""
    named = (m for s in sections for m in s.layout.metrics)
    return list(dict.fromkeys([*DEFAULT_METRICS, *named, *STABLE_METRICS]))


def write_csv(output_dir: Path, sections: list[Section], method: str = "t") -> None:
    """One row per group: its overrides, n (the seeds its statistics are over), diverged (the
    seeds left out because they diverged), collapsed (those of the n that collapsed),
    never_left_chance (those of the n that never learned), and mean/std of every metric in raw
    units (of a time to a target: over the seeds that reached it); then `seeds` (the n seeds),
    `ci` (the interval's method) and `statistics_columns` of every metric."""
    groups = [(s, g) for s in sections for g in s.groups]
    keys = list(dict.fromkeys(k for _, g in groups for k in g.overrides))
    metrics = csv_metrics(sections)
    stats = [f"{m}_{part}" for m in metrics for part in ("mean", "std")]
    rows = []
    for section, group in groups:
        row: dict[str, Any] = {"group": section.group_label(group), **group.overrides}
        row["n"] = len(group.healthy)
        row["diverged"] = len(group.diverged)
        row["collapsed"] = len(group.collapsed)
        row[NEVER_KEY] = len(group.never_learned)
        for metric in metrics:
            mean, std = mean_and_std(metric_values(group, metric))
            row[f"{metric}_mean"] = "" if mean is None else mean
            row[f"{metric}_std"] = "" if std is None else std
        seeds = sorted(map(seed_of, group.healthy), key=seed_order)
        row |= {"seeds": " ".join(seeds), "ci": method}
        for metric in metrics:
            row |= statistics_columns(group, metric, method)
        rows.append(row)
    fixed = ["group", *keys, "n", "diverged", "collapsed", NEVER_KEY, *stats]
    fieldnames = list(dict.fromkeys([*fixed, *(k for row in rows for k in row)]))
    with (output_dir / "report.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fieldnames, restval="")
        writer.writeheader()
        writer.writerows(rows)


def statistics_columns(group: Group, metric: str, method: str) -> dict[str, Any]:
    """`<metric>_ci_low` and `_ci_high` (the 95% interval of the mean, raw units); for a time to
    a target instead `_reached` (the seeds that reached it), `_median` (Kaplan–Meier),
    `_censored_at` (the furthest a seed that never reached it ran), and `_geomean` with
    `_geomean_ci_low`/`_high` (t on the logs; only where every seed reached it)."""
    if not is_censored(metric):
        found = interval(metric_values(group, metric), method)
        ends = (None, None) if found is None else (found.low, found.high)
        columns = dict(zip(("ci_low", "ci_high"), ends, strict=True))
    else:
        seen = observations(group, metric)
        late = [o.value for o in seen if not o.reached]
        geometric = log_interval(seen)
        columns = {
            "reached": sum(o.reached for o in seen) if seen else None,
            "median": kaplan_meier_median(seen),
            "censored_at": max(late, default=None),
            "geomean": None if geometric is None else geometric.mean,
            "geomean_ci_low": None if geometric is None else geometric.low,
            "geomean_ci_high": None if geometric is None else geometric.high,
        }
    return {f"{metric}_{k}": "" if v is None else v for k, v in columns.items()}


def column_points(job: JobResult, column: str = "test_accuracy") -> dict[int, float]:
    """A job's metrics.csv column by evaluated round (accuracies in percent); a diverged job's
    only before it diverged (its NaN/Inf fields are already gone)."""
    last = math.inf if job.diverged_at_round is None else job.diverged_at_round
    scale = 100.0 if column.endswith("accuracy") else 1.0
    return {
        int(r["round"]): scale * r[column]
        for r in job.evaluated_rows
        if r["round"] < last and column in r
    }


def curve_jobs(group: Group) -> list[JobResult]:
    """The seeds a group's curve is over: the healthy ones, or the diverged ones until they
    diverged when none is healthy."""
    return group.healthy or group.jobs


def column_curve(
    group: Group, column: str = "test_accuracy"
) -> tuple[list[int], list[list[float]]]:
    """The rounds every seed of the curve evaluated, and each seed's value of `column` there
    (accuracies in percent)."""
    per_job = [column_points(job, column) for job in curve_jobs(group)]
    rounds = sorted(set.intersection(*(set(points) for points in per_job)))
    return rounds, [[points[r] for points in per_job] for r in rounds]


def mean_virtual_times(group: Group, rounds: list[int]) -> list[float]:
    """The seeds' mean virtual time (`system`) at each of `rounds`: a curve's x on the clock."""
    times = [
        {int(r["round"]): float(r["virtual_time"]) for r in job.rows if "virtual_time" in r}
        for job in curve_jobs(group)
    ]
    return [statistics.fmean(t[r] for t in times) for r in rounds]


def write_curves(output_dir: Path, title: str, sections: list[Section]) -> None:
    """Each group's mean over its seeds, with a ± std band where it has several: one panel per
    column the layouts' `curves` name (the test accuracy by default)."""
    columns = list(dict.fromkeys(c for section in sections for c in section.layout.curves))
    panels = [column_panel(column, title, sections) for column in columns]
    for panel in panels[1:]:  # stacked under the first, which names them
        panel.title = None
    curves.write_curves(output_dir / "curves.png", panels, 7, 120, stacked=len(panels) > 1)


def column_panel(column: str, title: str, sections: list[Section]) -> Panel:
    """One column's curves, a line per group (accuracies clipped to [0, 100] in the band: a
    diverged seed makes the std huge)."""
    accuracy = column.endswith("accuracy")
    lines = []
    for section in sections:
        for group in section.groups:
            rounds, values = column_curve(group, column)
            xs = mean_virtual_times(group, rounds) if section.layout.x == "virtual_time" else rounds
            means = [statistics.fmean(v) for v in values]
            band = None
            if len(curve_jobs(group)) >= 2:
                stds = [statistics.stdev(v) for v in values]
                low, high = (0.0, 100.0) if accuracy else (-math.inf, math.inf)
                band = (
                    [max(low, m - s) for m, s in zip(means, stds, strict=True)],
                    [min(high, m + s) for m, s in zip(means, stds, strict=True)],
                )
            label = section.group_label(group)
            if markers(group):
                label += f" ({markers(group)})"
            lines.append(Line(label, xs, means, band))
    banded = any(len(curve_jobs(g)) >= 2 for s in sections for g in s.groups)
    on_clock = any(section.layout.x == "virtual_time" for section in sections)
    return Panel(
        f"{column.replace('_', ' ')}{' (%)' if accuracy else ''}",
        lines,
        title,
        "mean over seeds, band ± std" if banded else None,
        "virtual time (s), mean over seeds" if on_clock else "round",
        log_y=column.endswith("loss"),
    )
