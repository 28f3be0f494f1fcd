"""Ditto (issue 16, part 4): each participant's second, personal training; its global model is
FedAvg's, its personal model one SGD step of F_k(v) + λ/2 ‖v − w‖² computed by hand, and runs
resume bit-exactly."""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedlight.core.errors import ConfigError
from fedlight.core.rng import Stream, numpy_generator
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from tests.conftest import TINY, rows_without_timings, run_killed_in_round

# Two clients, both in every round, one full-batch local step per training.
FULL_BATCH = [*TINY, "fl.num_clients=2", "fl.clients_per_round=2", "local.batch_size=1000"]


def checkpoint(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoint.pt", weights_only=True)


def test_the_personal_model_takes_one_proximal_sgd_step_by_hand_and_the_global_is_fedavgs(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 2's personal model of client 0 is v₁ − η (∇F₀(v₁) + λ (v₁ − w₁)), with v₁ its
    personal model and w₁ the global model after round 1; the global model is FedAvg's, bit for
    bit (the personal training draws nothing the global training uses)."""
    lam, lr = 0.5, 0.05
    overrides = [*FULL_BATCH, "fl.rounds=2", f"optim.lr={lr}", "algo=ditto", f"algo.lam={lam}"]
    job = make_job(overrides)
    run_job(job, tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 2, monkeypatch)
    run_job(make_job([*FULL_BATCH, "fl.rounds=2", f"optim.lr={lr}"]), tmp_path / "fedavg")
    before, after = checkpoint(tmp_path / "killed"), checkpoint(tmp_path / "full")
    for name, weight in checkpoint(tmp_path / "fedavg")["server_weights"].items():
        assert torch.equal(after["server_weights"][name], weight)

    data = job.data.load()
    sets = job.partition(data.train_y.numpy(), 2, numpy_generator(0, Stream.PARTITION))
    indices = torch.as_tensor(sets[0])
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    personal, global_weights = before["client_states"]["0"], before["server_weights"]
    module.load_state_dict(personal)
    loss = module.training_step((data.prepare(data.train_x[indices]), data.train_y[indices]), 0)
    loss.backward()
    for name, param in module.named_parameters():
        pull = lam * (personal[name] - global_weights[name])
        expected = personal[name] - lr * (param.grad + pull)
        torch.testing.assert_close(after["client_states"]["0"][name], expected, rtol=0, atol=1e-6)
        assert not torch.allclose(pull, torch.zeros_like(pull))


def test_the_first_personal_model_starts_from_the_global_model_and_others_evaluate_it(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """After one round, a participant's personal model is the global model it received after one
    plain step (λ has nothing to pull yet): FedAvg's local model, so the mean of the two is
    FedAvg's next global model."""
    run_job(make_job([*FULL_BATCH, "fl.rounds=1", "algo=ditto", "algo.lam=5"]), tmp_path / "d")
    state = checkpoint(tmp_path / "d")
    states, server = state["client_states"], state["server_weights"]
    for name, weight in server.items():
        mean = (states["0"][name] + states["1"][name]) / 2
        torch.testing.assert_close(mean, weight, rtol=0, atol=1e-6)


def test_a_killed_ditto_run_resumes_bit_exactly_from_the_disk_store(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = [
        *TINY,
        "partition=label_quantity",
        "partition.client_test_fraction=0.3",
        "algo=ditto",
        "fl.client_state=disk",
    ]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    full = rows_without_timings(tmp_path / "full")
    assert rows_without_timings(tmp_path / "resumed") == full
    assert float(full[-1]["local_accuracy_mean"]) > float(full[-1]["test_accuracy"])


@pytest.mark.parametrize(
    ("setting", "message"),
    [("algo.lam=-1", r"^algo.lam=-1 must be >= 0"), ("algo.personal_epochs=0", r"^algo.pers")],
)
def test_bad_ditto_settings_are_refused_in_one_line(
    make_job: Callable[[list[str]], Job], setting: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        make_job([*TINY, "algo=ditto", setting])
