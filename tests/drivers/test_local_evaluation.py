"""Per-client evaluation (issue 16, first part): each client's set is split, per label, into its
training part and its local test set; every evaluated round reports the mean, 10th percentile and
spread of the clients' accuracies on their local test sets with the model each would use."""

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from fedlight.core.errors import ConfigError
from fedlight.core.rng import Stream, numpy_generator
from fedlight.engines.evaluator import ACCURACY, Evaluator
from fedlight.partitions.dirichlet import Dirichlet
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from tests.conftest import TINY, rows_without_timings, run_killed_in_round

LOCAL_TEST = [*TINY, "partition.client_test_fraction=0.3"]


def test_the_local_test_split_is_stratified_disjoint_complete_and_seeded() -> None:
    labels = np.random.default_rng(0).integers(0, 10, 2000)
    partition = Dirichlet(alpha=0.3, min_samples=10, client_test_fraction=0.25)
    client_sets = partition(labels, 20, numpy_generator(0, Stream.PARTITION))
    train, test = partition.hold_out(client_sets, labels, seed=0)
    assert test is not None
    for whole, kept, held in zip(client_sets, train, test, strict=True):
        assert not set(kept) & set(held)
        assert np.array_equal(np.sort(np.concatenate([kept, held])), whole)
        for label in np.unique(labels[whole]):
            count = int((labels[whole] == label).sum())
            assert int((labels[held] == label).sum()) == round(0.25 * count)
    again = partition.hold_out(client_sets, labels, seed=0)[1]
    other = partition.hold_out(client_sets, labels, seed=1)[1]
    assert again is not None and other is not None
    assert all(np.array_equal(a, b) for a, b in zip(test, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(test, other, strict=True))
    assert Dirichlet().hold_out(client_sets, labels, seed=0) == (client_sets, None)


@pytest.mark.parametrize("fraction", [-0.1, 1.0])
def test_a_fraction_outside_zero_to_one_is_refused_in_one_line(
    make_job: Callable[[list[str]], Job], fraction: float
) -> None:
    with pytest.raises(ConfigError, match=r"^partition.client_test_fraction=.* must lie in"):
        make_job([*TINY, f"partition.client_test_fraction={fraction}"])


@pytest.mark.parametrize("algo", ["fedavg", "local"])
def test_local_accuracies_are_each_clients_model_on_its_held_out_examples(
    make_job: Callable[[list[str]], Job], tmp_path: Path, algo: str
) -> None:
    """Recomputed by hand from the checkpoint: FedAvg's global model, or each local model (the
    initial model for a client that never trained), on the client's held-out examples, which
    it never trained on; the summary columns are their mean, 10th percentile and std."""
    job = make_job([*LOCAL_TEST, f"algo={algo}"])
    run_job(job, tmp_path)
    data = job.data.load()
    labels = data.train_y.numpy()
    sets = job.partition(labels, 10, numpy_generator(0, Stream.PARTITION))
    train, test = job.partition.hold_out(sets, labels, seed=0)
    assert test is not None
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    evaluator = Evaluator(module, 1000)
    by_hand = []
    for client, indices in enumerate(test):
        index = torch.as_tensor(indices)
        weights = checkpoint["client_states"].get(str(client)) or checkpoint["server_weights"]
        if algo == "fedavg":
            weights = checkpoint["server_weights"]
        x, y = data.prepare(data.train_x[index]), data.train_y[index]
        by_hand.append(evaluator.evaluate(weights, x, y)[ACCURACY])
    saved = json.loads((tmp_path / "local_accuracy.json").read_text())["accuracies"]
    assert [saved[str(c)] for c in range(10)] == pytest.approx(by_hand, abs=1e-12)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["local_accuracy_mean"] == pytest.approx(np.mean(by_hand))
    assert summary["local_accuracy_p10"] == pytest.approx(np.percentile(by_hand, 10))
    assert summary["local_accuracy_std"] == pytest.approx(np.std(by_hand))
    assert (tmp_path / "local_accuracy.png").stat().st_size > 0
    histogram = json.loads((tmp_path / "label_histogram.json").read_text())
    assert sum(sum(row) for row in histogram.values()) == sum(len(t) for t in train)


def test_a_killed_run_with_local_test_sets_resumes_bit_exactly_on_the_disk_store(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = [*LOCAL_TEST, "algo=local", "fl.client_state=disk"]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    full = rows_without_timings(tmp_path / "full")
    assert rows_without_timings(tmp_path / "resumed") == full
    assert {"local_accuracy_mean", "local_accuracy_p10", "local_accuracy_std"} <= set(full[0])
    for name in ("local_accuracy.json",):
        assert (tmp_path / "resumed" / name).read_text() == (tmp_path / "full" / name).read_text()


def test_fine_tuning_before_local_evaluation_changes_nothing_else(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """eval.finetune_epochs trains a copy of each client's model on its training part before its
    local evaluation: every other number, the global model and the client states are those of
    the run without it; on 2 classes per client the local accuracy rises; reruns repeat it."""
    base = [*LOCAL_TEST, "partition=label_quantity"]
    tuned = [*base, "eval.finetune_epochs=2"]
    for name, overrides in (("plain", base), ("tuned", tuned), ("again", tuned)):
        run_job(make_job(overrides), tmp_path / name)
    local = {"local_accuracy_mean", "local_accuracy_p10", "local_accuracy_std"}
    plain_rows, tuned_rows = (rows_without_timings(tmp_path / n) for n in ("plain", "tuned"))
    for plain, fine in zip(plain_rows, tuned_rows, strict=True):
        assert {k: v for k, v in plain.items() if k not in local} == {
            k: v for k, v in fine.items() if k not in local
        }
    assert float(tuned_rows[-1]["local_accuracy_mean"]) > float(
        plain_rows[-1]["local_accuracy_mean"]
    )
    assert rows_without_timings(tmp_path / "again") == tuned_rows
    plain_state, tuned_state = (
        torch.load(tmp_path / n / "checkpoint.pt", weights_only=True) for n in ("plain", "tuned")
    )
    for key in ("server_weights", "client_states"):
        assert plain_state[key].keys() == tuned_state[key].keys()
    for k, t in plain_state["server_weights"].items():
        assert torch.equal(t, tuned_state["server_weights"][k])


@pytest.mark.parametrize("algo", ["fedavg", "local"])
def test_own_labels_are_each_clients_model_on_the_test_examples_of_its_labels(
    make_job: Callable[[list[str]], Job], tmp_path: Path, algo: str
) -> None:
    """eval.own_labels, recomputed by hand from the checkpoint: each client's model (FedAvg's
    global one, or its own local model, the initial one before it trained) on the global test
    examples whose labels its training part holds; the test-set metrics are those without it."""
    overrides = [*TINY, f"algo={algo}", "partition=label_quantity"]
    job = make_job([*overrides, "eval.own_labels=true"])
    run_job(job, tmp_path / "own")
    run_job(make_job(overrides), tmp_path / "plain")
    data = job.data.load()
    labels = data.train_y.numpy()
    sets = job.partition(labels, 10, numpy_generator(0, Stream.PARTITION))
    checkpoint = torch.load(tmp_path / "own" / "checkpoint.pt", weights_only=True)
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    evaluator = Evaluator(module, 1000)
    by_hand = []
    for client, indices in enumerate(sets):
        held = torch.as_tensor(np.unique(labels[indices]))
        index = torch.isin(data.test_y, held).nonzero().flatten()
        weights = checkpoint["server_weights"]
        if algo == "local":
            weights = checkpoint["client_states"].get(str(client)) or weights
        x, y = data.prepare(data.test_x[index]), data.test_y[index]
        by_hand.append(evaluator.evaluate(weights, x, y)[ACCURACY])
    summary = json.loads((tmp_path / "own" / "summary.json").read_text())
    assert summary["local_accuracy_own_labels_mean"] == pytest.approx(np.mean(by_hand))
    assert summary["local_accuracy_own_labels_p10"] == pytest.approx(np.percentile(by_hand, 10))
    assert summary["local_accuracy_own_labels_std"] == pytest.approx(np.std(by_hand))
    own = "local_accuracy_own_labels_"
    stripped = [
        {k: v for k, v in row.items() if not k.startswith(own)}
        for row in rows_without_timings(tmp_path / "own")
    ]
    assert stripped == rows_without_timings(tmp_path / "plain")
