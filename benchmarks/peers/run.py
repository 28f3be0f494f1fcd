"""`python -m benchmarks.peers run --workload W1`: every framework on the workload's settings in one
run, repeats alternated (fedlight, flower, pfl, then the next repeat starting one further along),
each run a fresh process tree measured from /proc; the record is written to
docs/results/peers/<workload>.json (<workload>-cuda.json with `--device cuda`). Every framework gets
the same number of torch threads (`--threads`, also OMP_NUM_THREADS and MKL_NUM_THREADS; Flower's
Ray backend one CPU a client) and the same device (`--device`: fedlight's `device`, the peers' data
and networks, Ray's GPU, pfl's PFL_PYTORCH_DEVICE). fedlight runs as `fedlight` with its
sequential engine and as `fedlight-vectorized` with its vectorized one (`fl.engine`).
`--before CHECKOUT` also runs fedlight from another checkout (a git worktree of the commit before
a change) as `fedlight-before`, so that a change's effect is measured in the same run."""

import dataclasses
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks.peers import spec as handed
from benchmarks.peers.measure import Usage, measure
from benchmarks.peers.records import FRAMEWORKS
from benchmarks.peers.setup import PEERS, REPO, WORK, venv_python
from benchmarks.peers.workloads import Workload
from fedlight.data.base import TensorDataset
from fedlight.data.cifar10 import CIFAR10
from fedlight.data.fmnist import FashionMNIST
from fedlight.data.mnist import MNIST

RECORDS = REPO / "docs" / "results" / "peers"
DRIVERS = REPO / "benchmarks" / "peers"
# fedlight's data options the workloads use (conf/data/<option>.yaml's classes)
SOURCES = {"mnist": MNIST, "fmnist": FashionMNIST, "cifar10": CIFAR10}


def fedlight_command(
    workload: Workload, folder: Path, data_root: Path, run_dir: Path, device: str, engine: str
) -> list[str]:
    """fedlight's CLI on the workload, reading the handed index sets (`partition=from_file`), on
    `device` with the engine `engine`."""
    return [
        sys.executable,
        "-m",
        "fedlight",
        f"data={workload.data}",
        f"data.root={data_root}",
        *(f"data.{key}={str(value).lower()}" for key, value in workload.data_settings.items()),
        f"model={workload.model}",
        "partition=from_file",
        f"partition.path={folder / 'clients.json'}",
        f"fl.clients_per_round={workload.clients_per_round}",
        f"fl.rounds={workload.rounds}",
        f"local.epochs={workload.epochs}",
        f"local.batch_size={workload.batch_size}",
        f"optim.lr={workload.lr}",
        f"optim.momentum={workload.momentum}",
        f"optim.weight_decay={workload.weight_decay}",
        f"seed={workload.seed}",
        f"eval.every={workload.rounds}",
        f"eval.batch_size={workload.eval_batch_size}",
        f"checkpoint.every={workload.rounds}",
        f"device={device}",
        f"fl.engine={engine}",
        "fl.workers=1",
        *workload.fedlight_overrides,
        f"hydra.run.dir={run_dir}",
    ]


def check_device(device: str) -> None:
    """Refuse, in one line, a device this machine does not have."""
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "--device cuda: no CUDA device is available here (torch.cuda.is_available() is "
            "False); run with --device cpu, or on a machine with a GPU"
        )


def load_data(workload: Workload, root: Path) -> TensorDataset:
    """The workload's data through fedlight's own loader (uint8 images and their statistics)."""
    source = SOURCES[workload.data](root=str(root), download=False, **workload.data_settings)
    return source.load()


def commit_of(checkout: Path) -> str:
    """The short commit a checkout is at."""
    found = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.strip()


def fedlight_result(run_dir: Path) -> tuple[list[float], float]:
    """Round seconds and final accuracy from a fedlight run's metrics.csv (`wall_seconds` counts
    from the loop's start)."""
    lines = (run_dir / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:]]
    walls = [0.0] + [float(r["wall_seconds"]) for r in rows]
    return [b - a for a, b in itertools.pairwise(walls)], float(rows[-1]["test_accuracy"])


