"""Finished jobs grouped into cells (jobs that differ only in their seed), the sections their
layouts make of them, and each cell's text: `mean ± std` over its healthy seeds, with the markers
of the seeds that diverged, collapsed or never left chance."""

import statistics
from dataclasses import replace

from fedlight.core.settings import output_only
from fedlight.reports.computed import computed, is_censored, observation
from fedlight.reports.model import MISSING, Group, JobResult, Layout, Section
from fedlight.reports.stats import Censored, kaplan_meier_median

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
DIVERGED_MARK = "†"
COLLAPSED_MARK = "‡"
NEVER_MARK = "§"


def group_jobs(jobs: list[JobResult]) -> list[Group]:
    """Finished jobs grouped by their overrides, in job order: the seed varies within a group, and
    overrides that only say where or how a run is written or shown do not make another
    experiment (`output_only`: a run resumed from a checkpoint, or shown with another console,
    gives the same numbers)."""
    groups: dict[tuple[tuple[str, str], ...], Group] = {}
    for job in jobs:
        if not job.finished:
            continue
        settings = {k: v for k, v in job.overrides.items() if k != "seed" and not output_only(k)}
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
    """A job's number for a metric: computed from metrics.csv for the names of
    `fedlight.reports.computed`, else summary.json's; a time to a target only where it reached
    it (`observations` has the others)."""
    found = computed(metric)
    if found is not None:
        family, match = found
        return family.value(job, match)
    value = (job.summary or {}).get(metric)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def metric_values(group: Group, metric: str) -> list[float]:
    """The metric's values over the group's healthy seeds (a diverged seed's numbers are not
    results)."""
    values = (metric_value(job, metric) for job in group.healthy)
    return [v for v in values if v is not None]


def observations(group: Group, metric: str) -> list[Censored]:
    """A time to a target over the group's healthy seeds: reached, or censored at what the seed
    ran to (never dropped: `metric_values` has only the reached ones)."""
    found = (observation(job, metric) for job in group.healthy)
    return [o for o in found if o is not None]


def is_accuracy(metric: str) -> bool:
    """Whether the metric is a fraction shown in percent."""
    found = computed(metric)
    return (
        metric in ("final_accuracy", "best_accuracy", "test_accuracy_at_best", "val_accuracy")
        or metric.startswith("local_accuracy_")
        or (found is not None and found[0].accuracy)
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
    found = computed(metric)
    if found is not None:
        family, match = found
        return family.title(match, lambda base: test_metric_title(base, groups))
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


def decimals_of(metric: str, count: int) -> int:
    """A cell's decimals: 3 for a loss (a cross-entropy), none for one seed's first round at a
    target, else DECIMALS or 1."""
    if metric.startswith("loss_at_"):
        return 3
    whole_rounds = metric.startswith("rounds_to_") and not metric.endswith("_interpolated")
    return 0 if whole_rounds and count == 1 else DECIMALS.get(metric, 1)


def format_cell(values: list[float], n: int, metric: str) -> str:
    """`mean ± std`, accuracies in percent; `(k/n)` when only k of the n seeds have a value."""
    if not values:
        return MISSING
    scale = 100.0 if is_accuracy(metric) else 1.0
    mean, std = mean_and_std([v * scale for v in values])
    decimals = decimals_of(metric, len(values))
    text = f"{mean:.{decimals}f}" + ("" if std is None else f" ± {std:.{decimals}f}")
    return text if len(values) == n else f"{text} ({len(values)}/{n})"


def censored_cell(found: list[Censored], n: int, metric: str) -> str:
    """A time to a target: `mean ± std` where every seed reached it; else how many did and the
    Kaplan–Meier median (`median 40 (2/3 reached)`), or, where half or more never did, what
    they ran to (`1/3 reached (censored at 632)`): a seed that never reached it is never
    averaged in nor left out."""
    reached = [o.value for o in found if o.reached]
    if len(reached) == len(found):
        return format_cell(reached, n, metric)
    share = f"{len(reached)}/{len(found)} reached"
    median = kaplan_meier_median(found)
    if median is not None:
        return f"median {median:.{decimals_of(metric, 2)}f} ({share})"
    horizon = max(o.value for o in found if not o.reached)
    return f"{share} (censored at {horizon:g})"


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
    found = observations(group, metric) if is_censored(metric) else []
    if not healthy:
        text = ""
    elif found:
        text = censored_cell(found, healthy, metric)
    else:
        text = format_cell(metric_values(group, metric), healthy, metric)
    return f"{text} {markers(group)}".strip()
