"""scripts/rate_grid.py: each cell's learning rate found the way McMahan et al. 2017 tune theirs
(a line search on the grid 10^(k/3) until the best is bracketed), the runs that can no longer be
chosen cut at the best's rounds, then seeds at the best rate."""

from pathlib import Path

import pytest

from fedlight.reports.stats import Censored
from scripts.rate_grid import Item, Plan, Run, main, next_rate, rate_of, starts
from tests.reports.test_report import write_job

CELL = "2nn_iid_b10_c10"
GROUP = "experiment/mcmahan2017_table1"


def tried(*rates: tuple[float, float | None]) -> list[Run]:
    """Seed-0 grid runs: (rate, rounds it reached the target in; None: it never did in 500)."""
    return [
        Run(CELL, f"{rate:g}", 0, "grid", Censored(500, False) if r is None else Censored(r, True))
        for rate, r in rates
    ]


def test_the_grid_is_ten_to_the_k_thirds_to_three_digits() -> None:
    assert [rate_of(k) for k in (-4, -3, -2, -1, 0, 1)] == [0.0464, 0.1, 0.215, 0.464, 1.0, 2.15]


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ((), (0.215, 174)),  # the centre first, at the cell's own rounds
        (((0.215, 42.0),), (0.464, 42)),  # then the larger neighbour, cut at the best's rounds
        (((0.215, 42.0), (0.464, 45.0)), (0.1, 42)),  # then the smaller one
        (((0.215, 42.0), (0.464, 45.0), (0.1, 60.0)), None),  # bracketed: done
        (((0.215, 42.0), (0.464, 40.5), (0.1, 60.0)), (1.0, 41)),  # the best moved: go on
        (((0.215, None),), (0.464, 174)),  # nothing reached: widen, larger rates first
        (((0.215, None), (0.464, None)), (0.1, 174)),
    ],
)
def test_a_line_search_steps_to_the_untried_neighbour_of_the_best(
    runs: tuple, expected: tuple[float, int] | None
) -> None:
    item = Item("grid", "grid", CELL, 0.215, (0, 1, 2))
    assert next_rate(item, tried(*runs), cap=174) == expected


def test_once_bracketed_the_seeds_run_at_the_best_rate_at_the_cells_own_rounds() -> None:
    item = Item("grid", "grid", CELL, 0.215, (0, 1, 2))
    runs = tried((0.215, 42.0), (0.464, 45.0), (0.1, 60.0))
    runs.append(Run(CELL, "0.215", 1, "seeds", Censored(37.0, True)))
    assert [(s.stage, s.rate, s.seed, s.rounds) for s in starts(item, runs, 174)] == [
        ("seeds", "0.215", 0, None),
        ("seeds", "0.215", 2, None),
    ]
    extra = Item("extra", "why", CELL, 0.215, (0, 1), ("data.normalize=true",))
    assert [(s.stage, s.seed, s.overrides) for s in starts(extra, runs, 174)] == [
        ("why", 0, ("data.normalize=true",)),
        ("why", 1, ("data.normalize=true",)),
    ]


