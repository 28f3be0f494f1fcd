"""Benchmark: the time from `python -m fedlight <overrides>` to its exit, and its peak RSS, for this
tree against a baseline checkout (e.g. `git worktree add /tmp/before <commit>`).

The commands run alternately, `--repeats` times each, under `/usr/bin/time`, so that load on the
machine falls on all alike; printed: each run, the medians and each one's ratio to the baseline's
run. Beside the two trees' runs: the floor of any process that trains a LightningModule, `import
torch` plus building an SGD optimizer (which imports torch._dynamo), with and without `import
pytorch_lightning`. A second table times `python -c "import fedlight.cli.main"` for both trees: the
share of the start that is imports.

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
# What any process that trains a torch model pays before its first step: the optimizer's
# constructor imports torch._dynamo.
FLOOR = "import torch; torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)"
# A command: the tree first on the path, and the interpreter's arguments for repeat r.
Command = tuple[Path, Callable[[int], list[str]]]


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


def compare(name: str, commands: dict[str, Command], repeats: int, workdir: Path) -> None:
    """Time each labelled (tree, arguments for repeat r) alternately; the first is the reference."""
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label in commands}
    for repeat in range(repeats):
        for label, (tree, arguments) in commands.items():
            runs[label].append(timed(tree, arguments(repeat), workdir))
            seconds, gigabytes = runs[label][-1]
            print(
                f"  {name} {label} #{repeat + 1}: {seconds:.2f} s  {gigabytes:.2f} GB", flush=True
            )
    medians = {
        label: (statistics.median(s for s, _ in r), statistics.median(g for _, g in r))
        for label, r in runs.items()
    }
    reference_s, reference_gb = next(iter(medians.values()))
    print(f"{name} (medians of {repeats}):")
    for label, (seconds, gigabytes) in medians.items():
        print(
            f"  {label}: {seconds:.2f} s ({seconds / reference_s:.0%}), {gigabytes:.2f} GB "
            f"({gigabytes / reference_gb:.0%})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the checkout to compare to")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("overrides", nargs="*", default=["fl.rounds=1"])
    args = parser.parse_args()
    baseline, this_tree = args.baseline.resolve(), HERE
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)

        def fedlight_run(label: str) -> Callable[[int], list[str]]:
            def arguments(repeat: int) -> list[str]:
                run_dir = workdir / f"{label}-{repeat}"
                return ["-m", "fedlight", *args.overrides, f"hydra.run.dir={run_dir}"]

            return arguments

        compare(
            "python -m fedlight " + " ".join(args.overrides),
            {
                "baseline": (baseline, fedlight_run("baseline")),
                "this tree": (this_tree, fedlight_run("this_tree")),
                "import torch + SGD": (this_tree, lambda repeat: ["-c", FLOOR]),
                "import torch + SGD + Lightning": (
                    this_tree,
                    lambda repeat: ["-c", f"import pytorch_lightning; {FLOOR}"],
                ),
            },
            args.repeats,
            workdir,
        )
        import_cli = ["-c", "import fedlight.cli.main"]
        compare(
            "import fedlight.cli.main",
            {
                "baseline": (baseline, lambda repeat: import_cli),
                "this tree": (this_tree, lambda repeat: import_cli),
            },
            args.repeats,
            workdir,
        )


if __name__ == "__main__":
    main()
