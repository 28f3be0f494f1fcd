"""Benchmark: the CIFAR-10 headline run's peak resident memory beside the floors under it.

Each stage runs in a fresh process, one after another, and its peak is the kernel's high-water
mark of that process's resident set (`ru_maxrss`, what GNU time's "maximum resident set size"
reports; Linux). Beside it, the peak until the process began to exit (VmHWM, read by its last
Python exit handler): at a normal exit the native libraries' finalizers run, and a CUDA build of
torch's fault in pages of their code, which can set the peak of a small process. Each stage adds
to the one before it:

- `interpreter`: `python -c pass`;
- `torch`: `import torch`; of it, torch's CUDA libraries (their mapped pages and the anonymous
  mapping after each, its zero-initialized data) in a CUDA build;
- `optimizer`: and one step of `torch.optim.SGD` (every optimizer's first step or `zero_grad`
  imports torch._dynamo, with triton where it is installed);
- `lightning`: and `import pytorch_lightning` (which imports torchmetrics whole: torchvision's
  models, scipy.signal, matplotlib);
- `fedlight`: and `import fedlight.cli.main`;
- `plain_loop`: no Lightning and no fedlight: torch, the decoded images as fedlight reads them
  (its decode cache, memory-mapped, uint8) and the headline's CNN trained by a hand-written loop
  for the headline's work (2 rounds of 10 of 100 IID clients of 500 images, B = 10, E = 1, SGD
  0.05, each round's model evaluated on the test set 100 images at a time): the floor of the work;
- `plain_loop_lightning`: the same loop after `import pytorch_lightning`;
- `headline`: `python -m fedlight algo=scaffold data=cifar10 fl.rounds=2 fl.workers=1` (run as
  `-m` runs it, in the stage's process).

Stages alternate over `--repeats`; the record (`--out`, JSON) keeps every repeat's peak and the
median, with the versions of torch, Lightning and torchmetrics it ran with.

    python benchmarks/memory_floor.py --cifar <ImageFolder> --out docs/results/memory/headline.json
"""

import argparse
import atexit
import json
import os
import re
import runpy
import statistics
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported by the stages that use it, not by the parent's start
    from torch import nn

HERE = Path(__file__).resolve().parents[1]
HEADLINE = ("algo=scaffold", "data=cifar10", "fl.rounds=2", "fl.workers=1")
STAGES = (
    *("interpreter", "torch", "optimizer", "lightning", "fedlight"),
    *("plain_loop", "plain_loop_lightning", "headline"),
)
# torch's CUDA libraries in a CUDA build (PyPI's wheels: nvidia-* packages and libtorch_cuda)
CUDA_LIBRARY = re.compile(r"/nvidia/|libtorch_cuda|libcudart|libcudnn|libnccl")
MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def library_rss_mb(pattern: re.Pattern[str]) -> float:
    """This process's resident MB in mappings of libraries matching `pattern`, each with the
    anonymous mapping right after it (a library's zero-initialized data)."""
    total_kb, counting, after = 0, False, ""
    with open("/proc/self/smaps") as smaps:  # line by line: the reading adds no peak of its own
        for line in smaps:
            if MAPPING.match(line):
                fields = line.split()
                name = fields[5] if len(fields) > 5 else ""
                counting = bool(pattern.search(name)) or (not name and bool(pattern.search(after)))
                after = name
            elif line.startswith("Rss:") and counting:
                total_kb += int(line.split()[1])
    return round(total_kb / 1024, 1)


def optimizer_step() -> None:
    import torch

    layer = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(torch.ones(1, 2)).sum().backward()
    optimizer.step()


def cifar_cnn() -> "nn.Sequential":
    """fedlight's `model=cifar_cnn` (fedlight.models.cifar_cnn) written out in torch."""
    from torch import nn

    return nn.Sequential(
        *(nn.Conv2d(3, 32, 3, padding=1), nn.MaxPool2d(2), nn.ReLU()),
        *(nn.Conv2d(32, 64, 3, padding=1), nn.MaxPool2d(2), nn.ReLU()),
        *(nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 10)),
    )


