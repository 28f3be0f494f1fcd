"""Peak memory of a command and every process it starts (its workers), sampled from /proc.

A run with `fl.workers=auto` is a parent and its forked workers, which share the parent's pages
(imported libraries, the loaded data) until one writes them: each process's RSS counts those
pages in full, so the sum of RSS overstates what the run holds. The proportional set size (PSS,
/proc/<pid>/smaps_rollup) charges a shared page to its sharers in equal parts, so the sum of PSS
is the memory the run holds. Reported: each process's peak RSS, the peak of the tree's summed
RSS and of its summed PSS (sampled every `--interval` seconds; Linux only).

    python benchmarks/memory_tree.py -- python -m fedlight algo=scaffold data=cifar10 \\
        data.root=<ImageFolder> fl.rounds=2
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path


def tasks(pid: int) -> list[Path]:
    """The /proc folders of `pid`'s threads; none once it has ended (a process of the tree can end
    while the tree is walked, and its folder goes with it)."""
    try:
        return list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []


def children(pid: int) -> list[int]:
    """`pid` and its descendants."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        for task in tasks(current):
            try:
                queue += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return found


def memory_kb(pid: int) -> tuple[int, int] | None:
    """(RSS, PSS) of a process in kB; None once it has ended."""
    try:
        fields = dict(
            line.split(":", 1)
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
        )
    except (OSError, ValueError):
        return None
    return int(fields["Rss"].split()[0]), int(fields["Pss"].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    process = subprocess.Popen(command)
    peak_rss: dict[int, int] = {}
    peak_sum_rss = peak_sum_pss = 0
    while process.poll() is None:
        sampled = {pid: memory_kb(pid) for pid in children(process.pid)}
        sampled = {pid: m for pid, m in sampled.items() if m is not None}
        for pid, (rss, _) in sampled.items():
            peak_rss[pid] = max(peak_rss.get(pid, 0), rss)
        peak_sum_rss = max(peak_sum_rss, sum(rss for rss, _ in sampled.values()))
        peak_sum_pss = max(peak_sum_pss, sum(pss for _, pss in sampled.values()))
        time.sleep(args.interval)
    print(f"exit code {process.returncode}; {len(peak_rss)} processes", file=sys.stderr)
    for pid, rss in peak_rss.items():
        print(f"  pid {pid}: peak RSS {rss / 1024:.0f} MB", file=sys.stderr)
    print(f"peak of summed RSS {peak_sum_rss / 1024:.0f} MB", file=sys.stderr)
    print(f"peak of summed PSS {peak_sum_pss / 1024:.0f} MB (what the run holds)", file=sys.stderr)


if __name__ == "__main__":
    main()
