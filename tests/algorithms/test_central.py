"""The `central` baseline: one model on the pooled data, a federated round's work per round."""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor

from fedlight.algorithms.central import POOLED_TRAINER
from fedlight.core.rng import Stream, derive_seed
from fedlight.data.digits import Digits
from fedlight.drivers.base import Clients
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from tests.conftest import TINY, rows_without_timings, run_killed_in_round
from tests.helpers.drivers import evaluate, evaluate_model, train_client


def build_loop(make_job: Callable[[list[str]], Job], overrides: list[str]) -> FederatedLoop:
    """Three clients split by label (client i holds the digits with label % 3 == i): non-IID."""
    job = make_job(["fl.num_clients=3", "local.batch_size=32", *overrides])
    data = Digits().load()
    torch.manual_seed(derive_seed(job.settings.seed, Stream.MODEL_INIT))
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    clients = [torch.nonzero(data.train_y % 3 == i).flatten() for i in range(3)]
    return FederatedLoop(job.settings, Clients(data, clients), module, job.stages)


def test_with_every_client_a_round_is_one_pass_over_all_pooled_examples(make_job) -> None:
    loop = build_loop(make_job, ["algo=central", "fl.clients_per_round=3"])
    participants = loop.algorithm.participants(
        loop.federation.round(1, (0, 1, 2)), loop.client_indices
    )
    assert [p for p, _ in participants] == [POOLED_TRAINER]
    pooled = sorted(torch.cat(list(loop.client_indices)).tolist())
    assert sorted(participants[0][1].tolist()) == pooled


def test_with_partial_participation_it_draws_as_many_examples_from_the_whole_pool(
    make_job,
) -> None:
    loop = build_loop(make_job, ["algo=central", "fl.clients_per_round=1"])
    [(_, drawn)] = loop.algorithm.participants(loop.federation.round(1, (1,)), loop.client_indices)
    assert len(drawn) == len(loop.client_indices[1])
    assert len(set(drawn.tolist())) == len(drawn)  # without replacement
    labels = loop.data.train_y[drawn] % 3
    assert set(labels.tolist()) == {0, 1, 2}  # not only client 1's labels: the pool is IID


def samples_seen(loop: FederatedLoop, round_index: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Training examples that pass through `training_step` in one round (gradients computed)."""
    seen = []
    original = loop.module.training_step

    def counting(batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        seen.append(len(batch[1]))
        return original(batch, batch_idx)

    with monkeypatch.context() as patch:
        patch.setattr(loop.module, "training_step", counting)
        loop.run_round(round_index)
    return sum(seen)


@pytest.mark.parametrize("clients_per_round", [1, 2, 3])
def test_a_round_computes_as_many_sample_gradients_as_the_federated_round(
    make_job, monkeypatch: pytest.MonkeyPatch, clients_per_round: int
) -> None:
    common = [f"fl.clients_per_round={clients_per_round}", "local.epochs=2"]
    federated = build_loop(make_job, ["algo=fedavg", *common])
    central = build_loop(make_job, ["algo=central", *common])
    for round_index in (1, 2):
        expected = samples_seen(federated, round_index, monkeypatch)
        assert samples_seen(central, round_index, monkeypatch) == expected > 0


def test_one_model_continues_across_rounds_and_nothing_is_communicated(make_job) -> None:
    loop = build_loop(make_job, ["algo=central", "fl.clients_per_round=3"])
    initial = {k: v.clone() for k, v in loop.server.weights.items()}
    stats = loop.run_round(1)
    assert (stats.bytes_up, stats.bytes_down) == (0, 0)
    assert sorted(loop.client_states) == [POOLED_TRAINER]
    after_round_1 = {k: v.clone() for k, v in loop.client_states[POOLED_TRAINER].items()}

    loop.run_round(2)
    [(_, indices)] = loop.algorithm.participants(
        loop.federation.round(2, (0, 1, 2)), loop.client_indices
    )
    expected = train_client(loop, POOLED_TRAINER, indices, 2, after_round_1, [0.05], [])
    trained = loop.client_states[POOLED_TRAINER]
    assert all(torch.equal(expected.weights[k], trained[k]) for k in trained)
    assert all(torch.equal(initial[k], loop.server.weights[k]) for k in initial)

    accuracy, loss, spread = evaluate(loop.evaluation, loop.server, loop.client_states, 1)
    assert (accuracy, loss) == evaluate_model(loop.evaluation, trained) and spread == 0.0


def test_central_resumes_bit_exactly(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pooled model travels in the checkpoint as the pooled trainer's state."""
    overrides = [*TINY, "algo=central", "partition=shards", "fl.rounds=3", "checkpoint.every=2"]
    summary = run_job(make_job(overrides), tmp_path / "full")
    assert summary["comm_mb"] == 0
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    rows = rows_without_timings(tmp_path / "full")
    assert rows_without_timings(tmp_path / "resumed") == rows and len(rows) == 3
