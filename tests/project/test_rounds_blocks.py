"""The `rounds` and `rates` blocks of the results pages (scripts/rounds_blocks.py) on constructed
records: the grid's choice of rate, each seed's reading, the geometric mean and its interval on
log rounds, the paired speedup over the baseline column and the one rule's verdict."""

import math
import shutil
from pathlib import Path

import pytest
import yaml

from fedlight.reports.model import ReportError
from fedlight.reports.stats import t_quantile
from scripts.results import Page, block_lines
from scripts.rounds_blocks import jobs_of, running_best
from tests.reports.test_report import write_job

KEY = "experiment/mcmahan2017_table1"
TARGET = 0.9
TABLE = {
    "metric": "rounds_to_target_interpolated",
    "factor": 1.5,
    "key": KEY,
    "rows": {"m_iid": "M, IID"},
    "columns": {"c0": "0.0", "c10": "0.1"},
    "cells": {"m_iid_c0": 100, "m_iid_c10": 25},
}


def reaching(rounds: int | None, ran: int = 0) -> list[float]:
    """A curve whose running best crosses the target exactly at `rounds` (None: never, in `ran`
    rounds)."""
    if rounds is None:
        return [0.5] * ran
    return [0.5] * (rounds - 1) + [TARGET]


def run(sweep: Path, cell: str, rate: str, seed: int, rounds: int | None, ran: int = 0) -> None:
    overrides = [f"+{KEY}={cell}", f"optim.lr={rate}", f"seed={seed}"]
    curve = reaching(rounds, ran)
    summary = {"seed": seed, "target_accuracy": TARGET, "final_accuracy": curve[-1]}
    write_job(sweep, f"{cell}_{rate}_{seed}", overrides, None, summary, curve)


def records(tmp_path: Path) -> Page:
    """Seed 0 at three rates per cell (0.1 first for the baseline, 0.2 for the other), then seeds
    0-2 at the chosen rates: the baseline at 80, 100, 125 rounds, the other at 20, 25 and a seed
    that never got there in 40 rounds, or 25."""
    (tmp_path / "reference.yaml").write_text(yaml.safe_dump({"table": TABLE}))
    grid, seeds = tmp_path / "runs" / "grid", tmp_path / "runs" / "seeds"
    run(grid, "m_iid_c0", "0.1", 0, 80)
    run(grid, "m_iid_c0", "0.2", 0, 90)
    run(grid, "m_iid_c10", "0.1", 0, None, 30)
    run(grid, "m_iid_c10", "0.2", 0, 20)
    # each choice bracketed on the grid 10^(k/3) by a worse rate on either side
    run(grid, "m_iid_c0", "0.0464", 0, None, 80)
    run(grid, "m_iid_c10", "0.464", 0, None, 20)
    for seed, rounds in enumerate((80, 100, 125)):
        run(seeds, "m_iid_c0", "0.1", seed, rounds)
    for seed, rounds in enumerate((20, 25, 25)):
        run(seeds, "m_iid_c10", "0.2", seed, rounds)
    return Page(directory=Path("."), reports={".": ("runs/seeds", "runs/grid")})


def t_bounds(logs: list[float]) -> tuple[float, float]:
    mean = sum(logs) / len(logs)
    std = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = t_quantile(len(logs) - 1) * std / math.sqrt(len(logs))
    return math.exp(mean - half), math.exp(mean + half)


def test_each_cell_reads_its_seeds_at_the_rate_its_grid_chose_with_its_speedup(
    tmp_path: Path,
) -> None:
    page = records(tmp_path)
    spec = {"kind": "rounds", "reference": "reference.yaml", "section": "table"}
    lines = block_lines(
        tmp_path, page, spec | {"records": ["runs/seeds"], "chosen_by": ["runs/grid"]}, "b"
    )
    base, cell = lines[2].split(" | "), lines[3].split(" | ")
    assert base[2:5] == ["100", "0.1", "80.0 / 100.0 / 125.0"]
    low, high = t_bounds([math.log(r) for r in (80, 100, 125)])
    assert base[5] == f"100 [{low:.0f}, {high:.0f}]"
    assert cell[2:5] == ["25 (4.0×)", "0.2", "20.0 / 25.0 / 25.0"]
    ratios = [math.log(4), math.log(4), math.log(5)]
    low, high = t_bounds(ratios)
    assert cell[6] == f"{math.exp(sum(ratios) / 3):.1f}× [{low:.1f}, {high:.1f}]"
    # the baseline's interval is wider than the band around 100 (×1.5 either way): undecided;
    # the other's lies inside the band around 25
    assert base[7] == "inconclusive |" and cell[7] == "reproduced |"


