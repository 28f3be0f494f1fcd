"""Benchmark: what the console's progress display costs a run of workload W1 (benchmarks/w1.py).

The same W1 job (the real Hydra config, `fl.workers=auto`: 2 forked workers on 2 cores, rank 0
drawing) is run with `console.progress=bar` (rich's live bar, drawn as on a terminal: forced,
its frames written to /dev/null) and with `console.progress=off`, alternating in this one
process after an untimed warm-up of each; the whole `run_job` is timed. Reported: the best time
of each (noise on a shared machine only adds time), their ratio, and the median of the
per-pair ratios.

    python benchmarks/progress.py --data-root data
    python benchmarks/progress.py --data-root data --models mlp --rounds 5 --repeats 6
"""

import argparse
import io
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import w1

from fedlight.cli.schema import register_schema
from fedlight.data.base import TensorDataset
from fedlight.data.mnist import MNIST
from fedlight.loggers.base import RunInfo
from fedlight.loggers.console import REFRESH_PER_SECOND, ConsoleProgress
from fedlight.runs.experiment import run_job

MODES = ("bar", "off")


def cpu_seconds() -> float:
    """User + system CPU time of this process and its waited-for children (the workers)."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed_run(model: str, data: TensorDataset, rounds: int, mode: str) -> tuple[float, float]:
    """Wall and CPU seconds of one `run_job` of W1 with `console.progress=mode`, its console on
    /dev/null (CPU time: what the bar's thread adds, less blurred by other load than wall time)."""
    job = w1.fedlight_job(model, data, rounds, [f"console.progress={mode}"])
    stderr = sys.stderr
    with open(os.devnull, "w") as null, tempfile.TemporaryDirectory() as output_dir:
        sys.stderr = null  # the bar's frames (and the summary line): drawn, then thrown away
        try:
            started, cpu = time.perf_counter(), cpu_seconds()
            run_job(job, Path(output_dir))
            return time.perf_counter() - started, cpu_seconds() - cpu
        finally:
            sys.stderr = stderr


def redraw_seconds(redraws: int = 2000) -> float:
    """Seconds one redraw of the bar takes (rich renders it and writes it to a terminal)."""
    progress = ConsoleProgress("bar", io.StringIO())
    progress.start(RunInfo(Path("."), {}, {}, None, 50))
    progress.round_started(3)
    progress.clients_chosen(5, 10)
    started = time.perf_counter()
    for _ in range(redraws):
        progress.client_trained()
        progress._progress.refresh()  # type: ignore[union-attr]
    seconds = (time.perf_counter() - started) / redraws
    progress.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, help="folder holding MNIST/raw/*-ubyte")
    parser.add_argument("--models", nargs="+", choices=w1.MODELS, default=["mlp"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    register_schema()
    data = MNIST(root=args.data_root, download=False).load()
    redraw = redraw_seconds()
    print(
        f"one redraw of the bar: {redraw * 1e6:.0f} µs; at {REFRESH_PER_SECOND} per second "
        f"{redraw * REFRESH_PER_SECOND:.2%} of one core",
        flush=True,
    )
    for model in args.models:
        for mode in MODES:  # untimed warm-up
            timed_run(model, data, 1, mode)
        times: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
        for repeat in range(args.repeats):
            for mode in MODES if repeat % 2 == 0 else MODES[::-1]:
                times[mode].append(timed_run(model, data, args.rounds, mode))
            (bar_wall, bar_cpu), (off_wall, off_cpu) = times["bar"][-1], times["off"][-1]
            print(
                f"{model} repeat {repeat + 1}: bar {bar_wall:.2f} s ({bar_cpu:.2f} s CPU), "
                f"off {off_wall:.2f} s ({off_cpu:.2f} s CPU)",
                flush=True,
            )
        for index, measure in enumerate(("wall", "CPU")):
            bar = [t[index] for t in times["bar"]]
            off = [t[index] for t in times["off"]]
            pairs = statistics.median(b / o for b, o in zip(bar, off, strict=True))
            print(
                f"W1 {model}, {args.rounds} rounds, torch {torch.__version__}, "
                f"{torch.get_num_threads()} threads, {measure} time: best bar {min(bar):.2f} s, "
                f"best off {min(off):.2f} s, ratio {min(bar) / min(off):.3f}; median of "
                f"{args.repeats} pairs' ratios {pairs:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