def fedlight_environment(run_dir: Path) -> dict[str, str]:
    """What a fedlight run says it trained with (summary.json): its engine, layout and device."""
    environment = json.loads((run_dir / "summary.json").read_text())["environment"]
    return {key: environment[key] for key in ("engine", "memory_format", "device")}


def fedlight_boundaries(round_seconds: list[float], usage: Usage) -> list[float]:
    """The times (time.time()) at which fedlight's round 1 began and each round ended: its
    console's line for the last round arrived when that round ended (the output unbuffered), and
    metrics.csv gives the rounds' seconds before it."""
    last = len(round_seconds)
    ended = next(t for t, line in reversed(usage.lines) if line.startswith(f"round {last}:"))
    starts = [ended - sum(round_seconds)]
    for seconds in round_seconds:
        starts.append(starts[-1] + seconds)
    return starts


def peer_result(out: Path) -> tuple[list[float], float, str, list[float]]:
    """Round seconds, final accuracy, version and round boundaries from a peer driver's report."""
    report = json.loads(out.read_text())
    times = report["boundaries"]
    return (
        [b - a for a, b in itertools.pairwise(times)],
        report["accuracy"],
        report["version"],
        times,
    )


def run_command(
    framework: str, workload: Workload, folder: Path, args, run_dir: Path, env: dict
) -> tuple[list[str], Path | None]:
    """The framework's command and the folder it runs in (None: here); sets its PYTHONPATH."""
    row = FRAMEWORKS[framework]
    if row.engine is not None:
        command = fedlight_command(
            workload, folder, args.data_root, run_dir, args.device, row.engine
        )
        command.append(f"fl.threads_per_worker={args.threads}")
        if not row.before:
            return command, None
        env["PYTHONPATH"] = str(args.before.resolve())
        return command, args.before.resolve()
    peer = next(p for p in PEERS if p.name == framework)
    env["PYTHONPATH"] = str(DRIVERS)
    driver = DRIVERS / f"{peer.driver}.py"
    return [str(venv_python(peer)), str(driver), str(folder), str(run_dir / "report.json")], None


def one_run(framework: str, workload: Workload, folder: Path, args, number: int) -> dict:
    """One framework's run on the workload, measured; its part of the record."""
    threads = str(args.threads)
    env = dict(
        os.environ,
        OMP_NUM_THREADS=threads,
        MKL_NUM_THREADS=threads,
        PFL_PYTORCH_DEVICE=args.device,
    )
    run_dir = WORK / "runs" / workload.name / f"{number:02d}_{framework}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a run of an earlier invocation
    run_dir.mkdir(parents=True)
    out = run_dir / "report.json"
    command, cwd = run_command(framework, workload, folder, args, run_dir, env)
    usage: Usage = measure(command, env, run_dir / "log.txt", cwd)
    if usage.exit_code != 0:
        raise SystemExit(f"{framework} failed (exit {usage.exit_code}); see {run_dir / 'log.txt'}")
    trained_with = {"device": args.device}
    if FRAMEWORKS[framework].engine is not None:
        rounds, accuracy = fedlight_result(run_dir)
        version = "working tree" if cwd is None else f"commit {commit_of(cwd)}"
        boundaries = fedlight_boundaries(rounds, usage)
        trained_with = fedlight_environment(run_dir)
    else:
        rounds, accuracy, version, boundaries = peer_result(out)
    cpu = [usage.cpu_between(a, b) for a, b in itertools.pairwise(boundaries)]
    print(
        f"{workload.name} {framework}: rounds {[round(s, 2) for s in rounds]} s, "
        f"CPU {[round(s, 2) for s in cpu]} s, acc {accuracy:.4f}, "
        f"PSS {usage.peak_pss_mb:.0f} MB",
        flush=True,
    )
    return {
        "framework": framework,
        "version": version,
        "round_seconds": rounds,
        "round_cpu_seconds": cpu,
        "outside_seconds": usage.seconds - sum(rounds),
        "accuracy": accuracy,
        "peak_rss_mb": usage.peak_rss_mb,
        "peak_pss_mb": usage.peak_pss_mb,
        "peak_threads": usage.peak_threads,
        "processes": usage.processes,
        "trained_with": trained_with,
    }


