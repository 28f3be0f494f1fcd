"""eval.stop_at_target and local.batch_size=null (B = ∞): what McMahan et al.'s Table 1 needs."""

import csv
import json
from pathlib import Path

import pytest
import torch

from fedlight.core.errors import ConfigError
from fedlight.core.settings import EvalSettings, LocalSettings
from fedlight.engines.base import batch_indices, num_local_steps
from tests.conftest import TINY, run_cli


def test_a_null_batch_size_is_one_batch_of_all_a_clients_examples_per_epoch() -> None:
    indices = torch.arange(100, 137)
    batches = list(batch_indices(indices, torch.Generator().manual_seed(0), 3, None))
    assert [len(b) for b in batches] == [37, 37, 37]
    assert all(sorted(b.tolist()) == indices.tolist() for b in batches)
    assert num_local_steps(37, 3, None) == 3
    assert num_local_steps(0, 3, None) == 0
    assert num_local_steps(37, 3, 10) == 12
    assert list(batch_indices(indices[:0], torch.Generator(), 3, None)) == []


def test_bad_settings_are_refused_in_one_line_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"local.batch_size=0 must be >= 1 \(null"):
        LocalSettings(batch_size=0)
    with pytest.raises(ConfigError, match=r"needs eval\.target_accuracy"):
        EvalSettings(stop_at_target=True)
    with pytest.raises(ConfigError, match=r"use eval\.test=every_round"):
        EvalSettings(stop_at_target=True, target_accuracy=0.5, test="final", split="validation")


def rounds_logged(run: Path) -> list[float]:
    with (run / "metrics.csv").open() as f:
        return [float(row["test_accuracy"]) for row in csv.DictReader(f)]


def test_a_run_ends_at_the_first_round_reaching_its_target_and_a_resume_adds_none(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    args = [*TINY, "fl.rounds=30", "local.batch_size=null", "optim.lr=0.5", f"hydra.run.dir={run}"]
    free = tmp_path / "free"
    run_cli(*args[:-1], f"hydra.run.dir={free}", cwd=tmp_path)
    curve = rounds_logged(free)
    # the median accuracy of the run that went on: first reached by its 16th round
    target = sorted(curve)[len(curve) // 2]
    first = next(i for i, accuracy in enumerate(curve, 1) if accuracy >= target)
    stop = [f"eval.target_accuracy={target}", "eval.stop_at_target=true"]
    run_cli(*args, *stop, cwd=tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == summary["rounds_to_target"] == first <= 16
    assert "eval.stop_at_target: round" in summary["stopped"]
    assert rounds_logged(run) == curve[:first]  # the same rounds as the run that went on
    again = run_cli(*args, *stop, "resume=auto", cwd=tmp_path)
    assert "finished" in again.stdout + again.stderr
    assert rounds_logged(run) == curve[:first]
