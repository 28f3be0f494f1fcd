"""The one rule every results page decides by: a measured cell against a published value, a paired
difference against a claimed gap, and rounds to a target against published rounds.

Given the 95% confidence interval of what is decided and a band, the published value ± a tolerance
(the page's; 2 points of accuracy by default, a factor on rounds): **reproduced** when the
interval lies inside the band, **refuted** when it lies entirely outside it, **inconclusive**
otherwise. "Inside" is an equivalence test: a 95% interval inside the band rejects both "below
the band" and "above the band" (two one-sided tests at 2.5% each: Schuirmann 1987). "Outside"
rejects every value of the band at 5%. An inconclusive verdict says how many seeds would decide
it at the observed spread: the smallest n at which mean ± t(0.975, n − 1) · s / √n, with this
mean and sample std s, would lie inside or outside the band (a planning figure, not a power
analysis: the next seeds move the mean and s too).

Rounds to a target are decided on a log scale (a run twice as slow is as far off as one twice as
fast): the interval of the mean log rounds against log(published) ± log(factor). A seed that
never reached the target within its run has no log rounds, so no interval: such a cell is
inconclusive, unless every seed ran past published × factor without reaching it, which refutes
the published rounds (no seed is consistent with them).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from fedlight.reports.stats import Censored, Interval, t_interval, t_quantile

DEFAULT_TOLERANCE = 2.0  # points of accuracy
DEFAULT_FACTOR = 1.5  # rounds within a factor 1.5 either way
MAX_SEEDS = 1000  # beyond this, "more than 1000": the mean sits (nearly) on the band's edge
MIN_SEEDS = 3  # what one seed's cell is planned to (a single seed has no spread)
PLANNING = "t-based, at the observed mean and std"


class Outcome(StrEnum):
    REPRODUCED = "reproduced"
    REFUTED = "refuted"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Verdict:
    """A decision on `metric`: its interval (`low`, `high`; None where none can be built), the
    band it was held against, the seeds it rests on, and, where inconclusive, the seeds that
    would decide it at the observed spread (`seeds_needed`; None where no number would, or
    none can be planned) and why (`reason`)."""

    outcome: Outcome
    metric: str
    low: float | None
    high: float | None
    band: tuple[float, float]
    n: int
    seeds_needed: int | None = None
    reason: str = ""

    @property
    def more_seeds(self) -> int | None:
        """How many seeds beyond the `n` it has would decide it."""
        return None if self.seeds_needed is None else max(self.seeds_needed - self.n, 0)


def placed(low: float, high: float, band: tuple[float, float]) -> Outcome:
    """The rule: inside the band, entirely outside it, or neither."""
    if band[0] <= low and high <= band[1]:
        return Outcome.REPRODUCED
    if high < band[0] or low > band[1]:
        return Outcome.REFUTED
    return Outcome.INCONCLUSIVE


def seeds_to_decide(
    mean: float, std: float, target: float, tolerance: float, limit: int = MAX_SEEDS
) -> int | None:
    """The fewest seeds (at least 2) whose t interval at this mean and std lies inside
    target ± tolerance or outside it; None when none up to `limit` does (a mean on the band's
    edge is never decided)."""
    distance = abs(mean - target)
    room = tolerance - distance if distance <= tolerance else distance - tolerance
    for n in range(2, limit + 1):
        half = t_quantile(n - 1) * std / math.sqrt(n)
        if (distance <= tolerance and half <= room) or (distance > tolerance and half < room):
            return n
    return None


def decide(
    found: Interval | None, target: float, tolerance: float, metric: str, scale: str = ""
) -> Verdict:
    """The rule for a cell's interval (or a paired difference's) against target ± tolerance,
    in the units of `found`; `scale` names a transformed scale in the reason (log)."""
    band = (target - tolerance, target + tolerance)
    if found is None:
        return Verdict(Outcome.INCONCLUSIVE, metric, None, None, band, 0, MIN_SEEDS, "no seeds")
    if found.low is None or found.high is None or found.std is None:
        why = "one seed: no spread to build an interval on"
        return Verdict(Outcome.INCONCLUSIVE, metric, None, None, band, found.n, MIN_SEEDS, why)
    outcome = placed(found.low, found.high, band)
    if outcome is not Outcome.INCONCLUSIVE:
        return Verdict(outcome, metric, found.low, found.high, band, found.n)
    needed = seeds_to_decide(found.mean, found.std, target, tolerance)
    on = f" on the {scale} scale" if scale else ""
    why = (
        f"seeds that would decide it: {PLANNING}{on}"
        if needed is not None
        else f"no number of seeds up to {MAX_SEEDS} would decide it at this mean ({PLANNING})"
    )
    return Verdict(outcome, metric, found.low, found.high, band, found.n, needed, why)


def log_decision(
    values: Sequence[float | None], published: float, factor: float, metric: str
) -> Verdict:
    """Positive values (rounds, or per-seed ratios of rounds) against `published` within a
    `factor`, by the rule on their logs; the verdict's interval and band are back on the
    original scale. A None value (a seed that never reached the target) leaves no interval."""
    if published <= 0 or factor <= 1:
        raise ValueError(f"log scale needs published > 0 and factor > 1 ({published}, {factor})")
    band = (published / factor, published * factor)
    known = [v for v in values if v is not None]
    if len(known) < len(values):
        why = (
            f"{len(values) - len(known)} of {len(values)} seeds never reached the target "
            "(censored): no interval of log rounds; run them longer (fl.rounds)"
        )
        return Verdict(Outcome.INCONCLUSIVE, metric, None, None, band, len(values), None, why)
    logs = [math.log(v) for v in known]
    found = decide(
        t_interval(logs) if logs else None, math.log(published), math.log(factor), metric, "log"
    )
    low, high = (None if v is None else math.exp(v) for v in (found.low, found.high))
    return replace(found, low=low, high=high, band=band)


def decide_rounds(
    found: Sequence[Censored], published: float, factor: float, metric: str
) -> Verdict:
    """Rounds to a target against `published` within a `factor`, on log rounds; the verdict's
    interval and band are in rounds. Censored seeds: see the module docstring."""
    censored = [o for o in found if not o.reached]
    top = published * factor
    if found and len(censored) == len(found) and all(o.value > top for o in censored):
        why = f"every seed ran past {top:g} without reaching the target"
        band = (published / factor, top)
        return Verdict(Outcome.REFUTED, metric, None, None, band, len(found), reason=why)
    return log_decision([o.value if o.reached else None for o in found], published, factor, metric)
