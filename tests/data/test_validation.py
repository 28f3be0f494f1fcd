"""The validation split: `data.validation_fraction` (the server's validation set, held out of the
training set before the partition), `partition.client_validation_fraction` (each client's local
validation part), `eval.split` (the split that picks best/target) and `eval.test` (where the test
set is evaluated)."""

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from fedlight.core.errors import ConfigError
from fedlight.core.rng import Stream, numpy_generator
from fedlight.data.base import TensorDataset
from fedlight.data.digits import Digits
from fedlight.data.validation import split_validation, stratified_sample, validation_indices
from fedlight.drivers.workers import OneWorker
from fedlight.loggers.base import METRIC_COLUMNS
from fedlight.runs.experiment import run_job
from fedlight.runs.federation import federation
from fedlight.runs.job import DivergenceError, Job
from fedlight.store.checkpoint import load_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY, rows_without_timings, run_cli, run_killed_in_round
from tests.helpers.commands import validate_command_line

VALIDATED = [*TINY, "data.validation_fraction=0.2"]
SELECTING = [*VALIDATED, "eval.split=validation", "eval.target_accuracy=0.3"]
TEST_COLUMNS = ("test_accuracy", "test_loss", "test_accuracy_std")


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def header(run_dir: Path) -> list[str]:
    with (run_dir / "metrics.csv").open() as f:
        return next(csv.reader(f))


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def digits() -> TensorDataset:
    return Digits().load()


# The split itself ---------------------------------------------------------------------------------


def test_the_validation_set_is_held_out_of_the_training_set_per_label(
    digits: TensorDataset,
) -> None:
    """Disjoint from what trains (together: the training set), the test set untouched, and each
    class holds out its share, rounded: within 1 of the fraction of its examples."""
    labels = digits.train_y.numpy()
    held = validation_indices(labels, 0.2, seed=0)
    kept = np.setdiff1d(np.arange(len(labels)), held)
    split = split_validation(digits, 0.2, seed=0)
    assert split.val_x is not None and split.val_y is not None
    assert torch.equal(split.val_x, digits.train_x[held])
    assert torch.equal(split.val_y, digits.train_y[held])
    assert torch.equal(split.train_x, digits.train_x[kept])
    assert torch.equal(split.train_y, digits.train_y[kept])
    assert np.intersect1d(held, kept).size == 0 and len(held) + len(kept) == len(labels)
    assert split.test_x is digits.test_x and split.test_y is digits.test_y
    counts = np.bincount(labels[held], minlength=10)
    totals = np.bincount(labels, minlength=10)
    assert np.all(np.abs(counts - 0.2 * totals) <= 1)
    assert np.array_equal(counts, np.round(0.2 * totals))


def test_the_draw_comes_from_its_own_stream_and_the_seed_alone(digits: TensorDataset) -> None:
    labels = digits.train_y.numpy()
    first, again = (validation_indices(labels, 0.2, seed=3) for _ in range(2))
    assert np.array_equal(first, again)
    assert not np.array_equal(first, validation_indices(labels, 0.2, seed=4))
    everything = np.arange(len(labels))
    own = numpy_generator(3, Stream.VALIDATION)
    assert np.array_equal(first, stratified_sample(everything, labels, 0.2, own))
    partition = numpy_generator(3, Stream.PARTITION)
    assert not np.array_equal(first, stratified_sample(everything, labels, 0.2, partition))


def test_fraction_zero_leaves_the_data_as_loaded(digits: TensorDataset) -> None:
    assert split_validation(digits, 0.0, seed=0) is digits


