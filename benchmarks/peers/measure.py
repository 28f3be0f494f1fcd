"""One framework's run as a process tree: its wall time, and the peaks of the tree's summed
resident memory (RSS), proportional set size (PSS: a page shared by k processes counts 1/k, so
the sum is what the tree holds) and thread count, sampled from /proc (Linux)."""

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Usage:
    """What a run's process tree used."""

    started: float  # time.time() at launch
    seconds: float  # wall time of the whole process
    exit_code: int
    peak_rss_mb: float
    peak_pss_mb: float
    peak_threads: int
    processes: int  # distinct processes seen


def tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                queue += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return found


def fields(text: str) -> dict[str, int]:
    """The `Name:   123 kB` lines of a /proc file as numbers (the unit dropped)."""
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        words = value.split()
        if words and words[0].isdigit():
            found[name.strip()] = int(words[0])
    return found


def sample(pid: int) -> tuple[int, int, int] | None:
    """(RSS kB, PSS kB, threads) of a process; None once it has ended."""
    try:
        memory = fields(Path(f"/proc/{pid}/smaps_rollup").read_text())
        status = fields(Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return None
    return memory.get("Rss", 0), memory.get("Pss", 0), status.get("Threads", 0)


def measure(command: list[str], env: dict[str, str], log: Path, interval: float = 0.2) -> Usage:
    """Run `command` (output to `log`) and sample its tree until it exits."""
    started = time.time()
    with open(log, "w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        peaks = [0, 0, 0]
        seen: set[int] = set()
        while process.poll() is None:
            samples = [s for s in map(sample, tree(process.pid)) if s is not None]
            seen.update(tree(process.pid))
            for i in range(3):
                peaks[i] = max(peaks[i], sum(s[i] for s in samples))
            time.sleep(interval)
    return Usage(
        started,
        time.time() - started,
        process.returncode,
        peaks[0] / 1024,
        peaks[1] / 1024,
        peaks[2],
        len(seen),
    )
