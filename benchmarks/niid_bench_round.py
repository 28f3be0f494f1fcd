"""Benchmark: one round of Flower's niid_bench setting through fedlight and a plain eager loop.

The setting (`+experiment=niid_bench`, NIID-Bench's): Fashion-MNIST, 10 clients (Dirichlet α = 0.5,
all of them every round), E = 10 local epochs, B = 64, SGD lr 0.01 momentum 0.9 weight decay 1e-5,
`simple_cnn` (LeNet), evaluated on the 10,000 test images after the round: 600,000 local samples
per round. Contenders, alternating in this one process after an untimed warm-up round (E = 1) of
each, on the same decoded tensors and the same client index sets:

- `fedlight`: the real Hydra config with fedlight's defaults (`fl.workers=auto`,
  `fl.memory_format=auto`), the whole `run_job` timed (the workers' start, partition, training,
  aggregation, evaluation, metrics, plots, checkpoint);
- `fedlight_before`: the same with `fl.workers=1 fl.memory_format=contiguous`, the settings of
  fedlight before they became `auto` (one process, the contiguous layout; its numbers equal the
  commit before, see docs/speed-and-memory.md);
- `hand`: what a user would write: one process, this process's torch threads (2 on this
  project's machine), the contiguous layout; per client the global weights loaded, a fresh SGD,
  E shuffled epochs over its indices, a sample-weighted average; then the test set in batches of
  1,000 under `torch.no_grad`;
- `ceiling`: the same loop as fedlight's defaults would run it with nothing else: channels-last,
  one forked single-threaded process per torch thread, each with its share of the clients
  (balanced by size), their weighted sums added by the parent, which evaluates: the most two
  single-threaded workers can do on this machine, fork, transfer and evaluation included.

Reported: samples per second of each (the best repeat: noise on a shared machine only adds time)
and the ratios, measured in this run; the evaluation's seconds and share of a round in the
`fedlight_before` and `fedlight` layouts (the evaluator alone, timed on the initial model); and
the 50-round job estimated from each contender's round (50 times the round as metrics.csv times it,
plus once what the one-round job spent outside it: start, summary, figures).

    python benchmarks/niid_bench_round.py --data-root data               # ~11 minutes
    python benchmarks/niid_bench_round.py --data-root data --repeats 1 --epochs 2
"""

import argparse
import csv
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import open_dict
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlight.cli.job
import fedlight.cli.schema
from fedlight.core.layout import LAYOUTS
from fedlight.core.rng import Stream, derive_seed, numpy_generator
from fedlight.data.base import TensorDataset
from fedlight.data.fmnist import FashionMNIST
from fedlight.engines.evaluator import Evaluator
from fedlight.models.simple_cnn import SimpleCNN
from fedlight.runs.experiment import Loaded, run_job
from fedlight.runs.job import Job

SEED = 0
CLIENTS = 10
BATCH_SIZE = 64
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 1e-5
EVAL_BATCH_SIZE = 1000
FULL_ROUNDS = 50
CONTENDERS = ("fedlight", "fedlight_before", "hand", "ceiling")
BEFORE = ("fl.workers=1", "fl.memory_format=contiguous")


@dataclass
class Result:
    seconds: float
    samples: int
    accuracy: float
    round_seconds: float | None = None  # fedlight: the round in metrics.csv (wall_seconds)

    @property
    def rate(self) -> float:
        return self.samples / self.seconds


