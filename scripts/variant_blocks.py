"""Results-page blocks that set one table cell's rounds to a target beside the same cell run
another way (the rounds table of scripts/rounds_blocks.py):

- `kind: protocols`: each cell of the columns given at the rate the paper's protocol picks (the
  fewest test rounds at seed 0, `chosen_by`) and at the rate an honest protocol picks (the same
  criterion on a validation split held out of training, `honest_by`), each read on the test set
  from the `records` at its rate, and the honest rounds over the paper's, paired by seed: what
  choosing the rate on the test set is worth (Bergstra and Bengio 2012 on selection bias; the
  paper itself picks on the test curve, §3).
- `kind: variants`: one cell's seeds as run beside the same cell with one setting changed (a
  record folder each: a data option, another rate, or the same runs read off another curve), each
  decided against the published rounds by the one rule; what explains a cell far from the paper.

    protocols:
      kind: protocols
      reference: docs/results/references/mcmahan2017.yaml
      records: [runs/seeds]          # the seeds at whichever rate each protocol chose
      chosen_by: [runs/grid]         # seed 0 at each rate, read on the test set
      honest_by: [runs/valgrid]      # seed 0 at each rate, read on the validation split
      columns: [c10]
    why:
      kind: variants
      reference: docs/results/references/mcmahan2017.yaml
      cell: 2nn_iid_b10_c10
      chosen_by: [runs/grid]         # the rate of a variant that names none
      variants:
        - {label: "as run", records: [runs/seeds]}
        - {label: "pixels standardized", records: [runs/why_normalize]}
        - {label: "the raw curve", records: [runs/seeds], metric: rounds_to_target}
        - {label: "η = 0.1 (seed 0)", records: [runs/grid], rate: "0.1"}
"""

from pathlib import Path
from typing import Any

from fedlight.reports.markdown import markdown_table
from fedlight.reports.model import MISSING, JobResult
from fedlight.reports.stats import Censored
from fedlight.reports.verdicts import decide_rounds
from scripts.rounds_blocks import (
    RATE,
    RoundsTable,
    chosen_rates,
    estimate,
    jobs_of,
    rate_text,
    ratio,
    ratio_text,
    seed_readings,
    sweeps_of,
    unbracketed,
    verdict_text,
)


def at_rate(jobs: list[JobResult], key: str, cell: str, rate: str | None) -> list[JobResult]:
    """The cell's jobs run at `rate` (None: no job)."""
    return [j for j in jobs if j.overrides.get(key) == cell and j.overrides.get(RATE) == rate]


def readings(jobs: list[JobResult], metric: str) -> tuple[dict[int, Censored], list[Censored]]:
    """The jobs' readings by seed, and in seed order."""
    seen = seed_readings(jobs, metric)
    return seen, [seen[s] for s in sorted(seen)]


def seeds_text(observed: list[Censored]) -> str:
    return " / ".join(o.text(1) for o in observed) or MISSING


def protocols_lines(directory: Path, spec: dict[str, Any], reference: Path) -> list[str]:
    """The `protocols` block (module docstring): one row a cell of the `columns` given."""
    table = RoundsTable.read(reference, spec.get("section", "table"))
    grids = {key: jobs_of(sweeps_of(directory, spec, key)) for key in ("chosen_by", "honest_by")}
    paper, honest = (chosen_rates(grids[key], table) for key in ("chosen_by", "honest_by"))
    searching = {
        key: unbracketed(grids[key], table, chosen)
        for key, chosen in (("chosen_by", paper), ("honest_by", honest))
    }
    jobs = jobs_of(sweeps_of(directory, spec, "records"))
    body = []
    for row, column, cell in table.placed(spec.get("columns"), spec.get("rows")):
        rate_p = paper[cell][0] if cell in paper else None
        rate_h = honest[cell][0] if cell in honest else None
        seen_p, shown_p = readings(at_rate(jobs, table.key, cell, rate_p), table.metric)
        seen_h, shown_h = readings(at_rate(jobs, table.key, cell, rate_h), table.metric)
        body.append(
            [
                table.rows[row],
                table.columns[column],
                f"{table.cells[cell]:.0f}",
                rate_text(cell, paper, {}, searching["chosen_by"]),
                estimate(shown_p) if shown_p else MISSING,
                rate_text(cell, honest, {}, searching["honest_by"]),
                seeds_text(shown_h),
                estimate(shown_h) if shown_h else MISSING,
                ratio_text(ratio(seen_h, seen_p)) if shown_h and shown_p else MISSING,
            ]
        )
    header = [
        "Model, split, B",
        "C",
        "Paper: rounds",
        "Rate chosen on the test set",
        "Its rounds [95% CI]",
        "Rate chosen on a validation split",
        "Its rounds, seed by seed",
        "Its rounds [95% CI]",
        "Its rounds over the test-chosen rate's [95% CI]",
    ]
    return markdown_table(header, body, text_columns=2)


def variants_lines(directory: Path, spec: dict[str, Any], reference: Path) -> list[str]:
    """The `variants` block (module docstring): one row a variant of the block's cell, its
    rounds against the first variant's paired by seed, its verdict against the paper's."""
    table = RoundsTable.read(reference, spec.get("section", "table"))
    cell = str(spec["cell"])
    chosen = chosen_rates(jobs_of(sweeps_of(directory, spec, "chosen_by")), table)
    published = table.cells[cell]
    first: dict[int, Censored] | None = None
    body = []
    for variant in spec["variants"]:
        rate = str(variant.get("rate") or (chosen[cell][0] if cell in chosen else ""))
        jobs = at_rate(jobs_of(sweeps_of(directory, variant, "records")), table.key, cell, rate)
        metric = str(variant.get("metric", table.metric))
        seen, shown = readings(jobs, metric)
        first = seen if first is None else first
        verdict = decide_rounds(shown, published, table.factor, metric)
        body.append(
            [
                str(variant["label"]),
                rate or MISSING,
                seeds_text(shown),
                estimate(shown) if shown else MISSING,
                ratio_text(ratio(first, seen)) if shown and first is not seen else MISSING,
                verdict_text(verdict) if shown else "not run",
            ]
        )
    header = [
        "Run",
        "Rate",
        "Rounds, seed by seed",
        "Geometric mean [95% CI]",
        "The first row's rounds over its [95% CI]",
        f"Verdict against the paper's {published:.0f} (within ×{table.factor:g})",
    ]
    return markdown_table(header, body, text_columns=1)


# the block kinds of this module, by the name a pages.yaml block gives as its `kind`
VARIANT_BLOCKS = {"protocols": protocols_lines, "variants": variants_lines}
