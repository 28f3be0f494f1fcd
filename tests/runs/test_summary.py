"""summary.json's records beyond the metrics (issue 31): a collapse to chance accuracy, and the
environment that decided the float results, also across a resume."""

import json
import math
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import fedlight
from fedlight.loggers.base import MetricsRow
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.runs.outputs import Chance, collapsed_at_round, never_left_chance
from fedlight.store.checkpoint import load_checkpoint, save_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY, run_killed_in_round

CHANCE = Chance(accuracy=0.1, margin=0.05)  # at chance: accuracy <= 0.15


def history(accuracies: list[float], losses: list[float] | None = None) -> list[MetricsRow]:
    """Evaluated rounds 1, 2, ... with these test accuracies (test loss 2.3 unless given)."""
    losses = losses or [2.3] * len(accuracies)
    return [
        {"round": r, "test_accuracy": a, "test_loss": loss}
        for r, (a, loss) in enumerate(zip(accuracies, losses, strict=True), start=1)
    ]


@pytest.mark.parametrize(
    ("accuracies", "collapsed"),
    [
        ([0.2, 0.3, 0.35, 0.416, 0.1, 0.1, 0.1, 0.1], 5),  # the SCAFFOLD run
        ([0.5, 0.1, 0.1, 0.1], 2),
        ([0.5, 0.15, 0.149, 0.0], 2),  # chance + margin itself is chance
        ([0.5, 0.1, 0.1], None),  # two evaluations at chance: a dip, maybe
        ([0.5, 0.1, 0.1, 0.1, 0.4], None),  # recovered by the end
        ([0.5, 0.1, 0.1, 0.1501, 0.1], None),  # the last three are not all at chance
        ([0.1, 0.12, 0.15, 0.11], None),  # never above chance: nothing fell
        ([], None),
    ],
)
def test_a_collapse_is_the_last_three_evaluations_at_chance_after_one_above(
    accuracies: list[float], collapsed: int | None
) -> None:
    assert collapsed_at_round(history(accuracies), CHANCE) == collapsed


@pytest.mark.parametrize(
    ("accuracies", "never"),
    [
        ([0.1, 0.12, 0.15, 0.11], True),  # the tuned FedAvg seed that blew up in round 1
        ([0.1, 0.1, 0.1], True),
        ([0.1, 0.1], False),  # two evaluations: too few to tell
        ([0.1, 0.1, 0.1, 0.1501], False),  # learned at the end
        ([0.5, 0.1, 0.1, 0.1], False),  # a collapse, not this
        ([], False),
    ],
)
def test_never_left_chance_is_every_evaluation_at_chance(
    accuracies: list[float], never: bool
) -> None:
    assert never_left_chance(history(accuracies), CHANCE) is never
    nan = math.nan  # a divergence is recorded on its own: its rows are no evidence
    assert not never_left_chance(history([0.1, 0.1, 0.1], [2.3, nan, nan]), CHANCE)


def test_a_collapse_counts_only_evaluations_with_a_finite_test_loss() -> None:
    """Rows of a diverged run (kept with `fl.on_divergence=continue`) are no evidence of a
    collapse; the round is the one its metrics.csv names (eval.every=5: rounds 5, 10, ...)."""
    nan = math.nan
    rows = history([0.5, 0.1, 0.1, 0.1, 0.1], [2.3, 2.3, 2.3, nan, nan])
    assert collapsed_at_round(rows, CHANCE) is None
    rows = history([0.5, 0.1, 0.1, 0.1, 0.1], [2.3, 9.0, 1e30, 2.3, nan])
    assert collapsed_at_round(rows, CHANCE) == 2
    every_five = [row | {"round": 5 * row["round"]} for row in history([0.6, 0.6, 0.1, 0.1, 0.1])]
    assert collapsed_at_round(every_five, CHANCE) == 15


def test_chance_is_the_most_frequent_test_class_and_the_margin_covers_small_test_sets() -> None:
    balanced = np.repeat(np.arange(10), 1000)
    assert Chance.of(balanced) == Chance(accuracy=0.1, margin=0.05)
    skewed = np.repeat(np.arange(4), [500, 200, 200, 100])
    assert Chance.of(skewed) == Chance(accuracy=0.5, margin=0.05)
    small = np.repeat(np.arange(10), 10)  # 100 images: 3 standard errors of 0.1 are 0.09
    assert Chance.of(small).margin == pytest.approx(3 * math.sqrt(0.1 * 0.9 / 100))


def git_commit() -> str | None:
    """The commit the environment should name, computed here independently."""
    package = Path(fedlight.__file__).parent
    try:
        log = subprocess.run(
            ["git", "-C", str(package), "log", "-1", "--format=%H", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(package), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return (log + "-dirty" if status else log) or None


def environment_of(run_dir: Path) -> dict[str, object]:
    return json.loads((run_dir / "summary.json").read_text())["environment"]


def test_the_summary_records_what_decides_the_float_results(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    before = torch.get_num_threads()
    run_job(make_job([*TINY, "fl.rounds=1", "fl.threads_per_worker=1"]), tmp_path / "one")
    run_job(make_job([*TINY, "fl.rounds=1", "fl.engine=vectorized"]), tmp_path / "vectorized")
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary["collapsed_at_round"] is None  # it learned, and did not fall back
    environment = summary["environment"]
    assert environment == {
        "torch_threads": 1,
        "workers": 1,
        "engine": "sequential",
        "memory_format": "contiguous",  # the mlp has no convolution
        "device": "cpu",
        "gpu": None,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "cuda": None,
        "cudnn": None,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "fedlight": fedlight.__version__,
        "fedlight_commit": git_commit(),
        "deterministic_algorithms": False,
        "float32_matmul_precision": "highest",
        "cuda_matmul_tf32": None,
        "cudnn_tf32": None,
        "cudnn_benchmark": None,
        "cudnn_deterministic": None,
    }
    vectorized = environment_of(tmp_path / "vectorized")
    assert vectorized == environment | {"engine": "vectorized", "torch_threads": before}


def test_a_resume_under_other_threads_records_both_and_an_older_checkpoint_unknown(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fl.threads_per_worker` may change on a resume and changes float rounding: the resumed
    run's summary keeps both values, oldest first. A checkpoint written before the record (no
    `environment` in it) makes every value `unknown, then` the resumed run's."""
    three_rounds = [*TINY[:4], "fl.rounds=3", *TINY[5:]]
    overrides = [*three_rounds, "fl.threads_per_worker=1"]
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 2, monkeypatch)
    resumed = [*three_rounds, "fl.threads_per_worker=2", f"resume={tmp_path / 'killed'}"]
    run_job(make_job(resumed), tmp_path / "resumed")
    environment = environment_of(tmp_path / "resumed")
    assert environment["torch_threads"] == [1, 2]
    assert environment["workers"] == 1 and environment["engine"] == "sequential"

    checkpoint_path = tmp_path / "killed" / CHECKPOINT_NAME
    older = load_checkpoint(checkpoint_path)
    del older["environment"]
    save_checkpoint(checkpoint_path, older)
    run_job(make_job(resumed), tmp_path / "from_older")
    environment = environment_of(tmp_path / "from_older")
    assert environment["torch_threads"] == ["unknown", 2]
    assert environment["gpu"] == ["unknown", None]
