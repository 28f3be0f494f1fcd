"""Benchmark: the time of one round's aggregation with each `aggregator=` option.

For n ∈ `--sizes` (default 10, 50, 100) random updates shaped like the state dict of a model on
Fashion-MNIST (1×28×28 inputs, 10 classes; `--model`, default `cnn`, McMahan et al.'s CNN:
1,663,370 parameters), each aggregator is built from its YAML as the config composes it
(`aggregator=<name>` with the settings below) and timed on what a round does with it: a fresh
accumulator, every update added, the result (with a device synchronization before the clock
stops). The updates are N(0, 0.01²) per entry (the `cnn`'s norm about 13, so norm_clip's default
M = 1 clips every one); every client weighs 1.

Settings: krum and multi_krum f = n // 5 (multi_krum's m = n − f); bulyan the largest f it
allows, f = (n − 3) // 4; the others their YAML defaults. Reported: seconds per aggregation,
best of `--repeats` after one untimed warm-up (noise on a shared machine only adds time; the
repeats go round the aggregators in turn), and the ratio to `aggregator=mean`. Issue target:
krum at 100 updates under 2 s on this project's 2-core CPU.

CPU, as measured for the issue (a few minutes, about 4 GB of memory at n = 100):

    OMP_NUM_THREADS=2 python benchmarks/aggregators.py --device cpu --output aggregators.md

GPU:

    python benchmarks/aggregators.py --device cuda

How the time grows with n (issue 67 item 4: the FedAvg tutorial's O(n) mean, O(n log n) median,
O(n²) Krum): `--record FILE.json` writes every repeat's wall and CPU seconds per aggregator and
n, from which the results block `aggregator_scaling` (scripts/aggregator_blocks.py) fits the
log-log slope of the CPU time against n (on one thread the CPU time is the work; the wall time
also holds the waits for a core, which the load of a shared machine moves from one n to the
next). Short enough for a loaded 2-core machine (about half an hour), on the 2NN's 199,210
parameters:

    OMP_NUM_THREADS=1 python benchmarks/aggregators.py --device cpu --threads 1 --model mlp \
        --sizes 200 300 400 500 --repeats 5 --record docs/results/robust/aggregator_scaling.json
"""

import argparse
import json
import platform
import shlex
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
from scripts.aggregator_blocks import log_log_slope

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