def plain_loop(cache: Path) -> None:
    """The headline's work in a hand-written loop (module docstring), FedAvg's mean of weights."""
    import torch

    data = torch.load(cache, weights_only=True, mmap=True)
    mean = torch.tensor((0.4914, 0.4822, 0.4465)).view(1, 3, 1, 1)
    std = torch.tensor((0.2470, 0.2435, 0.2616)).view(1, 3, 1, 1)
    generator = torch.Generator().manual_seed(0)
    clients = torch.randperm(len(data["train_y"]), generator=generator).view(100, -1)
    model = cifar_cnn()
    for _ in range(2):
        start = {name: t.clone() for name, t in model.state_dict().items()}
        total = {name: torch.zeros_like(t) for name, t in start.items()}
        for client in torch.randperm(100, generator=generator)[:10].tolist():
            model.load_state_dict(start)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
            order = clients[client][torch.randperm(clients.shape[1], generator=generator)]
            for batch in order.split(10):
                images = (data["train_x"][batch].float() / 255 - mean) / std
                loss = torch.nn.functional.cross_entropy(model(images), data["train_y"][batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            for name, t in model.state_dict().items():
                total[name].add_(t, alpha=0.1)
        model.load_state_dict(total)
        with torch.no_grad():
            for images in data["test_x"].split(100):
                model((images.float() / 255 - mean) / std)


def high_water_mb() -> float:
    """This process's peak resident MB so far (VmHWM)."""
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return round(kb / 1024, 1)


def run_stage(stage: str, cache: Path | None, fedlight_args: list[str]) -> None:
    """One stage in this process (the child); it prints what it measured at the start of its
    exit (the Python side's; torch's libraries are finalized after it)."""
    measured: dict[str, float] = {}
    atexit.register(lambda: print("MEASURED " + json.dumps(measured), flush=True))
    atexit.register(lambda: measured.update(before_exit_mb=high_water_mb()))
    if stage == "interpreter":
        return
    import torch

    measured["cuda_libraries_mb"] = library_rss_mb(CUDA_LIBRARY) if torch.version.cuda else 0.0
    if stage in ("lightning", "fedlight", "plain_loop_lightning"):
        import pytorch_lightning  # noqa: F401
    if stage == "fedlight":
        import fedlight.cli.main  # noqa: F401
    if stage in ("optimizer", "lightning", "fedlight"):
        optimizer_step()
        measured["triton_mb"] = library_rss_mb(re.compile(r"/triton/"))
    if stage.startswith("plain_loop"):
        assert cache is not None
        torch.set_num_threads(1)  # as fedlight's one worker trains
        plain_loop(cache)
    if stage == "headline":  # as `python -m fedlight ...`, in this process
        sys.argv = ["fedlight", *fedlight_args]
        runpy.run_module("fedlight", run_name="__main__", alter_sys=True)


def peak_of(command: list[str], cwd: Path) -> tuple[float, str]:
    """The peak RSS (MB) of one process running `command`, and its standard output."""
    env = {**os.environ, "PYTHONPATH": str(HERE), "WANDB_MODE": "disabled"}
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} exited with {process.returncode}")
    return usage.ru_maxrss / 1024, text


def command_of(stage: str, cifar: Path, cache_dir: Path, run_dir: Path, cache: Path) -> list[str]:
    command = [sys.executable, __file__, "--stage", stage, "--cache", str(cache)]
    if stage == "headline":
        data = (f"data.root={cifar}", f"data.cache_dir={cache_dir}")
        return [*command, "--", *HEADLINE, *data, f"hydra.run.dir={run_dir}"]
    return command


def decode_cache(cifar: Path, cache_dir: Path) -> Path:
    """The decoded images as fedlight caches them (decoded first if not yet), by a child: this
    process stays small, since a child's peak counts the parent's pages it was forked with."""
    load = "from fedlight.data.cifar10 import CIFAR10; CIFAR10(root=r'{}', cache_dir=r'{}').load()"
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    subprocess.run([sys.executable, "-c", load.format(cifar, cache_dir)], env=env, check=True)
    [cache] = cache_dir.glob("cifar10-*.pt")
    return cache


def measure(cifar: Path, cache_dir: Path, repeats: int) -> dict:
    """Every stage's peak, alternating over the repeats (module docstring)."""
    cache = decode_cache(cifar, cache_dir)
    peaks: dict[str, list[float]] = {stage: [] for stage in STAGES}
    extra: dict[str, list[dict[str, float]]] = {stage: [] for stage in STAGES}
    with tempfile.TemporaryDirectory() as workdir:
        for repeat in range(repeats):
            for stage in STAGES:
                run_dir = Path(workdir) / f"{stage}{repeat}"  # the headline's run directory
                command = command_of(stage, cifar, cache_dir, run_dir, cache)
                peak, text = peak_of(command, Path(workdir))
                peaks[stage].append(round(peak, 1))
                lines = [line for line in text.splitlines() if line.startswith("MEASURED ")]
                extra[stage].append(json.loads(lines[-1].removeprefix("MEASURED ")))
                before = extra[stage][-1]["before_exit_mb"]
                print(f"#{repeat + 1} {stage}: peak {peak:,.0f} MB, {before:,.0f} before exit")
    stages = {
        stage: {
            "peak_mb": statistics.median(values),
            "each_mb": values,
            "before_exit_mb": statistics.median(m["before_exit_mb"] for m in extra[stage]),
            **{k: v for k, v in extra[stage][-1].items() if k != "before_exit_mb"},
        }
        for stage, values in peaks.items()
    }
    return {
        "command": "python -m fedlight " + " ".join(HEADLINE),
        "versions": {p: version(p) for p in ("torch", "pytorch-lightning", "torchmetrics")},
        "cuda_build": bool(stages["torch"]["cuda_libraries_mb"]),
        "images_mb": round(cache.stat().st_size / 2**20, 1),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "repeats": repeats,
        "stages": stages,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cifar", type=Path, help="CIFAR-10 as an ImageFolder tree")
    parser.add_argument("--cache-dir", type=Path, help="fedlight's decode cache (data.cache_dir)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, help="the JSON record")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)  # one child
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("fedlight_args", nargs="*", help=argparse.SUPPRESS)  # the headline's
    args = parser.parse_args()
    if args.stage:
        run_stage(args.stage, args.cache, args.fedlight_args)
        return
    if args.cifar is None:
        parser.error("--cifar is required")
    cache_dir = args.cache_dir or Path(tempfile.mkdtemp(prefix="fedlight-memory-"))
    record = measure(args.cifar.resolve(), cache_dir.resolve(), args.repeats)
    text = json.dumps(record, indent=2) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
