"""Same numbers: does a refactor move any number? Runs a fixed set of 3-round cases from two
checkouts and compares their `metrics.csv` (every column but the wall-clock timings) and exit codes.

The cases: every algorithm of the README's Fashion-MNIST shards comparison (its command with
`fl.rounds=3`) plus the other synchronous options of conf/algo on that setting; the first cell of
every preset's sweep (`+experiment=<preset>` and, for each key of its `hydra.sweeper.params`, the
first value); a few more cells of the async, compression and privacy presets; and one case that
spells out both codec chains (translated to the groups compression, wire and download_compression
for a checkout that has them). Each runs as
`python -m fedlight` from the checkout (cwd and PYTHONPATH), with OMP_NUM_THREADS=1 and
`fl.threads_per_worker=1` and `fl.memory_format=contiguous` (where the checkout has those
settings), once per `--workers` count, into
`OUT/<case>_w<workers>`. Each case directory gets `outcome.txt` (exit code, the last line of stderr,
seconds, the command): a refused combination (an asynchronous algorithm with `fl.workers=2`) is
an outcome compared like the others. A case whose `outcome.txt` exists is skipped, so an
interrupted run resumes where it stopped.

Baseline from a frozen checkout of the commit before the change (`git worktree add`), then the
candidate, then the comparison (one job at a time on a small machine; `run` took 65 minutes for
the 54 runs of commit f7a5257 on this project's shared 2-core machine):

    python benchmarks/same_numbers.py run --src ../wt/base --out ../sweeps/base \
        --workers 1 2
    python benchmarks/same_numbers.py run --src ../wt/new --out ../sweeps/new --workers 1 2
    python benchmarks/same_numbers.py compare ../sweeps/base ../sweeps/new

`list` prints the cases and their commands; `--only NAME...` (shell patterns) runs a subset.
"""

import argparse
import csv
import fnmatch
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ROUNDS = 3
OUTCOME = "outcome.txt"
METRICS = "metrics.csv"

# The README's "Algorithms on non-IID Fashion-MNIST" command, `partition=shards` (docs/results/
# fmnist_shards), without its fl.rounds=100 and the sweep's algo list.
FMNIST_SHARDS = (
    "data=fmnist",
    "fl.num_clients=10",
    "fl.clients_per_round=10",
    "local.batch_size=64",
    "optim.lr=0.01",
    "optim.momentum=0.9",
    "eval.target_accuracy=0.8",
    "partition=shards",
)
# The README's table, then the other options of conf/algo but the asynchronous fedasync and fedbuff
# (they run through the async preset's cells).
README_ALGOS = ("fedavg", "scaffold", "fedprox", "fednova", "fedadam", "local", "central")
OTHER_ALGOS = ("fedavgm", "fedyogi", "fedadagrad", "ditto", "fedper", "lg_fedavg")
ASYNC_ALGOS = ("fedasync", "fedbuff")

# Each preset's first sweep cell: every key of its hydra.sweeper.params at its first value.
PRESET_CELLS: dict[str, tuple[str, ...]] = {
    "selection": ("selection=random", "seed=0"),
    "lr_schedule": ("lr_schedule=constant", "seed=0"),
    "robust": ("+experiment/robust=mean", "attack=none", "partition=iid", "seed=0"),
    "compression": ("+experiment/compression=none", "seed=0"),
    "compression_scaffold": ("algo=fedavg", "+experiment/compression=none", "seed=0"),
    "privacy": ("+experiment/privacy=none_100", "seed=0"),
    "personalization": ("+experiment/personalization=fedavg", "seed=0"),
    "async": ("+experiment/async=fedavg", "seed=0"),
    # the slowest case by far (E = 10): about 7 minutes at each worker count on the 2-core machine
    "niid_bench": ("+experiment/niid_bench=fedavg", "partition=dirichlet", "seed=0"),
    "scaffold_stability": (
        "algo.variant=fedlight",
        "optim.momentum=0",
        "optim.lr=0.01",
        "seed=0",
    ),
}
# More cells of some presets: (case name, preset, overrides).
EXTRA_CELLS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("async_fedbuff", "async", ("+experiment/async=fedbuff", "seed=0")),
    ("async_fedasync_constant", "async", ("+experiment/async=fedasync_constant", "seed=0")),
    ("compression_topk10", "compression", ("+experiment/compression=topk10", "seed=0")),
    ("privacy_fedavg100_eps10", "privacy", ("+experiment/privacy=fedavg100_eps10", "seed=0")),
    # both codec chains spelled out, a cast after a compressor (see `old_spelling`)
    (
        "codec_topk_fp16_int8",
        "compression",
        (
            "upload=[topk,fp16]",
            "upload.topk.ratio=0.05",
            "upload.fp16.error_feedback=true",
            "download=[int8]",
            "seed=0",
        ),
    ),
)
# A checkout from before the groups upload and download (issue 32) spells a codec with the groups
# compression (a compressor, first in the upload chain), wire (the casts after it) and
# download_compression: `old_spelling` translates a case's overrides for it.
COMPRESSORS = ("topk", "randk", "qsgd", "int8", "sign")
CASTS = ("fp16", "bf16")