def frameworks_for(workload: Workload, args) -> list[str]:
    """The frameworks `args` asks for that can run the workload, in FRAMEWORKS' order; a line for
    each left out. Without --frameworks: fedlight's sequential engine and the peers, and its
    vectorized engine on a GPU (the engine `fl.engine=auto` would pick there once measured)."""
    asked = args.frameworks
    if asked is None:
        asked = [f.name for f in FRAMEWORKS.values() if args.device in f.default_on]
    chosen = []
    for framework in FRAMEWORKS.values():
        if framework.name not in asked and not (framework.before and args.before is not None):
            continue
        if framework.engine == "vectorized" and workload.vectorized:
            print(f"{workload.name}: {framework.name} left out ({workload.vectorized})", flush=True)
            continue
        chosen.append(framework.name)
    return chosen


def record_path(workload: Workload, device: str) -> Path:
    """Where a workload's record goes: <workload>.json on the CPU, <workload>-<device>.json else."""
    suffix = "" if device == "cpu" else f"-{device}"
    return RECORDS / f"{workload.name}{suffix}.json"


def machine(device: str) -> str:
    """The machine in words, for the record."""
    cores = f"{os.cpu_count()} CPU cores, shared with other jobs"
    return cores if device == "cpu" else f"{torch.cuda.get_device_name()}, {cores}"


def prepared(workload: Workload, data: TensorDataset, args) -> tuple[Path, dict]:
    """The folder every framework is handed (the spec, the data, fedlight's clients.json) and
    the spec's content."""
    folder = WORK / "work" / workload.name
    content = handed.spec(workload, data, args.threads, args.device)
    handed.write(folder, content, data)
    (folder / "clients.json").write_text(json.dumps(content["clients"]))
    return folder, content


def header(workload: Workload, content: dict, args) -> dict:
    """What a record says besides its runs: the settings, the work, the versions, the machine."""
    return {
        "workload": workload.name,
        "settings": workload.settings(),
        "rounds": workload.rounds,
        "samples": handed.samples_trained(content),
        "threads": args.threads,
        "device": args.device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": machine(args.device),
    }


def write_record(path: Path, record: dict) -> Path:
    """`record` as JSON at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def run_workload(workload: Workload, args) -> Path:
    """Every framework on `workload`, repeats alternated; the record's path."""
    folder, content = prepared(workload, load_data(workload, args.data_root), args)
    frameworks = frameworks_for(workload, args)
    runs = []
    for repeat in range(args.repeats):
        order = frameworks[repeat % len(frameworks) :] + frameworks[: repeat % len(frameworks)]
        for framework in order:
            runs.append(one_run(framework, workload, folder, args, len(runs)))
    record = header(workload, content, args) | {
        "order": "repeats alternated, each starting one framework further along",
        "runs": runs,
    }
    return write_record(record_path(workload, args.device), record)


def run_seeds(workload: Workload, args) -> Path:
    """fedlight alone on the workload at each of `args.seeds`, with its own draws for the seed
    (index sets, selections, initial weights, shuffles), handed to it as `run_workload` hands
    seed 0's: the seed noise that a record's accuracies are compared with. The record's path
    (<workload>-seeds.json); its header (the samples trained) is the first seed's."""
    data = load_data(workload, args.data_root)
    record, runs = {}, []
    for seed in args.seeds:
        seeded = dataclasses.replace(workload, name=f"{workload.name}-seed{seed}", seed=seed)
        folder, content = prepared(seeded, data, args)
        if not runs:
            record = header(workload, content, args)
        runs.append({"seed": seed} | one_run("fedlight", seeded, folder, args, len(runs)))
    record |= {"runs": runs}
    path = record_path(workload, args.device)
    return write_record(path.with_name(f"{path.stem}-seeds.json"), record)
