"""The statistics of `fedlight report` and the one verdict rule, on constructed records: 95%
intervals, censored times to a target, the stable metrics, McMahan et al.'s interpolated reading,
paired differences, verdicts with the seeds that would decide them, and the commands that add
those seeds (run for real on digits)."""

import csv
import json
import math
import shlex
from pathlib import Path

import pytest

from fedlight.reports.cli import main
from fedlight.reports.computed import crossing, first_reaching
from fedlight.reports.stats import (
    Censored,
    bootstrap_interval,
    kaplan_meier_median,
    t_interval,
)
from fedlight.reports.verdict_tables import beside_table
from fedlight.reports.verdicts import Outcome, decide, decide_rounds, seeds_to_decide
from tests.conftest import REPO, TINY, run_cli
from tests.reports.test_report import read_report_csv, summary_of, write_job, write_multirun

T_975_2 = 4.302652729749464  # Student's t, 97.5th percentile, 2 degrees of freedom (tables)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------ intervals and rule


def test_the_t_interval_is_mean_plus_minus_t_times_the_standard_error() -> None:
    found = t_interval([70.0, 71.0, 72.0])
    assert (found.n, found.mean, found.std) == (3, 71.0, 1.0)
    assert found.high - 71.0 == pytest.approx(T_975_2 / math.sqrt(3))
    assert found.low == pytest.approx(2 * 71.0 - found.high)
    assert t_interval([70.0]).low is None  # one seed: no interval


def test_the_bootstrap_interval_is_seeded_and_within_the_values() -> None:
    values = [0.1, 0.4, 0.35, 0.8, 0.5]
    first, again = bootstrap_interval(values), bootstrap_interval(values)
    assert first == again
    assert min(values) <= first.low < first.mean < first.high <= max(values)


def test_a_ci_inside_the_band_reproduces_outside_refutes_across_is_inconclusive() -> None:
    inside = decide(t_interval([70.0, 71.0, 72.0]), 71.0, 3.0, "final_accuracy")
    assert inside.outcome is Outcome.REPRODUCED and inside.metric == "final_accuracy"
    assert inside.band == (68.0, 74.0)
    outside = decide(t_interval([60.0, 61.0, 62.0]), 71.0, 2.0, "final_accuracy")
    assert outside.outcome is Outcome.REFUTED
    # mean 71, std 2: t(0.975, n − 1) · 2 / √n ≤ 2 first at n = 7 (2.447 / √7 = 0.925)
    across = decide(t_interval([69.0, 71.0, 73.0]), 71.0, 2.0, "final_accuracy")
    assert across.outcome is Outcome.INCONCLUSIVE
    assert (across.seeds_needed, across.more_seeds) == (7, 4)
    assert "t-based" in across.reason


def test_an_undecidable_cell_says_why_rather_than_a_seed_count() -> None:
    one = decide(t_interval([70.0]), 71.0, 2.0, "best_accuracy")
    assert one.outcome is Outcome.INCONCLUSIVE and one.seeds_needed == 3
    assert "one seed" in one.reason
    # a mean exactly on the band's edge is never decided, whatever the seeds
    assert seeds_to_decide(73.0, 2.0, 71.0, 2.0) is None
    edge = decide(t_interval([71.0, 73.0, 75.0]), 71.0, 2.0, "best_accuracy")
    assert edge.seeds_needed is None and "no number of seeds" in edge.reason


def test_rounds_are_decided_on_log_rounds_within_a_factor() -> None:
    reached = [Censored(r, True) for r in (100.0, 110.0, 121.0)]  # logs evenly spaced
    verdict = decide_rounds(reached, 110.0, 1.5, "rounds_to_target")
    assert verdict.outcome is Outcome.REPRODUCED
    assert verdict.band == pytest.approx((110 / 1.5, 165.0))
    assert verdict.low * verdict.high == pytest.approx(110.0**2)  # symmetric on the log scale
    assert decide_rounds(reached, 300.0, 1.5, "rounds_to_target").outcome is Outcome.REFUTED


