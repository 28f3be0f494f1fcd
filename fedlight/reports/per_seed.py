"""A report's per-seed view: each cell's seeds side by side with n, mean ± std and the 95%
confidence interval of the mean (report.md), every finished job's numbers (seeds.csv), and the
paired differences of cells that share their seeds (report.md, paired.csv)."""

import csv
from pathlib import Path
from typing import Any

from fedlight.reports.cells import (
    DIVERGED_MARK,
    censored_cell,
    decimals_of,
    format_cell,
    is_accuracy,
    metric_title,
    metric_value,
    metric_values,
    observations,
)
from fedlight.reports.computed import is_censored, observation
from fedlight.reports.markdown import markdown_table
from fedlight.reports.model import MISSING, Group, JobResult, Section
from fedlight.reports.paired import Paired, Pairing, seed_of, seed_order
from fedlight.reports.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, Interval, interval
from fedlight.reports.stats import log_interval as geometric_interval

CI_TEXT = {
    "t": "Student t with n − 1 degrees of freedom",
    "bootstrap": f"percentile bootstrap of {BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}",
}


def scale_of(metric: str) -> float:
    return 100.0 if is_accuracy(metric) else 1.0


def number(value: float, metric: str, sign: str = "") -> str:
    return f"{scale_of(metric) * value:{sign}.{decimals_of(metric, 2)}f}"


def interval_text(found: Interval | None, metric: str, sign: str = "") -> str:
    """`[low, high]` in the cell's units; — without an interval."""
    if found is None or found.low is None or found.high is None:
        return MISSING
    return f"[{number(found.low, metric, sign)}, {number(found.high, metric, sign)}]"


def seeds_of(groups: list[Group]) -> list[str]:
    return sorted({seed_of(job) for group in groups for job in group.jobs}, key=seed_order)


def seed_text(job: JobResult | None, metric: str) -> str:
    """One seed's number in the cell's units; `>R` where it never reached a target by R."""
    if job is None:
        return MISSING
    if job.diverged_at_round is not None:
        return DIVERGED_MARK
    if is_censored(metric):
        found = observation(job, metric)
        return MISSING if found is None else found.text(decimals_of(metric, 1))
    value = metric_value(job, metric)
    return MISSING if value is None else number(value, metric)


def statistics_cells(group: Group, metric: str, method: str) -> list[str]:
    """n, mean ± std and the 95% interval; for a time to a target the censoring-aware cell and
    the geometric mean's interval (only where every seed reached it)."""
    n = len(group.healthy)
    if is_censored(metric):
        found = observations(group, metric)
        geometric = geometric_interval(found)
        text = censored_cell(found, n, metric) if found else MISSING
        if geometric is None:
            return [str(n), text, MISSING]
        return [
            str(n),
            text,
            f"{number(geometric.mean, metric)} {interval_text(geometric, metric)}",
        ]
    values = metric_values(group, metric)
    text = format_cell(values, n, metric)
    return [str(n), text, interval_text(interval(values, method), metric)]


def decided_on(metric: str) -> bool:
    """Whether a verdict may rest on the metric (an accuracy, a loss, a time to a target), which
    report.md shows per seed; the others (bytes, seconds) are in seeds.csv."""
    return is_accuracy(metric) or is_censored(metric) or metric.startswith("loss_at_")


def per_seed_markdown(section: Section, method: str) -> list[str]:
    """A table per metric of the section a verdict may rest on: its cells' seeds, n, mean ± std
    and the 95% CI; nothing where no cell has two seeds."""
    if all(len(g.healthy) < 2 for g in section.groups):
        return []
    seeds = seeds_of(section.groups)
    lines = []
    for metric in filter(decided_on, section.layout.metrics):
        title = metric_title(metric, section.groups)
        censored = is_censored(metric)
        last = "geometric mean [95% CI], log scale" if censored else "95% CI of the mean"
        header = ["cell", *(f"seed {s}" for s in seeds), "n", "mean ± std", last]
        body = []
        for group in section.groups:
            by_seed = {seed_of(job): job for job in group.jobs}
            values = [seed_text(by_seed.get(s), metric) for s in seeds]
            stats = statistics_cells(group, metric, method)
            body.append([section.group_label(group), *values, *stats])
        lines += [f"#### {title}: per seed", "", *markdown_table(header, body), ""]
    note = (
        f"Per seed: each seed's number ({DIVERGED_MARK} diverged: left out of n); 95% CI of the "
        f"mean over the n seeds: {CI_TEXT[method]}. A time to a target that a seed never reached "
        "is `>R` (the last round it was evaluated at): never averaged, never dropped; the cell "
        "gives how many reached it and the Kaplan–Meier median, and the geometric mean with the "
        "t interval of the mean log only where every seed reached it (docs/statistics.md)."
    )
    return [*lines, note, ""] if lines else []


