"""Finished jobs grouped into cells (jobs that differ only in their seed), the sections their
layouts make of them, and each cell's text: `mean ± std` over its healthy seeds, with the markers
of the seeds that diverged, collapsed or never left chance."""

import re
import statistics
from dataclasses import replace

from fedlight.reports.model import MISSING, Group, JobResult, Layout, Section

METRIC_TITLES = {
    "final_accuracy": "Final accuracy (%)",
    "best_accuracy": "Best accuracy (%)",
    "test_accuracy_at_best": "Test accuracy at the best round (%)",
    "val_accuracy": "Validation accuracy, last round (%)",
    "comm_mb": "Communication (MB)",
    "comm_mb_per_round": "MB per round",
    "local_accuracy_mean": "Local accuracy, mean (%)",
    "local_accuracy_p10": "Local accuracy, 10th percentile (%)",
    "local_accuracy_std": "Local accuracy, std (%)",
    "wall_seconds": "Wall time (s)",
    "client_seconds_per_round": "Client compute (s/round)",
    "participation_jain": "Jain's index of participation",
    "participation_min": "Fewest rounds a client trained",
    "participation_max": "Most rounds a client trained",
    "malicious": "Malicious participants",
    "rejected": "Rejected updates (NaN/Inf)",
    "aggregation_refused": "Rounds the aggregator refused",
    "upload_mb": "Upload (MB)",
    "epsilon": "ε reached",
    "privacy.noise_multiplier": "Noise multiplier z",
    "privacy.clip": "Clip norm",
    "virtual_time": "Virtual time (s)",
    "staleness_mean": "Staleness, mean (last update)",
    "staleness_max": "Staleness, max (last update)",
    "staleness_run_mean": "Staleness, mean",
    "staleness_run_p90": "Staleness, 90th percentile",
    "staleness_run_max": "Staleness, max",
}
# Metrics counted until the first round reaching the target accuracy: "<title> <target>".
TO_TARGET_TITLES = {
    "rounds_to_target": "Rounds to",
    "mb_to_target": "MB (up + down) to",
    "upload_mb_to_target": "Upload MB to",
    "virtual_time_to_target": "Virtual seconds to",
}
# Decimals of a cell where one is not enough (an index in [1/N, 1]).
DECIMALS = {"participation_jain": 3}
ACCURACY_AT = re.compile(r"accuracy_at_(\d+)")
LOSS_AT = re.compile(r"loss_at_(\d+)")  # the test loss at round R (metrics.csv)
# The first round whose test accuracy reaches N percent (metrics.csv): rounds_to_70, rounds_to_72.3
ROUNDS_TO = re.compile(r"rounds_to_(\d+(?:\.\d+)?)")
DIVERGED_MARK = "†"
COLLAPSED_MARK = "‡"
NEVER_MARK = "§"
# Overrides that do not make a different experiment: the seed varies within a group, and a run
# resumed from a checkpoint gives the uninterrupted run's numbers.
NOT_GROUPED = ("seed", "resume")


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
    groups: list[Group],
    title: str,
    metrics: tuple[str, ...] | None = None,
    x: str | None = None,
    curves: tuple[str, ...] | None = None,
) -> list[Section]:
    """One section per distinct layout, its rows defaulting to the keys the sweep varies;
    `metrics`, `x` and `curves` (from the command line) replace every layout's."""
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
            x=x or layout.x,
            curves=curves or layout.curves,
        )
        extra = varying_keys(members, exclude=(*resolved.rows, *resolved.columns))
        sections.append(Section(resolved, members, extra))
    return sections


def metric_value(job: JobResult, metric: str) -> float | None:
    """A job's number for a metric: from metrics.csv for accuracy_at_<R>, loss_at_<R> and
    rounds_to_<N>, else summary.json."""
    for pattern, column in ((ACCURACY_AT, "test_accuracy"), (LOSS_AT, "test_loss")):
        at_round = pattern.fullmatch(metric)
        if at_round:
            at = int(at_round.group(1))
            matches = [r[column] for r in job.evaluated_rows if r["round"] == at and column in r]
            return matches[0] if matches else None
    to_percent = ROUNDS_TO.fullmatch(metric)
    if to_percent:
        target = float(to_percent.group(1)) / 100
        reached = (r["round"] for r in job.evaluated_rows if r["test_accuracy"] >= target)
        return next((float(r) for r in reached), None)
    value = (job.summary or {}).get(metric)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def metric_values(group: Group, metric: str) -> list[float]:
    """The metric's values over the group's healthy seeds (a diverged seed's numbers are not
    results)."""
    values = (metric_value(job, metric) for job in group.healthy)
    return [v for v in values if v is not None]


