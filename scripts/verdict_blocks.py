"""The results pages' statistics, generated: blocks of paired differences with the verdicts of
claimed gaps (`kind: paired`), the seeds that would decide the undecided verdicts (`kind:
more_seeds`, what `fedlight report --more-seeds` prints), and the inline functions that build an
interval and the one rule's verdict (`fedlight.reports.verdicts`) from a report's numbers.

A `paired` block (pages.yaml):

    claims:
      kind: paired
      compare: experiment/scaffold_tutorial=scaffold,fedavg     # KEY=A,B: A − B per seed
      metrics: [last10_accuracy, final_accuracy, rounds_to_50]   # a row each
      reference: docs/results/references/scaffold_tutorial.yaml # optional: its claimed gaps
      section: beside                                           # decided by the rule
      records: [runs/a_seed0, runs/a_seeds12_fedavg]            # optional: the page's sweeps

Inline functions (scripts/results.py's values): `ci_low(MEAN, STD, N)` and `ci_high(...)`, the
Student t 95% interval of a cell's mean from a report's mean, std and n (an archived report.csv
has no per-seed rows); `t_low(X1, X2, ...)` and `t_high(...)`, the same interval of the mean of
the values given (per-seed numbers of seeds.csv or paired.csv); `diff_low(M1, S1, N1, M2, S2,
N2)` and `diff_high(...)`, Welch's 95% interval of M1 − M2 for two cells without per-seed rows
to pair; `seeds(MEAN, STD, TARGET, TOLERANCE)`, the seeds whose interval would decide it at that
spread, and `diff_seeds(M1, S1, N1, M2, S2, N2[, CLAIMED, TOLERANCE])` the seeds per cell whose
Welch interval would decide a claimed gap (without one, the ordering: the interval clear of 0);
and with the format `text`,
`verdict(LOW, HIGH, BAND_LOW, BAND_HIGH)` (reproduced, refuted or inconclusive) and
`order(LOW, HIGH)`, the same rule for a claimed ordering (A above B: the interval of A − B above
0 reproduces it, below 0 refutes it).
"""

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedlight.reports.cells import group_jobs, is_accuracy, metric_title
from fedlight.reports.computed import is_censored
from fedlight.reports.load import load_jobs
from fedlight.reports.markdown import markdown_table
from fedlight.reports.model import MISSING, Group
from fedlight.reports.more_seeds import more_seeds_commands
from fedlight.reports.paired import Comparison, paired, pairings, seed_order
from fedlight.reports.per_seed import paired_cells
from fedlight.reports.published import ClaimDecision, Published, decide_cells, decide_claims
from fedlight.reports.published import undecided as undecided_verdicts
from fedlight.reports.stats import t_interval, t_quantile
from fedlight.reports.verdict_tables import gap_text, seeds_text, undecided_lines
from fedlight.reports.verdicts import MAX_SEEDS, Outcome, placed, seeds_to_decide


class StatisticsError(ValueError):
    """A statistic that cannot be built from the numbers given; the message says why."""


def half_width(std: float, n: float) -> float:
    if n < 2:
        raise StatisticsError(f"n = {n:g}: one seed has no interval")
    return t_quantile(int(n) - 1) * std / math.sqrt(n)


def t_interval_of(values: tuple[float, ...]) -> tuple[float, float]:
    found = t_interval(list(values))
    if found.low is None or found.high is None:
        raise StatisticsError("one value has no interval")
    return found.low, found.high


def welch(m1: float, s1: float, n1: float, m2: float, s2: float, n2: float) -> tuple[float, float]:
    """M1 − M2 and the half width of its Welch 95% interval (Welch–Satterthwaite's df)."""
    if min(n1, n2) < 2:
        raise StatisticsError("a cell of one seed has no interval")
    v1, v2 = s1 * s1 / n1, s2 * s2 / n2
    if v1 + v2 == 0:
        return m1 - m2, 0.0
    df = (v1 + v2) ** 2 / (v1 * v1 / (n1 - 1) + v2 * v2 / (n2 - 1))
    return m1 - m2, t_quantile(df) * math.sqrt(v1 + v2)


def diff_seeds(
    m1: float, s1: float, n1: float, m2: float, s2: float, n2: float, *claim: float
) -> float:
    """The fewest seeds per cell whose Welch interval of M1 − M2, at these means and stds, would
    lie inside CLAIMED ± TOLERANCE or outside it (no claim: clear of 0, an ordering decided)."""
    target, tolerance = claim if claim else (0.0, 0.0)
    distance = abs(m1 - m2 - target)
    inside = distance <= tolerance and claim
    room = tolerance - distance if inside else distance - tolerance
    for n in range(2, MAX_SEEDS + 1):
        _, half = welch(m1, s1, n, m2, s2, n)
        if (inside and half <= room) or (not inside and half < room):
            return float(n)
    raise StatisticsError(f"no number of seeds up to {MAX_SEEDS} would decide it")


