"""pfl-research (pfl 0.6) with its PyTorch backend, as its benchmarks drive a simulation:
`FederatedAveraging.run` on a `SimulatedBackend` over a `FederatedDataset`, a `PyTorchModel` with a
local SGD optimizer and a central SGD at rate 1 (the averaged update applied as it is). Run inside
pfl's environment:

    python pfl_driver.py SPEC_FOLDER OUT.json

fedlight's draws are handed over: the user sampler yields fedlight's selection, round by round,
and a user's dataset is its index set, which each local epoch iterates in the order fedlight's
generator draws for the user's round (a pfl `Dataset` whose `iter` reshuffles per epoch: pfl's own
iterates a user's data in one order every epoch), the first epoch also seeding dropout as
fedlight's engines do. The local optimizer is the workload's SGD (momentum, weight decay), the
users' updates are weighted by their examples (`WeightByDatapoints`, what pfl's benchmarks use with
`weight_by_samples`; fedlight's FedAvg weights so), and the model and data live on the workload's
device (`PFL_PYTORCH_DEVICE`, set by the benchmark). The global model is evaluated after the last
round only, with peer_common's evaluation.
"""

import functools
import sys
import time
from collections.abc import Iterator

import peer_common
import pfl.version
import torch
from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByDatapoints
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
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
        return EpochShuffled(client, DATA["shuffle_seeds"][f"{self.round_of[client]}/{client}"])


class EpochShuffled(Dataset):
    """A user's examples for one round. Local training iterates them once per epoch in batches
    of B, each time in a fresh order from fedlight's generator for the user's round (the first
    time also seeding dropout); any other iteration (pfl's evaluation of the user in its first
    round, in batches of the evaluation batch size) sees them as held."""

    def __init__(self, client: int, seed: int) -> None:
        indices = DATA.clients[client]
        super().__init__((DATA.train_x[indices], DATA.train_y[indices]), user_id=str(client))
        self.client, self.seed = client, seed
        self.generator: torch.Generator | None = None

    def iter(self, batch_size: int | None) -> Iterator:
        if batch_size != DATA["batch_size"]:
            yield from super().iter(batch_size)
            return
        if self.generator is None:
            self.generator = torch.Generator().manual_seed(self.seed)
            DATA.seed_dropout(self.seed)
        order = DATA.epoch_order(self.client, self.generator)
        x, y = DATA.train_x[order], DATA.train_y[order]
        yield from zip(x.split(batch_size), y.split(batch_size), strict=True)


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
        local_optimizer_create=functools.partial(
            torch.optim.SGD, momentum=DATA["momentum"], weight_decay=DATA["weight_decay"]
        ),
        central_optimizer=torch.optim.SGD(module.parameters(), lr=1.0),
    )
    handed = Handed()
    backend = SimulatedBackend(
        training_data=FederatedDataset(handed.dataset, handed),
        val_data=None,
        postprocessors=[WeightByDatapoints()],
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
        model_eval_params=NNEvalHyperParams(local_batch_size=DATA["eval_batch_size"]),
        callbacks=[boundaries],
    )
    accuracy = peer_common.accuracy(module.net, DATA)
    boundaries.times[-1] = time.time()
    peer_common.report(OUT, "pfl", pfl.version.__version__, boundaries.times, accuracy)


if __name__ == "__main__":
    main()
