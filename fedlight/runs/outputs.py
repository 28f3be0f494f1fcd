"""Files a run leaves beside metrics.csv: summary.json, curves.png and the label histogram."""

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedlight.engines.evaluator import VALIDATION_PREFIX
from fedlight.loggers.base import (
    METRIC_COLUMNS,
    SPLIT_ACCURACY,
    SPLIT_LOSS,
    MetricsRow,
    evaluated,
)
from fedlight.reports import curves
from fedlight.reports.curves import Line, Panel
from fedlight.store.files import write_text
from fedlight.store.run_files import (
    CURVES_NAME,
    LABEL_HISTOGRAM_NAME,
    LOCAL_ACCURACY_NAME,
    PARTICIPATION_NAME,
)


def label_histogram(
    client_sets: list[np.ndarray], labels: np.ndarray, num_classes: int
) -> np.ndarray:
    """Counts of each class (columns) on each client (rows)."""
    return np.stack([np.bincount(labels[s], minlength=num_classes) for s in client_sets])


def write_label_histogram(output_dir: Path, histogram: np.ndarray) -> None:
    write_text(
        output_dir / "label_histogram.json",
        json.dumps({str(c): row.tolist() for c, row in enumerate(histogram)}),
    )
    height = min(2 + 0.12 * len(histogram), 30)
    fig = curves.figure(1.5 + 0.5 * histogram.shape[1], height)
    ax = fig.subplots()
    fig.subplots_adjust(left=0.2, right=0.95)
    image = ax.imshow(histogram, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title("samples per client and class")
    fig.colorbar(image, ax=ax)
    curves.save(fig, output_dir / LABEL_HISTOGRAM_NAME, dpi=100)


# A collapse: the last COLLAPSE_EVALUATIONS evaluations at chance after an earlier one above it.
# One or two evaluations at chance can be a dip a run recovers from (an oscillating SCAFFOLD, a
# learning-rate spike); three in a row to the end are where the run ended up.
COLLAPSE_EVALUATIONS = 3
# Points of accuracy above chance that still count as chance: far above the test-set noise of a
# chance-level model on 10,000 test images (3 standard errors: 0.9 points), far below what a model
# that learned anything scores on the benchmarks here. Small test sets widen it to 3 standard
# errors of a chance-level model's accuracy.
COLLAPSE_MARGIN = 0.05


@dataclass(frozen=True)
class Chance:
    """Chance accuracy on the test set: what always answering its most frequent class scores (1/C
    on a balanced test set; a model guessing at random scores 1/C on average), and the margin
    above it that still counts as chance."""

    accuracy: float
    margin: float

    @classmethod
    def of(cls, test_labels: np.ndarray) -> "Chance":
        share = float(np.bincount(test_labels).max() / len(test_labels))
        noise = 3 * math.sqrt(share * (1 - share) / len(test_labels))
        return cls(share, max(COLLAPSE_MARGIN, noise))


def chance_streak(
    rows: list[MetricsRow], chance: Chance, split: str
) -> tuple[int, list[MetricsRow]]:
    """How many of the last evaluations on `split` were at chance (≤ chance + margin), and the
    evaluations counted: those with a finite loss (a divergence is recorded on its own)."""
    accuracy, loss = SPLIT_ACCURACY[split], SPLIT_LOSS[split]
    finite = [r for r in evaluated(rows, split) if math.isfinite(r[loss])]
    streak = 0
    ceiling = chance.accuracy + chance.margin
    while streak < len(finite) and finite[-1 - streak][accuracy] <= ceiling:
        streak += 1
    return streak, finite


def collapsed_at_round(rows: list[MetricsRow], chance: Chance, split: str = "test") -> int | None:
    """The round from which a run's accuracy on `split` stayed at chance (≤ chance + margin) for
    at least its last COLLAPSE_EVALUATIONS evaluations, after an earlier evaluation above that;
    None for a run that did not collapse. Only evaluations with a finite loss count: a collapse
    is a failure with finite losses, a divergence is recorded on its own."""
    streak, finite = chance_streak(rows, chance, split)
    if streak < COLLAPSE_EVALUATIONS or streak == len(finite):  # never above chance: no fall
        return None
    return int(finite[-streak]["round"])


def never_left_chance(rows: list[MetricsRow], chance: Chance, split: str = "test") -> bool:
    """True for a run whose every evaluation on `split` (at least COLLAPSE_EVALUATIONS of them,
    with finite losses) was at chance: it never learned, which is no collapse (nothing fell) but
    as much a failure (a learning rate that wrecks the first round, a dead network)."""
    streak, finite = chance_streak(rows, chance, split)
    return streak >= COLLAPSE_EVALUATIONS and streak == len(finite)


# Where each of summary.json's evaluation numbers comes from: "test", or "split" for the split
# `eval.split` names (what picks the best round and the target); `splits` states it per run.
NUMBER_SPLITS = {
    "final_accuracy": "test",
    "best_accuracy": "split",
    "rounds_to_target": "split",
    "collapsed_at_round": "split",
    "never_left_chance": "split",
    "mb_to_target": "split",
    "upload_mb_to_target": "split",
    "virtual_time_to_target": "split",
    "test_accuracy_at_best": "test",
    "best_round": "split",
}


def splits_summary(summary: dict[str, Any], split: str) -> dict[str, dict[str, str]]:
    """`splits`: the split (test or validation) each evaluation number of `summary` comes from;
    the columns it copies from the last rows (`val_accuracy`, `local_accuracy_mean`, a module's
    own `test_f1`) name theirs: `val_*` the validation set, the others the test sets."""
    named = {key: split if where == "split" else where for key, where in NUMBER_SPLITS.items()}
    copied = {
        key: "validation" if key.startswith(VALIDATION_PREFIX) else "test"
        for key in summary
        if key.startswith((VALIDATION_PREFIX, "test_", "local_accuracy_"))
    }
    return {"splits": {key: where for key, where in (named | copied).items() if key in summary}}


def summarize(
    rows: list[MetricsRow],
    *,
    chance: Chance,
    target_accuracy: float | None,
    total_bytes: int,
    wall_seconds: float,
    client_seconds: float,
    rounds: int,
    seed: int,
    choices: dict[str, str],
    split: str = "test",
) -> dict[str, Any]:
    """summary.json's numbers: the final accuracy from the last tested round; the best one, the
    target and a collapse from the rounds evaluated on `split` (`eval.split`); each other
    column's last value from the last round that has it."""
    accuracy = SPLIT_ACCURACY[split]
    chosen = evaluated(rows, split)
    accuracies = [float(r[accuracy]) for r in chosen]
    tested = evaluated(rows)
    reported = {
        name: value for row in rows for name, value in row.items() if name not in METRIC_COLUMNS
    }
    reached = [
        int(r["round"])
        for r in chosen
        if target_accuracy is not None and r[accuracy] >= target_accuracy
    ]
    clocked: dict[
        str, float | None
    ] = {}  # runs on a system's clock: the virtual seconds to the target too
    if "virtual_time" in reported:
        at_target = [
            float(r["virtual_time"]) for r in chosen if reached and r["round"] == reached[0]
        ]
        clocked["virtual_time_to_target"] = at_target[0] if at_target else None
    return {
        **reported,  # each other column's last value: fedlight's own numbers below win
        "final_accuracy": float(tested[-1]["test_accuracy"]) if tested else None,
        "best_accuracy": max(accuracies),
        "rounds_to_target": reached[0] if reached else None,
        "target_accuracy": target_accuracy,
        "collapsed_at_round": collapsed_at_round(rows, chance, split),
        "never_left_chance": never_left_chance(rows, chance, split),
        "comm_mb": total_bytes / 1e6,
        "comm_mb_per_round": total_bytes / 1e6 / max(rounds, 1),
        "wall_seconds": wall_seconds,
        "client_seconds_per_round": client_seconds / max(rounds, 1),
        "rounds": rounds,
        "seed": seed,
        **choices,
        **clocked,
        **({} if split == "test" else selected_model(chosen, accuracy)),
    }


def selected_model(chosen: list[MetricsRow], accuracy: str) -> dict[str, Any]:
    """`best_round`, the first round of the best accuracy on the validation set, and
    `test_accuracy_at_best`, the test accuracy then (null where that round was not tested,
    `eval.test=final`): the model a validation set selects, judged on the test set."""
    best = max(chosen, key=lambda row: row[accuracy])  # the first of equals
    return {"best_round": int(best["round"]), "test_accuracy_at_best": best.get("test_accuracy")}


def write_curves(output_dir: Path, rows: list[MetricsRow]) -> None:
    """A run's test (and validation) accuracy and loss per evaluated round, and its train loss
    per round."""

    def line(label: str | None, column: str, points: list[MetricsRow]) -> Line:
        return Line(label, [int(r["round"]) for r in points], [float(r[column]) for r in points])

    tested, validated = evaluated(rows), evaluated(rows, "validation")
    test_label = "test" if validated else None
    accuracies = [line(test_label, "test_accuracy", tested)]
    losses = [line("test", "test_loss", tested)]
    if validated:
        accuracies.append(line("validation", "val_accuracy", validated))
        losses.append(line("validation", "val_loss", validated))
    title = "accuracy" if validated else "test accuracy"
    accuracy = Panel(title, accuracies)
    loss = Panel("loss", [*losses, line("train", "train_loss", rows)])
    curves.write_curves(output_dir / CURVES_NAME, [accuracy, loss], width=10, dpi=100)


def traffic_summary(bytes_up: int, bytes_to_target: list[int] | None) -> dict[str, Any]:
    """Upload megabytes of the run, and the megabytes (both ways, and up alone) sent until the first
    evaluated round reaching eval.target_accuracy (None when no round did): what compression saves
    shows in the traffic to a given accuracy, not in the traffic per round alone."""
    up, down = bytes_to_target or (None, None)
    return {
        "upload_mb": bytes_up / 1e6,
        "mb_to_target": None if up is None or down is None else (up + down) / 1e6,
        "upload_mb_to_target": None if up is None else up / 1e6,
    }


def jain_index(counts: list[int]) -> float | None:
    """Jain's fairness index (Σx)² / (N·Σx²) of the clients' participation counts: 1 when every
    client trained equally often, 1/N when one client did all the training (Jain et al. 1984)."""
    squares = sum(c * c for c in counts)
    return sum(counts) ** 2 / (len(counts) * squares) if squares else None


def participation_summary(counts: list[int]) -> dict[str, float | int | None]:
    return {
        "participation_jain": jain_index(counts),
        "participation_min": min(counts),
        "participation_max": max(counts),
    }


# Clients drawn one by one in participation.png; more are drawn as block means (one bar per
# client took minutes for 100,000 clients).
MAX_CLIENT_BARS = 1000


def client_blocks(counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Edges and mean counts of consecutive blocks of clients: one client per block up to
    MAX_CLIENT_BARS clients, else blocks of ⌈N / MAX_CLIENT_BARS⌉ (the last one shorter)."""
    values = np.asarray(counts, dtype=np.float64)
    size = max(1, -(-len(values) // MAX_CLIENT_BARS))
    edges = np.append(np.arange(0, len(values), size), len(values))
    means = np.add.reduceat(values, edges[:-1]) / np.diff(edges) if len(values) else values
    return edges, means


def write_participation(output_dir: Path, counts: list[int]) -> None:
    """participation.json ({"counts": {client id: rounds trained}}, every client listed) and
    participation.png: how often each client trained, and how many clients trained how often."""
    write_text(
        output_dir / "participation.json",
        json.dumps({"counts": {str(client): count for client, count in enumerate(counts)}}),
    )
    fig = curves.figure(10, 3.5)
    by_client, histogram = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.15, wspace=0.25)
    edges, means = client_blocks(counts)
    by_client.stairs(means, edges, fill=True)
    block = int(edges[1] - edges[0]) if len(means) else 1
    by_client.set_xlabel("client" if block == 1 else f"client (mean over blocks of {block})")
    by_client.set_ylabel("rounds trained")
    jain = jain_index(counts)
    by_client.set_title(f"participation (Jain's index {'-' if jain is None else f'{jain:.3f}'})")
    values, frequencies = np.unique(np.asarray(counts), return_counts=True)
    histogram.bar(values, frequencies, width=0.8)
    histogram.set_xlabel("rounds trained")
    histogram.set_ylabel("clients")
    curves.save(fig, output_dir / PARTICIPATION_NAME, dpi=100)


def write_local_accuracies(output_dir: Path, accuracies: list[float]) -> None:
    """local_accuracy.json ({"accuracies": {client id: accuracy or null}}) and local_accuracy.png:
    the histogram of the clients' accuracies on their local test sets at the last evaluation,
    with their mean and 10th percentile marked."""
    tested = [a for a in accuracies if not np.isnan(a)]
    write_text(
        output_dir / "local_accuracy.json",
        json.dumps(
            {
                "accuracies": {
                    str(client): None if np.isnan(a) else a for client, a in enumerate(accuracies)
                }
            }
        ),
    )
    fig = curves.figure(6, 3.5)
    ax = fig.subplots()
    fig.subplots_adjust(bottom=0.15)
    ax.hist(tested, bins=20, range=(0.0, 1.0))
    for value, style, label in (
        (float(np.mean(tested)), "-", "mean"),
        (float(np.percentile(tested, 10)), "--", "10th percentile"),
    ):
        ax.axvline(value, color="black", linestyle=style, label=f"{label} {value:.3f}")
    ax.set_xlabel("accuracy on the client's local test set")
    ax.set_ylabel("clients")
    ax.legend()
    curves.save(fig, output_dir / LOCAL_ACCURACY_NAME, dpi=100)
