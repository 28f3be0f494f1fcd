"""Benchmark: what the console's progress display costs a run of workload W1 (benchmarks/w1.py).

The same W1 job (the real Hydra config, `fl.workers=auto`: 2 forked workers on 2 cores, rank 0
drawing) is run with `console.progress=bar` (rich's live bar, drawn as on a terminal: forced,
its frames written to /dev/null) and with `console.progress=off`, alternating in this one
process after an untimed warm-up of each; the whole `run_job` is timed. Reported: the best time
of each (noise on a shared machine only adds time), their ratio, and the median of the
per-pair ratios.

    python benchmarks/progress.py --data-root ../shared/data
    python benchmarks/progress.py --data-root ../shared/data --models mlp --rounds 5 --repeats 6
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import w1

from fedlight.config import register_schema
from fedlight.data.base import TensorDataset
from fedlight.data.mnist import MNIST
from fedlight.experiment import run_job

MODES = ("bar", "off")


def timed_run(model: str, data: TensorDataset, rounds: int, mode: str) -> float:
    """Seconds of one `run_job` of W1 with `console.progress=mode`, its console on /dev/null."""
    job = w1.fedlight_job(model, data, rounds, [f"console.progress={mode}"])
    stderr = sys.stderr
    with open(os.devnull, "w") as null, tempfile.TemporaryDirectory() as output_dir:
        sys.stderr = null  # the bar's frames (and the summary line): drawn, then thrown away
        try:
            started = time.perf_counter()
            run_job(job, Path(output_dir))
            return time.perf_counter() - started
        finally:
            sys.stderr = stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, help="folder holding MNIST/raw/*-ubyte")
    parser.add_argument("--models", nargs="+", choices=w1.MODELS, default=["mlp"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    register_schema()
    data = MNIST(root=args.data_root, download=False).load()
    for model in args.models:
        for mode in MODES:  # untimed warm-up
            timed_run(model, data, 1, mode)
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        for repeat in range(args.repeats):
            for mode in MODES if repeat % 2 == 0 else MODES[::-1]:
                times[mode].append(timed_run(model, data, args.rounds, mode))
            print(
                f"{model} repeat {repeat + 1}: bar {times['bar'][-1]:.2f} s, off "
                f"{times['off'][-1]:.2f} s",
                flush=True,
            )
        best = {mode: min(seconds) for mode, seconds in times.items()}
        pairs = statistics.median(b / o for b, o in zip(times["bar"], times["off"], strict=True))
        print(
            f"W1 {model}, {args.rounds} rounds, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads: best bar {best['bar']:.2f} s, best off "
            f"{best['off']:.2f} s, ratio bar/off {best['bar'] / best['off']:.3f} "
            f"(median of {args.repeats} pairs {pairs:.3f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
