"""Results-page blocks of rounds to a target per cell, as McMahan et al. 2017 tabulate them
(Table 1): `kind: rounds`, each cell's seeds at the learning rate its grid chose beside the
published rounds, with the speedup over the row's baseline column and the one rule's verdict on
log rounds (`fedlight.reports.verdicts.decide_rounds`); and `kind: rates`, the grid itself.

A reference file's `table` section (docs/results/references/mcmahan2017.yaml):

    table:
      metric: rounds_to_target_interpolated   # each seed's reading (censored: never got there)
      factor: 1.5                             # published rounds within a factor either way
      key: experiment/mcmahan2017_table1      # the setting whose value names a cell
      rows: {2nn_iid_b10: "2NN, IID, B = 10"} # a cell is <row>_<column>
      columns: {c0: "0.0", c10: "0.1"}        # the first is the row's baseline (speedups)
      cells: {2nn_iid_b10_c0: 316}            # published rounds; a cell without one is not shown

A block (docs/results/pages.yaml):

    table1:
      kind: rounds
      reference: docs/results/references/mcmahan2017.yaml
      section: table
      records: [runs/seeds]        # the seeds of every cell (any rates)
      chosen_by: [runs/grid]       # seed 0 at each rate tried: the fewest rounds picks the rate
      columns: [c10]               # optional: only these columns (and `rows`: these rows)
      borrowed: {m_iid_c100: m_iid_c10}   # optional: a cell with no grid, at another's rate

The rate of a cell is read from `optim.lr` of its jobs' overrides; the grid's choice is the rate
whose seed-0 run reached the target in the fewest rounds (the paper's criterion, §3), so the
table needs no rate typed anywhere.
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedlight.reports.computed import observation, test_points
from fedlight.reports.curves import Line, Panel, write_curves
from fedlight.reports.load import load_jobs
from fedlight.reports.markdown import markdown_table
from fedlight.reports.model import MISSING, JobResult, ReportError
from fedlight.reports.stats import Censored, Interval, log_interval, t_interval
from fedlight.reports.verdicts import Outcome, Verdict, decide_rounds, placed

RATE = "optim.lr"


@dataclass(frozen=True)
class RoundsTable:
    """A reference file's table of published rounds (the module docstring)."""

    metric: str
    factor: float
    key: str
    rows: dict[str, str]
    columns: dict[str, str]
    cells: dict[str, float]

    @classmethod
    def read(cls, reference: Path, section: str) -> "RoundsTable":
        content = yaml.safe_load(reference.read_text())[section]
        return cls(
            metric=str(content["metric"]),
            factor=float(content["factor"]),
            key=str(content["key"]),
            rows={str(k): str(v) for k, v in content["rows"].items()},
            columns={str(k): str(v) for k, v in content["columns"].items()},
            cells={str(k): float(v) for k, v in content["cells"].items()},
        )

    def placed(
        self, columns: Iterable[str] | None = None, rows: Iterable[str] | None = None
    ) -> list[tuple[str, str, str]]:
        """(row, column, cell) of every published cell (of the `rows` and `columns` given), in
        the table's order."""
        wanted = list(self.columns) if columns is None else list(columns)
        return [
            (row, column, f"{row}_{column}")
            for row in (self.rows if rows is None else rows)
            for column in wanted
            if f"{row}_{column}" in self.cells
        ]


def jobs_of(sweeps: list[Path]) -> list[JobResult]:
    return [job for sweep in sweeps for job in load_jobs(sweep) if job.finished]


def seed_of(job: JobResult) -> int:
    return int((job.summary or {}).get("seed", job.overrides.get("seed", 0)))


def chosen_rates(jobs: list[JobResult], table: RoundsTable) -> dict[str, tuple[str, Censored]]:
    """Per cell, the rate whose seed-0 run reached the target first (ties: the first tried) and
    that run's reading."""
    chosen: dict[str, tuple[str, Censored]] = {}
    for job in jobs:
        found = observation(job, table.metric)
        cell = job.overrides.get(table.key)
        if found is None or not found.reached or cell is None or seed_of(job) != 0:
            continue
        if cell not in chosen or found.value < chosen[cell][1].value:
            chosen[cell] = (job.overrides[RATE], found)
    return chosen