def test_censored_rounds_give_no_interval_unless_every_seed_ran_past_the_band() -> None:
    some = [Censored(90.0, True), Censored(200.0, False), Censored(95.0, True)]
    verdict = decide_rounds(some, 100.0, 1.5, "rounds_to_target")
    assert verdict.outcome is Outcome.INCONCLUSIVE and verdict.low is None
    assert verdict.seeds_needed is None and "1 of 3 seeds never reached" in verdict.reason
    beyond = [Censored(300.0, False)] * 3
    assert decide_rounds(beyond, 100.0, 1.5, "rounds_to_target").outcome is Outcome.REFUTED
    short = [Censored(120.0, False)] * 3  # stopped inside the band: nothing known
    assert decide_rounds(short, 100.0, 1.5, "rounds_to_target").outcome is Outcome.INCONCLUSIVE


# ---------------------------------------------------------------------- censoring and curves


def test_the_kaplan_meier_median_never_averages_a_censored_seed() -> None:
    reached = [Censored(v, True) for v in (30.0, 40.0, 50.0)]
    assert kaplan_meier_median(reached) == 40.0
    assert kaplan_meier_median(reached[:2]) == 35.0  # no censoring: the sample median
    assert kaplan_meier_median([*reached[:2], Censored(100.0, False)]) == 40.0
    assert kaplan_meier_median([reached[0], Censored(100.0, False)]) is None
    # a seed censored early leaves the risk set: 10, >15, 20, 30 -> S(20) = 0.75 · 1/2
    early = [
        Censored(10.0, True),
        Censored(15.0, False),
        Censored(20.0, True),
        Censored(30.0, True),
    ]
    assert kaplan_meier_median(early) == 20.0


def test_mcmahans_reading_interpolates_the_running_best_curve() -> None:
    """Rounds 1-4 at 90, 95, 94, 98%: the running best is 90, 95, 95, 98, and crosses 97% two
    thirds of the way from round 3 to round 4."""
    points = [(1.0, 0.90), (2.0, 0.95), (3.0, 0.94), (4.0, 0.98)]
    found = crossing(points, 0.97)
    assert found.reached and found.value == pytest.approx(3 + 2 / 3)
    assert first_reaching(points, 0.97) == Censored(4.0, True)
    assert crossing(points, 0.85) == Censored(1.0, True)  # already there at the first evaluation
    assert crossing(points, 0.99) == Censored(4.0, False)  # censored at the last round
    every_other = [(2.0, 0.5), (4.0, 0.7), (6.0, 0.9)]
    assert crossing(every_other, 0.8).value == pytest.approx(5.0)


def stat_sweep(sweep: Path, runs: dict[str, list[list[float]]], **summary: object) -> Path:
    """A sweep of `algo` cells, one job per seed with the given test-accuracy curves."""
    layout = {"rows": ["algo"], "metrics": ["final_accuracy"]}
    number = 0
    for algo, curves in runs.items():
        for seed, curve in enumerate(curves):
            fields = {"algo": algo, "seed": seed, "rounds": len(curve)} | summary
            write_job(
                sweep,
                str(number),
                [f"algo={algo}", f"seed={seed}"],
                layout,
                summary_of(curve[-1], best_accuracy=max(curve), **fields),
                curve,
            )
            number += 1
    write_multirun(sweep, [f"algo={','.join(runs)}", "seed=0,1,2"])
    return sweep


