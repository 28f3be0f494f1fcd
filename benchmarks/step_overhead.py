"""Benchmark: the per-step overhead of fedlight's local loop against a plain eager loop.

One client of Fashion-MNIST (the first 6,000 training images), one local epoch, `simple_cnn`, SGD
lr 0.01 momentum 0.9 weight decay 1e-5 (the niid_bench setting), one torch thread, both in the
same layout, alternating after a warm-up:

- `fedlight`: `SequentialEngine.train` on a FedAvg task: the client module's hooks as a Trainer
  calls them, `self.log` collection, the optimizer from `configure_optimizers` each client,
  batches drawn by the client's generator and normalized per batch;
- `plain`: the same module's `net`, the same optimizer settings, the same batches, in the five
  lines a user writes (`zero_grad(set_to_none=True)`, forward, loss, backward, step).

Reported per batch size: microseconds per step of each (best of the repeats), the difference
(fedlight's overhead), and where fedlight's own Python time goes (cProfile of one more epoch,
the functions of fedlight and Lightning by their own time per step).

    python benchmarks/step_overhead.py --data-root data
"""

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedlight.core.layout import LAYOUTS
from fedlight.core.settings import LocalSettings, OptimSettings, RunSettings
from fedlight.data.base import TensorDataset
from fedlight.data.fmnist import FashionMNIST
from fedlight.engines.base import LocalTask, batch_indices
from fedlight.engines.sequential import SequentialEngine
from fedlight.models.simple_cnn import SimpleCNN

EXAMPLES = 6000
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 1e-5


def build(data: TensorDataset, layout: str, batch_size: int) -> tuple[SequentialEngine, LocalTask]:
    torch.manual_seed(0)
    module = LAYOUTS[layout].apply(
        SimpleCNN(data.input_shape, data.num_classes, LR, MOMENTUM, WEIGHT_DECAY)
    )
    settings = RunSettings(
        local=LocalSettings(epochs=1, batch_size=batch_size),
        optim=OptimSettings(lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY),
    )
    engine = SequentialEngine(module, data, settings)
    start = {k: v.clone() for k, v in module.state_dict().items()}
    return engine, LocalTask(0, torch.arange(EXAMPLES), start, [])


def fedlight_seconds(engine: SequentialEngine, task: LocalTask) -> float:
    started = time.perf_counter()
    for _ in engine.train([task], 1, [LR]):
        pass
    return time.perf_counter() - started


def plain_seconds(engine: SequentialEngine, task: LocalTask) -> float:
    """The same module's net and batches in a plain loop."""
    module, data = engine.module, engine.data
    started = time.perf_counter()
    module.load_state_dict(task.start)
    net = module.net
    optimizer = torch.optim.SGD(
        net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY
    )
    generator = torch.Generator().manual_seed(engine.seed_of(1, task.client))
    for indices in batch_indices(task.indices, generator, 1, engine.settings.local.batch_size):
        loss = F.cross_entropy(net(data.prepare(data.train_x[indices])), data.train_y[indices])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - started


def own_time(engine: SequentialEngine, task: LocalTask, steps: int, top: int) -> None:
    """cProfile of one epoch: fedlight's and Lightning's functions by own time per step."""
    profiler = cProfile.Profile()
    profiler.runcall(fedlight_seconds, engine, task)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = [
        (own, calls, f"{Path(file).parent.name}/{Path(file).name}:{line}({name})")
        for (file, line, name), (_, calls, own, _, _) in stats.items()
        if "fedlight" in file or "lightning" in file
    ]
    total = sum(own for own, _, _ in rows)
    print(f"  fedlight's and Lightning's own Python time: {total / steps * 1e6:.1f} µs/step")
    for own, calls, where in sorted(rows, reverse=True)[:top]:
        print(f"    {own / steps * 1e6:7.1f} µs/step  {calls:6d} calls  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, help="folder holding FashionMNIST/raw/")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--layout", choices=list(LAYOUTS), default="channels_last")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = FashionMNIST(root=args.data_root, download=False).load()
    print(f"torch {torch.__version__}, 1 thread, layout {args.layout}, {EXAMPLES} examples")
    for batch_size in args.batch_sizes:
        engine, task = build(data, args.layout, batch_size)
        steps = -(-EXAMPLES // batch_size)
        fedlight_seconds(engine, task), plain_seconds(engine, task)  # warm-up
        times: dict[str, list[float]] = {"fedlight": [], "plain": []}
        for _ in range(args.repeats):
            times["fedlight"].append(fedlight_seconds(engine, task))
            times["plain"].append(plain_seconds(engine, task))
        fed, plain = (min(times[k]) / steps * 1e6 for k in ("fedlight", "plain"))
        print(
            f"B={batch_size}: fedlight {fed:.0f} µs/step, plain {plain:.0f} µs/step, "
            f"overhead {fed - plain:+.0f} µs/step ({fed / plain - 1:+.1%})"
        )
        own_time(engine, task, steps, top=8)


if __name__ == "__main__":
    main()
