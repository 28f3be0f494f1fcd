"""Metrics a report computes from a job's metrics.csv rather than reads from its summary.json, by
name: `accuracy_at_<R>` and `loss_at_<R>` (the test numbers of round R), `rounds_to_<N>` (the
first evaluated round at N% test accuracy), the stable ones `last<k>_accuracy` (the mean test
accuracy of the last k evaluated rounds: one round's accuracy is one noisy draw) and
`accuracy_auc` (the area under the test-accuracy curve over the evaluated rounds, by the
trapezoid rule, divided by the rounds it spans: the curve's mean height), and
`rounds_to_<N>_interpolated` / `rounds_to_target_interpolated`, McMahan et al. 2017's reading
(AISTATS, §3: the running-best test accuracy, the round where it crosses the target by linear
interpolation between the evaluated rounds around it).

Times to a target are censored: a seed that never reached it is an observation "more than its last
evaluated round" (`Censored`), never a value; `observation` gives it for these and for
summary.json's `rounds_to_target`, `mb_to_target`, `upload_mb_to_target` and
`virtual_time_to_target` (censored at the run's total MB or virtual time).
"""

import itertools
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from fedlight.loggers.base import SPLIT_ACCURACY, MetricsRow, evaluated
from fedlight.reports.model import JobResult
from fedlight.reports.stats import Censored

PERCENT = r"(\d+(?:\.\d+)?)"


def test_points(job: JobResult, column: str = "test_accuracy") -> list[tuple[float, float]]:
    """(round, value) of the job's evaluated rounds that have `column`."""
    return [(float(r["round"]), float(r[column])) for r in job.evaluated_rows if column in r]


def at_round(column: str) -> Callable[[JobResult, re.Match[str]], float | None]:
    def value(job: JobResult, match: re.Match[str]) -> float | None:
        found = [v for r, v in test_points(job, column) if r == int(match[1])]
        return found[0] if found else None

    return value


def mean_of_last(job: JobResult, k: int) -> float | None:
    """The mean test accuracy of the last k evaluated rounds; None below k of them (a mean of
    fewer would not be the same statistic)."""
    accuracies = [v for _, v in test_points(job)]
    return statistics.fmean(accuracies[-k:]) if k and len(accuracies) >= k else None


def last_mean(job: JobResult, match: re.Match[str]) -> float | None:
    return mean_of_last(job, int(match[1]))


def curve_area(job: JobResult, _: re.Match[str]) -> float | None:
    """The trapezoid area under the test-accuracy curve between the first and last evaluated
    rounds, divided by the rounds between them (one evaluated round: its accuracy)."""
    points = test_points(job)
    if len(points) < 2:
        return points[0][1] if points else None
    area = sum((r1 - r0) * (a0 + a1) / 2 for (r0, a0), (r1, a1) in itertools.pairwise(points))
    return area / (points[-1][0] - points[0][0])


def first_reaching(points: list[tuple[float, float]], target: float) -> Censored | None:
    """The first round at `target` or above, else censored at the last evaluated round."""
    if not points:
        return None
    reached = next((r for r, v in points if v >= target), None)
    return Censored(points[-1][0], False) if reached is None else Censored(reached, True)


def crossing(points: list[tuple[float, float]], target: float) -> Censored | None:
    """Where the running-best curve crosses `target`, linearly interpolated between the evaluated
    round before it (at the best so far) and the first at the target (McMahan et al. 2017, §3);
    the first evaluated round when it already is; censored at the last one when none is."""
    best: tuple[float, float] | None = None
    for round_index, value in points:
        if value >= target:
            if best is None:
                return Censored(round_index, True)
            before, below = best
            share = (target - below) / (value - below)
            return Censored(before + share * (round_index - before), True)
        best = (round_index, value if best is None else max(best[1], value))
    return Censored(points[-1][0], False) if points else None


def split_points(job: JobResult, metric: str) -> list[tuple[float, float]]:
    """(round, accuracy) on the split a summary number was measured on (`splits`: the test set,
    or the validation set of `eval.split=validation`)."""
    split = ((job.summary or {}).get("splits") or {}).get(metric, "test")
    column = SPLIT_ACCURACY.get(split, "test_accuracy")
    rows: list[MetricsRow] = evaluated(job.rows, split) if split in SPLIT_ACCURACY else []
    return [(float(r["round"]), float(r[column])) for r in rows]


def to_percent(reading: Callable[[list[tuple[float, float]], float], Censored | None]):
    """A censored reading of the test curve against the N% of `rounds_to_<N>...`."""

    def observe(job: JobResult, match: re.Match[str]) -> Censored | None:
        return reading(test_points(job), float(match[1]) / 100)

    return observe