def test_a_cell_far_from_the_paper_is_refuted_on_its_side_and_censored_seeds_are_counted(
    tmp_path: Path,
) -> None:
    page = records(tmp_path)
    table = TABLE | {"cells": {"m_iid_c0": 1000, "m_iid_c10": 25}}
    (tmp_path / "reference.yaml").write_text(yaml.safe_dump({"table": table}))
    # seed 2 again, as a run that never got there in 40 rounds, in place of the one that did
    shutil.rmtree(tmp_path / "runs" / "seeds" / "m_iid_c10_0.2_2")
    run(tmp_path / "runs" / "seeds", "m_iid_c10", "0.2", 2, None, 40)
    spec = {"kind": "rounds", "reference": "reference.yaml", "chosen_by": ["runs/grid"]}
    lines = block_lines(tmp_path, page, spec | {"records": ["runs/seeds"]}, "b")
    assert lines[2].endswith("| refuted: fewer rounds |")
    cell = lines[3].split(" | ")
    assert cell[4] == "20.0 / 25.0 / >40.0" and cell[5] == "2/3 reached (>40)"
    assert cell[6] == "censored" and cell[7] == "inconclusive |"


def test_the_rates_block_marks_each_cells_choice_and_the_runs_that_stopped_short(
    tmp_path: Path,
) -> None:
    page = records(tmp_path)
    spec = {"kind": "rates", "reference": "reference.yaml", "records": ["runs/grid"]}
    lines = block_lines(tmp_path, page, spec, "b")
    assert lines[0] == "| Model, split, B | C | η = 0.0464 | η = 0.1 | η = 0.2 | η = 0.464 |"
    assert lines[2] == "| M, IID | 0.0 | >80.0 | **80.0** | 90.0 | — |"
    assert lines[3] == "| M, IID | 0.1 | — | >30.0 | **20.0** | >20.0 |"


def test_a_choice_not_bracketed_by_its_grid_neighbours_is_marked_unfinished(
    tmp_path: Path,
) -> None:
    page = records(tmp_path)
    shutil.rmtree(tmp_path / "runs" / "grid" / "m_iid_c10_0.464_0")
    spec = {"kind": "rounds", "reference": "reference.yaml", "chosen_by": ["runs/grid"]}
    lines = block_lines(tmp_path, page, spec | {"records": ["runs/seeds"]}, "b")
    assert lines[2].split(" | ")[3] == "0.1"
    assert lines[3].split(" | ")[3] == "0.2 (search unfinished)"


def test_a_finding_is_a_band_of_ratios_of_rounds_decided_seed_by_seed(tmp_path: Path) -> None:
    """The baseline over the other cell: 4, 4 and 5 times, its interval within [2, ∞): the claim
    "several times fewer rounds" holds; within (-∞, 2] it would be refuted."""
    page = records(tmp_path)
    for band, verdict in (([2, None], "reproduced"), ([None, 2], "refuted")):
        finding = {"claim": "fewer", "band": band, "pairs": [["m_iid_c0", "m_iid_c10"]]}
        reference = {"table": TABLE, "findings": {"f": finding}}
        (tmp_path / "reference.yaml").write_text(yaml.safe_dump(reference))
        spec = {"kind": "findings", "reference": "reference.yaml", "chosen_by": ["runs/grid"]}
        [*_, row] = block_lines(tmp_path, page, spec | {"records": ["runs/seeds"]}, "b")
        inside = "yes" if verdict == "reproduced" else "no"
        assert row.startswith(f"| fewer | m_iid_c0 / m_iid_c10 | 4.0× ({inside}) | 4.3× [")
        assert row.endswith(f"| {verdict} |")


