"""A round's row of metrics (its columns, in their order) and what of a round is not finite, which
ends a run with `fl.on_divergence=stop`: the checks and the row the drivers' loop over rounds
(`fedlight.drivers.base`) writes after each round.
"""

import math
from collections.abc import Mapping
from typing import Any

import torch

from fedlight.core.tensors import StateDict
from fedlight.drivers.evaluation import Evaluated
from fedlight.drivers.history import History, RoundStats
from fedlight.engines.evaluator import ACCURACY, LOSS, VAL_ACCURACY, VAL_LOSS, VALIDATION_PREFIX
from fedlight.loggers.base import MetricsRow


def not_finite(stats: RoundStats, weights: StateDict) -> str | None:
    """What of a round is not finite (every client's update, its training loss, if anybody
    trained, or the global weights), in words; None if everything is. A round whose every update
    was rejected kept the global model, but nothing its clients computed was a number: local
    training diverged (e.g. a learning rate far too high), or every participant attacked."""
    if stats.every_update_rejected:
        return "every client update had NaN/Inf entries (all rejected; the model was kept)"
    if stats.num_samples and not math.isfinite(stats.train_loss):
        return f"train_loss {stats.train_loss}"
    floating = {name: t for name, t in weights.items() if t.is_floating_point()}
    finite = torch.stack([t.isfinite().all() for t in floating.values()])
    if bool(finite.all()):  # one device sync per round
        return None
    return f"weights {list(floating)[int(finite.logical_not().nonzero()[0])]} not finite"


# A round that was not evaluated (`eval.every`): no test or validation metrics.
NOT_EVALUATED = Evaluated({}, {})
# The validation columns a row puts first, in this order (then the others, sorted by name).
VALIDATION_COLUMNS = (VAL_ACCURACY, VAL_LOSS, "val_accuracy_std")
# Where a module's own name in training is a column already (`train_loss`, a test metric, a
# stage's), its value is kept as `model/<name>`; a validation name a test one as `val_<name>`.
MODEL_PREFIX = "model/"


def own_name(name: str, taken: Mapping[str, Any], prefix: str) -> str:
    """`name`, or `prefix` + `name` where `taken` has it: no column holds two values."""
    return prefix + name if name in taken else name


def non_finite_loss(metrics: dict[str, float]) -> str | None:
    """The first of the test and the validation loss that `metrics` has and that is not finite,
    with its value, in words; None if none."""
    return next(
        (
            f"{name} {metrics[name]}"
            for name in (LOSS, VAL_LOSS)
            if name in metrics and not math.isfinite(metrics[name])
        ),
        None,
    )


def round_row(
    round_index: int, stats: RoundStats, evaluated: Evaluated, history: History, clocked: bool
) -> MetricsRow:
    """The round's row of metrics: the fixed columns (the test ones only if the round was
    tested: `evaluated.test` not empty), then the test metrics beyond accuracy and loss, then
    the validation ones (`val_accuracy`, `val_loss`, `val_accuracy_std`, then the others),
    then what the stages reported, each sorted by name; the wall time as `history` has it, and its
    virtual time where the run is `clocked` (a system model's clock)."""
    tested, validated = dict(evaluated.test), dict(evaluated.validation)

    def test(*names: str) -> MetricsRow:
        return {name: tested.pop(name) for name in names if name in tested}

    row: MetricsRow = {
        "round": round_index,
        **test(ACCURACY, LOSS),
        "train_loss": stats.train_loss,
        "lr": stats.lr,
        "bytes_up": stats.bytes_up,
        "bytes_down": stats.bytes_down,
        "wall_seconds": history.wall_seconds,
        **test("test_accuracy_std"),
        "client_seconds": stats.client_seconds,
    }
    if clocked:
        row["virtual_time"] = history.virtual_time
    row |= {name: tested[name] for name in sorted(tested)}
    first = [name for name in VALIDATION_COLUMNS if name in validated]
    for name in [*first, *sorted(set(validated) - set(first))]:
        row[own_name(name, row, VALIDATION_PREFIX)] = validated[name]
    taken = row | stats.metrics
    for name in sorted(stats.logged):
        row[own_name(name, taken, MODEL_PREFIX)] = stats.logged[name]
    return row | {name: stats.metrics[name] for name in sorted(stats.metrics)}