def unbracketed(jobs: list[JobResult], table: RoundsTable, chosen: dict[str, Any]) -> set[str]:
    """The cells whose chosen rate's two neighbours on the grid 10^(k/3) did not both run at
    seed 0: a search not yet finished (McMahan et al. checked their best rates were inside their
    grids, §3)."""
    tried: dict[str, set[int]] = {}
    for job in (j for j in jobs if seed_of(j) == 0 and RATE in j.overrides):
        step = round(3 * math.log10(float(job.overrides[RATE])))
        tried.setdefault(str(job.overrides.get(table.key)), set()).add(step)
    return {
        cell
        for cell, (rate, _) in chosen.items()
        if not {round(3 * math.log10(float(rate))) + d for d in (-1, 1)} <= tried.get(cell, set())
    }


def ratio(base: dict[int, Censored], cell: dict[int, Censored]) -> Interval | str:
    """The baseline's rounds over the cell's, seed by seed (the same seed: the same split and
    initial model), as a geometric mean and its 95% CI (t on the log ratios); a word where there
    is none (no common seed, or one censored)."""
    seeds = sorted(set(base) & set(cell))
    if not seeds:
        return MISSING
    if not all(base[s].reached and cell[s].reached for s in seeds):
        return "censored"
    return t_interval([math.log(base[s].value / cell[s].value) for s in seeds]).mapped(math.exp)


def ratio_text(found: Interval | str) -> str:
    if isinstance(found, str):
        return found
    if found.low is None or found.high is None:
        return f"{found.mean:.1f}×"
    return f"{found.mean:.1f}× [{found.low:.1f}, {found.high:.1f}]"


def estimate(seen: list[Censored]) -> str:
    """A cell's rounds over its seeds: the geometric mean and its 95% CI on log rounds, or how
    many seeds reached the target and how far the others ran."""
    found = log_interval(seen)
    if found is not None and found.low is not None and found.high is not None:
        return f"{found.mean:.0f} [{found.low:.0f}, {found.high:.0f}]"
    if found is not None:
        return f"{found.mean:.0f}"
    reached = sum(o.reached for o in seen)
    ran = max((o.value for o in seen if not o.reached), default=0)
    return f"{reached}/{len(seen)} reached (>{ran:.0f})"


def sweeps_of(directory: Path, spec: dict[str, Any], key: str) -> list[Path]:
    """The block's sweeps named by `key` (`records`, `chosen_by`), relative to the page."""
    return [directory / name for name in spec[key]]


def chosen_readings(
    directory: Path, spec: dict[str, Any], table: RoundsTable
) -> tuple[dict[str, tuple[str, Censored]], dict[str, list[JobResult]]]:
    """Each cell's rate as the block's grid (`chosen_by`) chose it (a cell of `borrowed`
    without a grid of its own: the rate chosen for the cell it names), and its jobs of the
    `records` at that rate."""
    chosen = chosen_rates(jobs_of(sweeps_of(directory, spec, "chosen_by")), table)
    for cell, source in (spec.get("borrowed") or {}).items():
        if cell in chosen:
            raise ReportError(f"borrowed: {cell} has a grid of its own; remove it from `borrowed`")
        if source in chosen:
            chosen[cell] = chosen[source]
    rates = {cell: rate for cell, (rate, _) in chosen.items()}
    at_rate: dict[str, list[JobResult]] = {}
    for job in jobs_of(sweeps_of(directory, spec, "records")):
        cell = job.overrides.get(table.key)
        if cell in rates and job.overrides.get(RATE) == rates[cell]:
            at_rate.setdefault(cell, []).append(job)
    return chosen, at_rate


def seed_readings(jobs: list[JobResult], metric: str) -> dict[int, Censored]:
    """Each job's reading of `metric`, by seed."""
    found = {seed_of(job): observation(job, metric) for job in jobs}
    return {seed: reading for seed, reading in found.items() if reading is not None}


