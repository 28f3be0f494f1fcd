"""What the peers' drivers share, in plain PyTorch and numpy (no fedlight import: the drivers load
this file in the peers' own environments, each of whose processes reads the spec once): the
networks, the per-batch input preparation, one client's local training, the evaluation and the
report a driver writes.

The networks are The same layers in the same order as fedlight's `mlp`
and `cnn` (tested), so that under one seed every framework starts from the same weights.

McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data",
AISTATS 2017: the 2NN (two hidden layers of 200 ReLU units) and the CNN (5×5 convolutions of 32 and
64 channels, each with 2×2 max pooling, a 512-unit dense layer).
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


NETS = {"mlp": mlp, "cnn": cnn}


def build(name: str, input_shape: tuple[int, ...], num_classes: int, seed: int) -> nn.Module:
    """The network `name` with the initial weights fedlight draws under `seed`."""
    torch.manual_seed(seed)
    return NETS[name](tuple(input_shape), num_classes)


class Prepare:
    """uint8 images to model inputs per batch, as fedlight's `Normalization`: (x/255 − mean)/std
    per channel, the same values bit for bit."""

    def __init__(self, mean: list[float], std: list[float]) -> None:
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, images: Tensor) -> Tensor:
        return (images.float() / 255.0 - self.mean).div_(self.std)


class Spec:
    """spec.json and data.npz of a folder written by `benchmarks.peers.spec`, as tensors."""

    def __init__(self, folder: Path) -> None:
        self.content: dict[str, Any] = json.loads((folder / "spec.json").read_text())
        arrays = np.load(folder / "data.npz")
        self.train_x = torch.from_numpy(arrays["train_x"])
        self.train_y = torch.from_numpy(arrays["train_y"])
        self.test_x = torch.from_numpy(arrays["test_x"])
        self.test_y = torch.from_numpy(arrays["test_y"])
        self.clients = [torch.tensor(s, dtype=torch.int64) for s in self.content["clients"]]
        self.prepare = Prepare(self.content["mean"], self.content["std"])

    def __getitem__(self, key: str) -> Any:
        return self.content[key]

    def net(self) -> nn.Module:
        """The workload's network with the initial weights fedlight draws."""
        return build(self["model"], self["input_shape"], self["num_classes"], self["init_seed"])


LOADED: dict[str, Spec] = {}


def spec(folder: str) -> Spec:
    """The spec in `folder`, read once per process (a simulator's worker processes each read it)."""
    if folder not in LOADED:
        torch.set_num_threads(int(json.loads((Path(folder) / "spec.json").read_text())["threads"]))
        LOADED[folder] = Spec(Path(folder))
    return LOADED[folder]


def train_client(net: nn.Module, data: Spec, client: int, round_index: int) -> int:
    """One client's local training as every framework runs it: SGD at the workload's rate without
    momentum, E epochs over its index set reshuffled each epoch (by fedlight's seed for the client's
    round), batches of B formed by indexing
    the held tensors (no per-sample loader in any framework). The examples trained on."""
    optimizer = torch.optim.SGD(net.parameters(), lr=data["lr"])
    seed = data["shuffle_seeds"][f"{round_index}/{client}"]
    generator = torch.Generator().manual_seed(seed)
    indices = data.clients[client]
    net.train()
    for _ in range(data["epochs"]):
        order = indices[torch.randperm(len(indices), generator=generator)]
        for batch in order.split(data["batch_size"]):
            loss = F.cross_entropy(net(data.prepare(data.train_x[batch])), data.train_y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return int(data["epochs"]) * len(indices)


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
