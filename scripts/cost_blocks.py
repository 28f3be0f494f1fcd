"""What a table of rounds to a target costs to run, from its records (`kind: cost`): per cell the
seconds a round took (the median over its runs: wall time over rounds, each run on one thread),
the hours its runs took in all, and one run at the published rounds estimated for every cell,
those not run included: the published rounds × the clients a round × the seconds a client's
round took in the row's run with the most clients (or its model's, for a row without runs:
training dominates a round; the evaluation each round adds is in the measured seconds). What a
page scopes its runs by, in numbers.

    cost:
      kind: cost
      reference: docs/results/references/mcmahan2017.yaml   # its `table` (scripts/rounds_blocks),
                                                            # with `clients`: a column's clients
      records: [runs/seeds, runs/grid]                      # every run whose time counts
"""

import statistics
from pathlib import Path
from typing import Any

import yaml

from fedlight.reports.markdown import markdown_table
from fedlight.reports.model import MISSING, JobResult
from scripts.rounds_blocks import RoundsTable, jobs_of, sweeps_of


def per_round(job: JobResult) -> tuple[float, float] | None:
    """(seconds a round, clients a round) of a finished run; None without its numbers."""
    summary = job.summary or {}
    rounds, wall = summary.get("rounds"), summary.get("wall_seconds")
    clients = [float(r["participants"]) for r in job.rows if r.get("participants") is not None]
    if not rounds or wall is None or not clients:
        return None
    return float(wall) / float(rounds), statistics.fmean(clients)


def widest_run(timed: dict[str, list[tuple[float, float]]], row: str) -> tuple[float, float] | None:
    """The (seconds a round, clients) of the row's run with the most clients; a row without runs
    takes the runs of the rows of its model (the row's name up to its first `_`): a client's
    round costs what its model's forward and backward passes over its examples cost."""
    for prefix in (f"{row}_", f"{row.split('_')[0]}_"):
        times = [t for cell, found in timed.items() if cell.startswith(prefix) for t in found]
        if times:
            return max(times, key=lambda t: t[1])
    return None


def cost_lines(directory: Path, spec: dict[str, Any], reference: Path) -> list[str]:
    """The `cost` block (module docstring): a row per published cell, then the total."""
    section = spec.get("section", "table")
    table = RoundsTable.read(reference, section)
    clients_of = yaml.safe_load(reference.read_text())[section]["clients"]  # a column's clients
    jobs = jobs_of(sweeps_of(directory, spec, "records"))
    by_cell: dict[str, list[JobResult]] = {}
    for job in jobs:
        by_cell.setdefault(job.overrides.get(table.key, ""), []).append(job)
    timed = {
        cell: [t for t in (per_round(j) for j in found) if t is not None]
        for cell, found in by_cell.items()
    }
    body = []
    for row, column, cell in table.placed():
        measured = timed.get(cell, [])
        widest = widest_run(timed, row)
        hours = sum(float((j.summary or {}).get("wall_seconds", 0)) for j in by_cell.get(cell, []))
        clients = int(clients_of[column])
        estimate = (
            MISSING
            if widest is None
            else f"{table.cells[cell] * clients * widest[0] / widest[1] / 3600:.2f}"
        )
        body.append(
            [
                table.rows[row],
                table.columns[column],
                str(len(measured)),
                f"{statistics.median(t[0] for t in measured):.2f}" if measured else MISSING,
                f"{hours / 3600:.1f}" if measured else MISSING,
                estimate,
            ]
        )
    total = sum(float((j.summary or {}).get("wall_seconds", 0)) for j in jobs) / 3600
    header = [
        "Model, split, B",
        "C",
        "Runs",
        "Seconds a round (median)",
        "Hours of its runs",
        "One run at the paper's rounds (hours, estimated)",
    ]
    runs = f"{len(jobs)} run" + "s" * (len(jobs) != 1)
    said = f"All the records' runs: {runs}, {total:.1f} hours of one thread each."
    return [*markdown_table(header, body, text_columns=2), "", said]


COST_BLOCKS = {"cost": cost_lines}
