"""The `pilot` results block (scripts/pilot_blocks.py): contests read off full-length records, the
pilot's pick at ⌈fraction · R⌉ against the end's winner, and the exact interval of the share."""

import csv
from pathlib import Path

import pytest
import yaml

from fedlight.reports.model import ReportError
from scripts.pilot_blocks import clopper_pearson, pilot_lines
from tests.reports.test_report import write_job

KEY = "experiment/demo"


def run(sweep: Path, method: str, seed: int, curve: list[float], diverged: int | None = None):
    summary = {"seed": seed, "final_accuracy": curve[-1], "diverged_at_round": diverged}
    write_job(sweep, f"{method}_{seed}", [f"+{KEY}={method}", f"seed={seed}"], None, summary, curve)


def block(tmp_path: Path, fraction: float = 0.05) -> dict:
    (tmp_path / "ref.yaml").write_text(yaml.safe_dump({"pilot": {"fraction": fraction}}))
    source = {"label": "demo", "records": ["runs"], "method": KEY, "setting": []}
    return {"kind": "pilot", "section": "pilot", "sources": [source]}


def test_the_pilot_reads_its_round_and_the_end_its_last_ten_and_a_diverged_run_loses(
    tmp_path: Path,
) -> None:
    """R = 40: the pilot reads round 2. Seed 0: a leads at round 2 and at the end (agree). Seed
    1: b leads at round 2, a at the end (disagree). Seed 2: c leads at round 2 and then diverges
    at round 30; b wins (disagree)."""
    runs = tmp_path / "runs"
    high = [0.1, 0.5] + [0.9] * 38
    run(runs, "a", 0, high)
    run(runs, "b", 0, [0.1, 0.4] + [0.95] * 28 + [0.8] * 10)  # ahead until its last ten
    run(runs, "a", 1, [0.1, 0.3] + [0.9] * 38)
    run(runs, "b", 1, high[:2] + [0.5] * 38)
    run(runs, "b", 2, [0.1, 0.2] + [0.6] * 38)
    run(runs, "c", 2, [0.1, 0.7] + [0.99] * 28, diverged=30)
    lines = pilot_lines(tmp_path, block(tmp_path), tmp_path / "ref.yaml")
    rows = [line.split(" | ") for line in lines[2:5]]
    assert [(r[2], r[3], r[4], r[5], r[7]) for r in rows] == [
        ("0", "2 of 40", "a", "a", "yes |"),
        ("1", "2 of 40", "b", "a", "no |"),
        ("2", "2 of 40", "c", "b", "no |"),
    ]
    assert rows[0][6] == "10.0" and rows[2][6] == "others diverged"
    ci_low, ci_high = clopper_pearson(1, 3)
    assert f"1 of 3 contests (33%, 95% CI {100 * ci_low:.0f}–{100 * ci_high:.0f}%" in lines[-1]
    assert "a pick at random would agree in 50%" in lines[-1] and "inconclusive" in lines[-1]


def test_the_exact_interval_of_a_share() -> None:
    """Clopper–Pearson at the edges has closed forms: k = 0 gives [0, 1 − 0.025^(1/n)] and
    k = n gives [0.025^(1/n), 1]."""
    for n in (1, 3, 10):
        assert clopper_pearson(0, n) == (0.0, pytest.approx(1 - 0.025 ** (1 / n), rel=1e-9))
        assert clopper_pearson(n, n) == (pytest.approx(0.025 ** (1 / n), rel=1e-9), 1.0)


def test_a_record_whose_rate_changes_is_not_a_pilot_and_unequal_rounds_are_refused(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    run(runs, "a", 0, [0.5] * 20)
    run(runs, "b", 0, [0.5] * 10)
    with pytest.raises(ReportError, match="ran 10 rounds, its contest 20"):
        pilot_lines(tmp_path, block(tmp_path), tmp_path / "ref.yaml")
    run(runs, "b", 1, [0.5] * 20)
    run(runs, "a", 1, [0.5] * 20)
    metrics = runs / "a_1" / "metrics.csv"
    with metrics.open(newline="") as f:
        rows = list(csv.DictReader(f))
    rows[-1]["lr"] = "0.01"  # a schedule over R: its first rounds are not a shorter run's
    with metrics.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (runs / "b_0").rename(tmp_path / "moved")
    with pytest.raises(ReportError, match="learning rate changes over the rounds"):
        pilot_lines(tmp_path, block(tmp_path), tmp_path / "ref.yaml")


def test_a_contest_of_fewer_than_ten_evaluations_has_no_last_ten_mean(tmp_path: Path) -> None:
    """The end's score is the pages' last10_accuracy, which a run of 8 evaluated rounds does not
    have (averaging its 8 would be another statistic)."""
    runs = tmp_path / "runs"
    run(runs, "a", 0, [0.5] * 8)
    run(runs, "b", 0, [0.6] * 8)
    with pytest.raises(ReportError, match="8 evaluated rounds, fewer than 10"):
        pilot_lines(tmp_path, block(tmp_path), tmp_path / "ref.yaml")
