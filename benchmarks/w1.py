"""Benchmark W1: fedlight's FederatedLoop against a minimal hand-written PyTorch FedAvg loop.

Workload W1 (McMahan et al., AISTATS 2017): MNIST, 100 clients, pathological non-IID `shards`
partition (2 shards × 300 samples per client), FedAvg with 10 clients per round, E=1 local epoch,
batch B=10, SGD lr 0.05 without momentum, 20 rounds, models `mlp` (2NN) and `cnn`.
That is 20 rounds × 10 clients × 60 steps = 12,000 local SGD steps per run.

Both contenders run in this one process on the CPU, with the same thread count, the same in-memory
data tensors (MNIST is decoded once, outside the timed region) and the same client index sets,
client selection, local shuffling seeds and initial weights, so they compute the same training and
should reach the same final accuracy (printed as a sanity check). Repeats alternate
(fedlight, hand-written, fedlight, ...) after one untimed one-round warm-up of each.

- fedlight: the real Hydra config is composed, `fedlight.cli.job.build_job` builds the job and the
  whole `fedlight.runs.experiment.run_job` call into a temporary directory is timed (partition,
  local training, aggregation, the final evaluation, metrics, plots and the checkpoint).
- hand-written: per round sample the clients; for each, copy the global weights into the model,
  shuffle its indices, run SGD over batches of B, and add its weights into a sample-weighted
  average; then one evaluation on the 10k test set.

Reported: steps/s of each, best of the repeats (noise on a shared machine only ever adds time, so
the fastest repeat is the steadiest estimate), and their ratio fedlight / hand-written.

Run (about 16 minutes on 2 CPU cores, the cnn dominating):

    python benchmarks/w1.py --data-root data
    python benchmarks/w1.py --data-root data --models mlp --rounds 2 --repeats 1
"""

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import hydra
import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812

# Benchmark the working tree's fedlight, installed or not (`python benchmarks/w1.py` puts only
# benchmarks/ on the path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlight.cli.job
import fedlight.cli.schema
from fedlight.core.rng import Stream, derive_seed, numpy_generator
from fedlight.data.base import TensorDataset
from fedlight.data.mnist import MNIST
from fedlight.models.cnn import CNN
from fedlight.models.mlp import MLP
from fedlight.partitions.shards import Shards
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job

