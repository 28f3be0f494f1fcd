"""Paired differences between cells that share their seeds. Two cells that differ in one setting
(`KEY=A,B`: e.g. `algo=scaffold,fedavg`) and ran the same seeds drew the same split, the same
initial model and the same client samples per seed, so seed-to-seed noise they share cancels in
the per-seed difference A − B; its mean and 95% interval (`--ci`) decide a claimed gap far
sooner than two cells' separate intervals (a paired t interval: Student 1908). Times to a target
pair as the log of the ratio A / B (shown as the ratio), and only where both seeds reached it.
"""

import math
from dataclasses import dataclass

from fedlight.reports.cells import metric_value, varying_keys
from fedlight.reports.computed import is_censored, observation
from fedlight.reports.model import Group, JobResult, ReportError, Section
from fedlight.reports.stats import Interval, interval

EXAMPLE = "e.g. --compare algo=scaffold,fedavg"


def seed_of(job: JobResult) -> str:
    return job.setting("seed") or "?"


def seed_order(seed: str) -> tuple[int, int | str]:
    return (0, int(seed)) if seed.lstrip("-").isdigit() else (1, seed)


@dataclass(frozen=True)
class Comparison:
    """`KEY=A,B`: each cell with KEY=A paired with the cell that differs from it only in KEY=B."""

    key: str
    a: str
    b: str

    @classmethod
    def parse(cls, text: str, where: str = "--compare") -> "Comparison":
        key, _, values = text.partition("=")
        pair = [v.strip() for v in values.split(",")]
        if not key.strip() or len(pair) != 2 or not all(pair):
            raise ReportError(f"{where} {text} is not KEY=A,B; {EXAMPLE}")
        return cls(key.strip(), pair[0], pair[1])

    @property
    def text(self) -> str:
        return f"{self.key}={self.a},{self.b}"


@dataclass(frozen=True)
class Pairing:
    """Two cells of a comparison, and the settings that tell this pair from the comparison's
    other pairs (`context`)."""

    comparison: Comparison
    a: Group
    b: Group
    context: dict[str, str]

    @property
    def label(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.context.items())
        return f"{self.comparison.a} − {self.comparison.b}" + (f" ({where})" if where else "")


def differs_only_in(first: Group, second: Group, key: str) -> bool:
    keys = (set(first.overrides) | set(second.overrides)) - {key}
    return all(first.setting(k) == second.setting(k) for k in keys)


def pairings(groups: list[Group], comparisons: list[Comparison]) -> list[Pairing]:
    """Every pair of cells each comparison names; a comparison that names none is a ReportError
    saying which values the cells have."""
    found = []
    for comparison in comparisons:
        key = comparison.key
        pairs = [
            (a, b)
            for a in groups
            if a.setting(key) == comparison.a
            for b in groups
            if b.setting(key) == comparison.b and differs_only_in(a, b, key)
        ]
        if not pairs:
            values = ", ".join(dict.fromkeys(str(g.setting(key)) for g in groups))
            raise ReportError(
                f"--compare {comparison.text}: no two cells differ only in {key} with these "
                f"values (the cells have {key} = {values}); {EXAMPLE}"
            )
        context_keys = varying_keys([g for pair in pairs for g in pair], exclude=(key,))
        for a, b in pairs:
            context = {k: str(a.setting(k)) for k in context_keys}
            found.append(Pairing(comparison, a, b, context))
    return found


def default_comparisons(sections: list[Section]) -> list[Comparison]:
    """Where a table has exactly two cells that differ in one setting, that comparison (the
    later cell minus the first): the A-versus-B study needs no flag."""
    found = []
    for section in sections:
        if len(section.groups) != 2:
            continue
        first, later = section.groups
        keys = [
            k
            for k in dict.fromkeys([*first.overrides, *later.overrides])
            if first.setting(k) != later.setting(k)
        ]
        if len(keys) == 1:
            (key,) = keys
            found.append(Comparison(key, str(later.setting(key)), str(first.setting(key))))
    return found


@dataclass(frozen=True)
class Paired:
    """One metric over a pairing: per seed A − B (in the metric's units) or A / B (times to a
    target; None where a seed of either cell never reached it), and the interval of their mean
    (of the log ratios, as ratios); `unpaired`: the seeds only one of the cells has healthy."""

    pairing: Pairing
    metric: str
    per_seed: dict[str, float | None]
    interval: Interval | None
    unpaired: list[str]

    @property
    def ratio(self) -> bool:
        return is_censored(self.metric)

    @property
    def unknown(self) -> int:
        """Pairs without a difference (a time to a target either seed never reached)."""
        return sum(v is None for v in self.per_seed.values())


def seed_difference(a: JobResult, b: JobResult, metric: str) -> float | None:
    """A − B for one seed (in the metric's units: a fraction for an accuracy), log(A / B) for a
    time to a target (None where either never reached it)."""
    if is_censored(metric):
        first, second = (observation(job, metric) for job in (a, b))
        if first is None or second is None or not (first.reached and second.reached):
            return None
        return math.log(first.value / second.value) if first.value > 0 < second.value else None
    first_value, second_value = (metric_value(job, metric) for job in (a, b))
    if first_value is None or second_value is None:
        return None
    return first_value - second_value


def paired(pairing: Pairing, metric: str, method: str = "t") -> Paired:
    """The metric's per-seed differences over the seeds both cells ran healthy, and their
    interval (none where a pair is censored)."""
    by_seed = [{seed_of(j): j for j in g.healthy} for g in (pairing.a, pairing.b)]
    shared = sorted(set(by_seed[0]) & set(by_seed[1]), key=seed_order)
    unpaired = sorted(set(by_seed[0]) ^ set(by_seed[1]), key=seed_order)
    logs = {s: seed_difference(by_seed[0][s], by_seed[1][s], metric) for s in shared}
    known = [v for v in logs.values() if v is not None]
    found = interval(known, method) if known and len(known) == len(logs) else None
    if is_censored(metric):
        logs = {s: None if v is None else math.exp(v) for s, v in logs.items()}
        found = None if found is None else found.mapped(math.exp)
    return Paired(pairing, metric, logs, found, unpaired)
