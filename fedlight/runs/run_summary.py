"""A finished run's summary.json (strict JSON: what the rounds measured, the objective, the
variants, the environment and resumes, the config a resume compares) and its figures and files
beside it (curves.png, participation, local accuracies); the loggers' last word."""

import json
import math
from pathlib import Path
from typing import Any

from fedlight import command_seconds
from fedlight.algorithms.base import Algorithm
from fedlight.core.variants import resolved_variants
from fedlight.loggers.base import (
    RoundLogger,
)
from fedlight.runs.job import Job, Ran, parallelism_of
from fedlight.runs.objective import objective_summary
from fedlight.runs.outputs import (
    participation_summary,
    splits_summary,
    summarize,
    traffic_summary,
    write_curves,
    write_local_accuracies,
    write_participation,
)
from fedlight.runs.same_config import comparable_config
from fedlight.store.files import write_text
from fedlight.store.run_files import SUMMARY_NAME


def finite_or_null(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary as strict JSON: a value that is not finite (a diverged run's) is null."""
    return {
        key: None if isinstance(value, float) and not math.isfinite(value) else value
        for key, value in summary.items()
    }


def variants_summary(algorithm: Algorithm) -> dict[str, Any]:
    """`variants`: the reference variant of the algorithm and its server optimizer, with every
    switch as it ran; absent when neither has variants."""
    components = {"algo": algorithm, "server_opt": getattr(algorithm, "server_opt", None)}
    variants = resolved_variants(components)
    return {"variants": variants} if variants else {}


def write_summary(
    job: Job, output_dir: Path, ran: Ran, loggers: list[RoundLogger]
) -> dict[str, Any]:
    """summary.json and curves.png of a finished run; the loggers' last word."""
    settings, history = job.settings, ran.history
    numbers = (
        summarize(
            history.rows,
            chance=ran.chance,
            target_accuracy=settings.eval.target_accuracy,
            total_bytes=history.bytes_up + history.bytes_down,
            wall_seconds=history.wall_seconds,
            client_seconds=history.client_seconds,
            rounds=history.completed_rounds,
            seed=settings.seed,
            choices=job.choices,
            split=settings.eval.split,
        )
        | participation_summary(history.participation)
        | traffic_summary(history.bytes_up, history.bytes_to_target)
    )
    summary = finite_or_null(
        numbers
        | objective_summary(history.rows, settings.objective, numbers)
        | splits_summary(numbers, settings.eval.split)
        | {"diverged_at_round": history.diverged_at_round, "divergence": history.divergence}
        | ({"stopped": history.stopped} if history.stopped else {})
        | variants_summary(job.stages.algorithm)
        | {"command_seconds": command_seconds()}
        | {"parallelism": parallelism_of(job).summary()}
        | {"environment": ran.environment, "resumes": ran.resumes}
        | ({"privacy": ran.privacy} if ran.privacy else {})
        | {"config": comparable_config(job.config)}
    )
    write_text(output_dir / SUMMARY_NAME, json.dumps(summary, indent=2, allow_nan=False))
    write_curves(output_dir, history.rows)
    write_participation(output_dir, history.participation)
    if history.local_accuracies:
        write_local_accuracies(output_dir, history.local_accuracies)
    for logger in loggers:
        logger.finish(summary)
    return summary
