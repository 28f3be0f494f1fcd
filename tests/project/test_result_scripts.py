"""The results pages' table scripts: scripts/tuned_vs_untuned.py (tuned beside untuned) and
scripts/beside_published.py (fedlight's cells beside a published table), on hand-made sweeps."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from scripts import beside_published, tuned_vs_untuned


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


def test_each_cell_is_said_reproduced_exceeded_or_missed_beside_the_published_number(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "seed0", tmp_path / "seeds12"
    cells = [  # (sweep, partition, method, seed, best, final)
        (first, "dirichlet", "fedavg", 0, 0.885, 0.884),
        (first, "dirichlet", "scaffold", 0, 0.912, 0.91),
        (first, "label_quantity", "fedavg", 0, 0.72, 0.67),
        (second, "label_quantity", "fedavg", 1, 0.76, 0.75),  # pooled with seed 0's job
        (first, "label_quantity", "fednova", 0, 0.70, 0.69),  # no published number
    ]
    for index, (sweep, partition, method, seed, best, final) in enumerate(cells):
        overrides = [f"+experiment/niid_bench={method}", f"partition={partition}", f"seed={seed}"]
        job(sweep / str(index), overrides, {"best_accuracy": best, "final_accuracy": final})
    published = tmp_path / "published.yaml"
    table = {
        "metric": "best_accuracy",
        "within": 2.0,
        "keys": ["partition", "experiment/niid_bench"],
        "cells": {
            "dirichlet/fedavg": "88.09 ± 0.29",
            "dirichlet/scaffold": "88.44 ± 0.25",
            "label_quantity/fedavg": "78.10 ± 2.51",
        },
    }
    published.write_text(yaml.safe_dump(table, allow_unicode=True))
    argv = ["beside_published", str(published), str(first), str(second)]
    monkeypatch.setattr(sys, "argv", argv)
    beside_published.main()
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [r[0].strip("| ") for r in rows] == [
        "dirichlet/fedavg",
        "dirichlet/scaffold",
        "label_quantity/fedavg",
        "label_quantity/fednova",
    ]
    assert rows[0][1:] == ["88.5", "88.4", "88.09 ± 0.29", "+0.4", "reproduced |"]
    assert rows[1][4:] == ["+2.8", "exceeded |"]
    assert rows[2][1:] == ["74.0 ± 2.8", "71.0 ± 5.7", "78.10 ± 2.51", "-4.1", "missed |"]
    assert rows[3][3:] == ["—", "—", "— |"]


def test_two_cells_of_one_published_key_are_told_apart_by_the_override_between_them(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flower's split with standardized and with [0, 1] pixels: one key, two rows."""
    sweep = tmp_path / "split"
    base = ["+experiment/niid_bench=fedavg", "partition=from_file", "seed=0"]
    job(sweep / "0", base, {"best_accuracy": 0.8126, "final_accuracy": 0.8126})
    job(
        sweep / "1",
        [*base, "data.normalize=false"],
        {"best_accuracy": 0.8108, "final_accuracy": 0.7771},
    )
    published = tmp_path / "published.yaml"
    table = {
        "metric": "best_accuracy",
        "within": 2.0,
        "keys": ["partition", "experiment/niid_bench"],
        "cells": {"from_file/fedavg": "78.10 ± 2.51"},
    }
    published.write_text(yaml.safe_dump(table, allow_unicode=True))
    monkeypatch.setattr(sys, "argv", ["beside_published", str(published), str(sweep)])
    beside_published.main()
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [r[0].strip("| ") for r in rows] == [
        "from_file/fedavg",
        "from_file/fedavg data.normalize=false",
    ]
    assert rows[0][1:] == ["81.3", "81.3", "78.10 ± 2.51", "+3.2", "exceeded |"]
    assert rows[1][1:] == ["81.1", "77.7", "78.10 ± 2.51", "+3.0", "exceeded |"]


def test_a_table_of_final_accuracy_shows_the_final_accuracy_once(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SCAFFOLD tutorial's table compares final accuracy: one column of it, not two."""
    sweep = tmp_path / "a"
    job(sweep / "0", ["+experiment/niid_bench=fedavg", "seed=0"], {"final_accuracy": 0.609})
    published = tmp_path / "published.yaml"
    table = {
        "metric": "final_accuracy",
        "within": 2.0,
        "keys": ["experiment/niid_bench"],
        "cells": {"fedavg": "72.3"},
    }
    published.write_text(yaml.safe_dump(table, allow_unicode=True))
    monkeypatch.setattr(sys, "argv", ["beside_published", str(published), str(sweep)])
    beside_published.main()
    header, _, row = capsys.readouterr().out.splitlines()
    assert header.count("final_accuracy") == 2  # fedlight's and the published one
    assert row.split(" | ")[1:] == ["60.9", "72.3", "-11.4", "missed |"]
