"""pfl-research (pfl 0.6) with its PyTorch backend, as its benchmarks drive a simulation:
`FederatedAveraging.run` on a `SimulatedBackend` over a `FederatedDataset`, a `PyTorchModel` with a
local SGD optimizer and a central SGD at rate 1 (the averaged update applied as it is). Run inside
pfl's environment:

    python pfl_driver.py SPEC_FOLDER OUT.json

fedlight's draws are handed over: the user sampler yields fedlight's selection, round by round,
and a user's dataset is its index set in the order fedlight's generator shuffles it for that round
(pfl iterates a user's data in order, without reshuffling between epochs). The global model is
evaluated after the last round only, with peer_common's evaluation.
"""

import sys
import time

import peer_common
import pfl.version
import torch
from pfl.aggregate.simulate import SimulatedBackend
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.hyperparam import NNTrainHyperParams
from pfl.metrics import Metrics, Weighted
from pfl.model.pytorch import PyTorchModel
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812

FOLDER, OUT = sys.argv[1], sys.argv[2]
DATA = peer_common.spec(FOLDER)


class Module(nn.Module):
    """The workload's network with the `loss` and `metrics` pfl's PyTorchModel asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.net = DATA.net()

    def forward(self, x: Tensor) -> Tensor:
        return self.net(DATA.prepare(x))

    def loss(self, x: Tensor, y: Tensor, eval: bool = False) -> Tensor:
        self.eval() if eval else self.train()
        return F.cross_entropy(self(x), y)

    @torch.no_grad()
    def metrics(self, x: Tensor, y: Tensor, eval: bool = True) -> dict[str, Weighted]:
        self.eval()
        correct = int((self(x).argmax(dim=1) == y).sum())
        return {"accuracy": Weighted(correct, len(y))}


class Handed:
    """fedlight's selection, round after round, as pfl's user sampler; and each user's dataset,
    its index set in fedlight's order for the round being sampled."""

    def __init__(self) -> None:
        self.order = [(r, c) for r, chosen in enumerate(DATA["selections"], 1) for c in chosen]
        self.position = 0
        self.round_of: dict[int, int] = {}

    def __call__(self) -> int:
        round_index, client = self.order[self.position]
        self.position += 1
        self.round_of[client] = round_index
        return client

    def dataset(self, client: int) -> Dataset:
        seed = DATA["shuffle_seeds"][f"{self.round_of[client]}/{client}"]
        indices = DATA.clients[client]
        order = indices[torch.randperm(len(indices), generator=torch.Generator().manual_seed(seed))]
        return Dataset((DATA.train_x[order], DATA.train_y[order]), user_id=str(client))


class Boundaries(TrainingProcessCallback):
    """The wall-clock time at which round 1 begins and each round ends."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_begin(self, *, model: PyTorchModel) -> Metrics:
        self.times.append(time.time())
        return Metrics()

    def after_central_iteration(
        self, aggregate_metrics: Metrics, model: PyTorchModel, *, central_iteration: int
    ) -> tuple[bool, Metrics]:
        self.times.append(time.time())
        return False, Metrics()


def main() -> None:
    """FedAvg for the workload's rounds, then the final evaluation."""
    module = Module()
    model = PyTorchModel(
        model=module,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(module.parameters(), lr=1.0),
    )
    handed = Handed()
    backend = SimulatedBackend(
        training_data=FederatedDataset(handed.dataset, handed), val_data=None
    )
    boundaries = Boundaries()
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=DATA["rounds"],
            evaluation_frequency=DATA["rounds"] + 1,
            train_cohort_size=len(DATA["selections"][0]),
            val_cohort_size=0,
        ),
        backend=backend,
        model=model,
        model_train_params=NNTrainHyperParams(
            local_learning_rate=DATA["lr"],
            local_num_epochs=DATA["epochs"],
            local_batch_size=DATA["batch_size"],
        ),
        callbacks=[boundaries],
    )
    accuracy = peer_common.accuracy(module.net, DATA)
    boundaries.times[-1] = time.time()
    peer_common.report(OUT, "pfl", pfl.version.__version__, boundaries.times, accuracy)


if __name__ == "__main__":
    main()
