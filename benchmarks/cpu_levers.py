"""Benchmark: candidate CPU speed levers for one niid_bench client step, against the default.

One client of Fashion-MNIST (the first 6,000 training images), one local epoch of `simple_cnn`
(channels-last, fedlight's default layout), SGD lr 0.01 momentum 0.9 weight decay 1e-5, B = 64,
one torch thread, in a plain loop, each lever alternating with the default after a warm-up:

- `bf16`: `torch.autocast("cpu", torch.bfloat16)` around forward and loss (mixed precision; uses
  AMX or AVX-512 BF16 where the CPU has them; changes the numbers);
- `inplace_relu`: every ReLU in place (the same values and gradients bit for bit);
- `flush_denormal`: `torch.set_flush_denormal(True)` (denormal floats read as zero: a CPU slows
  down on them; changes numbers only where they occur);
- `compile`: `torch.compile` (inductor: C++ kernels for the pointwise and pooling parts; the
  convolutions stay oneDNN's), timed after its warm-up epoch compiled it.

Reported per lever: the default's seconds over the lever's, per repeat (above 1 means faster),
and whether the trained parameters equal the default's bit for bit.

    python benchmarks/cpu_levers.py --data-root data
"""

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedlight.core.layout import LAYOUTS
from fedlight.data.base import TensorDataset
from fedlight.data.fmnist import FashionMNIST
from fedlight.models.simple_cnn import SimpleCNN

EXAMPLES, BATCH = 6000, 64
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 1e-5


Context = contextlib.AbstractContextManager[None]
# What a lever changes: the model called, a context around forward and loss, one around the epoch.
Lever = tuple[Callable[[torch.Tensor], torch.Tensor], Context, Context]


def plain(net: nn.Module, forward: Context | None = None, epoch: Context | None = None) -> Lever:
    return net, forward or contextlib.nullcontext(), epoch or contextlib.nullcontext()


def relu_in_place(net: nn.Module) -> Lever:
    for layer in net.modules():
        if isinstance(layer, nn.ReLU):
            layer.inplace = True
    return plain(net)


class FlushDenormal(contextlib.AbstractContextManager[None]):
    """Denormals flushed to zero inside the block, torch's default (kept) outside."""

    def __enter__(self) -> None:
        torch.set_flush_denormal(True)

    def __exit__(self, *exc: object) -> None:
        torch.set_flush_denormal(False)


LEVERS: dict[str, Callable[[nn.Module], Lever]] = {
    "default": plain,
    "bf16": lambda net: plain(net, forward=torch.autocast("cpu", dtype=torch.bfloat16)),
    "inplace_relu": relu_in_place,
    "flush_denormal": lambda net: plain(net, epoch=FlushDenormal()),
    # a new module of the same class reuses the code compiled in the warm-up epoch
    "compile": lambda net: plain(torch.compile(net, dynamic=False)),
}


def train(data: TensorDataset, lever: str) -> tuple[float, list[torch.Tensor]]:
    """One epoch of the plain loop under a lever: seconds and the trained parameters."""
    torch.manual_seed(0)
    module = LAYOUTS["channels_last"].apply(
        SimpleCNN(data.input_shape, data.num_classes, LR, MOMENTUM, WEIGHT_DECAY)
    )
    net = module.net
    model, forward, epoch = LEVERS[lever](net)
    optimizer = torch.optim.SGD(
        net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY
    )
    order = torch.randperm(EXAMPLES, generator=torch.Generator().manual_seed(0))
    started = time.perf_counter()
    with epoch:
        for indices in order.split(BATCH):
            with forward:
                x, y = data.prepare(data.train_x[indices]), data.train_y[indices]
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return time.perf_counter() - started, [p.detach().clone() for p in net.parameters()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, help="folder holding FashionMNIST/raw/")
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = FashionMNIST(root=args.data_root, download=False).load()
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"torch {torch.__version__} ({capability}), 1 thread, channels-last, B={BATCH}")
    for lever in LEVERS:
        train(data, lever)  # warm-up
    for lever in list(LEVERS)[1:]:
        ratios, same = [], True
        for _ in range(args.repeats):
            base, base_params = train(data, "default")
            seconds, params = train(data, lever)
            ratios.append(base / seconds)
            same &= all(torch.equal(a, b) for a, b in zip(base_params, params, strict=True))
        print(
            f"{lever}: speed-up per repeat {', '.join(f'{r:.2f}' for r in ratios)}; "
            f"parameters {'bit-identical' if same else 'differ'}"
        )


if __name__ == "__main__":
    main()