def test_stable_metrics_and_censored_rounds_are_columns_of_report_csv(tmp_path: Path) -> None:
    curves = [[0.2, 0.6, 0.8, 0.8], [0.2, 0.4, 0.6, 0.7], [0.1, 0.2, 0.3, 0.4]]
    sweep = stat_sweep(tmp_path / "sweep", {"fedavg": curves})
    metrics = "final_accuracy,last3_accuracy,accuracy_auc,rounds_to_60,rounds_to_65_interpolated"
    assert main([str(sweep), "--metrics", metrics]) == 0
    row = read_report_csv(sweep)["algo=fedavg"]
    last3 = [0.6 + 0.8 + 0.8, 0.4 + 0.6 + 0.7, 0.2 + 0.3 + 0.4]
    assert float(row["last3_accuracy_mean"]) == pytest.approx(sum(last3) / 9)
    # each seed's trapezoids over rounds 1-4, divided by the 3 rounds they span
    areas = [(0.8 + 1.4 + 1.6) / 2, (0.6 + 1.0 + 1.3) / 2, (0.3 + 0.5 + 0.7) / 2]
    assert float(row["accuracy_auc_mean"]) == pytest.approx(sum(areas) / 3 / 3)
    assert row["last10_accuracy_mean"] == ""  # 4 rounds: no mean of the last 10
    # seeds at 2, 3 and never (censored at 4): 2 reached, median 3, no geometric mean
    assert (row["rounds_to_60_reached"], row["rounds_to_60_median"]) == ("2", "3.0")
    assert row["rounds_to_60_censored_at"] == "4.0" and row["rounds_to_60_geomean"] == ""
    report = (sweep / "report.md").read_text()
    assert "| algo=fedavg | 2 | 3 | >4 | 3 | median 3.0 (2/3 reached) | — |" in report
    seeds = read_csv(sweep / "seeds.csv")
    assert [(r["seed"], r["rounds_to_60"], r["rounds_to_60_censored_at"]) for r in seeds] == [
        ("0", "2.0", ""),
        ("1", "3.0", ""),
        ("2", "", "4.0"),
    ]
    assert float(seeds[0]["rounds_to_65_interpolated"]) == pytest.approx(2 + 0.05 / 0.2)


# --------------------------------------------------------------------- paired and verdicts


PAIRED = {  # large spread between seeds, the same +1, +2, +3 points on every seed
    "fedavg": [[0.3, 0.50], [0.5, 0.70], [0.7, 0.90]],
    "scaffold": [[0.3, 0.51], [0.5, 0.72], [0.7, 0.93]],
}


def test_paired_differences_are_taken_seed_by_seed(tmp_path: Path) -> None:
    """Two cells differing in algo pair without a flag (the later minus the first)."""
    sweep = stat_sweep(tmp_path / "sweep", PAIRED)
    assert main([str(sweep)]) == 0
    (row,) = [r for r in read_csv(sweep / "paired.csv") if r["metric"] == "final_accuracy"]
    assert (row["key"], row["a"], row["b"], row["n"]) == ("algo", "scaffold", "fedavg", "3")
    per_seed = [float(row[f"seed_{s}"]) for s in range(3)]
    assert per_seed == pytest.approx([0.01, 0.02, 0.03])
    assert float(row["mean"]) == pytest.approx(0.02) and float(row["std"]) == pytest.approx(0.01)
    half = T_975_2 * 0.01 / math.sqrt(3)
    assert float(row["ci_low"]) == pytest.approx(0.02 - half)
    report = (sweep / "report.md").read_text()
    assert "### Paired: scaffold − fedavg" in report
    assert "| Final accuracy (%) | +1.0 | +2.0 | +3.0 | 3 | +2.0 ± 1.0 | [-0.5, +4.5] |" in report


