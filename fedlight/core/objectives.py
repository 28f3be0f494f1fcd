"""The summary.json numbers a sweep may optimize (`objective`, a study's `objectives`): which way
is better, and the worst value, given to a job that diverged or never reached its target."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Objective:
    """A summary.json number that a sweep may optimize (`objective`): which way is better, and
    the value an optimizing sweeper gives a job that diverged or never reached its target (the
    worst the number can be; None where it is unbounded, and such a job is a failed trial)."""

    direction: str  # maximize | minimize
    worst: float | None


# summary.json's numbers that a sweep may optimize (`objective`; or a column the run logs, whose
# direction a study is then told: `fedlight.runs.objective`)
OBJECTIVES = {
    "final_accuracy": Objective("maximize", 0.0),
    "best_accuracy": Objective("maximize", 0.0),
    "val_accuracy": Objective("maximize", 0.0),  # the last evaluated round's (validation set)
    "rounds_to_target": Objective("minimize", None),
    "comm_mb": Objective("minimize", None),
    "upload_mb": Objective("minimize", None),
    "mb_to_target": Objective("minimize", None),
    "wall_seconds": Objective("minimize", None),
    "command_seconds": Objective("minimize", None),
}
