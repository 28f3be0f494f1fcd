"""The command line of `python -m benchmarks.peers`."""

import argparse
from collections.abc import Sequence
from pathlib import Path

from benchmarks.peers.records import FRAMEWORKS
from benchmarks.peers.setup import setup
from benchmarks.peers.workloads import WORKLOADS


def chosen_workloads(prefix: str) -> list[str]:
    """The workloads named by `prefix` (W1: W1-2NN and W1-CNN), refused in one line if none."""
    names = [name for name in WORKLOADS if name == prefix or name.startswith(f"{prefix}-")]
    if not names:
        raise SystemExit(
            f"--workload {prefix}: no such workload; choose from {', '.join(WORKLOADS)}"
        )
    return names


def workload_options() -> argparse.ArgumentParser:
    """The options `run` and `seeds` share: the workload, its data, threads and device."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--workload", required=True, help="W1 (or W1-2NN, W1-CNN), N1 or XD")
    shared.add_argument(
        "--data-root",
        required=True,
        type=Path,
        help="fedlight's data.root for the workload's data (MNIST/raw/, FashionMNIST/raw/, or "
        "CIFAR-10's train/ and test/ image folders)",
    )
    shared.add_argument("--threads", type=int, default=1, help="torch threads of every framework")
    shared.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where every framework trains (fedlight's device; the peers' data and networks)",
    )
    return shared


def parser() -> argparse.ArgumentParser:
    """`setup`, `run` and `seeds`, with their options."""
    main_parser = argparse.ArgumentParser(prog="python -m benchmarks.peers")
    commands = main_parser.add_subparsers(dest="command", required=True)
    install = commands.add_parser("setup", help="each peer in its own environment, pinned")
    install.add_argument("peers", nargs="*", help="peers to set up (all without)")
    shared = workload_options()
    run = commands.add_parser(
        "run", parents=[shared], help="every framework on a workload; writes its record"
    )
    run.add_argument("--repeats", type=int, default=3)
    run.add_argument(
        "--frameworks",
        nargs="+",
        choices=FRAMEWORKS,
        help="default: fedlight, flower, pfl (and fedlight-vectorized with --device cuda)",
    )
    run.add_argument(
        "--before",
        type=Path,
        help="a checkout of fedlight (a git worktree of the commit before a change): run as "
        "fedlight-before beside the others",
    )
    seeds = commands.add_parser(
        "seeds",
        parents=[shared],
        help="fedlight alone at other seeds (its own draws for each): the seed noise the "
        "frameworks' accuracies are compared with; writes <workload>-seeds.json",
    )
    seeds.add_argument("--seeds", nargs="+", type=int, required=True, help="e.g. 1 2")
    return main_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the subcommand."""
    args = parser().parse_args(argv)
    if args.command == "setup":
        return setup(args.peers)
    args.data_root = args.data_root.resolve()  # fedlight-before runs in its own checkout
    if args.command == "seeds":
        args.frameworks, args.before, args.repeats = ["fedlight"], None, 1
    for name in args.frameworks or ():
        if args.before is None and FRAMEWORKS[name].before:
            raise SystemExit(f"--frameworks {name}: name the checkout with --before CHECKOUT")
    if args.before is not None and not (args.before / "fedlight" / "__main__.py").exists():
        raise SystemExit(f"--before {args.before}: not a checkout of fedlight")
    from benchmarks.peers.run import check_device, run_seeds, run_workload  # imports torch

    check_device(args.device)
    for name in chosen_workloads(args.workload):
        if args.command == "seeds":
            print(f"record: {run_seeds(WORKLOADS[name], args)}", flush=True)
        else:
            print(f"record: {run_workload(WORKLOADS[name], args)}", flush=True)
    return 0