def model_shapes(model: str) -> dict[str, torch.Size]:
    """A model's state dict shapes for Fashion-MNIST, built from conf/model/<model>.yaml."""
    with hydra.initialize_config_dir(config_dir=fedlight.cli.schema.CONF_DIR, version_base="1.3"):
        cfg = hydra.compose("config", overrides=[f"model={model}"])
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
) -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds of one round's aggregation (the CPU time is
    what the other processes of a loaded machine move least: it leaves out the time spent
    waiting for a core)."""
    synchronize(device)
    started, cpu_started = time.perf_counter(), time.process_time()
    accumulator = aggregator.accumulator(float(len(updates)), len(updates))
    for update in updates:
        accumulator.add(update, 1.0)
    accumulator.result()
    synchronize(device)
    return time.perf_counter() - started, time.process_time() - cpu_started


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
    parser.add_argument("--model", default="cnn", help="the model the updates are shaped like")
    parser.add_argument(
        "--aggregators", nargs="+", default=list(AGGREGATORS), choices=AGGREGATORS, metavar="NAME"
    )
    parser.add_argument("--record", type=Path, help="also write every repeat's seconds (JSON)")
    return parser.parse_args()


RULES = {"krum": "f = n // 5", "multi_krum": "f = n // 5", "bulyan": "f = (n − 3) // 4"}


Timings = dict[str, dict[int, list[float]]]  # aggregator → n → each repeat's seconds


def measure(
    args: argparse.Namespace, shapes: dict[str, torch.Size], device: torch.device
) -> tuple[Timings, Timings]:
    """Every repeat's wall and CPU seconds per aggregator and n, after one untimed warm-up each;
    the repeats go round the aggregators in turn, so that a burst of load on a shared machine
    falls on one repeat of several rules rather than on every repeat of one."""
    wall: Timings = {name: {} for name in args.aggregators}
    cpu: Timings = {name: {} for name in args.aggregators}
    for n in args.sizes:
        updates = random_updates(shapes, n, device)
        built = {name: build_aggregator(name, n) for name in args.aggregators}
        for name, aggregator in built.items():
            time_aggregation(aggregator, updates, device)  # warm-up
            wall[name][n], cpu[name][n] = [], []
        for _ in range(args.repeats):
            for name, aggregator in built.items():
                seconds, cpu_seconds = time_aggregation(aggregator, updates, device)
                wall[name][n].append(seconds)
                cpu[name][n].append(cpu_seconds)
        for name in args.aggregators:
            best, best_cpu = min(wall[name][n]), min(cpu[name][n])
            shown = f"{name} n={n} {' '.join(settings(name, n))}"
            print(f"{shown}: {best:.3f} s, {best_cpu:.3f} CPU s", flush=True)
        del updates
    return wall, cpu


def table(
    args: argparse.Namespace,
    seconds: Timings,
    parameters: int,
    device: torch.device,
) -> str:
    """The best repeat per aggregator and n, with its ratio to the mean where it was timed."""
    lines = [
        f"Aggregators on {device_name(device)}: torch {torch.__version__}, updates shaped like "
        f"`{args.model}` on Fashion-MNIST ({parameters:,} parameters), seconds per round's "
        f"aggregation (accumulator, adds, result), best of {args.repeats} after a warm-up; in "
        "parentheses the ratio to mean; the last column the log-log slope of time against n.",
        "",
        "| aggregator | settings | " + " | ".join(f"n = {n}" for n in args.sizes) + " | slope |",
        "| --- | --- | " + " | ".join("---:" for _ in args.sizes) + " | ---: |",
    ]
    for name in args.aggregators:
        best = {n: min(seconds[name][n]) for n in args.sizes}
        mean = {n: min(seconds["mean"][n]) for n in args.sizes} if "mean" in seconds else None
        cells = [
            f"{best[n]:.3f}" + ("" if mean is None else f" ({best[n] / mean[n]:.1f}×)")
            for n in args.sizes
        ]
        slope = log_log_slope(list(best), list(best.values())) if len(best) > 1 else float("nan")
        lines.append(
            f"| {name} | {RULES.get(name, 'defaults')} | " + " | ".join(cells) + f" | {slope:.2f} |"
        )
    return "\n".join(lines) + "\n"


def record(
    args: argparse.Namespace,
    timings: tuple[Timings, Timings],
    parameters: int,
    device: torch.device,
) -> dict:
    """What the results block reads: the setting and every repeat's wall and CPU seconds."""
    return {
        "benchmark": "benchmarks/aggregators.py",
        "command": shlex.join(["python", "benchmarks/aggregators.py", *sys.argv[1:]]),
        "model": args.model,
        "parameters": parameters,
        "device": device_name(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "repeats": args.repeats,
        "sizes": list(args.sizes),
        "settings": {name: RULES.get(name, "defaults") for name in args.aggregators},
        **{
            key: {
                name: {str(n): times for n, times in by_size.items()}
                for name, by_size in timing.items()
            }
            for key, timing in zip(("seconds", "cpu_seconds"), timings, strict=True)
            if key == "seconds" or device.type == "cpu"  # a GPU's work is not this CPU time
        },
    }


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    fedlight.cli.schema.register_schema()
    device = resolve_device(args.device)
    shapes = model_shapes(args.model)
    parameters = sum(shape.numel() for shape in shapes.values())
    if args.model == "cnn" and parameters != CNN_PARAMETERS:
        raise SystemExit(f"cnn has {parameters:,} parameters, not {CNN_PARAMETERS:,}: not W1's")
    print(f"{args.model} on {INPUT_SHAPE}, {NUM_CLASSES} classes: {parameters:,} parameters")
    timings = measure(args, shapes, device)
    text = table(args, timings[0], parameters, device)
    print()
    print(text, end="")
    if args.output is not None:
        args.output.write_text(text)
    if args.record is not None:
        content = record(args, timings, parameters, device)
        args.record.write_text(json.dumps(content, indent=1) + "\n")


if __name__ == "__main__":
    main()