# metrics.csv columns that measure real time, left out of the comparison: the run's and the
# clients' (fedlight/drivers/synchronous.py) and a wire codec's encode/decode time
# (`wire.<direction>.encode_seconds`, fedlight/stages/wire/base.py); any other name ending in
# "seconds" too, except these numbers of the system's virtual clock.
WALL_CLOCK = ("wall_seconds", "client_seconds")
VIRTUAL_CLOCK = ("virtual_time", "round_seconds")


@dataclass(frozen=True)
class Case:
    """One run: a name and its Hydra overrides (without rounds, data root, workers, run dir)."""

    name: str
    overrides: tuple[str, ...]


def cases() -> list[Case]:
    """Every case, in the order they run."""
    found = [
        Case(f"fmnist_shards_{algo}", (*FMNIST_SHARDS, f"algo={algo}"))
        for algo in README_ALGOS + OTHER_ALGOS
    ]
    found += [
        Case(preset, (f"+experiment={preset}", *cell)) for preset, cell in PRESET_CELLS.items()
    ]
    found += [Case(name, (f"+experiment={preset}", *cell)) for name, preset, cell in EXTRA_CELLS]
    return found


def selected(only: Sequence[str] | None) -> list[Case]:
    """The cases whose name matches one of the shell patterns `only` (all without)."""
    if not only:
        return cases()
    chosen = [c for c in cases() if any(fnmatch.fnmatchcase(c.name, p) for p in only)]
    if not chosen:
        sys.exit(f"same_numbers: no case matches {' '.join(only)}; see `list`")
    return chosen


# Settings pinned where the checkout has them: one torch thread per worker, and the layout of
# fedlight before channels-last became the default (which rounds differently).
PINNED = {"threads_per_worker": "1", "memory_format": "contiguous"}


def pinned(src: Path) -> list[str]:
    """The PINNED settings the checkout's config.yaml has, as overrides."""
    config = yaml.safe_load((src / "conf" / "config.yaml").read_text())
    fl = config.get("fl") or {}
    return [f"fl.{key}={value}" for key, value in PINNED.items() if key in fl]


def check_checkout(src: Path) -> None:
    """Warn where the checkout's configs no longer match the hard-coded cases: an algorithm
    option not covered, or a preset whose first sweep cell is not the one run here."""
    algos = {p.stem for p in (src / "conf" / "algo").glob("*.yaml")}
    missing = sorted(algos - set(README_ALGOS + OTHER_ALGOS + ASYNC_ALGOS))
    if missing:
        print(f"warning: conf/algo options without a case: {', '.join(missing)}", flush=True)
    for preset, cell in PRESET_CELLS.items():
        path = src / "conf" / "experiment" / f"{preset}.yaml"
        if not path.exists():
            print(f"warning: {path} does not exist", flush=True)
            continue
        params = (yaml.safe_load(path.read_text()) or {}).get("hydra", {})
        params = params.get("sweeper", {}).get("params", {})
        first = tuple(f"{key}={str(values).split(',')[0]}" for key, values in params.items())
        if sorted(first) != sorted(cell):
            print(
                f"warning: {preset}'s first cell is {' '.join(first)}, not {' '.join(cell)}",
                flush=True,
            )


