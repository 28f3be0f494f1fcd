"""The `local` baseline: each client trains its own model on and on; nothing travels."""

import csv
from pathlib import Path

import torch

from fedlight.core.rng import Stream, derive_seed
from fedlight.data.digits import Digits
from fedlight.drivers.base import Clients
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.runs.experiment import run_job
from tests.conftest import TINY
from tests.helpers.drivers import evaluate, evaluate_model, train_client


def build_loop(make_job, overrides: list[str]) -> FederatedLoop:
    job = make_job(overrides)
    data = Digits().load()
    torch.manual_seed(derive_seed(job.settings.seed, Stream.MODEL_INIT))
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    clients = [torch.arange(i, len(data.train_y), 3) for i in range(3)]
    return FederatedLoop(job.settings, Clients(data, clients), module, job.stages)


def test_each_client_continues_its_own_model_and_the_server_never_changes(make_job) -> None:
    loop = build_loop(
        make_job, ["algo=local", "fl.num_clients=3", "fl.clients_per_round=3", "fl.rounds=2"]
    )
    initial = {k: v.clone() for k, v in loop.server.weights.items()}
    stats = loop.run_round(1)
    assert (stats.bytes_up, stats.bytes_down) == (0, 0)
    after_round_1 = {c: {k: v.clone() for k, v in s.items()} for c, s in loop.client_states.items()}
    assert sorted(after_round_1) == [0, 1, 2]
    assert not torch.equal(after_round_1[0]["net.1.weight"], after_round_1[1]["net.1.weight"])

    loop.run_round(2)
    expected = train_client(loop, 0, loop.client_indices[0], 2, after_round_1[0], [0.05], [])
    assert all(torch.equal(expected.weights[k], loop.client_states[0][k]) for k in expected.weights)
    assert all(torch.equal(initial[k], loop.server.weights[k]) for k in initial)


def test_reported_accuracy_is_the_mean_over_client_models_with_its_spread(make_job) -> None:
    loop = build_loop(
        make_job, ["algo=local", "fl.num_clients=3", "fl.clients_per_round=2", "fl.rounds=1"]
    )
    loop.run_round(1)
    trained = sorted(loop.client_states)
    assert len(trained) == 2
    per_model = [
        evaluate_model(loop.evaluation, loop.client_states.get(c, loop.server.weights))[0]
        for c in range(3)
    ]
    mean, _, spread = evaluate(loop.evaluation, loop.server, loop.client_states, 1)
    assert mean == sum(per_model) / 3
    assert spread == torch.tensor(per_model, dtype=torch.float64).std(correction=0).item() > 0


def test_local_runs_end_to_end_without_communication(make_job, tmp_path: Path) -> None:
    summary = run_job(make_job([*TINY, "algo=local"]), tmp_path)
    with (tmp_path / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert all(r["bytes_up"] == r["bytes_down"] == "0" for r in rows)
    assert summary["comm_mb"] == 0
    assert float(rows[-1]["test_accuracy_std"]) > 0