def test_a_claimed_difference_is_decided_on_the_paired_interval(tmp_path: Path) -> None:
    """The cells' own intervals (± 50 points) decide nothing; the paired one decides the gap."""
    sweep = stat_sweep(tmp_path / "sweep", PAIRED)
    published = tmp_path / "published.yaml"
    published.write_text(
        "metric: final_accuracy\nwithin: 2\nkeys: [algo]\ncells: {fedavg: 70.0, scaffold: 72}\n"
        "differences:\n"
        "  - {compare: 'algo=scaffold,fedavg', claimed: 2.0, within: 3}\n"
        "  - {compare: 'algo=scaffold,fedavg', claimed: 10.0}\n"
    )
    assert main([str(sweep), "--published", str(published)]) == 0
    rows = read_csv(sweep / "verdicts.csv")
    verdicts = {(r["kind"], r["key"], r["published"]): r["verdict"] for r in rows}
    assert verdicts == {
        ("cell", "fedavg", "70.0"): "inconclusive",
        ("cell", "scaffold", "72.0"): "inconclusive",
        ("difference", "algo=scaffold,fedavg", "2.0"): "reproduced",
        ("difference", "algo=scaffold,fedavg", "10.0"): "refuted",
    }
    cells = [r for r in rows if r["kind"] == "cell"]
    assert all(int(r["more_seeds"]) > 0 for r in cells)
    assert (
        "| scaffold − fedavg | final_accuracy | 3 | [-0.5, +4.5] | +2 | [-1.0, +5.0] | "
        in (sweep / "report.md").read_text()
    )


def test_a_claim_whose_cell_diverged_on_every_seed_plans_no_more_seeds(tmp_path: Path) -> None:
    """Every scaffold seed diverged: no difference to pair, and more seeds of the same setting
    would diverge too, so the verdict says why instead of asking for seeds."""
    sweep = stat_sweep(tmp_path / "sweep", PAIRED)
    for job in ("3", "4", "5"):  # the scaffold seeds
        summary = json.loads((sweep / job / "summary.json").read_text())
        (sweep / job / "summary.json").write_text(json.dumps(summary | {"diverged_at_round": 2}))
    published = tmp_path / "published.yaml"
    published.write_text(
        "metric: final_accuracy\nkeys: [algo]\ncells: {}\n"
        "differences: [{compare: 'algo=scaffold,fedavg', claimed: 2.0}]\n"
    )
    assert main([str(sweep), "--published", str(published)]) == 0
    (row,) = [r for r in read_csv(sweep / "verdicts.csv") if r["kind"] == "difference"]
    assert (row["verdict"], row["seeds_needed"], row["more_seeds"]) == ("inconclusive", "", "")
    assert row["reason"] == "every seed of scaffold diverged: no value to pair"