def seeds(mean: float, std: float, target: float, tolerance: float) -> float:
    needed = seeds_to_decide(mean, std, target, tolerance)
    if needed is None:
        raise StatisticsError(f"no number of seeds up to {MAX_SEEDS} would decide it")
    return float(needed)


# Numbers an inline value may compute from a report's numbers.
NUMBERS: dict[str, Callable[..., float]] = {
    "ci_low": lambda m, s, n: m - half_width(s, n),
    "ci_high": lambda m, s, n: m + half_width(s, n),
    "t_low": lambda *values: t_interval_of(values)[0],
    "t_high": lambda *values: t_interval_of(values)[1],
    "diff_low": lambda *cells: welch(*cells)[0] - welch(*cells)[1],
    "diff_high": lambda *cells: welch(*cells)[0] + welch(*cells)[1],
    "seeds": seeds,
    "diff_seeds": diff_seeds,
}
# Words an inline value (format `text`) may compute: the one rule's verdict.
WORDS: dict[str, Callable[..., str]] = {
    "verdict": lambda low, high, band_low, band_high: str(placed(low, high, (band_low, band_high))),
    "order": lambda low, high: str(placed(low, high, (0.0, math.inf))),
}


def statistic(name: str, arguments: list[float]) -> float | str:
    """An inline function's value (NUMBERS or WORDS) for its evaluated arguments."""
    function = NUMBERS.get(name) or WORDS[name]
    try:
        return function(*arguments)
    except TypeError:
        raise StatisticsError(f"{name}() takes other arguments (see its module)") from None


def page_groups(sweeps: list[Path]) -> list[Group]:
    return group_jobs([job for sweep in sweeps for job in load_jobs(sweep)])


def row_title(metric: str, ratio: bool, groups: list[Group]) -> str:
    """A metric's row: its title, in points for an accuracy's difference, A / B for a time."""
    title = metric_title(metric, groups)
    if ratio:
        return f"{title}: ratio"
    return title.replace("(%)", "(points)") if is_accuracy(metric) else title


def claim_cells(found: ClaimDecision | None) -> list[str]:
    """The claimed gap, its band, the verdict and the seeds that would decide it."""
    if found is None:
        return [MISSING] * 4
    metric, verdict = found.claim.metric, found.verdict
    claimed = found.claim.claimed
    shown = f"×{claimed:g}" if is_censored(metric) else f"{claimed:+g}"
    undecided = verdict.outcome is Outcome.INCONCLUSIVE
    return [
        shown,
        gap_text(metric, *verdict.band),
        str(verdict.outcome),
        seeds_text(verdict) if undecided else MISSING,
    ]


def paired_lines(sweeps: list[Path], spec: dict[str, Any], reference: Path | None) -> list[str]:
    """A `paired` block: per metric, each seed's A − B (A / B for a time to a target), n,
    mean ± std and the 95% CI; with a reference, its claimed gap, band, verdict and seeds."""
    groups = page_groups(sweeps)
    comparison = Comparison.parse(str(spec["compare"]), "pages.yaml: compare")
    claims: list[ClaimDecision] = []
    if reference is not None:
        section = spec.get("section")
        claims = decide_claims(
            Published.read(f"{reference}#{section}" if section else str(reference)), groups, "t"
        )
    rows, seed_names = [], set()
    for pairing in pairings(groups, [comparison]):
        for metric in spec["metrics"]:
            found = paired(pairing, str(metric), "t")
            seed_names |= set(found.per_seed)
            claim = next(
                (c for c in claims if c.paired.pairing == pairing and c.claim.metric == metric),
                None,
            )
            rows.append((pairing, found, claim))
    order = sorted(seed_names, key=seed_order)
    body = [
        [row_title(p.metric, p.ratio, groups), *paired_cells(p, order), *claim_cells(claim)]
        for pairing, p, claim in rows
    ]
    header = [rows[0][0].label, *(f"seed {s}" for s in order), "n", "mean ± std", "95% CI"]
    header += ["claimed", "band", "verdict", "seeds to decide"]
    if reference is None:
        header, body = header[:-4], [row[:-4] for row in body]
    return markdown_table(header, body)


def more_seeds_lines(sweeps: list[Path], spec: dict[str, Any], reference: Path) -> list[str]:
    """A `more_seeds` block: the lines `fedlight report --published ... --more-seeds` prints,
    the undecided verdicts with the seeds that would decide them, then, where the block names a
    `sweep`, one command per cell (its sweep under `<sweep>-more/`)."""
    section = spec.get("section")
    published = Published.read(f"{reference}#{section}" if section else str(reference))
    groups = page_groups(sweeps)
    cells = decide_cells(published, groups, "t")
    claims = decide_claims(published, groups, "t")
    lines = undecided_lines(cells, claims)
    if not lines:
        return ["Every verdict is decided: no cell needs more seeds."]
    text = ["```text", *lines, "```"]
    if not spec.get("sweep"):
        return text
    base = Path(str(spec["sweep"]))
    commands = more_seeds_commands(undecided_verdicts(cells, claims), base, groups)
    return [*text, "", "```bash", *commands, "```"] if commands else text