def is_accuracy(metric: str) -> bool:
    """Whether the metric is a fraction shown in percent."""
    return (
        metric in ("final_accuracy", "best_accuracy", "test_accuracy_at_best", "val_accuracy")
        or metric.startswith("local_accuracy_")
        or bool(ACCURACY_AT.fullmatch(metric))
    )


def metric_title(metric: str, groups: list[Group]) -> str:
    """The column's title; ", validation" in it where every job's number comes from the
    validation set (summary.json's `splits`, `eval.split=validation`)."""
    title = test_metric_title(metric, groups)
    splits = {
        (job.summary.get("splits") or {}).get(metric)
        for group in groups
        for job in group.jobs
        if job.summary is not None
    }
    if splits != {"validation"}:
        return title
    base, percent, _ = title.partition(" (%)")
    return f"{base}, validation{percent}"


def test_metric_title(metric: str, groups: list[Group]) -> str:
    at_round = ACCURACY_AT.fullmatch(metric)
    if at_round:
        return f"Accuracy at round {at_round.group(1)} (%)"
    loss_at = LOSS_AT.fullmatch(metric)
    if loss_at:
        return f"Test loss at round {loss_at.group(1)}"
    to_percent = ROUNDS_TO.fullmatch(metric)
    if to_percent:
        return f"Rounds to {to_percent.group(1)}%"
    if metric in TO_TARGET_TITLES:
        targets = {j.target_accuracy for g in groups for j in g.jobs}
        if len(targets) == 1 and None not in targets:
            return f"{TO_TARGET_TITLES[metric]} {100 * float(targets.pop()):g}%"
        return f"{TO_TARGET_TITLES[metric]} target"
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
    rounds = metric == "rounds_to_target" or ROUNDS_TO.fullmatch(metric)
    decimals = 0 if rounds and len(values) == 1 else DECIMALS.get(metric, 1)
    if LOSS_AT.fullmatch(metric):
        decimals = 3  # a cross-entropy
    text = f"{mean:.{decimals}f}" + ("" if std is None else f" ± {std:.{decimals}f}")
    return text if len(values) == n else f"{text} ({len(values)}/{n})"


def diverged_marker(group: Group) -> str:
    """`† 1 of 3 diverged`: how many of the group's seeds its cells leave out."""
    return f"{DIVERGED_MARK} {len(group.diverged)} of {group.n} diverged"


def collapsed_marker(group: Group) -> str:
    """`‡ 1 of 3 collapsed`: how many of the seeds its cells average fell to chance."""
    return f"{COLLAPSED_MARK} {len(group.collapsed)} of {group.n} collapsed"


def never_marker(group: Group) -> str:
    """`§ 1 of 3 never left chance`: how many of the seeds its cells average never learned."""
    return f"{NEVER_MARK} {len(group.never_learned)} of {group.n} never left chance"


def markers(group: Group) -> str:
    """The group's diverged, collapsed and never-learned markers, where it has such seeds."""
    return " ".join(
        marker(group)
        for marker, jobs in (
            (diverged_marker, group.diverged),
            (collapsed_marker, group.collapsed),
            (never_marker, group.never_learned),
        )
        if jobs
    )


def cell(group: Group | None, metric: str) -> str:
    """The healthy seeds' `mean ± std`, followed by the diverged and collapsed markers when some
    diverged or collapsed; only the markers when all diverged."""
    if group is None:
        return MISSING
    healthy = len(group.healthy)
    text = format_cell(metric_values(group, metric), healthy, metric) if healthy else ""
    return f"{text} {markers(group)}".strip()
