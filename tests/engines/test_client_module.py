"""Any LightningModule with training_step and configure_optimizers can be a client."""

from pathlib import Path

import torch

from fedlight.data.digits import Digits
from fedlight.drivers.base import Clients
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.runs.experiment import run_job
from tests.helpers.drivers import train_client
from tests.helpers.user_module import RecordingModule


def test_user_module_hooks_fire_in_trainer_order_once_per_local_step(
    make_job, tmp_path: Path
) -> None:
    RecordingModule.calls.clear()
    job = make_job(
        [
            "model._target_=tests.helpers.user_module.RecordingModule",
            "fl.num_clients=5",
            "fl.clients_per_round=2",
            "fl.rounds=2",
            "local.epochs=2",
            "local.batch_size=100",
        ]
    )
    summary = run_job(job, tmp_path)
    calls = RecordingModule.calls
    steps = [c for c in calls if c.startswith("training_step")]
    # 2 rounds × 2 clients × 2 epochs × ceil(~287 samples / 100) batches
    assert len(steps) == 2 * 2 * 2 * 3
    per_step = ["on_before_backward", "on_after_backward", "on_before_optimizer_step"]
    for i, call in enumerate(calls):
        if call.startswith("training_step"):
            assert calls[i + 1 : i + 4] == per_step
    # batch_idx counts each local epoch's batches from zero, as a Trainer's
    assert steps[:7] == [f"training_step:{i}" for i in (0, 1, 2, 0, 1, 2, 0)]
    assert summary["final_accuracy"] > 0.5


def test_a_client_without_data_takes_no_step(make_job) -> None:
    job = make_job(["fl.num_clients=2", "fl.clients_per_round=2", "fl.rounds=1"])
    data = Digits().load()
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    clients = [torch.arange(50), torch.zeros(0, dtype=torch.int64)]
    loop = FederatedLoop(job.settings, Clients(data, clients), module, job.stages)
    empty = train_client(loop, 1, loop.client_indices[1], 1, loop.server.weights, [0.05], [])
    assert (empty.num_steps, empty.num_samples, empty.train_loss) == (0, 0, 0.0)
    stats = loop.run_round(1)
    assert stats.train_loss == stats.train_loss  # not NaN