def old_spelling(overrides: Sequence[str]) -> list[str]:
    """`overrides` in the groups compression, wire and download_compression: `upload=[c,cast]`
    is `compression=c wire=cast`, `download=[int8]` is `download_compression=int8`, an fp16 cast
    both ways is `wire=fp16_both`; each option's settings follow it. Other chains had no old
    spelling and stop the run."""
    chains: dict[str, list[str]] = {"upload": [], "download": []}
    kept = []
    for override in overrides:
        key, _, value = override.partition("=")
        if key in chains:
            chains[key] = [v for v in value.strip("[]").split(",") if v]
        else:
            kept.append(override)
    upload, download = chains["upload"], chains["download"]
    compressors, casts = [c for c in upload if c in COMPRESSORS], [c for c in upload if c in CASTS]
    if compressors + casts != upload or len(compressors) > 1 or len(casts) > 1:
        sys.exit(f"same_numbers: upload={upload} has no spelling in compression= and wire=")
    if download not in ([], ["int8"]) and not (download == ["fp16"] and casts == ["fp16"]):
        sys.exit(f"same_numbers: download={download} has no old spelling")
    groups = [f"compression={c}" for c in compressors] + [
        f"download_compression={d}" for d in download if d == "int8"
    ]
    if casts:
        groups.append(f"wire={casts[0]}{'_both' if download == ['fp16'] else ''}")
    renamed = []
    for override in kept:
        key, _, value = override.partition("=")
        direction, _, rest = key.partition(".")
        option, _, setting = rest.partition(".")
        if direction == "upload" and option in COMPRESSORS:
            key = f"compression.{setting}"
        elif direction == "download" and option == "int8":
            key = f"download_compression.{setting}"
        elif direction in chains and option in CASTS:
            key = f"wire.{key}"
        renamed.append(f"{key}={value}" if value or "=" in override else key)
    return [*groups, *renamed]


def command(case: Case, src: Path, run_dir: Path, data_root: Path, workers: int) -> list[str]:
    """The `python -m fedlight` command line of `case` (run from `src`), in the old codec
    groups where the checkout has them (`old_spelling`)."""
    old = (src / "conf" / "compression").is_dir()
    return [
        sys.executable,
        "-m",
        "fedlight",
        *(old_spelling(case.overrides) if old else case.overrides),
        f"fl.rounds={ROUNDS}",
        f"data.root={data_root}",
        f"fl.workers={workers}",
        *pinned(src),
        f"hydra.run.dir={run_dir}",
    ]


def last_line(text: str) -> str:
    """The last non-empty line of `text` ('' if none)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def run_case(case: Case, src: Path, run_dir: Path, data_root: Path, workers: int) -> float:
    """Run one case into `run_dir` (a previous attempt that left no outcome.txt is removed
    first), write its outcome.txt; the seconds it took."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    argv = command(case, src, run_dir, data_root, workers)
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1")
    started = time.perf_counter()
    with (
        open(run_dir / "stdout.txt", "w") as stdout,
        open(run_dir / "stderr.txt", "w+") as stderr,
    ):
        code = subprocess.run(argv, cwd=src, env=env, stdout=stdout, stderr=stderr).returncode
        stderr.seek(0)
        message = last_line(stderr.read())
    seconds = time.perf_counter() - started
    (run_dir / OUTCOME).write_text(
        f"exit_code: {code}\n"
        f"last_stderr: {message}\n"
        f"seconds: {seconds:.1f}\n"
        f"command: {shlex.join(['python', *argv[1:]])}\n"
    )
    return seconds


def run(args: argparse.Namespace) -> int:
    """`run`: every selected case at every worker count, skipping those with an outcome."""
    src, out = args.src.resolve(), args.out.resolve()
    data_root = (REPO / args.data_root).resolve()  # an absolute --data-root stays as it is
    check_checkout(src)
    jobs = [(case, w) for case in selected(args.only) for w in args.workers]
    began = time.perf_counter()
    for number, (case, workers) in enumerate(jobs, 1):
        run_dir = out / f"{case.name}_w{workers}"
        label = f"[{number}/{len(jobs)}] {run_dir.name}"
        if (run_dir / OUTCOME).exists():
            print(f"{label}: done before, skipped", flush=True)
            continue
        print(f"{label}: running", flush=True)
        seconds = run_case(case, src, run_dir, data_root, workers)
        outcome = read_outcome(run_dir)
        refused = "" if outcome["exit_code"] == "0" else f": {outcome['last_stderr']}"
        print(f"{label}: exit {outcome['exit_code']} in {seconds:.1f} s{refused}", flush=True)
    print(f"total {time.perf_counter() - began:.1f} s", flush=True)
    return 0


def read_outcome(run_dir: Path) -> dict[str, str]:
    """outcome.txt as a dict."""
    fields = {}
    for line in (run_dir / OUTCOME).read_text().splitlines():
        key, _, value = line.partition(": ")
        fields[key] = value
    return fields


def timing(column: str) -> bool:
    """Whether a metrics.csv column measures real time (left out of the comparison)."""
    if column in VIRTUAL_CLOCK:
        return False
    return column in WALL_CLOCK or column.endswith("seconds")


def read_metrics(path: Path) -> tuple[list[str], list[list[str]]]:
    """The compared columns of a metrics.csv and its rows restricted to them, as text."""
    with open(path, newline="") as file:
        rows = list(csv.reader(file))
    if not rows:
        return [], []
    header, body = rows[0], rows[1:]
    kept = [i for i, name in enumerate(header) if not timing(name)]
    return [header[i] for i in kept], [
        [row[i] if i < len(row) else "" for i in kept] for row in body
    ]


