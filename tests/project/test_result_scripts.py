"""The results pages' table script scripts/tuned_vs_untuned.py (tuned beside untuned), on a
hand-made sweep. (A `beside` block's table is fedlight.reports.verdict_tables.beside_table, tested
in tests/reports/test_statistics.py.)"""

import json
import sys
from pathlib import Path

import pytest
import yaml

from scripts import tuned_vs_untuned


def job(directory: Path, overrides: list[str], summary: dict) -> None:
    (directory / ".hydra").mkdir(parents=True)
    (directory / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (directory / "summary.json").write_text(json.dumps(summary))


def test_the_table_puts_each_tuned_algorithm_beside_its_untuned_seeds(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    untuned, study = tmp_path / "untuned", tmp_path / "fedavg"
    for index, (algo, seed, final) in enumerate(
        [("fedavg", 0, 0.80), ("fedavg", 1, 0.82), ("scaffold", 0, 0.7), ("scaffold", 1, 0.1)]
    ):
        summary = {"final_accuracy": final, "test_accuracy_at_best": final - 0.01}
        if final < 0.5:
            summary |= {"diverged_at_round": 3, "final_accuracy": None}
        job(untuned / str(index), [f"algo={algo}", f"seed={seed}"], summary)
    task = ["+experiment/tuning=x", "+experiment/tune=fedavg", "optim.momentum=choice(0.0,0.9)"]
    study.mkdir()
    record = {"hydra": {"overrides": {"task": task, "hydra": []}}}  # as Hydra writes it
    (study / "multirun.yaml").write_text(yaml.safe_dump(record))
    results = {"best_params": {"optim.lr": 0.05912345, "optim.momentum": 0.5}, "best_value": 0.847}
    (study / "optimization_results.yaml").write_text(yaml.safe_dump(results))
    for seed, final in enumerate([0.84, 0.86]):
        overrides = ["algo=fedavg", "optim.lr=0.05912345", "optim.momentum=0.5", f"seed={seed}"]
        job(study / "tested" / str(seed), overrides, {"final_accuracy": final})
    monkeypatch.setattr(sys, "argv", ["tuned_vs_untuned", str(untuned), str(study)])
    tuned_vs_untuned.main()
    header, _, row = capsys.readouterr().out.splitlines()
    assert header.startswith("| algorithm | untuned: final test |")
    assert row.split(" | ") == [
        "| FedAvg",
        "81.0 ± 1.4",
        "80.0 ± 1.4",
        "`optim.lr=0.0591`, `optim.momentum=0.5` (val 84.7)",
        "85.0 ± 1.4",
        "—",  # the tested jobs evaluated the test set only at the end: no test at the best round
        "+4.0 |",
    ]