def test_client_ids_follow_the_examples_that_train() -> None:
    """`partition=natural`'s ids of the training examples stay aligned with them."""
    x = torch.arange(40, dtype=torch.float32).view(40, 1)
    y = torch.arange(40) % 2
    data = TensorDataset(x, y, x[:2], y[:2], 2, train_clients=torch.arange(40) // 4)
    split = split_validation(data, 0.25, seed=0)
    assert split.train_clients is not None
    assert torch.equal(split.train_clients, split.train_x[:, 0].long() // 4)


def test_a_fraction_that_holds_out_no_example_is_refused_in_one_line() -> None:
    x, y = torch.zeros(6, 1), torch.tensor([0, 0, 0, 1, 1, 1])
    with pytest.raises(ConfigError, match=r"^data\.validation_fraction=0\.1 holds out 0 of the 6"):
        split_validation(TensorDataset(x, y, x, y, 2), 0.1, seed=0)


def test_no_client_trains_or_tests_on_the_validation_set(
    make_job: Callable[[list[str]], Job], tmp_path: Path, digits: TensorDataset
) -> None:
    """The partition splits what is left: every client's training, local test and local
    validation indices (into the reduced training set) map to examples outside the validation
    set, and are disjoint from each other."""
    job = make_job(
        [
            *VALIDATED,
            "partition.client_test_fraction=0.2",
            "partition.client_validation_fraction=0.1",
        ]
    )
    data = split_validation(job.data.load(), 0.2, job.settings.seed)
    clients = federation(
        job.settings, job.partition, data, tmp_path, OneWorker(torch.device("cpu"))
    )
    labels = digits.train_y.numpy()
    held = validation_indices(labels, 0.2, job.settings.seed)
    original = np.setdiff1d(np.arange(len(labels)), held)  # reduced index → the source's
    assert clients.test is not None and clients.validation is not None
    parts = [clients.train, clients.test, clients.validation]
    for client in range(job.settings.fl.num_clients):
        sets = [original[part[client].numpy()] for part in parts]
        assert all(np.intersect1d(s, held).size == 0 for s in sets)
        assert sum(map(len, sets)) == len(np.unique(np.concatenate(sets)))
        assert len(sets[2]) > 0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["data.validation_fraction=1"], "data.validation_fraction=1.0 must lie in [0, 1)"),
        (["data.validation_fraction=-0.1"], "data.validation_fraction=-0.1 must lie in [0, 1)"),
        (["eval.split=validation"], "eval.split=validation needs a validation set; set data."),
        (["eval.split=train"], "eval.split=train is not a split; use test or validation"),
        (["eval.test=never"], "eval.test=never is not a choice; use every_round"),
        (["eval.test=final"], "eval.test=final leaves eval.split=test only the last round"),
        (["objective=val_accuracy"], "objective=val_accuracy needs a validation set"),
        (
            ["partition.client_test_fraction=0.5", "partition.client_validation_fraction=0.5"],
            "partition.client_validation_fraction=0.5 must lie in [0, 1 - partition.client_test",
        ),
    ],
)
def test_bad_validation_settings_fail_before_any_work_with_one_line(
    args: list[str], expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line(args)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(expected), message


# Runs -------------------------------------------------------------------------------------------

LOCAL_TEST = [
    *TINY,
    "partition=dirichlet",
    "partition.client_test_fraction=0.2",
    "eval.finetune_epochs=1",
    "fl.threads_per_worker=1",
]
BEFORE_COLUMNS = [
    *METRIC_COLUMNS,
    "local_accuracy_mean",
    "local_accuracy_p10",
    "local_accuracy_std",
    "participants",
    "rejected",
]


def test_without_a_validation_set_every_number_and_column_is_as_before(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Fraction 0 (the default, or said explicitly): the same numbers either way and the columns
    of the commit before validation sets existed, and summary.json says that every number comes
    from the test set. (That the numbers are also the commit before's, digit for digit, was
    checked once between the two checkouts on one machine, benchmarks/same_numbers.py: digits
    depend on the CPU's kernels, so no test records them.)"""
    explicit = [
        "data.validation_fraction=0",
        "partition.client_validation_fraction=0",
        "eval.split=test",
        "eval.test=every_round",
    ]
    rows = {}
    for name, extra in (("default", []), ("explicit", explicit)):
        summary = run_job(make_job([*LOCAL_TEST, *extra]), tmp_path / name)
        rows[name] = rows_without_timings(tmp_path / name)
        assert header(tmp_path / name) == BEFORE_COLUMNS
        assert set(summary["splits"].values()) == {"test"}
        assert "best_round" not in summary and "test_accuracy_at_best" not in summary
    assert rows["default"] == rows["explicit"]


def test_eval_split_validation_picks_best_and_target_by_the_validation_set(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """The split decides the summary alone: both runs log the same rows, with `val_*` columns in
    every evaluated round; best_accuracy, rounds_to_target and mb_to_target follow the split
    named, and summary.json's `splits` says which."""
    by_test = run_job(make_job([*SELECTING[:-2], "eval.target_accuracy=0.3"]), tmp_path / "t")
    by_validation = run_job(make_job(SELECTING), tmp_path / "v")
    rows = rows_without_timings(tmp_path / "v")
    assert rows == rows_without_timings(tmp_path / "t")
    assert header(tmp_path / "v")[: len(METRIC_COLUMNS) + 3] == [
        *METRIC_COLUMNS,
        "val_accuracy",
        "val_loss",
        "val_accuracy_std",
    ]
    validation = [float(r["val_accuracy"]) for r in rows]
    test = [float(r["test_accuracy"]) for r in rows]
    assert validation != test and all(0 < v <= 1 for v in validation)

    def first_reaching(accuracies: list[float]) -> int | None:
        return next((i + 1 for i, a in enumerate(accuracies) if a >= 0.3), None)

    assert by_validation["best_accuracy"] == max(validation)
    assert by_validation["rounds_to_target"] == first_reaching(validation)
    assert by_test["best_accuracy"] == max(test)
    assert by_test["rounds_to_target"] == first_reaching(test)
    for summary in (by_test, by_validation):
        assert summary["final_accuracy"] == test[-1]
        assert summary["val_accuracy"] == validation[-1]
    best = by_validation["best_round"]
    assert validation[best - 1] == max(validation)
    assert by_validation["test_accuracy_at_best"] == test[best - 1]
    splits = by_validation["splits"]
    assert splits["final_accuracy"] == "test" and splits["test_accuracy_at_best"] == "test"
    for key in ("best_accuracy", "rounds_to_target", "mb_to_target", "val_accuracy"):
        assert splits[key] == "validation"
    assert by_test["splits"]["best_accuracy"] == by_test["splits"]["rounds_to_target"] == "test"
    assert by_test["splits"]["val_accuracy"] == "validation"


def test_eval_test_final_tests_the_last_round_alone(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Test columns (the local test sets' too) stay empty but in the last round's row; every
    other number is that of the run that tests each round."""
    local = ["partition.client_test_fraction=0.2", "partition.client_validation_fraction=0.1"]
    every = run_job(make_job([*SELECTING, *local]), tmp_path / "every")
    final = run_job(make_job([*SELECTING, *local, "eval.test=final"]), tmp_path / "final")
    tested = [*TEST_COLUMNS, "local_accuracy_mean", "local_accuracy_p10", "local_accuracy_std"]
    every_rows = rows_without_timings(tmp_path / "every")
    final_rows = rows_without_timings(tmp_path / "final")
    assert len(final_rows) == 4
    for row in final_rows[:-1]:
        assert all(row[name] == "" for name in tested), row
        assert row["val_accuracy"] and row["val_local_accuracy_mean"]
    assert final_rows[-1] == every_rows[-1]
    for was, now in zip(every_rows, final_rows, strict=True):
        assert {k: v for k, v in was.items() if k not in tested} == {
            k: v for k, v in now.items() if k not in tested
        }
    kept = ("final_accuracy", "best_accuracy", "rounds_to_target", "best_round", "mb_to_target")
    assert {k: final[k] for k in kept} == {k: every[k] for k in kept}
    assert final["test_accuracy_at_best"] is None or final["best_round"] == 4


def test_two_workers_hold_out_the_same_validation_sets(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Each worker draws the split itself: with the server's and the clients' validation sets,
    2 workers (the CLI spawns them) log 1 worker's numbers, bit for bit."""
    overrides = [*SELECTING, "partition.client_validation_fraction=0.1"]
    two = ["fl.workers=2", "fl.threads_per_worker=1", f"hydra.run.dir={tmp_path / 'two'}"]
    run_cli(*overrides, *two, cwd=tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_job(make_job(overrides), tmp_path / "one")
    finally:
        torch.set_num_threads(threads)
    one = rows_without_timings(tmp_path / "one")
    assert "val_local_accuracy_mean" in one[0]
    assert rows_without_timings(tmp_path / "two") == one


# Every validation setting at once, the test set in the last round alone.
RESUMABLE = [
    *SELECTING,
    "eval.test=final",
    "partition.client_test_fraction=0.2",
    "partition.client_validation_fraction=0.1",
]


def test_a_resumed_run_holds_out_the_same_validation_sets(
    make_job: Callable[[list[str]], Job],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed in round 3 and resumed: the rows and summary numbers of the uninterrupted run."""
    full = run_job(make_job(RESUMABLE), tmp_path / "full")
    run_killed_in_round(make_job(RESUMABLE), tmp_path / "killed", 3, monkeypatch)
    resumed = run_job(make_job([*RESUMABLE, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
    numbers = ("final_accuracy", "best_accuracy", "rounds_to_target", "mb_to_target", "splits")
    assert {k: resumed[k] for k in numbers} == {k: full[k] for k in numbers}


@pytest.mark.parametrize("every", [1, 2])
def test_an_extended_run_with_eval_test_final_tests_only_its_new_last_round(
    make_job: Callable[[list[str]], Job], tmp_path: Path, every: int
) -> None:
    """A finished 3-round run extended to 4: its old last round loses its test numbers, and its
    validation numbers too where `eval.every` would not have evaluated it, as in a 4-round run."""
    overrides = [*RESUMABLE, f"eval.every={every}"]
    run_job(make_job([*overrides, "fl.rounds=3"]), tmp_path / "three")
    run_job(make_job([*overrides, f"resume={tmp_path / 'three'}"]), tmp_path / "extended")
    run_job(make_job(overrides), tmp_path / "four")
    assert rows_without_timings(tmp_path / "extended") == rows_without_timings(tmp_path / "four")
    rows = read_rows(tmp_path / "extended")
    assert [bool(r["test_accuracy"]) for r in rows] == [False, False, False, True]
    assert [bool(r["val_accuracy"]) for r in rows] == [r % every == 0 for r in range(1, 5)]


def test_a_checkpoint_from_before_the_validation_settings_resumes(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint whose config and state lack every new key continues at their defaults."""
    overrides = [*TINY, "partition.client_test_fraction=0.2"]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 3, monkeypatch)
    path = tmp_path / "killed" / CHECKPOINT_NAME
    checkpoint = load_checkpoint(path)
    config = json.loads(checkpoint["config"])
    del config["data"]["validation_fraction"], config["eval"]["split"], config["eval"]["test"]
    del config["partition"]["client_validation_fraction"]
    checkpoint["config"] = json.dumps(config)
    del checkpoint["validation_columns"]
    torch.save(checkpoint, path)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")


def test_a_run_that_diverges_is_tested_in_its_last_round(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """With eval.test=final and fl.on_divergence=stop, the round that diverges ends the run: its
    row is tested, and summary.json has a final accuracy."""
    with pytest.raises(DivergenceError):
        run_job(make_job([*SELECTING, "eval.test=final", "optim.lr=1e30"]), tmp_path / "run")
    [row] = read_rows(tmp_path / "run")
    assert row["test_accuracy"] and row["val_accuracy"]
    assert summary_of(tmp_path / "run")["final_accuracy"] == float(row["test_accuracy"])
