"""End-to-end runs: the real CLI on digits, output files, sweeps, determinism, resume, W&B."""

import csv
import json
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import wandb

from fedlight.data.base import TensorDataset
from fedlight.data.digits import Digits
from fedlight.loggers.base import METRIC_COLUMNS, RunInfo
from fedlight.loggers.wandb import WandbLogger
from fedlight.runs import experiment
from fedlight.runs.experiment import run_job
from fedlight.store.checkpoint import load_checkpoint
from tests.conftest import REPO, TINY, run_cli, run_killed_in_round, without_timings


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def test_cli_run_writes_the_output_contract(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # one worker: client_seconds sums the clients' training over all workers, so only with one
    # is it a part of the round's wall time (without `pytest -n`, auto would take two)
    overrides = ["eval.every=2", "eval.target_accuracy=0.3", "fl.workers=1"]
    result = run_cli(*TINY, *overrides, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert "fedlight: 4 rounds" in result.stdout + result.stderr

    all_rows = read_rows(run_dir)
    assert list(all_rows[0]) == [*METRIC_COLUMNS, "participants", "rejected"]
    assert [int(r["round"]) for r in all_rows] == [1, 2, 3, 4]  # a row per round
    rows = [r for r in all_rows if r["test_accuracy"]]
    assert [int(r["round"]) for r in rows] == [2, 4]  # test metrics where evaluated
    model_bytes = 4 * (64 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10)
    for row in all_rows:
        assert int(row["bytes_up"]) == 4 * model_bytes
        assert int(row["bytes_down"]) == 4 * model_bytes
        assert float(row["lr"]) == 0.05
    for row in rows:
        assert 0 <= float(row["test_accuracy"]) <= 1
    walls = [float(r["wall_seconds"]) for r in all_rows]
    assert walls == sorted(walls) and walls[0] > 0
    # client_seconds: that round's local training only, a part of the round's wall time
    for row, before, wall in zip(all_rows, [0.0, *walls], walls, strict=False):
        assert 0 < float(row["client_seconds"]) < wall - before

    summary = json.loads((run_dir / "summary.json").read_text())
    accuracies = [float(r["test_accuracy"]) for r in rows]
    assert summary["final_accuracy"] == accuracies[-1]
    assert summary["best_accuracy"] == max(accuracies)
    reached = [int(r["round"]) for r in rows if float(r["test_accuracy"]) >= 0.3]
    assert summary["rounds_to_target"] == (reached[0] if reached else None)
    assert summary["comm_mb"] == pytest.approx(4 * 2 * 4 * model_bytes / 1e6)
    assert summary["rounds"] == 4 and summary["seed"] == 0
    assert summary["target_accuracy"] == 0.3
    assert 0 < summary["client_seconds_per_round"] < summary["wall_seconds"] / 4
    assert {k: summary[k] for k in ("algo", "data", "model", "partition")} == {
        "algo": "fedavg",
        "data": "digits",
        "model": "mlp",
        "partition": "iid",
    }
    assert summary["selection"] == "random" and summary["lr_schedule"] == "constant"
    assert summary["logger"] == "csv"

    histogram = json.loads((run_dir / "label_histogram.json").read_text())
    assert len(histogram) == 10 and all(len(counts) == 10 for counts in histogram.values())
    assert sum(map(sum, histogram.values())) == len(Digits().load().train_y)
    for image in ("curves.png", "label_histogram.png"):
        assert (run_dir / image).read_bytes()[:4] == b"\x89PNG"

    # resumed without more rounds, the finished run has nothing to do: said, nothing written
    resumed_dir = tmp_path / "resumed"
    again = run_cli(
        *TINY,
        "eval.every=2",
        "eval.target_accuracy=0.3",
        f"resume={run_dir}",
        f"hydra.run.dir={resumed_dir}",
        cwd=tmp_path,
    )
    assert "nothing to resume" in again.stdout and not resumed_dir.exists()


def test_cli_sweep_runs_every_job_into_the_sweep_dir(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "multirun"
    run_cli(
        "-m",
        *TINY,
        "fl.rounds=2",
        "partition=iid,shards",
        "local.epochs=1,2",
        f"hydra.sweep.dir={sweep_dir}",
        cwd=tmp_path,
    )
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in jobs] == ["0", "1", "2", "3"]
    seen = set()
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        epochs = "2" if "local.epochs=2" in overrides else "1"
        seen.add((summary["partition"], epochs))
        assert len(read_rows(job)) == 2
    assert seen == {("iid", "1"), ("iid", "2"), ("shards", "1"), ("shards", "2")}


def test_cli_bad_setting_exits_with_one_line_and_does_no_work(tmp_path: Path) -> None:
    result = run_cli(
        *TINY, "partition=dirichlet", "partition.alpha=-0.5", cwd=tmp_path, check=False
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "fedlight: error: partition.alpha=-0.5 must be > 0 (e.g. 0.1 or 0.5)"
    ]
    assert not (tmp_path / "outputs").exists()


def test_default_command_runs_from_the_repo_config() -> None:
    assert (REPO / "conf" / "config.yaml").resolve() == (
        REPO / "fedlight" / "conf" / "config.yaml"
    ).resolve()


def test_same_config_and_seed_give_identical_numbers(make_job, tmp_path: Path) -> None:
    overrides = [*TINY, "partition=shards"]
    run_job(make_job(overrides), tmp_path / "a")
    run_job(make_job(overrides), tmp_path / "b")
    run_job(make_job([*overrides, "seed=1"]), tmp_path / "c")
    a, b, c = (without_timings(read_rows(tmp_path / d)) for d in "abc")
    assert a == b
    assert a != c


@pytest.mark.parametrize("algo_overrides", [["partition=dirichlet", "optim.momentum=0.9"]])
def test_resume_after_a_kill_is_bit_exact(
    make_job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algo_overrides: list[str]
) -> None:
    overrides = [*TINY, *algo_overrides, "fl.rounds=5", "checkpoint.every=2"]
    run_job(make_job(overrides), tmp_path / "full")

    run_killed_in_round(make_job(overrides), tmp_path / "killed", 4, monkeypatch)
    assert len(read_rows(tmp_path / "killed")) == 3  # rounds 1-3 were logged before the kill
    assert load_checkpoint(tmp_path / "killed" / "checkpoint.pt")["completed_rounds"] == 2

    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    full, resumed = read_rows(tmp_path / "full"), read_rows(tmp_path / "resumed")
    assert without_timings(resumed) == without_timings(full)
    final_full = load_checkpoint(tmp_path / "full" / "checkpoint.pt")["server_weights"]
    final_resumed = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")["server_weights"]
    assert all(torch.equal(final_full[k], final_resumed[k]) for k in final_full)


# Rows of every round (issue 33) -----------------------------------------------------------------

TEST_COLUMNS = ("test_accuracy", "test_loss", "test_accuracy_std")
TRAINING_COLUMNS = ("train_loss", "lr", "bytes_up", "bytes_down", "wall_seconds", "client_seconds")


def test_every_round_has_a_row_and_test_metrics_only_where_evaluated(tmp_path: Path) -> None:
    """eval.every=3 of 5 rounds: rounds 3 and 5 (the last) evaluated; the others keep their
    training numbers; the summary's accuracies and target come from the evaluated rows."""
    run_dir = tmp_path / "run"
    result = run_cli(
        *TINY,
        "eval.every=3",
        "fl.rounds=5",
        "eval.target_accuracy=0.01",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    rows = read_rows(run_dir)
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4, 5]
    evaluated = [r for r in rows if r["round"] in ("3", "5")]
    for row in rows:
        assert all(row[c] for c in TRAINING_COLUMNS) and int(row["bytes_up"]) > 0
        assert all(bool(row[c]) == (row in evaluated) for c in TEST_COLUMNS)
    summary = json.loads((run_dir / "summary.json").read_text())
    accuracies = [float(r["test_accuracy"]) for r in evaluated]
    assert summary["final_accuracy"] == accuracies[-1]
    assert summary["best_accuracy"] == max(accuracies)
    assert summary["rounds_to_target"] == 3  # the first evaluated round, not round 1
    sent = sum(int(r["bytes_up"]) + int(r["bytes_down"]) for r in rows[:3])
    assert summary["mb_to_target"] == sent / 1e6
    # the console: a short line for a round not evaluated, the test metrics for one evaluated
    assert f"round 1: train_loss {float(rows[0]['train_loss']):.4f}\n" in result.stderr
    assert f"round 3: acc {accuracies[0]:.4f}  loss " in result.stderr


@pytest.mark.parametrize("kill_round", [3, 5])
def test_a_resume_between_evaluations_gives_the_uninterrupted_metrics_csv(
    make_job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_round: int
) -> None:
    """Killed in round 3 (checkpoint of rounds 1-2, neither evaluated) or 5 (rounds 1-4, round 3
    evaluated): the resumed metrics.csv is the uninterrupted run's, header and cells."""
    overrides = [*TINY, "fl.rounds=5", "eval.every=3", "checkpoint.every=2"]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", kill_round, monkeypatch)
    saved = load_checkpoint(tmp_path / "killed" / "checkpoint.pt")
    assert [row["round"] for row in saved["rows"]] == list(range(1, kill_round))
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    full, resumed = read_rows(tmp_path / "full"), read_rows(tmp_path / "resumed")
    assert list(resumed[0]) == list(full[0])
    assert without_timings(resumed) == without_timings(full)
    assert [r["round"] for r in full if r["test_accuracy"]] == ["3", "5"]


def test_a_checkpoint_of_evaluated_rows_only_still_resumes(
    make_job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint written before rows of every round (state format 2: the evaluated rows alone,
    no test_columns) resumes: its rows are replayed, the later rounds get a row each."""
    overrides = [*TINY, "fl.rounds=5", "eval.every=3", "checkpoint.every=2"]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 5, monkeypatch)
    path = tmp_path / "killed" / "checkpoint.pt"
    old = load_checkpoint(path)
    del old["test_columns"]
    old["state_format"] = 2
    old["rows"] = [row for row in old["rows"] if "test_accuracy" in row]
    torch.save(old, path)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    full = {r["round"]: r for r in without_timings(read_rows(tmp_path / "full"))}
    assert without_timings(read_rows(tmp_path / "resumed")) == [full["3"], full["5"]]


def test_resume_refuses_a_different_config(make_job, tmp_path: Path) -> None:
    run_job(make_job(TINY), tmp_path / "first")
    from fedlight.core.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"config differs at local.epochs \(checkpoint 1, now 2\)"
    ):
        run_job(make_job([*TINY, "local.epochs=2", f"resume={tmp_path / 'first'}"]), tmp_path / "x")


def test_wandb_offline_run_records_the_round_metrics(
    make_job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_root"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_job(make_job([*TINY, "logger=wandb", "fl.rounds=2"]), tmp_path / "run")
    wandb.teardown()  # what process exit does: wait until the W&B service has written everything
    runs = list((tmp_path / "wandb_root" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # The offline run log holds each history record's values as JSON text.
    record_log = next(runs[0].glob("run-*.wandb")).read_bytes()
    assert b"test_accuracy" in record_log and b"bytes_up" in record_log
    for row in read_rows(tmp_path / "run"):
        assert json.dumps(float(row["test_accuracy"])).encode() in record_log


def test_wandb_groups_a_sweep_types_jobs_by_algo_and_tags_the_choices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict] = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: calls.append(kwargs))
    choices = {"algo": "scaffold", "partition": "shards"}
    WandbLogger(tags=["paper"]).start(RunInfo(tmp_path, {}, choices, "multirun/x", 3))
    [call] = calls
    assert (call["group"], call["job_type"]) == ("multirun/x", "scaffold")
    assert call["tags"] == ["paper", "algo=scaffold", "partition=shards"]


def test_the_summary_and_figures_are_written_after_the_rounds_data_is_released(
    make_job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drawing the figures (matplotlib's import and rendering) reuses the memory of the data and
    models instead of adding to the run's peak."""
    job = make_job(TINY)
    source, loaded = job.data, []

    class RecordingSource:
        def load(self) -> TensorDataset:
            data = source.load()
            loaded.append(weakref.ref(data.train_x))
            return data

    data_alive_at_summary = []

    def write_summary(*args: Any, **kwargs: Any) -> dict[str, Any]:
        data_alive_at_summary.append(loaded[0]() is not None)
        return real_write_summary(*args, **kwargs)

    real_write_summary = experiment.write_summary
    monkeypatch.setattr(experiment, "write_summary", write_summary)
    run_job(replace(job, data=RecordingSource()), tmp_path)
    assert data_alive_at_summary == [False]
    assert (tmp_path / "curves.png").is_file()
