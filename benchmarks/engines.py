"""Benchmark: the sequential against the vectorized client engine (`fl.engine`), in one process.

Workloads (both FedAvg, E=1, B=10, SGD lr 0.05 without momentum, seed 0):
- W1 (McMahan et al., AISTATS 2017; as benchmarks/w1.py): MNIST, 100 clients, `shards` 2×300,
  10 clients per round, models `mlp` (2NN) and `cnn`, `--w1-rounds` rounds (default 20).
- CIFAR: CIFAR-10, `--cifar-clients` IID clients (default 1,000: 50 images each),
  `--cifar-per-round` of them per round (default 100), model `simple_cnn`, one round, with
  data=cifar10's default augmentation (random crop + flip).

Each contender is the FederatedLoop that `run_job` builds (same partition, initial weights,
selection and local seeds), differing only in `fl.engine`; timed is `run_round` over the rounds
(local training and aggregation; no evaluation), with a device synchronization before the clock
stops. Repeats alternate (sequential, vectorized, ...) after one untimed warm-up round of each.
Reported: local steps per second, best of the repeats (noise on a shared machine only adds time),
their ratio vectorized / sequential, and the largest difference between the two engines' final
global weights (they train the same batches, so it is float rounding). `fl.engine=auto` should
pick the vectorized engine on a device type only where this ratio is clearly above 1.

GPU (the measurement the README asks for; `--data-root` holds MNIST, `--cifar` is a tar.gz of
CIFAR-10 as an ImageFolder tree, extracted into a temporary folder):

    python benchmarks/engines.py --data-root data \
        --cifar cifar10-jpeg.tar.gz --device cuda

CPU, small sizes (a few minutes on 2 cores):

    OMP_NUM_THREADS=1 python benchmarks/engines.py --data-root data \
        --cifar cifar10-jpeg.tar.gz --device cpu --threads 1 \
        --w1-rounds 2 --cifar-clients 1000 --cifar-per-round 100

`--synthetic` replaces the datasets by random tensors of their shapes (speed does not depend on
pixel values), for machines without the data.
"""

import argparse
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import hydra
import torch

# Benchmark the working tree's fedlight, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlight.cli.job
import fedlight.cli.schema
from fedlight.core.messages import LocalResult
from fedlight.core.rng import Stream, derive_seed, numpy_generator
from fedlight.data.augment import CropFlip
from fedlight.data.base import TensorDataset
from fedlight.data.cifar10 import CIFAR10, MEAN, STD
from fedlight.data.mnist import MNIST
from fedlight.drivers.base import Clients
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.engines.base import LocalTask
from fedlight.runs.parallelism import resolve_device

ENGINES = ("sequential", "vectorized")
SEED = 0


@dataclass
class Workload:
    name: str
    model: str
    num_clients: int
    clients_per_round: int
    rounds: int
    overrides: list[str]  # data, partition


@dataclass
class Timing:
    seconds: float
    steps: int
    final_weights: dict[str, torch.Tensor]

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds


def build_loop(workload: Workload, engine: str, data: TensorDataset) -> FederatedLoop:
    """The FederatedLoop `run_job` would build for this workload (untimed)."""
    overrides = [
        *workload.overrides,
        f"model={workload.model}",
        f"seed={SEED}",
        f"fl.engine={engine}",
        "fl.workers=1",  # the loop runs in this process
        f"fl.num_clients={workload.num_clients}",
        f"fl.clients_per_round={workload.clients_per_round}",
        f"fl.rounds={workload.rounds}",
        "local.epochs=1",
        "local.batch_size=10",
        "optim.lr=0.05",
        "optim.momentum=0.0",
    ]
    with hydra.initialize_config_dir(config_dir=fedlight.cli.schema.CONF_DIR, version_base="1.3"):
        cfg = hydra.compose("config", overrides=overrides)
    job = fedlight.cli.job.build_job(cfg, choices={})
    labels = data.train_y.cpu().numpy()
    client_sets = job.partition(
        labels, workload.num_clients, numpy_generator(SEED, Stream.PARTITION)
    )
    device = data.train_x.device
    client_indices = [torch.as_tensor(s, dtype=torch.int64, device=device) for s in client_sets]
    torch.manual_seed(derive_seed(SEED, Stream.MODEL_INIT))
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes).to(device)
    return FederatedLoop(job.settings, Clients(data, client_indices), module, job.stages)


def count_steps(loop: FederatedLoop) -> list[int]:
    """Makes the loop's engine add every result's local steps to the returned one-item list."""
    steps = [0]
    train = loop.engine.train

    def counting(
        tasks: Sequence[LocalTask], round_index: int, lrs: Sequence[float]
    ) -> Iterator[LocalResult]:
        for result in train(tasks, round_index, lrs):
            steps[0] += result.num_steps
            yield result

    loop.engine.train = counting  # type: ignore[method-assign]
    return steps


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_rounds(workload: Workload, engine: str, data: TensorDataset) -> Timing:
    loop = build_loop(workload, engine, data)
    steps = count_steps(loop)
    synchronize(data.train_x.device)
    started = time.perf_counter()
    for round_index in range(1, workload.rounds + 1):
        loop.run_round(round_index)
    synchronize(data.train_x.device)
    return Timing(time.perf_counter() - started, steps[0], loop.server.weights)


