"""The statistics of a report's cells: a 95% confidence interval of the mean over seeds (Student's
t, or a seeded percentile bootstrap where asked), and the summaries of a censored quantity (rounds
to a target that some seeds never reached: the Kaplan–Meier median, the geometric mean on log
rounds only when every seed reached it).

Student's t interval: mean ± t(0.975, n − 1) · s / √n, s the sample std (ddof = 1); exact for
normally distributed seeds, and the usual choice at the few seeds FL papers run ("Student" 1908).
The percentile bootstrap (Efron & Tibshirani 1993, ch. 13) resamples the seeds with replacement;
at 3 to 5 seeds it is too narrow (it cannot see beyond the values it has), which is why t is the
default. The Kaplan–Meier estimator (Kaplan & Meier 1958) treats a seed that never reached the
target as censored at its last evaluated round: it counts as "not yet" up to there, never as a
value.
"""

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0  # the same report from the same records, every time


@dataclass(frozen=True)
class Interval:
    """The mean of `n` values with their sample std and a confidence interval of the mean; `low`
    and `high` are None below two values (no spread to build one on)."""

    n: int
    mean: float
    std: float | None
    low: float | None
    high: float | None
    method: str

    @property
    def half_width(self) -> float | None:
        return None if self.low is None or self.high is None else (self.high - self.low) / 2

    def scaled(self, factor: float) -> "Interval":
        """The interval in other units (× 100: fractions in percent, or points)."""
        low, high = (None if v is None else factor * v for v in (self.low, self.high))
        std = None if self.std is None else factor * self.std
        return Interval(self.n, factor * self.mean, std, low, high, self.method)

    def mapped(self, function: Callable[[float], float]) -> "Interval":
        """The interval's mean and ends through a monotone `function` (exp of a log-scale one);
        the std stays on the scale it was computed on."""
        low, high = (None if v is None else function(v) for v in (self.low, self.high))
        return Interval(self.n, function(self.mean), self.std, low, high, self.method)


def t_quantile(df: int, level: float = LEVEL) -> float:
    """Student's t quantile t((1 + level) / 2, df): a two-sided interval's multiplier."""
    from scipy.special import stdtrit  # scipy comes with scikit-learn; imported when used

    return float(stdtrit(df, (1 + level) / 2))


def t_interval(values: Sequence[float]) -> Interval:
    """Mean ± t(0.975, n − 1) · s / √n."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return Interval(n, mean, None, None, None, "t")
    std = statistics.stdev(values)
    half = t_quantile(n - 1) * std / math.sqrt(n)
    return Interval(n, mean, std, mean - half, mean + half, "t")


def bootstrap_interval(values: Sequence[float]) -> Interval:
    """The 2.5th and 97.5th percentiles of the means of BOOTSTRAP_RESAMPLES resamples of the
    values (with replacement), drawn from a generator seeded with BOOTSTRAP_SEED."""
    import numpy as np

    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return Interval(n, mean, None, None, None, "bootstrap")
    generator = np.random.default_rng(BOOTSTRAP_SEED)
    draws = generator.choice(np.asarray(values, dtype=float), size=(BOOTSTRAP_RESAMPLES, n))
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(draws.mean(axis=1), [tail, 100 - tail])
    return Interval(n, mean, statistics.stdev(values), float(low), float(high), "bootstrap")


# `--ci` and a layout's `ci`: how a cell's interval is computed.
CI_METHODS: dict[str, Callable[[Sequence[float]], Interval]] = {
    "t": t_interval,
    "bootstrap": bootstrap_interval,
}


def interval(values: Sequence[float], method: str = "t") -> Interval | None:
    """The values' interval by `method` (a CI_METHODS name); None without values."""
    return CI_METHODS[method](values) if values else None


@dataclass(frozen=True)
class Censored:
    """One seed's time to a target: the round (or MB, seconds) it reached it at, or, when it never
    did (`reached` False), the last one it was evaluated at: it needs more than `value`."""

    value: float
    reached: bool

    def text(self, decimals: int = 0) -> str:
        shown = f"{self.value:.{decimals}f}"
        return shown if self.reached else f">{shown}"


def kaplan_meier_median(observations: Sequence[Censored]) -> float | None:
    """The Kaplan–Meier estimate of the median: the first time the survival curve S(t) (the
    share not yet at the target) falls below one half; where it stays at exactly one half until a
    later time it reaches, the midpoint of the two (what R's survival package does, and the
    sample median when nothing is censored). None where the curve never falls below one half
    within the seeds' times (half or more never reached it as far as they ran)."""
    times = sorted({o.value for o in observations if o.reached})
    survival = 1.0
    for index, time in enumerate(times):
        at_risk = sum(o.value >= time for o in observations)
        events = sum(o.reached and o.value == time for o in observations)
        survival *= 1 - events / at_risk
        if math.isclose(survival, 0.5) and index + 1 < len(times):
            return (time + times[index + 1]) / 2
        if survival < 0.5 and not math.isclose(survival, 0.5):
            return time
    return None


def log_interval(observations: Sequence[Censored], method: str = "t") -> Interval | None:
    """The interval of the mean log value, back on the original scale (a geometric mean and its
    CI); None when a seed is censored (its log is unknown) or none is there."""
    if not observations or not all(o.reached and o.value > 0 for o in observations):
        return None
    found = interval([math.log(o.value) for o in observations], method)
    return None if found is None else found.mapped(math.exp)
