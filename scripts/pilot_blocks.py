"""The results-page block `kind: pilot`: how often a pilot run of a few rounds picks the method
that wins at the end, read off committed records of full-length runs (the FedAvg tutorial's §2.1
tip: run 5% of the rounds first and watch the trend).

A contest is one setting and seed on which several methods ran the same rounds. The pilot's pick
is the method with the highest test accuracy at round ⌈fraction · R⌉ (the last evaluated round up
to it); the end's winner is the method with the highest mean test accuracy of the last ten
evaluations (the pages' `last10_accuracy`). Reading the pilot off a full run's first rounds is
the same as running the pilot only when the learning rate does not depend on R: a record whose
rate changes over its rounds is refused. Over the contests, the share where the two agree gets a
Clopper–Pearson 95% interval (exact for a binomial count; Clopper and Pearson 1934), set beside
the share a pick at random would agree (the mean of 1/m over contests of m methods).

    pilot:
      kind: pilot
      reference: docs/results/references/fedavg_tutorial.yaml
      section: pilot                              # its `fraction`: the pilot's share of R
      sources:
        - label: "niid_bench"
          records: [../niid_bench/runs/seed0]   # relative to the page's directory
          method: +experiment/niid_bench          # the override that names the method
          setting: [partition]                    # with the seed: what makes a contest
          methods: [fedavg, scaffold]             # optional: only these methods
"""

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedlight.reports.computed import mean_of_last, test_points
from fedlight.reports.markdown import markdown_table
from fedlight.reports.model import JobResult, ReportError
from fedlight.reports.stats import LEVEL
from scripts.rounds_blocks import jobs_of, seed_of, sweeps_of

LAST = 10  # the pages' stable metric: the mean of the last ten evaluations


@dataclass(frozen=True)
class Contest:
    """One setting and seed: each method's pilot reading and its end reading."""

    source: str
    setting: str
    seed: int
    rounds: int
    pilot_round: int
    pilot: dict[str, float]
    end: dict[str, float]

    @property
    def pick(self) -> str | None:
        """The pilot's choice; None on a tie at the top (no pick)."""
        return leader(self.pilot)

    @property
    def winner(self) -> str | None:
        return leader(self.end)

    @property
    def margin(self) -> str:
        """The end's winner over the runner-up (points): how clear the end is; "diverged" where
        every other method diverged."""
        first, second = sorted(self.end.values(), reverse=True)[:2]
        return "others diverged" if math.isinf(second) else f"{100 * (first - second):.1f}"

    def row(self) -> list[str]:
        where = [self.source, self.setting, str(self.seed), f"{self.pilot_round} of {self.rounds}"]
        agree = "yes" if self.pick is not None and self.pick == self.winner else "no"
        return [*where, self.pick or "tie", self.winner or "tie", self.margin, agree]


def leader(readings: dict[str, float]) -> str | None:
    best = max(readings.values())
    leaders = [method for method, value in readings.items() if value == best]
    return leaders[0] if len(leaders) == 1 else None


def pilot_reading(job: JobResult, pilot_round: int) -> float:
    """The test accuracy of the last evaluated round up to the pilot's."""
    points = [value for r, value in test_points(job) if r <= pilot_round]
    if not points:
        raise ReportError(f"{job.directory}: no evaluated round up to the pilot's {pilot_round}")
    return points[-1]


def constant_rate(job: JobResult) -> None:
    rates = {row["lr"] for row in job.rows if "lr" in row}
    if len(rates) > 1:
        raise ReportError(
            f"{job.directory}: its learning rate changes over the rounds, so its first rounds are "
            "not a pilot run; leave the sweep out of `records`"
        )