def rate_text(
    cell: str,
    chosen: dict[str, tuple[str, Censored]],
    borrowed: dict[str, str],
    searching: set[str] = frozenset(),
) -> str:
    """The cell's rate; the cell whose grid chose it where it has none of its own; whether its
    grid's search is unfinished (`unbracketed`)."""
    if cell not in chosen:
        return MISSING
    source = borrowed.get(cell, cell)
    shown = f"{chosen[cell][0]} (as {source})" if cell in borrowed else chosen[cell][0]
    return f"{shown} (search unfinished)" if source in searching else shown


def verdict_text(verdict: Verdict) -> str:
    """The rule's verdict, and for a refuted cell which side of the band its rounds lie on."""
    if verdict.outcome != Outcome.REFUTED:
        return verdict.outcome.value
    fewer = verdict.high is not None and verdict.band is not None and verdict.high < verdict.band[0]
    return f"{verdict.outcome.value}: {'fewer' if fewer else 'more'} rounds"


def rounds_lines(directory: Path, spec: dict[str, Any], reference: Path) -> list[str]:
    """The `rounds` block: one row a published cell (module docstring); with `curves: <file>`,
    the cells' running-best curves drawn into that file of the page's folder, and shown."""
    table = RoundsTable.read(reference, spec.get("section", "table"))
    chosen, jobs = chosen_readings(directory, spec, table)
    grid = jobs_of(sweeps_of(directory, spec, "chosen_by"))
    searching = unbracketed(grid, table, chosen_rates(grid, table))
    seen = {cell: seed_readings(found, table.metric) for cell, found in jobs.items()}
    shown = [f"![{spec['curves']}]({spec['curves']})", ""] if spec.get("curves") else []
    if shown:
        draw_curves(directory / spec["curves"], table, jobs)
    base_column = next(iter(table.columns))
    body = []
    for row, column, cell in table.placed(spec.get("columns"), spec.get("rows")):
        published = table.cells[cell]
        base = table.cells.get(f"{row}_{base_column}")
        paper = f"{published:.0f}" + (
            f" ({base / published:.1f}×)" if base is not None and column != base_column else ""
        )
        seeds = seen.get(cell, {})
        observed = [seeds[s] for s in sorted(seeds)]
        verdict = decide_rounds(observed, published, table.factor, table.metric)
        ours = ratio_text(ratio(seen.get(f"{row}_{base_column}", {}), seeds))
        body.append(
            [
                table.rows[row],
                table.columns[column],
                paper,
                rate_text(cell, chosen, spec.get("borrowed") or {}, searching),
                " / ".join(o.text(1) for o in observed) or MISSING,
                estimate(observed) if observed else MISSING,
                MISSING if column == base_column else ours,
                verdict_text(verdict) if observed else "not run",
            ]
        )
    header = [
        "Model, split, B",
        "C",
        "Paper: rounds (speedup)",
        "Rate (grid)",
        "fedlight: rounds, seed by seed",
        "Geometric mean [95% CI]",
        "Speedup over C = 0 [95% CI]",
        f"Verdict (within ×{table.factor:g})",
    ]
    return [*shown, *markdown_table(header, body, text_columns=2)]


def running_best(job: JobResult) -> tuple[list[float], list[float]]:
    """The job's test accuracy at each evaluated round as the paper reads it: the best so far."""
    rounds, best, top = [], [], 0.0
    for round_index, value in test_points(job):
        top = max(top, value)
        rounds.append(round_index)
        best.append(top)
    return rounds, best


def draw_curves(path: Path, table: RoundsTable, jobs: dict[str, list[JobResult]]) -> None:
    """One panel a row of the table: every seed's running-best curve, one colour a column (C),
    against log rounds, with the target as a dashed line."""
    from matplotlib import colormaps

    colors = colormaps["tab10"].colors
    panels = []
    for row, label in table.rows.items():
        lines, targets = [], set()
        for index, (column, name) in enumerate(table.columns.items()):
            for seed, job in enumerate(sorted(jobs.get(f"{row}_{column}", []), key=seed_of)):
                rounds, best = running_best(job)
                shown = f"C = {name}" if seed == 0 else None
                lines.append(Line(shown, rounds, best, color=colors[index % len(colors)]))
                targets.add(float(job.target_accuracy or 0))
        if lines:
            top = max(targets)
            ylim = (top - 0.07, min(1.0, top + 0.015))
            title = f"{label}: running-best test accuracy, every seed"
            panels.append(Panel("accuracy", lines, title, log_x=True, targets=(top,), ylim=ylim))
    write_curves(path, panels, width=8, dpi=80, stacked=True)


