"""Preemption: a run told to stop by a signal finishes its round, writes its checkpoint and exits
with `PREEMPTED_EXIT_CODE`, so that it resumes bit-exactly where it stopped.

Clusters warn before they take a node back: SLURM sends SIGTERM on preemption and, with `#SBATCH
--signal=USR1@120`, a chosen signal before the time limit; submitit (`hydra/launcher=slurm`) uses
SIGUSR2. On one of `preemption.signals` fedlight only takes note (the handler never interrupts a
round, an exchange between workers or a checkpoint write); at the end of the round the workers
agree to stop (one of them noticing is enough), the checkpoint is written whatever
`checkpoint.every` says, the directory gets `preempted.json` (`fedlight.runs.resume` then continues
the run on its own when its command runs again), and the process exits 75 (`EX_TEMPFAIL`: "try
again later"). A second signal while the round finishes stops the run at once, as without
fedlight. A handler that was there before (submitit's checkpoint-and-requeue) is called after the
checkpoint; under SLURM without one, `preemption.requeue` asks SLURM to requeue the job.
"""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fedlight.core.settings import signal_number
from fedlight.core.signals import Handler, installed

PREEMPTED_EXIT_CODE = 75  # sysexits.h EX_TEMPFAIL: a temporary failure, try again


class Preempted(BaseException):
    """The run stopped on a preemption signal after writing the checkpoint of `round_index`.
    Not an `Exception`: no handler of errors (Hydra's, a stage's) takes it for one."""

    def __init__(self, signal_name: str, round_index: int) -> None:
        super().__init__(signal_name, round_index)
        self.signal_name = signal_name
        self.round_index = round_index


@dataclass(eq=False)  # a watch is itself (identity): an inner one has the same fields
class Watch:
    """The preemption signals this process takes note of while it is active.

    `forward`: also send the first signal to these processes (a run's workers); `insist`: a
    second signal stops the process at once (the top process; workers only take note)."""

    signals: tuple[signal.Signals, ...]
    insist: bool = True
    received: signal.Signals | None = None
    previous: dict[signal.Signals, Handler] | None = None
    forward: Sequence[int] = ()

    def handle(self, signum: int, frame: Any) -> None:
        number = signal.Signals(signum)
        if self.received is not None and self.insist:
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
            return
        if self.received is None:
            self.received = number
            if self.insist:
                print(
                    f"fedlight: {number.name}: finishing this round, then the checkpoint and "
                    f"exit {PREEMPTED_EXIT_CODE} (send it again to stop at once)",
                    file=sys.stderr,
                    flush=True,
                )
        for pid in self.forward:
            try:
                os.kill(pid, number)
            except ProcessLookupError:
                pass

    def chain(self) -> None:
        """The handler that was there before this watch, for the signal received (submitit's
        checkpoint-and-requeue), called now that the checkpoint is written."""
        if self.received is None or self.previous is None:
            return
        before = self.previous.get(self.received)
        if callable(before):
            before(int(self.received), None)


watches: list[Watch] = []  # the active watches of this process, innermost last


def forget_inherited_watches() -> None:
    """A forked worker's copy of its parent's watches is not its own: it installs its own."""
    watches.clear()


def requested() -> str | None:
    """The preemption signal this process received under its active watches, if any."""
    received = next((w.received for w in reversed(watches) if w.received is not None), None)
    return None if received is None else received.name


def watching(number: signal.Signals) -> bool:
    return any(number in w.signals for w in watches)


@contextmanager
def watched(names: Sequence[str], insist: bool = True) -> Iterator[Watch]:
    """`names`' signals taken note of for the duration (main thread only: elsewhere nothing is
    installed and nothing is received); the handlers before are put back after. A watch inside
    another (a run's inside its command's) begins with the signal that one took note of."""
    watch = Watch(tuple(signal_number(n) for n in names), insist)
    with installed({n: watch.handle for n in watch.signals}) as before:
        if before is None or not watch.signals:  # off the main thread, or nothing to watch
            yield watch
            return
        watch.previous = {n: launchers_handler(n, h) for n, h in before.items()}
        watch.received = next((w.received for w in reversed(watches) if w.received), None)
        watches.append(watch)
        try:
            yield watch
        finally:
            watches.remove(watch)


def launchers_handler(number: signal.Signals, handler: Handler) -> Handler:
    """The handler that was there before any of this process's watches (submitit's), for
    `Watch.chain`: where `handler` is an outer watch's (the command's, `fedlight.cli.main.main`),
    the one that watch found."""
    outer = next((w for w in watches if handler == w.handle), None)
    if outer is None or outer.previous is None:
        return handler
    return outer.previous.get(number)


@contextmanager
def forwarded_to(pids: Sequence[int]) -> Iterator[None]:
    """The innermost watch sends the signals it receives on to `pids` for the duration (a run's
    workers, which stop with it at the end of the round); one that came before is sent now."""
    if not watches:
        yield
        return
    watch = watches[-1]
    watch.forward = tuple(pids)
    if watch.received is not None:
        for pid in pids:
            os.kill(pid, watch.received)
    try:
        yield
    finally:
        watch.forward = ()


def requeue_on_slurm(enabled: bool) -> str | None:
    """Ask SLURM to requeue this job (`scontrol requeue $SLURM_JOB_ID`) where it runs under
    SLURM and `enabled`; what happened, in words (None where nothing was asked)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not enabled or not job:
        return None
    try:
        done = subprocess.run(
            ["scontrol", "requeue", job], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"scontrol requeue {job} could not run ({error}); resubmit the job to continue"
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no reason given"]
        return f"scontrol requeue {job} failed ({reason[0]}); resubmit the job to continue"
    return f"SLURM job {job} requeued: it continues from the checkpoint when it starts again"
