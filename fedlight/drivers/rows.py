"""A round's row of metrics (its columns, in their order) and what of a round is not finite, which
ends a run with `fl.on_divergence=stop`: the checks and the row the drivers' loop over rounds
(`fedlight.drivers.base`) writes after each round.
"""

import math
from collections.abc import Collection

import torch

from fedlight.core.objectives import OBJECTIVES
from fedlight.core.tensors import StateDict
from fedlight.drivers.evaluation import Evaluated
from fedlight.drivers.history import History, RoundStats
from fedlight.engines.evaluator import ACCURACY, LOSS, VAL_ACCURACY, VAL_LOSS, VALIDATION_PREFIX
from fedlight.loggers.base import METRIC_COLUMNS, VIRTUAL_CLOCK, MetricsRow


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
# fedlight's own names, whether a row has them or not (`virtual_time` only on a clock): its
# columns and the summary.json numbers a sweep may optimize (`comm_mb`, read from the columns).
FEDLIGHT_NAMES = frozenset((*METRIC_COLUMNS, *VIRTUAL_CLOCK, *OBJECTIVES))
# Where a module's own name is one of fedlight's or a column already (`round`, `train_loss`, a
# stage's `epsilon`), its value is kept under a prefix: a training name as `model/<name>`, a
# validation one as `val_<name>`, a test one (beyond `test_accuracy`/`test_loss`, which the
# module may report for fedlight) as `test_<name>`.
MODEL_PREFIX, TEST_PREFIX = "model/", "test_"


def own_name(name: str, taken: Collection[str], prefix: str) -> str:
    """`name`, or `prefix` + `name` (as often as it takes) where `taken` has it: no column holds
    two values."""
    while name in taken:
        name = prefix + name
    return name


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
    then the module's training values, then what the stages reported, each sorted by name; the
    wall time as `history` has it, and its virtual time where the run is `clocked` (a system
    model's clock). A module's name that is one of fedlight's takes its prefix (`own_name`)."""
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
    reserved = FEDLIGHT_NAMES | set(stats.metrics)
    for name in sorted(tested):
        row[own_name(name, reserved | row.keys(), TEST_PREFIX)] = tested[name]
    first = [name for name in VALIDATION_COLUMNS if name in validated]
    row |= {name: validated[name] for name in first}
    for name in sorted(set(validated) - set(first)):
        row[own_name(name, reserved | row.keys(), VALIDATION_PREFIX)] = validated[name]
    for name in sorted(stats.logged):
        row[own_name(name, reserved | row.keys(), MODEL_PREFIX)] = stats.logged[name]
    return row | {name: stats.metrics[name] for name in sorted(stats.metrics)}