@pytest.mark.parametrize(
    ("argument", "fragment"),
    [
        (["--compare", "algo"], "--compare algo is not KEY=A,B"),
        (["--compare", "algo=scaffold,local"], "no two cells differ only in algo"),
        (["--published", "missing.yaml"], "--published missing.yaml does not exist"),
    ],
)
def test_bad_statistics_arguments_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argument: list[str], fragment: str
) -> None:
    sweep = stat_sweep(tmp_path / "sweep", PAIRED)
    assert main([str(sweep), *argument]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert fragment in line


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("metric: final_accuracy\nkeys: [algo]\ncells: {fedavg: high}", "cells.fedavg is 'high'"),
        (
            "metric: rounds_to_target\nfactor: 0.5\nkeys: [algo]\ncells: {fedavg: 9}",
            "factor is 0.5",
        ),
        (
            "metric: final_accuracy\nkeys: [algo]\ncells: {fedprox: 70}",
            "which are fedavg, scaffold",
        ),
        ("metric: final_acc\nkeys: [algo]\ncells: {fedavg: 70}", "metric final_acc: no seed"),
        ("metric: final_accuracy\ndifferences: [{compare: algo, claimed: 2}]", "is not KEY=A,B"),
    ],
)
def test_a_published_file_that_cannot_be_decided_on_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, fragment: str
) -> None:
    sweep = stat_sweep(tmp_path / "sweep", PAIRED)
    published = tmp_path / "published.yaml"
    published.write_text(content + "\n")
    assert main([str(sweep), "--published", str(published)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(published) in line and fragment in line


# ------------------------------------------------------------------------------ more seeds


def test_more_seeds_go_to_the_inconclusive_cells_only_and_resume(tmp_path: Path) -> None:
    """A real digits sweep; a published value at the FedAvg cell's mean with a tolerance half its
    interval is inconclusive, the Local one far away is refuted. The printed command adds seeds to
    the FedAvg cell alone; its jobs join the cell in the report, and the same command again
    runs none of them twice."""
    sweep = tmp_path / "sweep"
    run_cli(
        "-m",
        *TINY,
        "fl.rounds=2",
        "algo=fedavg,local",
        "seed=0,1",
        f"hydra.sweep.dir={sweep}",
        cwd=REPO,
    )
    assert main([str(sweep)]) == 0
    rows = read_report_csv(sweep)
    fedavg = rows["algo=fedavg"]
    mean, low, high = (
        100 * float(fedavg[f"final_accuracy_{k}"]) for k in ("mean", "ci_low", "ci_high")
    )
    published = tmp_path / "published.yaml"
    published.write_text(
        f"metric: final_accuracy\nwithin: {(high - low) / 4}\nkeys: [algo]\n"
        f"cells: {{fedavg: {mean}, local: 250}}\n"
    )
    result = run_cli("report", str(sweep), "--published", str(published), "--more-seeds", cwd=REPO)
    lines = result.stdout.splitlines()
    (undecided,) = [line for line in lines if line.startswith("inconclusive: fedavg")]
    needed = int(undecided.split(": ")[2].split()[0])
    (command,) = [line for line in lines if line.startswith("python -m fedlight -m")]
    assert "algo=fedavg" in command and "algo=local" not in command
    assert f"seed=range(2,{needed})" in command and "resume=auto" in command
    arguments = shlex.split(command)[3:]
    run_cli(*arguments, cwd=REPO)
    more = Path(f"{sweep}-more")
    assert main([str(sweep), *map(str, more.iterdir()), "-o", str(tmp_path / "all")]) == 0
    assert read_report_csv(tmp_path / "all")["algo=fedavg"]["n"] == str(needed)
    again = run_cli(*arguments, cwd=REPO)
    assert f"{needed - 2} finished (not run again)" in again.stdout + again.stderr


def test_a_presets_layout_can_carry_the_published_numbers_and_the_interval(tmp_path: Path) -> None:
    """`report: published:` and `ci: bootstrap` in the jobs' layout need no flag; the results
    pages' `beside` block decides the same cells by the same rule."""
    published = {"metric": "final_accuracy", "keys": ["algo"], "cells": {"fedavg": 70.0}}
    layout = {"rows": ["algo"], "metrics": ["final_accuracy"], "ci": "bootstrap"}
    sweep = tmp_path / "sweep"
    for seed, final in enumerate([0.69, 0.70, 0.71]):
        summary = summary_of(final, seed=seed)
        overrides = ["algo=fedavg", f"seed={seed}"]
        write_job(sweep, str(seed), overrides, layout | {"published": published}, summary, [final])
    write_multirun(sweep, ["algo=fedavg", "seed=0,1,2"])
    assert main([str(sweep)]) == 0
    assert read_report_csv(sweep)["algo=fedavg"]["ci"] == "bootstrap"
    (row,) = read_csv(sweep / "verdicts.csv")
    assert (row["key"], row["metric"], row["verdict"]) == ("fedavg", "final_accuracy", "reproduced")
    file = tmp_path / "published.yaml"
    file.write_text("beside:\n  metric: final_accuracy\n  keys: [algo]\n  cells: {fedavg: 80}\n")
    lines = beside_table(file, [sweep], "beside")
    assert lines[0].startswith("Verdicts on final_accuracy against ")
    assert lines[-1].startswith("| fedavg | 3 | 70.0 ± 1.0 | [67.5, 72.5] | 80 | [78.0, 82.0] |")
    assert "| refuted |" in lines[-1]
