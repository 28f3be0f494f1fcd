"""One framework's run as a process tree: its wall time, and the peaks of the tree's summed
resident memory (RSS), proportional set size (PSS: a page shared by k processes counts 1/k, so
the sum is what the tree holds) and thread count, sampled from /proc (Linux); the tree's CPU
seconds (user and system) over time, and when each line of its output came, so that a round's
CPU time can be read between its boundaries. On a shared machine a round's CPU seconds move less
with the load than its wall seconds, and CPU seconds above the wall seconds show a framework
running on more than one core.

The tree is the run's session (it starts in a new one) with its descendants: a process whose
parent ended is adopted by init and leaves the parent-child tree, but not the session (Flower's
Ray actors outlived the simulation that way, still computing). Whatever of the session is left
when the run's process ends is killed, so that it loads no later run."""

import bisect
import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.memory_tree import children

TICKS = os.sysconf("SC_CLK_TCK")
INTERVAL = 0.2  # seconds between samples


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
    cpu_trace: list[tuple[float, float]] = field(default_factory=list)  # (time, CPU seconds)
    lines: list[tuple[float, str]] = field(default_factory=list)  # (time, line) of its output

    def cpu_between(self, start: float, end: float) -> float:
        """The tree's CPU seconds between two times (time.time()), interpolated between the
        samples."""
        return cpu_at(self.cpu_trace, end) - cpu_at(self.cpu_trace, start)


def cpu_at(trace: list[tuple[float, float]], moment: float) -> float:
    """CPU seconds at `moment`, linear between the samples around it (clamped at the ends)."""
    times = [t for t, _ in trace]
    i = bisect.bisect_left(times, moment)
    if i == 0:
        return trace[0][1]
    if i == len(trace):
        return trace[-1][1]
    (t0, c0), (t1, c1) = trace[i - 1], trace[i]
    return c0 + (c1 - c0) * (moment - t0) / (t1 - t0)


def members(pid: int) -> list[int]:
    """The processes of the session `pid` leads, and `pid`'s descendants."""
    found = set(children(pid))
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rpartition(")")[2].split()[3]) == pid:
                found.add(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return sorted(found)


def fields(text: str) -> dict[str, int]:
    """The `Name:   123 kB` lines of a /proc file as numbers (the unit dropped)."""
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        words = value.split()
        if words and words[0].isdigit():
            found[name.strip()] = int(words[0])
    return found


def cpu_seconds(stat: str) -> float:
    """User and system time of a process (its own, not its children's: each member is counted
    itself), from its /proc/<pid>/stat line (fields 14 and 15, after the command's name)."""
    after_name = stat.rpartition(")")[2].split()
    return (int(after_name[11]) + int(after_name[12])) / TICKS


def sample(pid: int) -> tuple[int, int, int, float] | None:
    """(RSS kB, PSS kB, threads, CPU seconds) of a process; None once it has ended."""
    try:
        memory = fields(Path(f"/proc/{pid}/smaps_rollup").read_text())
        status = fields(Path(f"/proc/{pid}/status").read_text())
        cpu = cpu_seconds(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None
    return memory.get("Rss", 0), memory.get("Pss", 0), status.get("Threads", 0), cpu


def copy_lines(source, log: Path, lines: list[tuple[float, str]]) -> None:
    """The process's output into `log`, each line's arrival time into `lines`."""
    with open(log, "w") as out:
        for line in source:
            lines.append((time.time(), line.rstrip("\n")))
            out.write(line)
            out.flush()


def measure(command: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> Usage:
    """Run `command` in `cwd` (output to `log`, unbuffered) and sample its tree every 0.2 s until
    it exits."""
    started = time.time()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        start_new_session=True,
        env=dict(env, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=copy_lines, args=(process.stdout, log, lines))
    reader.start()
    peaks = [0, 0, 0]
    seen: set[int] = set()
    trace: list[tuple[float, float]] = []
    cpu: dict[int, float] = {}  # each member's CPU seconds when last seen (ended ones kept)
    while process.poll() is None:
        samples = {pid: s for pid in members(process.pid) if (s := sample(pid)) is not None}
        cpu.update({pid: s[3] for pid, s in samples.items()})
        trace.append((time.time(), sum(cpu.values())))
        seen.update(samples)
        for i in range(3):
            peaks[i] = max(peaks[i], sum(s[i] for s in samples.values()))
        time.sleep(INTERVAL)
    for pid in members(process.pid):  # left running: an orphan the run did not end
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    reader.join()
    return Usage(
        started,
        time.time() - started,
        process.returncode,
        peaks[0] / 1024,
        peaks[1] / 1024,
        peaks[2],
        len(seen),
        trace,
        lines,
    )
