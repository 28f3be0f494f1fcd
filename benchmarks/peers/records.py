"""The committed records (docs/results/peers/<workload>.json) and what the page reads from them:
each framework's steady-state seconds per round, samples per second, peaks and accuracy over the
repeats, and the ratios fedlight / peer.

Steady state: a run's rounds after its first (the first holds a simulator's warm-up: Ray starting
its workers, first-call allocations), their median; over the repeats, the median again. Samples per
second: the examples a round trains on average divided by that. CPU seconds per round: the same
medians of the process tree's CPU time within the rounds (what the load moves least; above the
wall seconds, the framework ran on more than one core). Memory: fedlight's peak PSS over the
peer's (below 1: fedlight holds less).

Ratios of speed and CPU pair the repeats: they are alternated (each starts one framework further
along), so a framework's k-th run and a peer's k-th ran in the same cycle, minutes apart, and
share its load. `paired` gives each repeat's ratio (fedlight's samples per second over the
peer's, above 1: fedlight is faster; the peer's CPU seconds per round over fedlight's, above 1:
fedlight needs less CPU); the page reports their geometric mean with the 95% t interval of
their logs (scripts/peer_blocks.py).
"""

import json
import statistics
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Framework:
    """A row of a record: who trains the workload, and how."""

    name: str
    engine: str | None  # fedlight's `fl.engine` for its rows; None: a peer (setup.PEERS)
    before: bool = False  # fedlight from `run --before CHECKOUT` (the commit before a change)
    in_line: bool = True  # the README's line compares fedlight with it (else: the page alone)
    default_on: tuple[str, ...] = ("cpu", "cuda")  # the devices `run` runs it on by default


# in the page's order, fedlight's rows first
FRAMEWORKS = {
    f.name: f
    for f in (
        Framework("fedlight", "sequential"),
        Framework("fedlight-vectorized", "vectorized", in_line=False, default_on=("cuda",)),
        Framework("fedlight-before", "sequential", before=True, in_line=False, default_on=()),
        Framework("flower", None),
        Framework("pfl", None),
    )
}


@dataclass(frozen=True)
class Summary:
    """One framework on one workload, over its repeats."""

    framework: str
    version: str
    repeats: int
    seconds_per_round: float
    cpu_seconds_per_round: float
    outside_seconds: float  # the process's time outside its rounds (start-up and teardown)
    samples_per_second: float
    peak_rss_mb: float
    peak_pss_mb: float
    peak_threads: int
    processes: int
    accuracies: tuple[float, ...]


def steady(round_seconds: list[float]) -> float:
    """A run's steady-state seconds per round: the median of its rounds after the first."""
    later = round_seconds[1:] or round_seconds
    return statistics.median(later)


def runs_of(record: dict, framework: str) -> list[dict]:
    """`framework`'s runs in `record`, in the order they ran."""
    return [r for r in record["runs"] if r["framework"] == framework]


def summarize(record: dict, framework: str) -> Summary:
    """`framework`'s runs in `record`, summarized."""
    runs = runs_of(record, framework)
    if not runs:
        raise ValueError(f"{record['workload']}: no run of {framework} in the record")
    per_round = statistics.median(steady(r["round_seconds"]) for r in runs)
    cpu_per_round = statistics.median(steady(r["round_cpu_seconds"]) for r in runs)
    samples_per_round = record["samples"] / record["rounds"]
    return Summary(
        framework,
        runs[0]["version"],
        len(runs),
        per_round,
        cpu_per_round,
        statistics.median(r["outside_seconds"] for r in runs),
        samples_per_round / per_round,
        max(r["peak_rss_mb"] for r in runs),
        max(r["peak_pss_mb"] for r in runs),
        max(r["peak_threads"] for r in runs),
        max(r["processes"] for r in runs),
        tuple(r["accuracy"] for r in runs),
    )


def pss_ratio(ours: Summary, peer: Summary) -> float:
    """fedlight's peak PSS over the peer's (below 1: fedlight holds less)."""
    return ours.peak_pss_mb / peer.peak_pss_mb


def paired(record: dict, ours: str, peer: str, key: str = "round_seconds") -> list[float]:
    """Per repeat, the peer's steady seconds a round over `ours`'s (`key`: wall seconds, the
    speed ratio; `round_cpu_seconds`, the CPU ratio), the k-th run of each paired: both ran in
    the k-th cycle of the alternation."""
    return [
        steady(theirs[key]) / steady(mine[key])
        for mine, theirs in zip(runs_of(record, ours), runs_of(record, peer), strict=True)
    ]


def read(path: Path) -> dict:
    """A workload's record."""
    return json.loads(path.read_text())


def frameworks_in(record: dict) -> list[str]:
    """The frameworks with runs in `record`, fedlight first."""
    present = {r["framework"] for r in record["runs"]}
    return [f for f in FRAMEWORKS if f in present]