def test_a_plan_names_its_preset_and_group_and_a_bad_line_is_one_line(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(
        "preset mcmahan2017_table1\ngroup experiment/mcmahan2017_table1\n"
        f"grid {CELL} 0.215 0,1,2  # a comment\nextra why {CELL} 0.215 0 data.normalize=true\n"
    )
    read = Plan.read(plan)
    assert (read.preset, read.group) == ("mcmahan2017_table1", "experiment/mcmahan2017_table1")
    assert read.items[0] == Item("grid", "grid", CELL, 0.215, (0, 1, 2))
    plan.write_text("preset p\ngroup g\ngrid only_a_cell\n")
    with pytest.raises(SystemExit, match=r"plan.txt:3: `grid only_a_cell` is no plan line"):
        Plan.read(plan)


def test_the_plan_of_the_mcmahan_page_is_a_plan_of_its_cells() -> None:
    plan = Plan.read(Path(__file__).parents[2] / "docs/results/mcmahan2017/plan.txt")
    cells = {item.cell for item in plan.items}
    assert plan.group == "experiment/mcmahan2017_table1" and CELL in cells


def test_a_dry_run_reads_the_records_and_prints_the_runs_that_would_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A grid run of the records (a Hydra sweep named grid_*) reached the target at round 42:
    the next rate is cut at 42 rounds; the seeds wait for the search."""
    plan = tmp_path / "plan.txt"
    plan.write_text(f"preset mcmahan2017_table1\ngroup {GROUP}\ngrid {CELL} 0.215 0,1,2\n")
    overrides = [f"+{GROUP}={CELL}", "optim.lr=0.215", "seed=0"]
    summary = {"seed": 0, "target_accuracy": 0.97, "final_accuracy": 0.97}
    write_job(tmp_path / "records" / "grid_a", "0", overrides, None, summary, [0.5] * 41 + [0.97])
    out = tmp_path / "out"
    assert (
        main(
            [
                str(plan),
                "--out",
                str(out),
                "--records",
                str(tmp_path / "records"),
                "--dry-run",
                "--",
                "data.root=data",
            ]
        )
        == 0
    )
    [line] = capsys.readouterr().out.splitlines()
    assert line == (
        f"+{GROUP}={CELL} +experiment=mcmahan2017_table1 optim.lr=0.464 seed=0 fl.rounds=42 "
        f"data.root=data resume=auto hydra.run.dir={out}/grid/{CELL}/lr0.464_s0"
    )


def test_each_cell_yaml_names_the_rate_its_grid_chose_else_its_plans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cell whose grid bracketed its best names it; a cell whose search goes on names its
    best so far, and says so; a cell with no rate that reached the target names its grid's
    centre; one with extra runs only, their rate; one the plan leaves out keeps its own."""
    import scripts.rate_grid as rate_grid

    cells = tmp_path / GROUP
    cells.mkdir(parents=True)
    for name in ("a", "b", "c", "d", "e"):
        (cells / f"{name}.yaml").write_text("fl:\n  rounds: 9\noptim:\n  lr: 0.1  # old\n")
    monkeypatch.setattr(rate_grid, "CONF_DIR", str(tmp_path))
    plan = Plan(
        "p", GROUP, [Item("grid", "grid", "a", 0.215, (0,)), Item("grid", "grid", "b", 1.0, ())]
    )
    plan.items.append(Item("grid", "grid", "e", 0.215, (0,)))
    plan.items.append(Item("extra", "single", "c", 0.464, (0,)))
    # a: 0.1 the best, both its neighbours on the grid tried (bracketed); e: one rate so far
    tried = (("0.215", 9), ("0.1", 7), ("0.0464", 8))
    runs = [Run("a", r, 0, "grid", Censored(n, True)) for r, n in tried]
    runs.append(Run("e", "0.215", 0, "grid", Censored(9, True)))
    assert rate_grid.write_cells(plan, runs, check=True) == ["a", "b", "c", "d", "e"]
    assert (cells / "a.yaml").read_text().endswith("lr: 0.1  # old\n")  # a check writes nothing
    rate_grid.write_cells(plan, runs, check=False)
    lines = {n: (cells / f"{n}.yaml").read_text().splitlines()[-1] for n in "abcde"}
    assert lines["a"] == "  lr: 0.1  # the rate seed 0's grid chose (the page's learning-rate grid)"
    assert lines["b"] == "  lr: 1  # the centre of its grid, which has not chosen yet (plan.txt)"
    assert lines["c"] == "  lr: 0.464  # no grid of its own: the rate of its runs in plan.txt"
    assert lines["d"] == "  lr: 0.1  # not run on the page: tune it (plan.txt)"
    assert (
        lines["e"]
        == "  lr: 0.215  # the best so far of seed 0's grid, whose search goes on (plan.txt)"
    )
    assert rate_grid.write_cells(plan, runs, check=True) == []


def test_the_mcmahan_cells_name_the_rates_of_the_committed_records() -> None:
    """Each preset cell's `optim.lr` is what its committed records chose (`--cells check`)."""
    plan = "docs/results/mcmahan2017/plan.txt"
    records = "docs/results/mcmahan2017/runs"
    assert main([plan, "--records", records, "--cells", "check"]) == 0