def warm_up(workload: Workload, data: TensorDataset) -> None:
    """One untimed round of each engine (allocator, kernel selection, torch.func setup)."""
    for engine in ENGINES:
        build_loop(workload, engine, data).run_round(1)


def synthetic(shape: tuple[int, ...], train: int, test: int, augment: bool) -> TensorDataset:
    """Random inputs and labels of a dataset's shapes."""
    generator = torch.Generator().manual_seed(SEED)
    return TensorDataset(
        torch.randn(train, *shape, generator=generator),
        torch.randint(0, 10, (train,), generator=generator),
        torch.randn(test, *shape, generator=generator),
        torch.randint(0, 10, (test,), generator=generator),
        10,
        CropFlip(padding=4, fill=tuple(-m / s for m, s in zip(MEAN, STD, strict=True)))
        if augment
        else None,
    )


def load_mnist(args: argparse.Namespace) -> TensorDataset:
    if args.synthetic:
        return synthetic((1, 28, 28), 60_000, 10_000, augment=False)
    return MNIST(root=args.data_root, download=False).load()


def load_cifar(args: argparse.Namespace) -> TensorDataset:
    """CIFAR-10 from a folder fedlight reads, or from the ImageFolder archive (extracted)."""
    if args.synthetic:
        return synthetic((3, 32, 32), 50_000, 10_000, augment=True)
    source = Path(args.cifar)
    if source.is_dir():
        return CIFAR10(root=str(source), download=False).load()
    with tempfile.TemporaryDirectory(prefix="cifar10-") as folder:
        with tarfile.open(source) as archive:
            archive.extractall(folder, filter="data")
        return CIFAR10(root=folder, download=False).load()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({torch.get_num_threads()} threads)"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", help="folder holding MNIST/raw/*-ubyte")
    parser.add_argument(
        "--cifar", help="CIFAR-10: a folder data=cifar10 reads, or cifar10-jpeg.tar.gz"
    )
    parser.add_argument("--synthetic", action="store_true", help="random data of the shapes")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--w1-models", nargs="*", default=["mlp", "cnn"], choices=["mlp", "cnn"])
    parser.add_argument("--w1-rounds", type=int, default=20)
    parser.add_argument("--cifar-clients", type=int, default=1000)
    parser.add_argument("--cifar-per-round", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=torch.get_num_threads(), help="torch.set_num_threads"
    )
    args = parser.parse_args()
    if not args.synthetic and args.w1_models and args.data_root is None:
        parser.error("W1 needs --data-root (or --synthetic, or --w1-models with no model)")
    return args


def workloads(args: argparse.Namespace) -> list[tuple[Workload, str]]:
    """Each workload with the dataset it runs on ("mnist" or "cifar")."""
    chosen = [
        (
            Workload(
                "W1",
                model,
                100,
                10,
                args.w1_rounds,
                ["data=mnist", "partition=shards", "partition.shards_per_client=2"],
            ),
            "mnist",
        )
        for model in args.w1_models
    ]
    if args.synthetic or args.cifar is not None:
        cifar = Workload(
            "CIFAR-10",
            "simple_cnn",
            args.cifar_clients,
            args.cifar_per_round,
            1,
            ["data=cifar10", "partition=iid"],
        )
        chosen.append((cifar, "cifar"))
    return chosen


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    fedlight.cli.schema.register_schema()
    device = resolve_device(args.device)
    chosen = workloads(args)
    loaders = {"mnist": load_mnist, "cifar": load_cifar}
    datasets = {name: loaders[name](args).to(device) for name in {d for _, d in chosen}}

    rows = []
    for workload, dataset in chosen:
        data = datasets[dataset]
        warm_up(workload, data)
        timings: dict[str, list[Timing]] = {engine: [] for engine in ENGINES}
        for repeat in range(1, args.repeats + 1):
            for engine in ENGINES:
                timing = time_rounds(workload, engine, data)
                timings[engine].append(timing)
                print(
                    f"{workload.name} {workload.model} repeat {repeat} {engine:10s}: "
                    f"{timing.steps} steps in {timing.seconds:.2f} s = "
                    f"{timing.steps_per_second:.1f} steps/s",
                    flush=True,
                )
        best = {engine: max(t.steps_per_second for t in timings[engine]) for engine in ENGINES}
        final = {engine: timings[engine][-1].final_weights for engine in ENGINES}
        difference = max(
            (final["vectorized"][name] - final["sequential"][name]).abs().max().item()
            for name in final["sequential"]
        )
        rows.append((workload, best["sequential"], best["vectorized"], difference))

    print()
    source = "synthetic data" if args.synthetic else "real data"
    print(
        f"Engines on {device_name(device)}: torch {torch.__version__}, {source}, "
        f"best of {args.repeats} alternating repeats"
    )
    print()
    print(
        "| workload | model | clients (per round) | rounds | sequential steps/s "
        "| vectorized steps/s | ratio | max weight difference |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for workload, sequential, vectorized, difference in rows:
        print(
            f"| {workload.name} | `{workload.model}` | {workload.num_clients:,} "
            f"({workload.clients_per_round}) | {workload.rounds} | {sequential:.1f} "
            f"| {vectorized:.1f} | {vectorized / sequential:.2f} | {difference:.1e} |"
        )


if __name__ == "__main__":
    main()
