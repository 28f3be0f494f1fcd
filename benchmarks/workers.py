"""Benchmark: W1 on 2 workers × 1 thread against 1 worker × 2 threads (`fl.workers`), on the CPU.

Workload W1 as in benchmarks/w1.py: MNIST, 100 clients, shards 2×300, FedAvg, 10 clients per
round, E=1, B=10, SGD lr 0.05, `--rounds` rounds (default 20: 12,000 local steps), models `mlp`
(2NN) and `cnn`.

The benchmark starts one group of 2 worker processes the way `fl.workers=2` does
(`fedlight.runs.launch.spawn_workers`) and keeps it for every repeat, as torchrun would. Each worker
decodes MNIST once, outside the timed region. Repeats alternate, after one untimed one-round
warm-up of each:

- 1 worker × 2 threads (`--threads`): rank 0 alone runs the job at 2 torch threads, through what
  `run_job` runs for `fl.workers=1`, while rank 1 waits at a barrier. Rank 1's CPU seconds during
  that wait are printed: about 0 means it did not compete for the cores.
- 2 workers × 1 thread: both ranks run the job with `fl.workers=2 fl.threads_per_worker=1`; their
  `run_job` joins the existing group (the torchrun path). The slowest rank's time counts.

Timed, as in w1.py, is the whole `run_job`: partition, local training, aggregation (with the
gather of the uploads between the workers), the final evaluation, metrics, plots and checkpoint.
Not timed: starting the worker processes (Python, torch and Lightning imports), printed once as
"start-up"; `python -m fedlight fl.workers=2` pays it on top of every run.

Reported: steps/s of each, best of the repeats (noise on a shared machine only adds time), their
ratio 2 workers / 1 worker, and both final accuracies (equal up to float rounding: the thread
count of a CPU kernel may change its rounding). Issue 5's target on this project's 2-core
machine: ratio ≥ 1.6 on `mlp` and ≥ 1.15 on `cnn` (raw PyTorch, two processes against one
with two threads: 1.79 and 1.23).

Run on an otherwise idle 2-core machine (about 15 minutes, the cnn dominating):

    python benchmarks/workers.py --data-root data

A smoke run that only checks that it works (its numbers mean nothing; one thread for the single
worker, since 2 threads on a machine busy with other jobs slow down many times over):

    python benchmarks/workers.py --data-root data --models mlp --rounds 1 --repeats 1 \
        --threads 1
"""

import argparse
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# Benchmark the working tree's fedlight, installed or not (`python benchmarks/workers.py` puts
# only benchmarks/ on the path; the spawned workers get the same path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from w1 import CLIENTS_PER_ROUND, MODELS, STEPS_PER_CLIENT, fedlight_job

import fedlight.cli.schema
from fedlight.core.settings import FLSettings, RunSettings
from fedlight.data.mnist import MNIST
from fedlight.drivers.workers import OneWorker, Workers
from fedlight.runs.experiment import run_job, run_worker
from fedlight.runs.job import Job
from fedlight.runs.launch import spawn_workers

WORKERS = 2
TWO_WORKERS = [f"fl.workers={WORKERS}", "fl.threads_per_worker=1"]
ONE_WORKER = ["fl.workers=1"]
TARGETS = {"mlp": 1.6, "cnn": 1.15}


@dataclass
class Timing:
    seconds: float
    steps: int
    accuracy: float
    idle_cpu_seconds: float = 0.0  # rank 1's CPU time while rank 0 ran alone

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds


def everyone(value: Any) -> list[Any]:
    """Every rank's `value`, in rank order."""
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed_run(run: Any, job: Job) -> tuple[float, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="workers-bench-") as output_dir:
        started = time.perf_counter()
        summary = run(job, Path(output_dir))
        return time.perf_counter() - started, summary