SEED = 0
NUM_CLIENTS = 100
CLIENTS_PER_ROUND = 10
SHARDS_PER_CLIENT = 2
LOCAL_EPOCHS = 1
BATCH_SIZE = 10
LR = 0.05
SAMPLES_PER_CLIENT = 60_000 // (NUM_CLIENTS * SHARDS_PER_CLIENT) * SHARDS_PER_CLIENT  # 600
STEPS_PER_CLIENT = LOCAL_EPOCHS * -(-SAMPLES_PER_CLIENT // BATCH_SIZE)  # 60
EVAL_BATCH_SIZE = 1000  # fedlight's eval.batch_size default
MODELS = ("mlp", "cnn")


@dataclass
class Preloaded:
    """A data source whose `load()` returns tensors decoded once, outside the timed region."""

    dataset: TensorDataset

    def load(self) -> TensorDataset:
        return self.dataset


@dataclass
class Result:
    seconds: float
    steps: int
    accuracy: float
    loop_seconds: float | None = None  # fedlight only: FederatedLoop.run up to the last evaluation

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds


# ---------------------------------------------------------------------------------------------
# fedlight


def fedlight_job(
    model: str, data: TensorDataset, rounds: int, overrides: Sequence[str] = ()
) -> Job:
    """W1 as a fedlight job from the real Hydra config (plus `overrides`), on preloaded data."""
    w1_overrides = [
        "data=mnist",
        f"model={model}",
        "partition=shards",
        f"partition.shards_per_client={SHARDS_PER_CLIENT}",
        f"seed={SEED}",
        "device=cpu",
        f"fl.num_clients={NUM_CLIENTS}",
        f"fl.clients_per_round={CLIENTS_PER_ROUND}",
        f"fl.rounds={rounds}",
        f"local.epochs={LOCAL_EPOCHS}",
        f"local.batch_size={BATCH_SIZE}",
        f"optim.lr={LR}",
        "optim.momentum=0.0",
        f"eval.every={rounds}",
        f"eval.batch_size={EVAL_BATCH_SIZE}",
        f"checkpoint.every={rounds}",
        *overrides,
    ]
    with hydra.initialize_config_dir(config_dir=fedlight.cli.schema.CONF_DIR, version_base="1.3"):
        cfg = hydra.compose("config", overrides=w1_overrides)
    choices = {"data": "mnist", "model": model, "partition": "shards", "algo": "fedavg"}
    job = fedlight.cli.job.build_job(cfg, choices=choices)
    job.data = Preloaded(data)
    return job


def run_fedlight(model: str, data: TensorDataset, rounds: int) -> Result:
    """One `run_job` of W1 through the real Hydra config; only `run_job` itself is timed."""
    job = fedlight_job(model, data, rounds)
    with tempfile.TemporaryDirectory(prefix="w1-fedlight-") as output_dir:
        started = time.perf_counter()
        summary = run_job(job, Path(output_dir))
        seconds = time.perf_counter() - started
    steps = rounds * CLIENTS_PER_ROUND * STEPS_PER_CLIENT
    return Result(seconds, steps, float(summary["final_accuracy"]), summary["wall_seconds"])


# ---------------------------------------------------------------------------------------------
# hand-written FedAvg


def mlp_net(num_classes: int) -> nn.Module:
    """McMahan's 2NN: the same layers, in the same order, as `fedlight.models.mlp.MLP.net`."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(28 * 28, 200),
        nn.ReLU(),
        nn.Linear(200, 200),
        nn.ReLU(),
        nn.Linear(200, num_classes),
    )


def cnn_net(num_classes: int) -> nn.Module:
    """McMahan's CNN: the same layers, in the same order, as `fedlight.models.cnn.CNN.net`."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 512),
        nn.ReLU(),
        nn.Linear(512, num_classes),
    )


HAND_NETS: dict[str, Callable[[int], nn.Module]] = {"mlp": mlp_net, "cnn": cnn_net}
FEDLIGHT_MODELS = {"mlp": MLP, "cnn": CNN}


def run_hand(model: str, data: TensorDataset, client_indices: list[Tensor], rounds: int) -> Result:
    """Plain PyTorch FedAvg on the same tensors; the whole function body is timed."""
    started = time.perf_counter()
    torch.manual_seed(derive_seed(SEED, Stream.MODEL_INIT))
    net = HAND_NETS[model](data.num_classes)
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    global_weights = {k: v.detach().clone() for k, v in net.state_dict().items()}
    steps = 0
    for round_index in range(1, rounds + 1):
        rng = numpy_generator(SEED, Stream.SELECTION, round_index)
        clients = sorted(int(c) for c in rng.choice(NUM_CLIENTS, CLIENTS_PER_ROUND, replace=False))
        total = sum(len(client_indices[c]) for c in clients)
        averaged = {k: torch.zeros_like(v) for k, v in global_weights.items()}
        for client in clients:
            net.load_state_dict(global_weights)
            net.train()
            seed = derive_seed(SEED, Stream.LOCAL_TRAINING, round_index, client)
            generator = torch.Generator().manual_seed(seed)
            indices = client_indices[client]
            for _ in range(LOCAL_EPOCHS):
                order = indices[torch.randperm(len(indices), generator=generator)]
                for batch in order.split(BATCH_SIZE):
                    inputs = data.prepare(data.train_x[batch])
                    loss = F.cross_entropy(net(inputs), data.train_y[batch])
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    steps += 1
            weight = len(indices) / total
            for name, value in net.state_dict().items():
                averaged[name].add_(value, alpha=weight)
        global_weights = averaged
    accuracy = evaluate(net, global_weights, data)
    return Result(time.perf_counter() - started, steps, accuracy)