def test_the_rounds_block_draws_its_cells_running_best_curves_beside_the_page(
    tmp_path: Path,
) -> None:
    page = records(tmp_path)
    spec = {"kind": "rounds", "reference": "reference.yaml", "curves": "table.png"}
    spec |= {"records": ["runs/seeds"], "chosen_by": ["runs/grid"]}
    lines = block_lines(tmp_path, page, spec, "b")
    assert lines[:2] == ["![table.png](table.png)", ""]
    assert (tmp_path / "table.png").read_bytes().startswith(b"\x89PNG")
    assert running_best_of(tmp_path / "one", [0.5, 0.7, 0.6, 0.9]) == (
        [1.0, 2.0, 3.0, 4.0],
        [0.5, 0.7, 0.7, 0.9],
    )


def running_best_of(sweep: Path, curve: list[float]) -> tuple[list[float], list[float]]:
    """running_best of a job whose test accuracy is `curve` round by round."""
    summary = {"seed": 0, "target_accuracy": TARGET, "final_accuracy": curve[-1]}
    write_job(sweep, "job", [f"+{KEY}=m_iid_c0", "optim.lr=0.1"], None, summary, curve)
    [job] = jobs_of([sweep])
    return running_best(job)


def test_the_cost_block_times_each_cell_and_estimates_one_run_at_the_published_rounds(
    tmp_path: Path,
) -> None:
    """A round of 4 clients took 2 s (0.5 s a client): the cell of 1 client a round at its
    published 100 rounds is estimated at 100 × 1 × 0.5 s."""
    (tmp_path / "reference.yaml").write_text(
        yaml.safe_dump({"table": TABLE | {"clients": {"c0": 1, "c10": 4}}})
    )
    overrides = [f"+{KEY}=m_iid_c10", "optim.lr=0.1", "seed=0"]
    summary = {"seed": 0, "target_accuracy": TARGET, "rounds": 10, "wall_seconds": 20.0}
    write_job(tmp_path / "runs" / "all", "a", overrides, None, summary, [0.5] * 10)
    lines_of = (tmp_path / "runs" / "all" / "a" / "metrics.csv").read_text().splitlines()
    rows = [lines_of[0] + ",participants", *(line + ",4" for line in lines_of[1:])]
    (tmp_path / "runs" / "all" / "a" / "metrics.csv").write_text("\n".join(rows) + "\n")
    page = Page(directory=Path("."), reports={".": ("runs/all",)})
    spec = {"kind": "cost", "reference": "reference.yaml", "records": ["runs/all"]}
    lines = block_lines(tmp_path, page, spec, "b")
    assert lines[2] == f"| M, IID | 0.0 | 0 | — | — | {100 * 1 * 0.5 / 3600:.2f} |"
    assert lines[3] == f"| M, IID | 0.1 | 1 | 2.00 | {20 / 3600:.1f} | {25 * 4 * 0.5 / 3600:.2f} |"
    assert lines[-1] == f"All the records' runs: 1 run, {20 / 3600:.1f} hours of one thread each."


def test_the_protocols_block_sets_the_rate_a_validation_split_picks_beside_the_test_sets(
    tmp_path: Path,
) -> None:
    """The grid on the test set picks 0.2 for the second cell; on a validation split 0.1 wins:
    its seeds (30, 30, 36 rounds) over the test-chosen rate's (20, 25, 25), seed by seed."""
    page = records(tmp_path)
    valgrid, seeds = tmp_path / "runs" / "valgrid", tmp_path / "runs" / "seeds"
    run(valgrid, "m_iid_c10", "0.1", 0, 15)
    run(valgrid, "m_iid_c10", "0.2", 0, 18)
    run(valgrid, "m_iid_c10", "0.0464", 0, 19)
    for seed, rounds in enumerate((30, 30, 36)):
        run(seeds, "m_iid_c10", "0.1", seed, rounds)
    spec = {"kind": "protocols", "reference": "reference.yaml", "columns": ["c10"]}
    spec |= {"records": ["runs/seeds"], "chosen_by": ["runs/grid"], "honest_by": ["runs/valgrid"]}
    [*_, row] = block_lines(tmp_path, page, spec, "b")
    cells = row.split(" | ")
    assert cells[1:4] == ["0.1", "25", "0.2"] and cells[5:7] == ["0.1", "30.0 / 30.0 / 36.0"]
    ratios = [math.log(30 / 20), math.log(30 / 25), math.log(36 / 25)]
    low, high = t_bounds(ratios)
    assert cells[8] == f"{math.exp(sum(ratios) / 3):.1f}× [{low:.1f}, {high:.1f}] |"


