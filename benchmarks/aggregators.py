"""Benchmark: the time of one round's aggregation with each `aggregator=` option.

For n ∈ `--sizes` (default 10, 50, 100) random updates shaped like the state dict of the `cnn`
model (McMahan et al.'s CNN) on Fashion-MNIST (1×28×28 inputs, 10 classes: 1,663,370
parameters), each aggregator is built from its YAML as the config composes it (`aggregator=<name>`
with the settings below) and timed on what a round does with it: a fresh accumulator, every
update added, the result (with a device synchronization before the clock stops). The updates
are N(0, 0.01²) per entry (norm about 13, so norm_clip's default M = 1 clips every one); every
client weighs 1.

Settings: krum and multi_krum f = n // 5 (multi_krum's m = n − f); bulyan the largest f it
allows, f = (n − 3) // 4; the others their YAML defaults. Reported: seconds per aggregation,
best of `--repeats` after one untimed warm-up (noise on a shared machine only adds time), and
the ratio to `aggregator=mean`. Issue target: krum at 100 updates under 2 s on this project's
2-core CPU.

CPU, as measured for the issue (a few minutes, about 4 GB of memory at n = 100):

    OMP_NUM_THREADS=2 python benchmarks/aggregators.py --device cpu --output aggregators.md

GPU:

    python benchmarks/aggregators.py --device cuda
"""

import argparse
import sys
import time
from pathlib import Path

import hydra
import torch

# Benchmark the working tree's fedlight, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlight.cli.schema
from fedlight.aggregation.base import Aggregator
from fedlight.cli.build import instantiate_group
from fedlight.core.tensors import StateDict
from fedlight.runs.parallelism import resolve_device

AGGREGATORS = (
    "mean",
    "median",
    "trimmed_mean",
    "krum",
    "multi_krum",
    "bulyan",
    "geometric_median",
    "norm_clip",
)
INPUT_SHAPE = (1, 28, 28)  # Fashion-MNIST
NUM_CLASSES = 10
CNN_PARAMETERS = 1_663_370  # McMahan et al.'s CNN on 28×28 inputs
SEED = 0


def settings(name: str, n: int) -> list[str]:
    """The overrides of an aggregator's settings for n updates."""
    if name in ("krum", "multi_krum"):
        return [f"aggregator.f={n // 5}"]
    if name == "bulyan":
        return [f"aggregator.f={(n - 3) // 4}"]
    return []


def build_aggregator(name: str, n: int) -> Aggregator:
    overrides = [f"aggregator={name}", *settings(name, n)]
    with hydra.initialize_config_dir(config_dir=fedlight.cli.schema.CONF_DIR, version_base="1.3"):
        cfg = hydra.compose("config", overrides=overrides)
    aggregator: Aggregator = instantiate_group(cfg, "aggregator")
    aggregator.check(n)
    return aggregator


def cnn_shapes() -> dict[str, torch.Size]:
    """The `cnn` model's state dict shapes for Fashion-MNIST, built from conf/model/cnn.yaml."""
    with hydra.initialize_config_dir(config_dir=fedlight.cli.schema.CONF_DIR, version_base="1.3"):
        cfg = hydra.compose("config", overrides=["model=cnn"])
    model = instantiate_group(cfg, "model")(input_shape=INPUT_SHAPE, num_classes=NUM_CLASSES)
    return {name: t.shape for name, t in model.state_dict().items()}


def random_updates(shapes: dict[str, torch.Size], n: int, device: torch.device) -> list[StateDict]:
    generator = torch.Generator(device=device).manual_seed(SEED)
    return [
        {
            name: 0.01 * torch.randn(shape, generator=generator, device=device)
            for name, shape in shapes.items()
        }
        for _ in range(n)
    ]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_aggregation(
    aggregator: Aggregator, updates: list[StateDict], device: torch.device
) -> float:
    synchronize(device)
    started = time.perf_counter()
    accumulator = aggregator.accumulator(float(len(updates)), len(updates))
    for update in updates:
        accumulator.add(update, 1.0)
    accumulator.result()
    synchronize(device)
    return time.perf_counter() - started


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({torch.get_num_threads()} threads)"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=torch.get_num_threads(), help="torch.set_num_threads"
    )
    parser.add_argument("--output", type=Path, help="also write the table to this file")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    fedlight.cli.schema.register_schema()
    device = resolve_device(args.device)
    shapes = cnn_shapes()
    parameters = sum(shape.numel() for shape in shapes.values())
    if parameters != CNN_PARAMETERS:
        raise SystemExit(f"cnn has {parameters:,} parameters, not {CNN_PARAMETERS:,}: not W1's")
    print(f"cnn on {INPUT_SHAPE}, {NUM_CLASSES} classes: {parameters:,} parameters", flush=True)

    seconds: dict[tuple[str, int], float] = {}
    for n in args.sizes:
        updates = random_updates(shapes, n, device)
        for name in AGGREGATORS:
            aggregator = build_aggregator(name, n)
            time_aggregation(aggregator, updates, device)  # warm-up
            best = min(time_aggregation(aggregator, updates, device) for _ in range(args.repeats))
            seconds[name, n] = best
            print(f"{name} n={n} {' '.join(settings(name, n))}: {best:.3f} s", flush=True)
        del updates

    lines = [
        f"Aggregators on {device_name(device)}: torch {torch.__version__}, updates shaped like "
        f"`cnn` on Fashion-MNIST ({parameters:,} parameters), seconds per round's aggregation "
        f"(accumulator, adds, result), best of {args.repeats} after a warm-up; in parentheses "
        "the ratio to mean.",
        "",
        "| aggregator | settings | " + " | ".join(f"n = {n}" for n in args.sizes) + " |",
        "| --- | --- | " + " | ".join("---:" for _ in args.sizes) + " |",
    ]
    rules = {"krum": "f = n // 5", "multi_krum": "f = n // 5", "bulyan": "f = (n − 3) // 4"}
    for name in AGGREGATORS:
        cells = [
            f"{seconds[name, n]:.3f} ({seconds[name, n] / seconds['mean', n]:.1f}×)"
            for n in args.sizes
        ]
        lines.append(f"| {name} | {rules.get(name, 'defaults')} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    print()
    print(table, end="")
    if args.output is not None:
        args.output.write_text(table)


if __name__ == "__main__":
    main()