@torch.no_grad()
def evaluate(net: nn.Module, weights: dict[str, Tensor], data: TensorDataset) -> float:
    net.load_state_dict(weights)
    net.eval()
    correct = 0
    for x, y in zip(
        data.test_x.split(EVAL_BATCH_SIZE), data.test_y.split(EVAL_BATCH_SIZE), strict=True
    ):
        correct += int((net(data.prepare(x)).argmax(dim=1) == y).sum())
    return correct / len(data.test_y)


# ---------------------------------------------------------------------------------------------
# setup checks and the driver


def check_same_architecture(model: str, data: TensorDataset) -> None:
    """The hand-written net has fedlight's layers and, under the same seed, its initial weights."""
    torch.manual_seed(derive_seed(SEED, Stream.MODEL_INIT))
    reference = FEDLIGHT_MODELS[model](
        input_shape=data.input_shape, num_classes=data.num_classes, lr=LR
    ).net
    torch.manual_seed(derive_seed(SEED, Stream.MODEL_INIT))
    hand = HAND_NETS[model](data.num_classes)
    expected, actual = reference.state_dict(), hand.state_dict()
    assert expected.keys() == actual.keys(), f"{model}: layers differ from fedlight's"
    for name, tensor in expected.items():
        assert torch.equal(tensor, actual[name]), f"{model}: {name} differs from fedlight's"


def shard_client_indices(data: TensorDataset) -> list[Tensor]:
    """fedlight's own partition of W1: the same Shards scheme and generator as `run_job`."""
    labels = data.train_y.numpy()
    client_sets: list[np.ndarray] = Shards(shards_per_client=SHARDS_PER_CLIENT)(
        labels, NUM_CLIENTS, numpy_generator(SEED, Stream.PARTITION)
    )
    return [torch.as_tensor(s, dtype=torch.int64) for s in client_sets]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, help="folder holding MNIST/raw/*-ubyte")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--threads", type=int, default=torch.get_num_threads(), help="torch.set_num_threads"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    fedlight.cli.schema.register_schema()
    data = MNIST(root=args.data_root, download=False).load()
    client_indices = shard_client_indices(data)
    assert all(len(s) == SAMPLES_PER_CLIENT for s in client_indices)

    rows = []
    for model in args.models:
        check_same_architecture(model, data)
        run_fedlight(model, data, rounds=1)  # untimed warm-up of both contenders
        run_hand(model, data, client_indices, rounds=1)
        fedlight_runs: list[Result] = []
        hand_runs: list[Result] = []
        for repeat in range(1, args.repeats + 1):
            fedlight_runs.append(run_fedlight(model, data, args.rounds))
            hand_runs.append(run_hand(model, data, client_indices, args.rounds))
            for name, result in (("fedlight", fedlight_runs[-1]), ("hand", hand_runs[-1])):
                loop = "" if result.loop_seconds is None else f" (loop {result.loop_seconds:.2f} s)"
                print(
                    f"{model} repeat {repeat} {name:8s}: {result.steps} steps in "
                    f"{result.seconds:.2f} s{loop} = {result.steps_per_second:.1f} steps/s, "
                    f"final accuracy {result.accuracy:.4f}",
                    flush=True,
                )
        fedlight_rate = max(r.steps_per_second for r in fedlight_runs)
        hand_rate = max(r.steps_per_second for r in hand_runs)
        rows.append(
            (
                model,
                fedlight_rate,
                hand_rate,
                fedlight_runs[-1].accuracy,
                hand_runs[-1].accuracy,
            )
        )

    print()
    print(
        f"W1: torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds, "
        f"best of {args.repeats} alternating repeats"
    )
    print()
    print("| model | fedlight steps/s | hand-written steps/s | ratio | accuracy fedlight / hand |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for model, fedlight_rate, hand_rate, fedlight_acc, hand_acc in rows:
        print(
            f"| {model} | {fedlight_rate:.1f} | {hand_rate:.1f} | {fedlight_rate / hand_rate:.3f} "
            f"| {fedlight_acc:.4f} / {hand_acc:.4f} |"
        )


if __name__ == "__main__":
    main()
