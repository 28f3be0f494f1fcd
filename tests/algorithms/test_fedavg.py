"""FedAvg's server arithmetic against a hand computation."""

import pytest
import torch

from fedlight.aggregation.mean import WeightedMean
from fedlight.algorithms.fedavg import FedAvg
from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload, LocalResult
from tests.helpers.algorithms import aggregate

CTX = Federation(num_clients=10, trainable=frozenset({"w"})).round(1)


def server_with(fedavg: FedAvg, weights: dict[str, torch.Tensor]):
    return fedavg.init_server(weights, CTX.federation)


def test_weighted_mean_matches_hand_computation() -> None:
    updates = [{"a": torch.tensor([1.0, 2.0])}, {"a": torch.tensor([4.0, -1.0])}]
    mean = WeightedMean()(updates, [1.0, 3.0])
    assert torch.allclose(mean["a"], torch.tensor([(1 + 12) / 4, (2 - 3) / 4]))


def test_fedavg_round_is_sample_weighted_average_of_client_models() -> None:
    fedavg = FedAvg()
    x = {"w": torch.tensor([1.0, 1.0]), "running": torch.tensor([0.0]), "count": torch.tensor(4)}
    server = server_with(fedavg, x)
    clients = [
        (
            {
                "w": torch.tensor([3.0, 0.0]),
                "running": torch.tensor([2.0]),
                "count": torch.tensor(6),
            },
            10,
        ),
        (
            {
                "w": torch.tensor([-1.0, 5.0]),
                "running": torch.tensor([6.0]),
                "count": torch.tensor(8),
            },
            30,
        ),
    ]
    uploads = []
    for cid, (weights, n) in enumerate(clients):
        local = LocalResult(cid, weights, n, num_steps=3, lr=0.1, train_loss=0.0)
        upload, state = fedavg.upload(CTX, server.weights, local, None)
        assert state is None
        assert isinstance(upload, ClientUpload)
        uploads.append(upload)
    new = aggregate(fedavg, CTX, server, uploads)
    # (10·y1 + 30·y2) / 40
    assert torch.allclose(new.weights["w"], torch.tensor([(30 - 30) / 40, (0 + 150) / 40]))
    assert torch.allclose(new.weights["running"], torch.tensor([(20 + 180) / 40]))
    assert new.weights["count"].dtype == torch.int64
    assert new.weights["count"].item() == 4 + round((10 * 2 + 30 * 4) / 40)


def test_server_lr_scales_the_averaged_delta_of_parameters_only() -> None:
    fedavg = FedAvg(server_lr=0.5)
    x = {"w": torch.tensor([2.0]), "running": torch.tensor([0.0])}
    server = server_with(fedavg, x)
    local = LocalResult(
        0, {"w": torch.tensor([6.0]), "running": torch.tensor([4.0])}, 5, 1, 0.1, 0.0
    )
    upload, _ = fedavg.upload(CTX, server.weights, local, None)
    new = aggregate(fedavg, CTX, server, [upload])
    assert new.weights["w"].item() == pytest.approx(2.0 + 0.5 * 4.0)
    assert new.weights["running"].item() == pytest.approx(4.0)


def test_server_lr_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"algo\.server_lr"):
        FedAvg(server_lr=0.0)