def niid_bench_job(data: TensorDataset, epochs: int, overrides: Sequence[str]) -> Job:
    """One niid_bench FedAvg round (Dirichlet α = 0.5) from the real config, on preloaded data."""
    with hydra.initialize_config_dir(config_dir=fedlight.cli.schema.CONF_DIR, version_base="1.3"):
        cfg = hydra.compose(
            "config",
            overrides=[
                "+experiment=niid_bench",
                "+experiment/niid_bench=fedavg",
                "partition=dirichlet",
                f"seed={SEED}",
                "device=cpu",
                "fl.rounds=1",
                f"local.epochs={epochs}",
                *overrides,
            ],
            return_hydra_config=True,
        )
    choices = fedlight.cli.job.group_choices(cfg, cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    job = fedlight.cli.job.build_job(cfg, choices=choices)
    job.data = Loaded(data)  # decoded once, outside the timed region
    return job


def client_sets(job: Job, data: TensorDataset) -> list[Tensor]:
    """fedlight's own partition of the run: the same scheme and generator as `run_job`."""
    sets = job.partition(job.partition.keys(data), CLIENTS, numpy_generator(SEED, Stream.PARTITION))
    return [torch.as_tensor(np.asarray(s), dtype=torch.int64) for s in sets]


def run_fedlight(job: Job, samples: int) -> Result:
    with tempfile.TemporaryDirectory(prefix="niid-bench-round-") as output_dir:
        started = time.perf_counter()
        summary = run_job(job, Path(output_dir))
        seconds = time.perf_counter() - started
        with (Path(output_dir) / "metrics.csv").open() as f:
            round_seconds = float(next(csv.DictReader(f))["wall_seconds"])
    return Result(seconds, samples, float(summary["final_accuracy"]), round_seconds)


def simple_cnn(num_classes: int) -> nn.Module:
    """NIID-Bench's LeNet, the layers of `fedlight.models.simple_cnn` in their order."""
    return nn.Sequential(
        nn.Conv2d(1, 6, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, num_classes),
    )


def run_hand(data: TensorDataset, clients: list[Tensor], epochs: int) -> Result:
    """The plain eager FedAvg round; the whole function body is timed."""
    started = time.perf_counter()
    net, global_weights = initial_model(data)
    averaged, samples = train_clients(net, global_weights, data, clients, range(CLIENTS), epochs)
    accuracy = evaluate(net, averaged, data)
    return Result(time.perf_counter() - started, samples, accuracy)


def initial_model(data: TensorDataset) -> tuple[nn.Module, dict[str, Tensor]]:
    torch.manual_seed(derive_seed(SEED, Stream.MODEL_INIT))
    net = simple_cnn(data.num_classes)
    return net, {k: v.detach().clone() for k, v in net.state_dict().items()}


def train_clients(
    net: nn.Module,
    global_weights: dict[str, Tensor],
    data: TensorDataset,
    clients: list[Tensor],
    chosen: Sequence[int],
    epochs: int,
) -> tuple[dict[str, Tensor], int]:
    """The `chosen` clients' local training: their sample-weighted sum of weights (weights by
    the round's total) and the samples trained."""
    total = sum(len(indices) for indices in clients)
    averaged = {k: torch.zeros_like(v) for k, v in global_weights.items()}
    samples = 0
    for client in chosen:
        indices = clients[client]
        net.load_state_dict(global_weights)
        net.train()
        optimizer = torch.optim.SGD(
            net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY
        )
        generator = torch.Generator().manual_seed(
            derive_seed(SEED, Stream.LOCAL_TRAINING, 1, client)
        )
        for _ in range(epochs):
            for batch in indices[torch.randperm(len(indices), generator=generator)].split(
                BATCH_SIZE
            ):
                loss = F.cross_entropy(net(data.prepare(data.train_x[batch])), data.train_y[batch])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                samples += len(batch)
        for name, value in net.state_dict().items():
            averaged[name].add_(value, alpha=len(indices) / total)
    return averaged, samples


def ceiling_share(
    args: tuple[TensorDataset, list[Tensor], list[int], int], pipe: Connection
) -> None:
    """A forked process's share of the `ceiling` round: one thread, channels-last."""
    data, clients, chosen, epochs = args
    torch.set_num_threads(1)
    layout = LAYOUTS["channels_last"]
    net, global_weights = initial_model(data)
    net = net.to(memory_format=torch.channels_last)
    prepared = TensorDataset(**{**data.__dict__, "layout": layout})
    summed, samples = train_clients(net, global_weights, prepared, clients, chosen, epochs)
    pipe.send(({k: v.numpy() for k, v in summed.items()}, samples))  # arrays: sent by value


def run_ceiling(data: TensorDataset, clients: list[Tensor], epochs: int) -> Result:
    """Two (one per torch thread) single-threaded channels-last shares of the plain round."""
    started = time.perf_counter()
    shares: list[list[int]] = [[] for _ in range(torch.get_num_threads())]
    for client in sorted(range(CLIENTS), key=lambda c: -len(clients[c])):  # largest first
        min(shares, key=lambda share: sum(len(clients[c]) for c in share)).append(client)
    context = multiprocessing.get_context("fork")
    pipes, processes = [], []
    for share in shares:
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(
            target=ceiling_share, args=((data, clients, share, epochs), sender)
        )
        process.start()
        pipes.append(receiver)
        processes.append(process)
    results = [pipe.recv() for pipe in pipes]
    for process in processes:
        process.join()
    net, _ = initial_model(data)
    averaged = {k: torch.from_numpy(sum(summed[k] for summed, _ in results)) for k in results[0][0]}
    accuracy = evaluate(net, averaged, data)
    return Result(time.perf_counter() - started, sum(n for _, n in results), accuracy)


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


def evaluation_seconds(data: TensorDataset, layout: str, threads: int, repeats: int) -> float:
    """fedlight's evaluator on the test set in `layout` with `threads` torch threads, best of
    `repeats`."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(derive_seed(SEED, Stream.MODEL_INIT))
    module = LAYOUTS[layout].apply(SimpleCNN(data.input_shape, data.num_classes, lr=LR))
    prepared = TensorDataset(**{**data.__dict__, "layout": LAYOUTS[layout]})
    evaluator = Evaluator(module, EVAL_BATCH_SIZE, prepared.prepare)
    weights = {k: v.clone() for k, v in module.state_dict().items()}
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        evaluator.evaluate(weights, data.test_x, data.test_y)
        times.append(time.perf_counter() - started)
    torch.set_num_threads(before)
    return min(times)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, help="folder holding FashionMNIST/raw/")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10, help="local epochs (the setting's: 10)")
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    fedlight.cli.schema.register_schema()
    data = FashionMNIST(root=args.data_root, download=False).load()
    overrides: dict[str, tuple[str, ...]] = {"fedlight": (), "fedlight_before": BEFORE}
    clients = client_sets(niid_bench_job(data, 1, ()), data)
    samples = args.epochs * sum(len(indices) for indices in clients)
    runners: dict[str, Callable[[int], Result]] = {
        name: (
            lambda epochs, name=name: run_fedlight(
                niid_bench_job(data, epochs, overrides[name]),
                epochs * sum(len(i) for i in clients),
            )
        )
        for name in overrides
    }
    runners["hand"] = lambda epochs: run_hand(data, clients, epochs)
    runners["ceiling"] = lambda epochs: run_ceiling(data, clients, epochs)
    for name in args.contenders:  # untimed warm-up: imports, first allocations
        runners[name](1)
    results: dict[str, list[Result]] = {name: [] for name in args.contenders}
    for repeat in range(1, args.repeats + 1):
        for name in args.contenders:
            result = runners[name](args.epochs)
            results[name].append(result)
            loop = "" if result.round_seconds is None else f" (round {result.round_seconds:.1f} s)"
            print(
                f"repeat {repeat} {name:15s}: {result.samples} samples in {result.seconds:.1f} s"
                f"{loop} = {result.rate:.0f} samples/s, accuracy {result.accuracy:.4f}",
                flush=True,
            )
    report(args, data, results, samples)


def report(
    args: argparse.Namespace,
    data: TensorDataset,
    results: dict[str, list[Result]],
    samples: int,
) -> None:
    best = {name: max(r.rate for r in runs) for name, runs in results.items()}
    print(
        f"\nniid_bench round: torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"E={args.epochs}, {samples} samples per round, best of {args.repeats} alternating "
        "repeats\n"
    )
    print(
        "| contender | samples/s | × hand | 1-round job (s) | round alone (s) | 50 rounds (min) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, rate in best.items():
        ratio = f"{rate / best['hand']:.2f}" if "hand" in best else "-"
        job = samples / rate
        rounds = [r.round_seconds for r in results[name] if r.round_seconds is not None]
        alone = min(rounds) if rounds else job  # the hand loop is its round
        once = job - alone  # start, summary, figures: paid once per job
        print(
            f"| {name} | {rate:.0f} | {ratio} | {job:.1f} | {alone:.1f} | "
            f"{(FULL_ROUNDS * alone + once) / 60:.1f} |"
        )
    if "hand" in results and len(results) > 1:
        for name, runs in results.items():
            ratios = [r.rate / h.rate for r, h in zip(runs, results["hand"], strict=True)]
            print(f"{name} / hand per repeat: {', '.join(f'{x:.2f}' for x in ratios)}", end="")
            print(f" (median {statistics.median(ratios):.2f})")
    threads = torch.get_num_threads()
    for name, layout, eval_threads in (
        ("fedlight_before", "contiguous", threads),
        ("fedlight", "channels_last", 1),
    ):
        if name in best:
            seconds = evaluation_seconds(data, layout, eval_threads, 3)
            share = seconds / (samples / best[name])
            print(
                f"evaluation ({name}: {layout}, {eval_threads} thread(s)): {seconds:.2f} s, "
                f"{share:.1%} of its round"
            )


if __name__ == "__main__":
    main()