def to_target(job: JobResult, _: re.Match[str]) -> Censored | None:
    """McMahan's reading against the job's own target (eval.target_accuracy), on the split its
    rounds_to_target is measured on."""
    if job.target_accuracy is None:
        return None
    return crossing(split_points(job, "rounds_to_target"), float(job.target_accuracy))


def censored_value(
    observe: Callable[[JobResult, re.Match[str]], Censored | None],
) -> Callable[[JobResult, re.Match[str]], float | None]:
    """A censored reading's value where the seed reached the target, None where it did not."""

    def value(job: JobResult, match: re.Match[str]) -> float | None:
        found = observe(job, match)
        return found.value if found is not None and found.reached else None

    return value


@dataclass(frozen=True)
class Computed:
    """One family of computed metrics: its name pattern, a job's value, its column title (given
    the title function, for a title built on another metric's), whether it is an accuracy (shown
    in percent), its censored reading (times to a target), and whether its name holds a round
    (accuracy_at_<R>: a round no job evaluated is refused)."""

    pattern: re.Pattern[str]
    value: Callable[[JobResult, re.Match[str]], float | None]
    title: Callable[[re.Match[str], Callable[[str], str]], str]
    accuracy: bool = False
    observe: Callable[[JobResult, re.Match[str]], Censored | None] | None = None
    names_round: bool = False


INTERPOLATED = ", interpolated (running best)"
COMPUTED = (
    Computed(
        re.compile(r"accuracy_at_(\d+)"),
        at_round("test_accuracy"),
        lambda m, _: f"Accuracy at round {m[1]} (%)",
        accuracy=True,
        names_round=True,
    ),
    Computed(
        re.compile(r"loss_at_(\d+)"),
        at_round("test_loss"),
        lambda m, _: f"Test loss at round {m[1]}",
        names_round=True,
    ),
    Computed(
        re.compile(rf"rounds_to_{PERCENT}"),
        censored_value(to_percent(first_reaching)),
        lambda m, _: f"Rounds to {m[1]}%",
        observe=to_percent(first_reaching),
    ),
    Computed(
        re.compile(rf"rounds_to_{PERCENT}_interpolated"),
        censored_value(to_percent(crossing)),
        lambda m, _: f"Rounds to {m[1]}%{INTERPOLATED}",
        observe=to_percent(crossing),
    ),
    Computed(
        re.compile(r"rounds_to_target_interpolated"),
        censored_value(to_target),
        lambda _, title: title("rounds_to_target") + INTERPOLATED,
        observe=to_target,
    ),
    Computed(
        re.compile(r"last(\d+)_accuracy"),
        last_mean,
        lambda m, _: f"Accuracy, mean of the last {m[1]} evaluations (%)",
        accuracy=True,
    ),
    Computed(
        re.compile(r"accuracy_auc"),
        curve_area,
        lambda *_: "Area under the accuracy curve, per round (%)",
        accuracy=True,
    ),
)
# The stable metrics every report.csv holds (docs/statistics.md).
STABLE_METRICS = ("last10_accuracy", "accuracy_auc")
# summary.json's times to the target, and what a seed that never reached it ran to.
SUMMARY_HORIZONS: dict[str, Callable[[JobResult], float | None]] = {
    "rounds_to_target": lambda job: next(
        (r for r, _ in reversed(split_points(job, "rounds_to_target"))), None
    ),
    "mb_to_target": lambda job: (job.summary or {}).get("comm_mb"),
    "upload_mb_to_target": lambda job: (job.summary or {}).get("upload_mb"),
    "virtual_time_to_target": lambda job: (job.summary or {}).get("virtual_time"),
}


def computed(metric: str) -> tuple[Computed, re.Match[str]] | None:
    """The computed family the metric's name belongs to, with the name's match."""
    for family in COMPUTED:
        match = family.pattern.fullmatch(metric)
        if match:
            return family, match
    return None


def is_censored(metric: str) -> bool:
    """Whether the metric is a time to a target (a seed may never reach it)."""
    found = computed(metric)
    return metric in SUMMARY_HORIZONS or (found is not None and found[0].observe is not None)


def observation(job: JobResult, metric: str) -> Censored | None:
    """A time-to-target metric of one job: reached at a value, or censored at what the job ran
    to; None where the job has neither (no target set, nothing evaluated)."""
    found = computed(metric)
    if found is not None and found[0].observe is not None:
        return found[0].observe(job, found[1])
    if metric not in SUMMARY_HORIZONS or job.summary is None or job.target_accuracy is None:
        return None
    value = job.summary.get(metric)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return Censored(float(value), True)
    horizon = SUMMARY_HORIZONS[metric](job)
    return None if horizon is None else Censored(float(horizon), False)