def one_worker(workers: Workers, job: Job, rounds: int, threads: int) -> Timing:
    """Rank 0 runs `job` alone at `threads` threads; rank 1 waits. Every rank gets the timing."""
    workers.barrier()
    waited_from = cpu_seconds()
    timing = None
    if workers.main:
        torch.set_num_threads(threads)
        seconds, summary = timed_run(
            lambda j, d: run_worker(OneWorker(torch.device("cpu")), j, d), job
        )
        steps = rounds * CLIENTS_PER_ROUND * STEPS_PER_CLIENT
        timing = Timing(seconds, steps, float(summary["final_accuracy"]))
    workers.barrier()
    idle = everyone(cpu_seconds() - waited_from)
    timing = everyone(timing)[0]
    timing.idle_cpu_seconds = max(idle[1:])
    return timing


def two_workers(workers: Workers, job: Job, rounds: int) -> Timing:
    """Both ranks run `job` (fl.workers=2, one thread each); the slowest rank's time."""
    torch.set_num_threads(1)
    workers.barrier()
    seconds, summary = timed_run(run_job, job)
    slowest = max(everyone(seconds))
    steps = rounds * CLIENTS_PER_ROUND * STEPS_PER_CLIENT
    return Timing(slowest, steps, float(summary["final_accuracy"]))


def measure(workers: Workers, args: argparse.Namespace, spawned_at: float) -> None:
    """What each of the 2 workers runs; rank 0 prints."""
    fedlight.cli.schema.register_schema()
    data = MNIST(root=args.data_root, download=False).load()
    workers.barrier()
    show = print if workers.main else ignore
    started = time.time() - spawned_at
    show(f"start-up of {WORKERS} spawned workers (imports, MNIST): {started:.1f} s", flush=True)
    rows = []
    for model in args.models:
        one_worker(workers, fedlight_job(model, data, 1, ONE_WORKER), 1, args.threads)  # warm-up
        two_workers(workers, fedlight_job(model, data, 1, TWO_WORKERS), 1)
        single_job = fedlight_job(model, data, args.rounds, ONE_WORKER)
        double_job = fedlight_job(model, data, args.rounds, TWO_WORKERS)
        singles: list[Timing] = []
        doubles: list[Timing] = []
        for repeat in range(1, args.repeats + 1):
            singles.append(one_worker(workers, single_job, args.rounds, args.threads))
            doubles.append(two_workers(workers, double_job, args.rounds))
            for name, result in (("1 worker", singles[-1]), ("2 workers", doubles[-1])):
                show(
                    f"{model} repeat {repeat} {name}: {result.steps} steps in "
                    f"{result.seconds:.2f} s = {result.steps_per_second:.1f} steps/s, final "
                    f"accuracy {result.accuracy:.4f}, rank 1 CPU while waiting "
                    f"{result.idle_cpu_seconds:.2f} s",
                    flush=True,
                )
        rows.append((model, fastest(singles), fastest(doubles)))

    show(
        f"\nW1 workers: torch {torch.__version__}, {args.rounds} rounds, "
        f"best of {args.repeats} alternating repeats\n"
    )
    show(
        f"| model | 1 worker × {args.threads} threads steps/s | 2 workers × 1 thread steps/s "
        "| ratio | target | accuracy 1 / 2 workers |"
    )
    show("| --- | ---: | ---: | ---: | ---: | ---: |")
    for model, single, double in rows:
        ratio = double.steps_per_second / single.steps_per_second
        show(
            f"| {model} | {single.steps_per_second:.1f} | {double.steps_per_second:.1f} | "
            f"{ratio:.3f} | ≥ {TARGETS[model]} | {single.accuracy:.4f} / {double.accuracy:.4f} |"
        )


def fastest(timings: list[Timing]) -> Timing:
    return max(timings, key=lambda t: t.steps_per_second)


def ignore(*_: Any, **__: Any) -> None:
    """`print` on the ranks that do not report."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, help="folder holding MNIST/raw/*-ubyte")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=WORKERS, help="torch threads of the single worker"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    group = RunSettings(fl=FLSettings(workers=WORKERS, threads_per_worker=1), device="cpu")
    spawn_workers(group, measure, (args, time.time()), ())


if __name__ == "__main__":
    main()