def rates_lines(directory: Path, spec: dict[str, Any], reference: Path) -> list[str]:
    """The `rates` block: each cell's seed-0 runs, one column a rate, the chosen one in bold; a
    run that stopped before the target reads >R (it ran R rounds: a rate tried after the best was
    found stops at the best's rounds, as it could no longer be chosen)."""
    table = RoundsTable.read(reference, spec.get("section", "table"))
    jobs = [j for j in jobs_of(sweeps_of(directory, spec, "records")) if seed_of(j) == 0]
    chosen = chosen_rates(jobs, table)
    rates = sorted({j.overrides[RATE] for j in jobs if RATE in j.overrides}, key=float)
    tried: dict[str, dict[str, Censored]] = {}
    for job in jobs:
        reading = observation(job, table.metric)
        if reading is not None and RATE in job.overrides:
            tried.setdefault(job.overrides.get(table.key, ""), {})[job.overrides[RATE]] = reading
    body = []
    for row, column, cell in table.placed(spec.get("columns")):
        if cell not in tried:
            continue
        shown = []
        for rate in rates:
            reading = tried[cell].get(rate)
            text = MISSING if reading is None else reading.text(1)
            best = cell in chosen and chosen[cell][0] == rate
            shown.append(f"**{text}**" if best else text)
        body.append([table.rows[row], table.columns[column], *shown])
    return markdown_table(["Model, split, B", "C", *(f"η = {r}" for r in rates)], body, 2)


def decision(found: Interval | str, band: tuple[float, float]) -> str:
    """The rule on a ratio's interval; "not run" without seeds, "inconclusive" without an
    interval (one seed, or one censored)."""
    if found == MISSING:
        return "not run"
    if isinstance(found, str) or found.low is None or found.high is None:
        return "inconclusive"
    return placed(found.low, found.high, band).value


def findings_lines(directory: Path, spec: dict[str, Any], reference: Path) -> list[str]:
    """The `findings` block: a reference's claims about ratios of rounds between cells (its
    `findings` section: each a `claim`, a `band` [low, high] of the ratio (null: unbounded) and
    `pairs` [A, B]: A's rounds over B's), each pair's ratio in the paper and in the records
    (paired by seed, 95% CI) decided by the one rule: inside the band, outside it, or neither."""
    content = yaml.safe_load(reference.read_text())
    table = RoundsTable.read(reference, spec.get("section", "table"))
    _, jobs = chosen_readings(directory, spec, table)
    seen = {cell: seed_readings(found, table.metric) for cell, found in jobs.items()}
    body = []
    for finding in content[spec.get("findings", "findings")].values():
        low, high = (
            math.inf * sign if v is None else float(v)
            for v, sign in zip(finding["band"], (-1, 1), strict=True)
        )
        for a, b in finding["pairs"]:
            paper = table.cells[a] / table.cells[b]
            found = ratio(seen.get(a, {}), seen.get(b, {}))
            inside = "yes" if low <= paper <= high else "no"
            body.append(
                [
                    finding["claim"],
                    f"{a} / {b}",
                    f"{paper:.1f}× ({inside})",
                    ratio_text(found),
                    decision(found, (low, high)),
                ]
            )
    header = ["Finding", "Rounds of A / B", "Paper (in the band)", "fedlight [95% CI]", "Verdict"]
    return markdown_table(header, body, text_columns=2)


# the block kinds of this module, by the name a pages.yaml block gives as its `kind`
ROUNDS_BLOCKS = {"rounds": rounds_lines, "rates": rates_lines, "findings": findings_lines}
