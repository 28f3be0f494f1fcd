"""`objective` names a summary.json number or any column the run logs (issue 54, item 4): its
last logged value is kept in summary.json and returned; a name the run does not log stops it
after its first evaluated round, in one line, the round's row kept."""

import csv
import json
from pathlib import Path

import pytest

from fedlight.core.errors import ConfigError
from fedlight.runs.objective import ObjectiveCheck, objective_summary
from tests.conftest import TINY, run_cli


def test_a_column_objective_is_its_last_logged_value() -> None:
    rows = [
        {"round": 1, "test_loss": 2.0, "mse": 0.5},
        {"round": 2, "train_loss": 1.0},
        {"round": 3, "test_loss": 1.5, "mse": 0.25},
        {"round": 4, "train_loss": 0.5},
    ]
    assert objective_summary(rows, "mse", {"final_accuracy": 0.1}) == {"mse": 0.25}
    assert objective_summary(rows, "final_accuracy", {"final_accuracy": 0.1}) == {}
    assert objective_summary(rows, "nowhere", {}) == {}


def test_the_check_waits_for_an_evaluated_round() -> None:
    check = ObjectiveCheck("mse")
    check.log_round({"round": 1, "train_loss": 1.0})  # not evaluated: nothing to judge by
    check.log_round({"round": 2, "test_accuracy": 0.5, "mse": 0.3})
    check.log_round({"round": 3, "test_accuracy": 0.5})  # checked once
    ObjectiveCheck("final_accuracy").log_round({"round": 1, "test_accuracy": 0.5})
    with pytest.raises(ConfigError, match=r"^objective=acc is neither .* column: round, tes"):
        ObjectiveCheck("acc").log_round({"round": 1, "test_accuracy": 0.5, "test_loss": 2.0})


def test_a_logged_column_is_the_objective_through_the_cli(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_cli(*TINY, "fl.rounds=2", "objective=test_loss", f"hydra.run.dir={run}", cwd=tmp_path)
    with (run / "metrics.csv").open() as f:
        last = list(csv.DictReader(f))[-1]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["test_loss"] == float(last["test_loss"])

    typo = tmp_path / "typo"
    args = [*TINY, "fl.rounds=3", "objective=accuracy", f"hydra.run.dir={typo}"]
    result = run_cli(*args, "fl.workers=1", cwd=tmp_path, check=False)
    assert result.returncode == 2
    error = [line for line in result.stderr.splitlines() if line.startswith("fedlight: error")]
    assert error == [error[0]] and "objective=accuracy is neither a summary.json" in error[0]
    with (typo / "metrics.csv").open() as f:
        assert [row["round"] for row in csv.DictReader(f)] == ["1"]