def test_the_variants_block_decides_each_way_of_running_a_cell_against_the_paper(
    tmp_path: Path,
) -> None:
    """The cell as run (20, 25, 25: inside ×1.5 of 25), with a setting changed (50 rounds every
    seed: twice the first row's, outside the band), the changed runs read off another metric
    (the summary's first round at the target, here 49) and a rate of the grid that stopped short
    of it."""
    page = records(tmp_path)
    for seed in range(3):
        overrides = [f"+{KEY}=m_iid_c10", "optim.lr=0.2", f"seed={seed}"]
        summary = {"seed": seed, "target_accuracy": TARGET, "rounds_to_target": 49}
        write_job(tmp_path / "runs" / "other", f"{seed}", overrides, None, summary, reaching(50))
    variants = [
        {"label": "as run", "records": ["runs/seeds"]},
        {"label": "changed", "records": ["runs/other"]},
        {"label": "raw", "records": ["runs/other"], "metric": "rounds_to_target"},
        {"label": "rate 0.1", "records": ["runs/grid"], "rate": "0.1"},
    ]
    spec = {"kind": "variants", "reference": "reference.yaml", "cell": "m_iid_c10"}
    spec |= {"chosen_by": ["runs/grid"], "variants": variants}
    lines = block_lines(tmp_path, page, spec, "b")
    logs = [math.log(r) for r in (20, 25, 25)]
    low, high = t_bounds(logs)
    mean = f"{math.exp(sum(logs) / 3):.0f} [{low:.0f}, {high:.0f}]"
    assert lines[2] == f"| as run | 0.2 | 20.0 / 25.0 / 25.0 | {mean} | — | reproduced |"
    assert lines[3].startswith("| changed | 0.2 | 50.0 / 50.0 / 50.0 | 50 [50, 50] | 0.5× [")
    assert lines[3].endswith("| refuted: more rounds |")
    assert lines[4].startswith("| raw | 0.2 | 49.0 / 49.0 / 49.0 | 49 [49, 49] |")
    # stopped at 30, inside the band's top (37.5): it may yet have got there within it
    assert lines[5] == "| rate 0.1 | 0.1 | >30.0 | 0/1 reached (>30) | censored | inconclusive |"


def test_a_cell_without_a_grid_borrows_anothers_rate_and_says_so(tmp_path: Path) -> None:
    """A cell too costly for a grid runs at the rate another cell's grid chose; once it has a
    grid of its own, borrowing is refused in one line."""
    page = records(tmp_path)
    table = TABLE | {"cells": TABLE["cells"] | {"m_iid_c100": 20}}
    table["columns"] = TABLE["columns"] | {"c100": "1.0"}
    (tmp_path / "reference.yaml").write_text(yaml.safe_dump({"table": table}))
    run(tmp_path / "runs" / "seeds", "m_iid_c100", "0.2", 0, 18)
    spec = {"kind": "rounds", "reference": "reference.yaml", "chosen_by": ["runs/grid"]}
    spec |= {"records": ["runs/seeds"], "borrowed": {"m_iid_c100": "m_iid_c10"}}
    row = block_lines(tmp_path, page, spec, "b")[4].split(" | ")
    assert row[1:5] == ["1.0", "20 (5.0×)", "0.2 (as m_iid_c10)", "18.0"]
    run(tmp_path / "runs" / "grid", "m_iid_c100", "0.1", 0, 25)
    with pytest.raises(ReportError, match="m_iid_c100 has a grid of its own"):
        block_lines(tmp_path, page, spec, "b")
