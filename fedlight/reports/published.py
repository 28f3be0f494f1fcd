"""Published numbers beside a report's cells, each decided by the one rule
(`fedlight.reports.verdicts`): `fedlight report --published FILE[#SECTION]`, a preset's
`report: published:` mapping, and the results pages' `beside` blocks (`beside_table`).

A published mapping (docs/statistics.md):

    metric: best_accuracy            # what the cells are decided on (also rounds_to_target, ...)
    within: 2.0                      # the tolerance in points (accuracies; default 2)
    factor: 1.5                      # for a time to a target: the tolerance as a factor
    keys: [partition, algo]          # the settings whose values name a cell, in order
    cells: {dirichlet/fedavg: 88.09 ± 0.29}   # percent for accuracies; the ± part is ignored
    differences:                     # claimed gaps, decided on the paired per-seed differences
      - {compare: "algo=scaffold,fedavg", claimed: 6.6, metric: final_accuracy, within: 2}
"""

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fedlight.reports.cells import is_accuracy, metric_values, observations
from fedlight.reports.computed import is_censored
from fedlight.reports.load import load_yaml
from fedlight.reports.model import Group, ReportError
from fedlight.reports.paired import Comparison, Paired, Pairing, paired, pairings
from fedlight.reports.stats import interval
from fedlight.reports.verdicts import (
    DEFAULT_FACTOR,
    DEFAULT_TOLERANCE,
    Outcome,
    Verdict,
    decide,
    decide_rounds,
    log_decision,
)

FIX = "see docs/statistics.md for the published mapping"


def tolerance_of(content: dict[str, Any], metric: str, where: str) -> float:
    """`within` (points, or the metric's units), or `factor` for a time to a target."""
    name, default = (
        ("factor", DEFAULT_FACTOR) if is_censored(metric) else ("within", DEFAULT_TOLERANCE)
    )
    value = content.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ReportError(f"{where}: {name} is {value!r}, not a positive number; {FIX}")
    if name == "factor" and value <= 1:
        raise ReportError(f"{where}: factor is {value!r}; give one above 1 (e.g. 1.5); {FIX}")
    return float(value)


def published_number(value: Any, where: str) -> float:
    """A published number: a number, or the mean of a `88.09 ± 0.29`."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        return float(str(value).split("±")[0])
    except ValueError:
        raise ReportError(
            f"{where} is {value!r}, not a number (e.g. 88.09 ± 0.29); {FIX}"
        ) from None


@dataclass(frozen=True)
class Claim:
    """A claimed difference between two cells (`compare`: A − B; a ratio A / B for a time to a
    target), decided on the paired per-seed differences."""

    comparison: Comparison
    claimed: float
    metric: str
    tolerance: float

    @classmethod
    def from_mapping(cls, content: Any, metric: str, where: str) -> "Claim":
        if not isinstance(content, dict) or "compare" not in content or "claimed" not in content:
            raise ReportError(f"{where} is not a mapping with compare and claimed; {FIX}")
        metric = str(content.get("metric", metric))
        return cls(
            Comparison.parse(str(content["compare"]), f"{where}: compare"),
            published_number(content["claimed"], f"{where}: claimed"),
            metric,
            tolerance_of(content, metric, where),
        )


@dataclass(frozen=True)
class Published:
    """A source's published cells and claimed differences, with the tolerances they are decided
    by."""

    source: str
    metric: str
    keys: tuple[str, ...]
    cells: dict[str, float]
    tolerance: float
    claims: tuple[Claim, ...] = ()

    @classmethod
    def from_mapping(cls, content: Any, where: str) -> "Published":
        if not isinstance(content, dict) or not isinstance(content.get("metric"), str):
            raise ReportError(f"{where} is not a mapping with a metric; {FIX}")
        metric = content["metric"]
        cells = content.get("cells") or {}
        keys = content.get("keys") or []
        if not isinstance(cells, dict) or (cells and not isinstance(keys, list)):
            raise ReportError(f"{where}: cells must be a mapping and keys a list; {FIX}")
        claims = content.get("differences") or []
        if not isinstance(claims, list):
            raise ReportError(f"{where}: differences must be a list; {FIX}")
        source = (content.get("source") or {}).get("name") if "source" in content else None
        return cls(
            source=str(source or where),
            metric=metric,
            keys=tuple(str(k) for k in keys),
            cells={str(k): published_number(v, f"{where}: cells.{k}") for k, v in cells.items()},
            tolerance=tolerance_of(content, metric, where),
            claims=tuple(
                Claim.from_mapping(c, metric, f"{where}: differences[{i}]")
                for i, c in enumerate(claims)
            ),
        )

    @classmethod
    def read(cls, text: str) -> "Published":
        """`FILE` or `FILE#SECTION` (a YAML file holding other figures too)."""
        name, _, section = text.partition("#")
        content = load_yaml(Path(name), f"pass --published a readable YAML file; {FIX}")
        if content is None:
            raise ReportError(f"--published {name} does not exist; pass a YAML file; {FIX}")
        if section:
            if not isinstance(content, dict) or section not in content:
                raise ReportError(f"--published {text}: {name} has no section {section}; {FIX}")
            source = (content.get("source") or {}).get("name")
            content = {"source": {"name": source or name}, **content[section]}
        return cls.from_mapping(content, name)

    def key(self, group: Group) -> str:
        return "/".join(str(group.setting(k)) for k in self.keys)


@dataclass(frozen=True)
class CellDecision:
    key: str
    group: Group
    published: float
    verdict: Verdict


@dataclass(frozen=True)
class ClaimDecision:
    claim: Claim
    paired: Paired
    verdict: Verdict


def shown_values(group: Group, metric: str) -> list[float]:
    """The metric over the group's healthy seeds, accuracies in percent."""
    scale = 100.0 if is_accuracy(metric) else 1.0
    return [scale * v for v in metric_values(group, metric)]


