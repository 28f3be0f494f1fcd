"""The files a run leaves in its directory, by name, and who holds its lock: without torch, for
`fedlight report` and a sweep's bookkeeping (`fedlight.store.sweeps`) as much as for the run.

The lock is an `flock` on LOCK_NAME that a run holds while it writes the directory (see
`fedlight.runs.run_dir`); the kernel drops it when the holder dies, so a held lock means a live run.
"""

import fcntl
import os
from pathlib import Path

CHECKPOINT_NAME = "checkpoint.pt"
SUMMARY_NAME = "summary.json"
LOCK_NAME = ".fedlight.lock"
ERROR_NAME = "error.txt"  # the one line a run that fedlight ended with an error printed
PREEMPTED_NAME = "preempted.json"  # a run stopped by a preemption signal, resumed on its own
STUDY_FILE = "optuna.db"  # a sweep's Optuna study (hydra/sweeper=optuna), in its directory
CURVES_NAME = "curves.png"
LABEL_HISTOGRAM_NAME = "label_histogram.png"
PARTICIPATION_NAME = "participation.png"
LOCAL_ACCURACY_NAME = "local_accuracy.png"
# The figures a run draws (local_accuracy.png only with local test sets), in the order a tracker
# shows them.
FIGURES = (CURVES_NAME, LABEL_HISTOGRAM_NAME, PARTICIPATION_NAME, LOCAL_ACCURACY_NAME)
MODEL_NAME = "model.pt"  # the final global weights, a plain state dict
LIGHTNING_CHECKPOINT_NAME = "model.ckpt"  # the same as a Lightning checkpoint
STUDY_NAME = "fedlight"
# Optuna's journal file, the study's storage with hydra.sweeper.storage=journal
JOURNAL_FILE = "optuna_journal.log"
# the random states of the study's sampler after its latest draw, as JSON numbers (no pickle)
SAMPLER_FILE = "optuna_sampler.json"


def drawn_figures(directory: Path) -> list[Path]:
    """The FIGURES a run drew in `directory`, in their order: what a tracker shows at the end."""
    return [directory / name for name in FIGURES if (directory / name).exists()]


def lock_holder(directory: Path) -> str | None:
    """The pid (or "unknown") of the process that holds `directory`'s lock; None if nobody does.

    Probed with a shared lock held for an instant (a run taking the lock meanwhile retries, see
    `fedlight.runs.run_dir.acquire`)."""
    try:
        descriptor = os.open(directory / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
        return text if text.isdigit() else "unknown"
    else:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return None
    finally:
        os.close(descriptor)
