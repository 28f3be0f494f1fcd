"""What the peers' drivers share, in plain PyTorch and numpy (no fedlight import: the drivers load
this file in the peers' own environments, each of whose processes reads the spec once): the
networks, the per-batch input preparation, one client's local training, the evaluation and the
report a driver writes.

The networks are the same layers in the same order as fedlight's `mlp`, `cnn`, `simple_cnn` and
`pfl_cnn` (tested), so that under one seed every framework starts from the same weights.

McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data",
AISTATS 2017: the 2NN (two hidden layers of 200 ReLU units) and the CNN (5×5 convolutions of 32 and
64 channels, each with 2×2 max pooling, a 512-unit dense layer). NIID-Bench's LeNet (Li et al.,
ICDE 2022). pfl-research's CIFAR-10 CNN (Granqvist et al., arXiv 2404.06430, its benchmarks'
`simple_cnn`).
"""

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812


def mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """McMahan's 2NN, as `fedlight.models.mlp.MLP.net`."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(input_shape), 200),
        nn.ReLU(),
        nn.Linear(200, 200),
        nn.ReLU(),
        nn.Linear(200, num_classes),
    )


def cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """McMahan's CNN, as `fedlight.models.cnn.CNN.net` (each block pools before its ReLU: the
    same values and gradients as ReLU then pool, on a quarter of the elements)."""
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, 32, 5, padding=2),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * (height // 4) * (width // 4), 512),
        nn.ReLU(),
        nn.Linear(512, num_classes),
    )


def simple_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """NIID-Bench's LeNet, as `fedlight.models.simple_cnn.SimpleCNN.net` (pooling before ReLU, as
    fedlight's `cnn`)."""
    channels, height, width = input_shape
    features = 16 * (((height - 4) // 2 - 4) // 2) * (((width - 4) // 2 - 4) // 2)
    return nn.Sequential(
        nn.Conv2d(channels, 6, 5),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Conv2d(6, 16, 5),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(features, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, num_classes),
    )


def pfl_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """pfl-research's CIFAR-10 CNN, as `fedlight.models.pfl_cnn.PflCNN.net`: Glorot-uniform
    weights, dropout 0.25 and 0.5."""
    channels, height, width = input_shape
    net = nn.Sequential(
        nn.Conv2d(channels, 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(64 * ((height - 4) // 2) * ((width - 4) // 2), 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, num_classes),
    )
    for layer in (net[0], net[2], net[7], net[10]):
        nn.init.xavier_uniform_(layer.weight)
    return net


NETS = {"mlp": mlp, "cnn": cnn, "simple_cnn": simple_cnn, "pfl_cnn": pfl_cnn}


def build(name: str, input_shape: tuple[int, ...], num_classes: int, seed: int) -> nn.Module:
    """The network `name` with the initial weights fedlight draws under `seed`."""
    torch.manual_seed(seed)
    return NETS[name](tuple(input_shape), num_classes)


class Prepare:
    """uint8 images to model inputs per batch, as fedlight's `Normalization`: (x/255 − mean)/std
    per channel, the same values bit for bit."""

    def __init__(self, mean: list[float], std: list[float], device: str = "cpu") -> None:
        self.mean = torch.tensor(mean).view(-1, 1, 1).to(device)
        self.std = torch.tensor(std).view(-1, 1, 1).to(device)

    def __call__(self, images: Tensor) -> Tensor:
        return (images.float() / 255.0 - self.mean).div_(self.std)


class Spec:
    """spec.json and data.npz of a folder written by `benchmarks.peers.spec`, as tensors on the
    workload's device (`device`: the whole data set held there, as fedlight holds it)."""

    def __init__(self, folder: Path) -> None:
        self.content: dict[str, Any] = json.loads((folder / "spec.json").read_text())
        self.device = torch.device(self.content["device"])
        arrays = np.load(folder / "data.npz")
        self.train_x = torch.from_numpy(arrays["train_x"]).to(self.device)
        self.train_y = torch.from_numpy(arrays["train_y"]).to(self.device)
        self.test_x = torch.from_numpy(arrays["test_x"]).to(self.device)
        self.test_y = torch.from_numpy(arrays["test_y"]).to(self.device)
        self.clients = [
            torch.tensor(s, dtype=torch.int64, device=self.device) for s in self.content["clients"]
        ]
        self.prepare = Prepare(self.content["mean"], self.content["std"], self.content["device"])

    def __getitem__(self, key: str) -> Any:
        return self.content[key]

    def net(self) -> nn.Module:
        """The workload's network with the initial weights fedlight draws, on the device."""
        net = build(self["model"], self["input_shape"], self["num_classes"], self["init_seed"])
        return net.to(self.device)

    def optimizer(self, net: nn.Module) -> torch.optim.Optimizer:
        """The workload's local SGD (its rate, momentum and weight decay) over `net`."""
        return torch.optim.SGD(
            net.parameters(),
            lr=self["lr"],
            momentum=self["momentum"],
            weight_decay=self["weight_decay"],
        )

    def seed_dropout(self, seed: int) -> None:
        """Seed the global generator a module's own randomness (dropout) draws from on the device,
        as fedlight's `seed_torch` does: on a CPU run the CPU's alone (torch.manual_seed would also
        queue the seed, at a cost, for accelerators that never start)."""
        if self.device.type == "cpu":
            torch.default_generator.manual_seed(seed)
        else:
            torch.manual_seed(seed)

    def epoch_order(self, client: int, generator: torch.Generator) -> Tensor:
        """One epoch's order of the client's index set: a permutation drawn on the CPU from the
        client's generator for the round, as fedlight's engines draw it on every device."""
        indices = self.clients[client]
        return indices[torch.randperm(len(indices), generator=generator).to(self.device)]


LOADED: dict[str, Spec] = {}


def spec(folder: str) -> Spec:
    """The spec in `folder`, read once per process (a simulator's worker processes each read it)."""
    if folder not in LOADED:
        torch.set_num_threads(int(json.loads((Path(folder) / "spec.json").read_text())["threads"]))
        LOADED[folder] = Spec(Path(folder))
    return LOADED[folder]


def train_client(net: nn.Module, data: Spec, client: int, round_index: int) -> int:
    """One client's local training as every framework runs it: the workload's SGD, E epochs over
    its index set reshuffled each epoch (by fedlight's seed for the client's round, which also
    seeds torch's global generators for dropout, as fedlight's engines do), batches of B formed by
    indexing the held tensors (no per-sample loader in any framework). The examples trained on."""
    optimizer = data.optimizer(net)
    seed = data["shuffle_seeds"][f"{round_index}/{client}"]
    generator = torch.Generator().manual_seed(seed)
    data.seed_dropout(seed)
    net.train()
    for _ in range(data["epochs"]):
        order = data.epoch_order(client, generator)
        for batch in order.split(data["batch_size"]):
            loss = F.cross_entropy(net(data.prepare(data.train_x[batch])), data.train_y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return int(data["epochs"]) * len(data.clients[client])


@torch.no_grad()
def accuracy(net: nn.Module, data: Spec) -> float:
    """Test accuracy of `net` over the whole test set, in batches of the eval batch size."""
    net.eval()
    size = data["eval_batch_size"]
    correct = 0
    for x, y in zip(data.test_x.split(size), data.test_y.split(size), strict=True):
        correct += int((net(data.prepare(x)).argmax(dim=1) == y).sum())
    return correct / len(data.test_y)


def report(path: str, framework: str, version: str, boundaries: list[float], acc: float) -> None:
    """The driver's result: the wall-clock times (time.time()) at which round 1 began and each
    round ended, the final accuracy, and the versions it ran with."""
    Path(path).write_text(
        json.dumps(
            {
                "framework": framework,
                "version": version,
                "torch": torch.__version__,
                "python": sys.version.split()[0],
                "boundaries": boundaries,
                "accuracy": acc,
                "torch_threads": torch.get_num_threads(),
                "pid": os.getpid(),
                "ended": time.time(),
            }
        )
    )
