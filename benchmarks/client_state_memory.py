"""Benchmark: peak memory of SCAFFOLD with 1,000 clients, memory against disk client state store.

SCAFFOLD on MNIST with McMahan's `cnn` (1,663,370 parameters, so each client's control variate c_i
is 6.65 MB), 1,000 clients (IID, 60 examples each), 10 per round, E=1, B=10, SGD lr 0.05, evaluated
at the last round only. Every client that has trained keeps its c_i: `fl.client_state=memory` holds
all of them in RAM (6.65 GB once all 1,000 have trained), `fl.client_state=disk` keeps them in
`<run dir>/client_states/` and holds only the round's clients in RAM.

The real Hydra config is composed and `fedlight.runs.experiment.run_job` runs the job in this
process, as `python -m fedlight` would. Printed: peak RSS of the process
(`getrusage(RUSAGE_SELF).ru_maxrss`), the clients holding state, the bytes of client state on disk
(and in checkpoint.pt), the wall time of `run_job` and the final accuracy. Peak RSS is per process,
so run each store separately (about 5 minutes each on 2 CPU cores; 100 rounds leave about 630
clients holding state):

    OMP_NUM_THREADS=1 python benchmarks/client_state_memory.py --client-state memory
    OMP_NUM_THREADS=1 python benchmarks/client_state_memory.py --client-state disk

A round's own memory (docs/concepts/client-state.md "Memory of a round"): 6 rounds, B = 60, 10, 50
or 200 per round:

    OMP_NUM_THREADS=1 python benchmarks/client_state_memory.py --client-state disk --rounds 6 \
        --batch-size 60 --per-round 50
"""

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import hydra
import torch

# Benchmark the working tree's fedlight, installed or not (`python benchmarks/...` puts only
# benchmarks/ on the path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlight.cli.job
import fedlight.cli.schema
from fedlight.core.tensors import nbytes
from fedlight.runs.experiment import run_job
from fedlight.store.client_states import CLIENT_STATES_DIR
from fedlight.store.run_files import CHECKPOINT_NAME

MB = 1e6


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def folder_bytes(folder: Path) -> tuple[int, int]:
    """Number of files and their total size under `folder`."""
    sizes = [p.stat().st_size for p in folder.rglob("*") if p.is_file()]
    return len(sizes), sum(sizes)


def run(args: argparse.Namespace, output_dir: Path) -> None:
    overrides = [
        "algo=scaffold",
        "data=mnist",
        f"data.root={args.data_root}",
        "data.download=false",
        "model=cnn",
        "partition=iid",
        "device=cpu",
        f"fl.num_clients={args.clients}",
        f"fl.clients_per_round={args.per_round}",
        f"fl.rounds={args.rounds}",
        f"fl.client_state={args.client_state}",
        "fl.workers=1",  # one process: its memory is what is measured
        "local.epochs=1",
        f"local.batch_size={args.batch_size}",
        "optim.lr=0.05",
        f"eval.every={args.rounds}",
        f"checkpoint.every={args.checkpoint_every}",
    ]
    with hydra.initialize_config_dir(config_dir=fedlight.cli.schema.CONF_DIR, version_base="1.3"):
        cfg = hydra.compose("config", overrides=overrides)
    choices = {"algo": "scaffold", "data": "mnist", "model": "cnn", "partition": "iid"}
    job = fedlight.cli.job.build_job(cfg, choices=choices)
    rss_before = peak_rss_bytes()
    started = time.perf_counter()
    summary = run_job(job, output_dir)
    seconds = time.perf_counter() - started
    rss_peak = peak_rss_bytes()  # before anything below reads the states back

    # Memory-mapped: reading the index and the tensor sizes touches none of the tensors' bytes.
    checkpoint = torch.load(output_dir / CHECKPOINT_NAME, weights_only=True, mmap=True)
    index = checkpoint["client_states"]
    state_bytes = nbytes(checkpoint["server_extras"])  # c has the size of one c_i
    files, disk_bytes = folder_bytes(output_dir / CLIENT_STATES_DIR)
    in_checkpoint = sum(nbytes(s) for s in index.values() if isinstance(s, dict))

    print(
        f"client_state={args.client_state}: {args.clients} clients, {args.per_round} per round, "
        f"{args.rounds} rounds, checkpoint every {args.checkpoint_every}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"local.batch_size={args.batch_size}"
    )
    print(f"peak RSS: {rss_peak / MB:.0f} MB (before run_job: {rss_before / MB:.0f} MB)")
    print(
        f"clients holding state: {len(index)} × {state_bytes / MB:.2f} MB = "
        f"{len(index) * state_bytes / MB:.0f} MB (all {args.clients}: "
        f"{args.clients * state_bytes / MB:.0f} MB)"
    )
    print(
        f"client state on disk: {files} files, {disk_bytes / MB:.0f} MB in {CLIENT_STATES_DIR}/; "
        f"{in_checkpoint / MB:.0f} MB of it in {CHECKPOINT_NAME} "
        f"({(output_dir / CHECKPOINT_NAME).stat().st_size / MB:.0f} MB file)"
    )
    print(
        f"wall time: {seconds:.1f} s ({summary['wall_seconds']:.1f} s in the loop), "
        f"final accuracy {summary['final_accuracy']:.4f}"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", default="data", help="holds MNIST/raw/*-ubyte")
    parser.add_argument("--client-state", choices=("memory", "disk"), required=True)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=10, help="local.batch_size")
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=25,
        help="checkpoint.every (fewer checkpoints than fedlight's 10: each one of the memory "
        "store writes all its states)",
    )
    parser.add_argument(
        "--output-dir", type=Path, help="run directory to keep (default: a temporary one)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    fedlight.cli.schema.register_schema()
    if args.output_dir is not None:
        run(args, args.output_dir)
        return
    with tempfile.TemporaryDirectory(prefix="client-state-memory-") as output_dir:
        run(args, Path(output_dir))


if __name__ == "__main__":
    main()