def compare_case(old: Path, new: Path) -> tuple[bool, str]:
    """Whether the two runs of one case agree, and what to print after the case's name."""
    if not (old / OUTCOME).exists() or not (new / OUTCOME).exists():
        side = "OLD" if not (old / OUTCOME).exists() else "NEW"
        return False, f"INCOMPLETE (no {OUTCOME} in {side})"
    before, after = read_outcome(old), read_outcome(new)
    if before["exit_code"] != after["exit_code"]:
        return False, (
            f"DIFFERS: exit code {before['exit_code']} vs {after['exit_code']} "
            f"({before['last_stderr']!r} vs {after['last_stderr']!r})"
        )
    note = ""
    if before["exit_code"] != "0":
        note = f"; exit {before['exit_code']} both"
        said = [
            o["last_stderr"].replace(str(d.resolve()), "<run dir>")
            for o, d in ((before, old), (after, new))
        ]
        if said[0] != said[1]:
            note += f", message {said[0]!r} now {said[1]!r}"
    has = [(old / METRICS).exists(), (new / METRICS).exists()]
    if has != [True, True]:
        if has == [False, False]:
            return True, f"IDENTICAL (no {METRICS}{note})"
        return False, f"DIFFERS: {METRICS} only in {'OLD' if has[0] else 'NEW'}"
    (columns, rows), (new_columns, new_rows) = (
        read_metrics(old / METRICS),
        read_metrics(new / METRICS),
    )
    if columns != new_columns:
        gone = [c for c in columns if c not in new_columns]
        added = [c for c in new_columns if c not in columns]
        what = f"only OLD {gone}, only NEW {added}" if gone or added else "same columns, new order"
        return False, f"DIFFERS: columns: {what}"
    if len(rows) != len(new_rows):
        return False, f"DIFFERS: {len(rows)} vs {len(new_rows)} rows"
    for number, (row, new_row) in enumerate(zip(rows, new_rows, strict=True), 1):
        for column, a, b in zip(columns, row, new_row, strict=True):
            if a != b:
                where = f"row {number}" + (f" (round {row[0]})" if columns[0] == "round" else "")
                return False, f"DIFFERS: {where} {column}: {a} vs {b}"
    return True, f"IDENTICAL ({len(rows)} rows, {len(columns)} columns{note})"


def compare(args: argparse.Namespace) -> int:
    """`compare OLD NEW`: one line per case directory; 1 if any differs or is missing."""
    old, new = args.old, args.new
    names = {p.name for p in old.iterdir() if p.is_dir()} | {
        p.name for p in new.iterdir() if p.is_dir()
    }
    order = {f"{c.name}_w{w}": i for i, c in enumerate(cases()) for w in range(1, 65)}
    same = True
    for name in sorted(names, key=lambda n: (order.get(n, len(order)), n)):
        if not (old / name).is_dir() or not (new / name).is_dir():
            same = False
            print(f"{name} MISSING in {'NEW' if (old / name).is_dir() else 'OLD'}")
            continue
        agrees, text = compare_case(old / name, new / name)
        same = same and agrees
        print(f"{name} {text}")
    return 0 if same else 1


def list_cases(args: argparse.Namespace) -> int:
    """`list`: every case's command, as `run` would start it from `--src`."""
    src = args.src.resolve()
    data_root = (REPO / args.data_root).resolve()  # an absolute --data-root stays as it is
    check_checkout(src)
    for case in selected(args.only):
        argv = command(case, src, Path("OUT") / f"{case.name}_w1", data_root, 1)
        print(f"{case.name}: python {shlex.join(argv[1:])}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the subcommand."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "list"):
        sub = commands.add_parser(name)
        sub.add_argument("--src", type=Path, default=REPO, help="the checkout to run")
        sub.add_argument(
            "--data-root",
            type=Path,
            default=Path("data"),
            help="data.root; relative: to the repository holding this script",
        )
        sub.add_argument("--only", nargs="+", metavar="NAME", help="case names (shell patterns)")
        if name == "run":
            sub.add_argument("--out", type=Path, required=True, help="one directory per case")
            sub.add_argument(
                "--workers", type=int, nargs="+", default=[1], help="fl.workers values"
            )
    both = commands.add_parser("compare")
    both.add_argument("old", type=Path)
    both.add_argument("new", type=Path)
    args = parser.parse_args(argv)
    return {"run": run, "list": list_cases, "compare": compare}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
