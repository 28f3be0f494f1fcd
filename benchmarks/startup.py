"""Benchmark: the time from `python -m fedlight <overrides>` to its exit, and its peak RSS, for this
tree against a baseline checkout (e.g. `git worktree add /tmp/before <commit>`).

The two trees run alternately, `--repeats` times each, under `/usr/bin/time`, so that load on the
machine falls on both alike; printed: each run, the medians and the ratio this tree / baseline.
A second table times `python -c "import fedlight.cli"` the same way: the share of the start that
is imports.

    python benchmarks/startup.py --baseline /tmp/before --repeats 5
    python benchmarks/startup.py --baseline /tmp/before -- data=cifar10 data.root=... fl.rounds=1
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def timed(tree: Path, command: list[str], workdir: Path) -> tuple[float, float]:
    """Seconds and peak RSS (GB) of one command run with `tree` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree), "WANDB_MODE": "disabled"}
    result = subprocess.run(
        ["/usr/bin/time", "-f", "TIME %e %M", sys.executable, *command],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("TIME ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"{command} in {tree} failed:\n{result.stdout}\n{result.stderr}")
    seconds, kilobytes = lines[-1].split()[1:]
    return float(seconds), int(kilobytes) / 1e6


def compare(
    name: str,
    trees: dict[str, Path],
    command: Callable[[str, int], list[str]],
    repeats: int,
    workdir: Path,
) -> None:
    """`command(label, repeat)` is the interpreter's arguments for one run of one tree."""
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label in trees}
    for repeat in range(repeats):
        for label, tree in trees.items():
            runs[label].append(timed(tree, command(label, repeat), workdir))
            seconds, gigabytes = runs[label][-1]
            print(
                f"  {name} {label} #{repeat + 1}: {seconds:.2f} s  {gigabytes:.2f} GB", flush=True
            )
    medians = {
        label: (statistics.median(s for s, _ in r), statistics.median(g for _, g in r))
        for label, r in runs.items()
    }
    (base_s, base_gb), (this_s, this_gb) = medians["baseline"], medians["this tree"]
    print(
        f"{name}: baseline {base_s:.2f} s {base_gb:.2f} GB, this tree {this_s:.2f} s "
        f"{this_gb:.2f} GB; time ratio {this_s / base_s:.2f}, RSS ratio {this_gb / base_gb:.2f} "
        f"(medians of {repeats})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the checkout to compare to")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("overrides", nargs="*", default=["fl.rounds=1"])
    args = parser.parse_args()
    trees = {"baseline": args.baseline.resolve(), "this tree": HERE}
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)

        def run(label: str, repeat: int) -> list[str]:
            run_dir = workdir / f"{label.replace(' ', '_')}-{repeat}"
            return ["-m", "fedlight", *args.overrides, f"hydra.run.dir={run_dir}"]

        compare("python -m fedlight " + " ".join(args.overrides), trees, run, args.repeats, workdir)
        compare(
            "import fedlight.cli",
            trees,
            lambda label, repeat: ["-c", "import fedlight.cli"],
            args.repeats,
            workdir,
        )


if __name__ == "__main__":
    main()
