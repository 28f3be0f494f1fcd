"""The block of how an aggregator's time grows with the number of updates n (issue 67 item 4),
from the record `python benchmarks/aggregators.py --record FILE` writes: per aggregator the
least-squares slope of log(seconds) against log(n) over the record's sizes (best repeat per n; the
process's CPU seconds where the record has them, else the wall seconds),
the 95% t interval of the slopes fitted to single repeats (their spread: the shared machine's
noise), the best time at the largest n over the mean's, and beside each the growth a reference
file claims (`robust.complexity`, the FedAvg tutorial's §3.2 column) with that growth's own
log-log slope over the same sizes (n log n is not a power of n: over 200-500 its slope is about
1.17, not 1). The claim is decided by the pages' one rule (`fedlight.reports.verdicts.placed`):
the interval against the claimed growth's slope ± half the smallest gap between two claimed
growths' slopes over these sizes, the widest band that still tells a claim from its nearest
neighbour (O(n) from O(n log n)).

    scaling:
      kind: aggregator_scaling
      records: [aggregator_scaling.json]   # relative to the page's folder
      reference: docs/results/references/fedavg_tutorial.yaml

Only ratios and slopes are shown: absolute seconds on a loaded machine say little.
"""

import itertools
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from fedlight.reports.markdown import markdown_table
from fedlight.reports.stats import t_interval
from fedlight.reports.verdicts import placed

# A claimed growth, as the reference file writes it, and its function of n.
GROWTHS: dict[str, Callable[[float], float]] = {
    "O(n)": lambda n: n,
    "O(n log n)": lambda n: n * math.log(n),
    "O(n²)": lambda n: n * n,
}
HEADER = [
    "aggregator",
    "settings",
    "claimed",
    "claimed growth's slope",
    "fitted slope",
    "95% CI (single repeats)",
    "band",
    "verdict",
    "time ÷ mean's at the largest n",
]


def log_log_slope(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """The least-squares slope of log(seconds) against log(size): the exponent k of a fitted
    seconds ∝ size^k."""
    xs, ys = [math.log(s) for s in sizes], [math.log(t) for t in seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def slopes(by_size: dict[str, list[float]]) -> tuple[float, list[float]]:
    """The slope of the best repeats and of each repeat alone."""
    sizes = [int(n) for n in by_size]
    best = log_log_slope(sizes, [min(times) for times in by_size.values()])
    repeats = len(next(iter(by_size.values())))
    single = [
        log_log_slope(sizes, [times[r] for times in by_size.values()]) for r in range(repeats)
    ]
    return best, single


def claimed_slope(claim: str, sizes: Sequence[int], where: str) -> float:
    if claim not in GROWTHS:
        raise ValueError(f"{where}: claimed growth {claim!r} is none of {', '.join(GROWTHS)}")
    return log_log_slope(sizes, [GROWTHS[claim](n) for n in sizes])


def half_gap(claims: dict[str, str], sizes: Sequence[int], where: str) -> float:
    """Half the smallest distance between two claimed growths' slopes over `sizes`."""
    claimed = sorted({claimed_slope(c, sizes, where) for c in claims.values()})
    gaps = [b - a for a, b in itertools.pairwise(claimed)]
    if not gaps:
        raise ValueError(f"{where}: robust.complexity needs two different growths to set a band")
    return min(gaps) / 2


def decided(slope: float | None, single: list[float], within: float) -> list[str]:
    """The CI of the single repeats' slopes, and the band around the claimed growth's `slope`
    and the verdict where a growth is claimed."""
    ci = t_interval(single)
    cells = [f"[{ci.low:.2f}, {ci.high:.2f}]" if ci.low is not None else "—"]
    if slope is None or ci.low is None or ci.high is None:
        return [*cells, "—", "—"]
    band = (slope - within, slope + within)
    return [*cells, f"[{band[0]:.2f}, {band[1]:.2f}]", placed(ci.low, ci.high, band).value]


def scaling_lines(directory: Path, spec: dict[str, Any], reference: Path) -> list[str]:
    """One row per aggregator of each record: the claim beside the fitted slopes, decided."""
    claims = yaml.safe_load(reference.read_text(encoding="utf-8"))["robust"]["complexity"]
    body = []
    for name in spec.get("records") or ():
        record = json.loads((directory / name).read_text(encoding="utf-8"))
        sizes, seconds = record["sizes"], record.get("cpu_seconds", record["seconds"])
        largest, within = str(max(sizes)), half_gap(claims, sizes, name)
        for aggregator, by_size in seconds.items():
            best, single = slopes(by_size)
            claim = claims.get(aggregator)
            slope = None if claim is None else claimed_slope(claim, sizes, name)
            mean = seconds.get("mean")
            ratio = None if mean is None else min(by_size[largest]) / min(mean[largest])
            body.append(
                [
                    aggregator,
                    record["settings"][aggregator],
                    claim or "—",
                    "—" if slope is None else f"{slope:.2f}",
                    f"{best:.2f}",
                    *decided(slope, single, within),
                    "—" if ratio is None else f"{ratio:.1f}×",
                ]
            )
    return markdown_table(HEADER, body, text_columns=3)


def setting_lines(directory: Path, spec: dict[str, Any], reference: Path) -> list[str]:
    """What each record measured: the sizes, the update's length, threads, repeats, torch."""
    lines = []
    for name in spec.get("records") or ():
        record = json.loads((directory / name).read_text(encoding="utf-8"))
        sizes = ", ".join(str(n) for n in record["sizes"])
        lines.append(
            f"n = {sizes} updates of `{record['model']}`'s {record['parameters']:,} parameters; "
            f"{record['device']}, torch {record['torch']}; "
            f"{'CPU' if 'cpu_seconds' in record else 'wall'} seconds, the best of "
            f"{record['repeats']} repeats after a warm-up; `{record['command']}`."
        )
    return lines


AGGREGATOR_BLOCKS = {"aggregator_scaling": scaling_lines, "aggregator_setting": setting_lines}