def paired_markdown(found: list[Paired], method: str) -> list[str]:
    """A table per pairing: each metric's per-seed A − B (accuracies in points) or A / B, with
    n, mean ± std and the 95% CI of the paired differences."""
    lines: list[str] = []
    pairings: list[Pairing] = []
    for p in found:
        if not any(p.pairing is seen for seen in pairings):
            pairings.append(p.pairing)
    for pairing in pairings:
        rows = [p for p in found if p.pairing is pairing]
        seeds = sorted({s for p in rows for s in p.per_seed}, key=seed_order)
        header = ["metric", *(f"seed {s}" for s in seeds), "n", "mean ± std", "95% CI"]
        cells = [pairing.a, pairing.b]
        body = [[metric_title(p.metric, cells), *paired_cells(p, seeds)] for p in rows]
        unpaired = sorted({s for p in rows for s in p.unpaired}, key=seed_order)
        left_out = f" Seeds only one cell ran healthy, left out: {', '.join(unpaired)}."
        lines += [f"### Paired: {pairing.label}", "", *markdown_table(header, body), ""]
        lines += [
            f"Per seed {pairing.comparison.a} − {pairing.comparison.b} on the same seed "
            "(accuracies in points), times to a target as the ratio ×A/B where both reached it; "
            f"95% CI of the mean paired difference: {CI_TEXT[method]} (of the log ratios for "
            "ratios)." + (left_out if unpaired else ""),
            "",
        ]
    return lines


def ratio_text(value: float | None) -> str:
    return "censored" if value is None else f"×{value:.2f}"


def ratio_bounds(ci: Interval | None) -> str:
    if ci is None or ci.low is None or ci.high is None:
        return MISSING
    return f"×[{ci.low:.2f}, {ci.high:.2f}]"


def paired_cells(found: Paired, seeds: list[str]) -> list[str]:
    """The per-seed entries, n, mean ± std and the 95% CI of one metric's pairing."""
    metric, ci = found.metric, found.interval
    if found.ratio:
        values = [ratio_text(found.per_seed[s]) if s in found.per_seed else MISSING for s in seeds]
        mean = MISSING if ci is None else ratio_text(ci.mean)
        return [*values, str(len(found.per_seed)), mean, ratio_bounds(ci)]
    differences = [found.per_seed.get(s) for s in seeds]
    values = [MISSING if v is None else number(v, metric, "+") for v in differences]
    if ci is None:
        return [*values, str(len(found.per_seed)), MISSING, MISSING]
    std = "" if ci.std is None else f" ± {number(ci.std, metric)}"
    return [*values, str(ci.n), number(ci.mean, metric, "+") + std, interval_text(ci, metric, "+")]


def write_seeds_csv(output_dir: Path, sections: list[Section], metrics: list[str]) -> None:
    """seeds.csv: a row per finished job of the report's cells: its cell, seed, job directory,
    whether it diverged, and each metric in raw units (a time to a target empty where the seed
    never reached it, `<metric>_censored_at` then saying how far it ran)."""
    groups = [(s, g) for s in sections for g in s.groups]
    keys = list(dict.fromkeys(k for _, g in groups for k in g.overrides))
    censored = [m for m in metrics if is_censored(m)]
    columns = [*metrics, *(f"{m}_censored_at" for m in censored)]
    with (output_dir / "seeds.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["group", *keys, "seed", "job", "diverged", *columns])
        writer.writeheader()
        for section, group in groups:
            for job in sorted(group.jobs, key=lambda j: seed_order(seed_of(j))):
                row: dict[str, Any] = {"group": section.group_label(group), **group.overrides}
                row |= {"seed": seed_of(job), "job": job.name}
                row["diverged"] = int(job.diverged_at_round is not None)
                for metric in metrics:
                    value = metric_value(job, metric)
                    row[metric] = "" if value is None else value
                for metric in censored:
                    found = observation(job, metric)
                    late = found is not None and not found.reached
                    row[f"{metric}_censored_at"] = found.value if late and found else ""
                writer.writerow(row)


def write_paired_csv(output_dir: Path, found: list[Paired]) -> None:
    """paired.csv: a row per pairing and metric: the compared key and values (A − B), the
    settings that tell the pairing from others, the scale (difference in raw units, or ratio),
    n, mean, std, the 95% CI, and each seed's difference (`seed_<s>`)."""
    context = list(dict.fromkeys(k for p in found for k in p.pairing.context))
    seeds = sorted({s for p in found for s in p.per_seed}, key=seed_order)
    fields = ["key", "a", "b", *context, "metric", "scale", "n", "mean", "std", "ci_low", "ci_high"]
    fields += ["unknown", "unpaired", *(f"seed_{s}" for s in seeds)]
    with (output_dir / "paired.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for p in found:
            comparison, ci = p.pairing.comparison, p.interval
            row: dict[str, Any] = {"key": comparison.key, "a": comparison.a, "b": comparison.b}
            row |= p.pairing.context | {"metric": p.metric, "n": len(p.per_seed)}
            row["scale"] = "ratio" if p.ratio else "difference"
            row |= {"unknown": p.unknown, "unpaired": " ".join(p.unpaired)}
            stats = (None,) * 4 if ci is None else (ci.mean, ci.std, ci.low, ci.high)
            for name, value in zip(("mean", "std", "ci_low", "ci_high"), stats, strict=True):
                row[name] = "" if value is None else value
            row |= {f"seed_{s}": "" if v is None else v for s, v in p.per_seed.items()}
            writer.writerow(row)
