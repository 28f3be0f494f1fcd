"""What `fedlight report` adds to its tables from the statistics: the interval method, the paired
differences of cells that share their seeds (`--compare`, a layout's `compare`, or the two cells
of an A-versus-B table), and the verdicts against published numbers (`--published`, a layout's
`published`), with the files that hold them (seeds.csv, paired.csv, verdicts.csv)."""

from dataclasses import dataclass, field
from pathlib import Path

from fedlight.reports.model import Group, ReportError, Section
from fedlight.reports.paired import Comparison, Paired, default_comparisons, paired, pairings
from fedlight.reports.per_seed import paired_markdown, write_paired_csv, write_seeds_csv
from fedlight.reports.published import (
    CellDecision,
    ClaimDecision,
    Published,
    Undecided,
    decide_cells,
    decide_claims,
    has_data,
    undecided,
)
from fedlight.reports.stats import CI_METHODS
from fedlight.reports.verdict_tables import undecided_lines, verdicts_markdown, write_verdicts_csv


@dataclass(frozen=True)
class Decided:
    published: Published
    cells: list[CellDecision]
    claims: list[ClaimDecision]


@dataclass
class Analysis:
    method: str
    paired: list[Paired] = field(default_factory=list)
    decided: list[Decided] = field(default_factory=list)

    def markdown(self, shown: tuple[str, ...]) -> list[str]:
        """The paired tables (the `shown` metrics) and the verdicts, for report.md."""
        lines = paired_markdown([p for p in self.paired if p.metric in shown], self.method)
        for d in self.decided:
            lines += verdicts_markdown(d.published, d.cells, d.claims, self.method)
        return lines

    def write(self, output_dir: Path, sections: list[Section], metrics: list[str]) -> None:
        write_seeds_csv(output_dir, sections, metrics)
        if self.paired:
            write_paired_csv(output_dir, self.paired)
        if self.decided:
            cells = [c for d in self.decided for c in d.cells]
            write_verdicts_csv(output_dir, cells, [c for d in self.decided for c in d.claims])

    def undecided(self) -> list[Undecided]:
        return [u for d in self.decided for u in undecided(d.cells, d.claims)]

    def printed(self) -> list[str]:
        return [line for d in self.decided for line in undecided_lines(d.cells, d.claims)]


def method_of(given: str | None, sections: list[Section]) -> str:
    """`--ci`, else the layouts' `ci` (one for the whole report)."""
    chosen = {given} if given else {s.layout.ci for s in sections} or {"t"}
    if len(chosen) > 1 or not chosen <= set(CI_METHODS):
        raise ReportError(
            f"report.ci is {', '.join(sorted(chosen))} in the jobs' presets; give one of "
            f"{', '.join(CI_METHODS)} (or --ci)"
        )
    return chosen.pop()


def comparisons_of(given: list[str], sections: list[Section]) -> list[Comparison]:
    """`--compare`, else the layouts' `compare`, else each A-versus-B table's two cells."""
    if given:
        return [Comparison.parse(text) for text in given]
    named = dict.fromkeys(text for s in sections for text in s.layout.compare)
    if named:
        return [Comparison.parse(text, "report.compare") for text in named]
    return default_comparisons(sections)


def analyse(
    sections: list[Section],
    metrics: list[str],
    ci: str | None = None,
    compare: list[str] | None = None,
    published: str | None = None,
) -> Analysis:
    """The paired differences and verdicts of a report's sections, for `metrics`."""
    method = method_of(ci, sections)
    groups = [g for s in sections for g in s.groups]
    found = pairings(groups, comparisons_of(compare or [], sections))
    paired_metrics = [
        paired(pairing, metric, method)
        for pairing in found
        for metric in metrics
        if has_data([pairing.a, pairing.b], metric)
    ]
    specs: list[tuple[Published, list[Group]]]
    if published:
        specs = [(Published.read(published), groups)]
    else:
        where = "report.published of the jobs' preset"
        specs = [
            (Published.from_mapping(s.layout.published, where), s.groups)
            for s in sections
            if s.layout.published
        ]
    decided = [
        Decided(spec, decide_cells(spec, members, method), decide_claims(spec, members, method))
        for spec, members in specs
    ]
    return Analysis(method, paired_metrics, decided)