def decide_cell(group: Group, metric: str, value: float, tolerance: float, method: str) -> Verdict:
    """A cell against a published value (a time to a target on log rounds)."""
    if is_censored(metric):
        return decide_rounds(observations(group, metric), value, tolerance, metric)
    return decide(interval(shown_values(group, metric), method), value, tolerance, metric)


def decide_cells(published: Published, groups: list[Group], method: str) -> list[CellDecision]:
    """Each cell with a published value, decided."""
    matched = [(published.key(g), g) for g in groups if published.key(g) in published.cells]
    if published.cells and not matched:
        keys = ", ".join(dict.fromkeys(published.key(g) for g in groups))
        raise ReportError(
            f"{published.source}: none of its cells is one of the report's, which are {keys} "
            f"(by {'/'.join(published.keys) or 'no keys'}); name its cells so, or give its keys"
        )
    metric = published.metric
    if matched and not any(has_data([g], metric) for _, g in matched):
        raise ReportError(
            f"{published.source}: metric {metric}: no seed of its cells has it; give a metric the "
            "jobs have (see `fedlight report --metrics` for the names)"
        )
    return [
        CellDecision(
            key,
            group,
            published.cells[key],
            decide_cell(group, metric, published.cells[key], published.tolerance, method),
        )
        for key, group in matched
    ]


def has_data(groups: list[Group], metric: str) -> bool:
    """Whether any seed of the groups has the metric (a time to a target: reached or not)."""
    if is_censored(metric):
        return any(observations(group, metric) for group in groups)
    return any(metric_values(group, metric) for group in groups)


def decide_claim(claim: Claim, pairing: Pairing, method: str) -> ClaimDecision:
    """A claimed gap against the pair's per-seed differences (a ratio on log scale)."""
    found = paired(pairing, claim.metric, method)
    if found.ratio:
        verdict = log_decision(
            list(found.per_seed.values()), claim.claimed, claim.tolerance, claim.metric
        )
    else:
        scale = 100.0 if is_accuracy(claim.metric) else 1.0  # accuracies in points
        differences = [scale * v for v in found.per_seed.values() if v is not None]
        found_interval = interval(differences, method)
        verdict = decide(found_interval, claim.claimed, claim.tolerance, claim.metric)
    return ClaimDecision(claim, found, all_diverged(pairing, found, verdict))


def all_diverged(pairing: Pairing, found: Paired, verdict: Verdict) -> Verdict:
    """No seed to pair because every one of a cell's seeds, two or more, diverged: no number of
    seeds is planned (the setting diverges seed after seed), and the verdict says so."""
    cells = [(pairing.comparison.a, pairing.a), (pairing.comparison.b, pairing.b)]
    gone = [name for name, group in cells if len(group.jobs) >= 2 and not group.healthy]
    if found.per_seed or not gone:
        return verdict
    why = f"every seed of {' and '.join(gone)} diverged: no value to pair"
    return replace(verdict, seeds_needed=None, reason=why)


def decide_claims(published: Published, groups: list[Group], method: str) -> list[ClaimDecision]:
    return [
        decide_claim(claim, pairing, method)
        for claim in published.claims
        for pairing in pairings(groups, [claim.comparison])
    ]


# An inconclusive verdict with the cells more seeds would go to.
Undecided = tuple[list[Group], Verdict]


def undecided(decisions: list[CellDecision], claims: list[ClaimDecision]) -> list[Undecided]:
    """The inconclusive verdicts with the cells more seeds would go to (both of a pair)."""
    found: list[Undecided] = [
        ([d.group], d.verdict) for d in decisions if d.verdict.outcome is Outcome.INCONCLUSIVE
    ]
    found += [
        ([c.paired.pairing.a, c.paired.pairing.b], c.verdict)
        for c in claims
        if c.verdict.outcome is Outcome.INCONCLUSIVE
    ]
    return found