def contests(directory: Path, spec: dict[str, Any], fraction: float) -> list[Contest]:
    """The source's contests: jobs grouped by `setting` and seed, each with ≥ 2 methods."""
    groups: dict[tuple[str, int], dict[str, JobResult]] = {}
    for job in jobs_of(sweeps_of(directory, spec, "records")):
        keys = [k for k in spec["setting"] if k in job.overrides]
        setting = ", ".join(f"{k}={job.overrides[k]}" for k in keys)
        method = job.overrides.get(spec["method"])
        if method is None:
            raise ReportError(f"{job.directory}: no override {spec['method']} names its method")
        if spec.get("methods") and method not in spec["methods"]:
            continue
        group = groups.setdefault((setting, seed_of(job)), {})
        if method in group:
            raise ReportError(f"{job.directory}: {method} ran twice in its contest (setting, seed)")
        group[method] = job
    return [
        contest(spec["label"], setting, seed, jobs, fraction)
        for (setting, seed), jobs in sorted(groups.items())
        if len(jobs) > 1
    ]


def contest(label: str, setting: str, seed: int, jobs: dict[str, JobResult], fraction: float):
    """A diverged method (NaN loss or weights: it stopped there) loses at the end whatever it
    read before; every other method must have run the contest's R rounds."""
    total = max(int(max(r for r, _ in test_points(job))) for job in jobs.values())
    pilot_round = math.ceil(fraction * total)
    end: dict[str, float] = {}
    for method, job in jobs.items():
        constant_rate(job)
        ran = int(max(r for r, _ in test_points(job)))
        if job.diverged_at_round is not None:
            end[method] = -math.inf
        elif ran != total:
            raise ReportError(f"{job.directory}: ran {ran} rounds, its contest {total}")
        else:
            end[method] = last_ten(job)
    pilot = {method: pilot_reading(job, pilot_round) for method, job in jobs.items()}
    return Contest(label, setting or "the preset's", seed, total, pilot_round, pilot, end)


def last_ten(job: JobResult) -> float:
    """The end's score: the pages' `last10_accuracy`, refused where fewer rounds were evaluated."""
    value = mean_of_last(job, LAST)
    if value is None:
        evaluated = len(test_points(job))
        raise ReportError(f"{job.directory}: {evaluated} evaluated rounds, fewer than {LAST}")
    return value


def clopper_pearson(successes: int, trials: int) -> tuple[float, float]:
    """The exact two-sided interval of a binomial proportion."""
    from scipy.stats import beta  # scipy comes with scikit-learn; imported when used

    tail = (1 - LEVEL) / 2
    failures = trials - successes
    low = 0.0 if successes == 0 else float(beta.ppf(tail, successes, failures + 1))
    high = 1.0 if failures == 0 else float(beta.ppf(1 - tail, successes + 1, failures))
    return low, high


def verdict(low: float, high: float, chance: float) -> str:
    """The one rule on a share: above chance when the whole interval is."""
    if low > chance:
        return "picks the end's winner more often than a pick at random"
    if high < chance:
        return "picks the end's winner less often than a pick at random"
    return "inconclusive: not told apart from a pick at random"


def pilot_lines(directory: Path, spec: dict[str, Any], reference: Path) -> list[str]:
    """The contests' table and the share where the pilot agrees, with its interval."""
    fraction = float(yaml.safe_load(reference.read_text())[spec["section"]]["fraction"])
    found = [c for source in spec["sources"] for c in contests(directory, source, fraction)]
    if not found:
        raise ReportError("pilot: no contest (a setting and seed with two methods) in its records")
    header = ["records", "setting", "seed", "pilot round (of R)", "pilot's pick"]
    header += ["end's winner (last 10)", "its margin (points)", "agree"]
    body = [c.row() for c in found]
    agree = sum(c.pick is not None and c.pick == c.winner for c in found)
    low, high = clopper_pearson(agree, len(found))
    chance = statistics.fmean(1 / len(c.end) for c in found)
    summary = (
        f"The pilot at {100 * fraction:g}% of the rounds picked the end's winner in {agree} of "
        f"{len(found)} contests ({100 * agree / len(found):.0f}%, 95% CI {100 * low:.0f}–"
        f"{100 * high:.0f}%, Clopper–Pearson); a pick at random would agree in "
        f"{100 * chance:.0f}%: **{verdict(low, high, chance)}**."
    )
    return [*markdown_table(header, body, text_columns=len(header)), "", summary]


PILOT_BLOCKS = {"pilot": pilot_lines}
