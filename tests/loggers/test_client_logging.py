"""What the trackers get beyond metrics.csv (issue 54, item 9): W&B a table of each round's
per-client rows and the final model.ckpt as an artifact, TensorBoard the run's figures as images
and histograms of each round's per-client update norms and losses; each optional by a setting.

W&B runs offline (no network): its table parts are JSON files in the offline run's media folder,
the artifact a record in its run log; TensorBoard's event files are read back with its own reader.
"""

import base64
import csv
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fedlight.core.errors import ConfigError
from fedlight.drivers import synchronous
from fedlight.loggers.clients import update_norm
from fedlight.loggers.tensorboard import TENSORBOARD_DIR
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.store.run_files import LIGHTNING_CHECKPOINT_NAME
from tests.conftest import TINY, run_cli

CLIENTS_PER_ROUND = 4  # TINY's
ROUNDS = 3
RUN = [*TINY, f"fl.rounds={ROUNDS}", "logger=[csv,wandb,tensorboard]", "logger.wandb.mode=offline"]


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run through the CLI with W&B (offline) and TensorBoard."""
    tmp_path = tmp_path_factory.mktemp("clients")
    run_dir = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("WANDB_DIR", raising=False)
        patch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))  # artifacts' staging
        run_cli(*RUN, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    return run_dir


def offline_run(run_dir: Path) -> Path:
    [offline] = (run_dir / "wandb").glob("offline-run-*")
    return offline


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def client_table(run_dir: Path) -> tuple[list[str], list[list[float]]]:
    """The W&B clients table: its columns and its rows, the parts of every round together."""
    parts = sorted((offline_run(run_dir) / "files" / "media" / "table").glob("clients_*.json"))
    tables = [json.loads(part.read_text()) for part in parts]
    assert tables, "no clients table was logged"
    assert all(table["columns"] == tables[0]["columns"] for table in tables)
    return tables[0]["columns"], [row for table in tables for row in table["data"]]


def events(run_dir: Path) -> Any:  # tensorboard's EventAccumulator
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(
        str(run_dir / TENSORBOARD_DIR), size_guidance={"images": 0, "histograms": 0}
    )
    accumulator.Reload()
    return accumulator


def test_wandb_gets_each_rounds_clients_in_a_table_that_adds_up_to_the_round(
    logged_run: Path,
) -> None:
    columns, rows = client_table(logged_run)
    assert columns[:3] == ["round", "client", "train_loss"]
    assert {"num_samples", "bytes_up", "bytes_down", "update_norm", "late", "rejected"} <= set(
        columns
    )
    by_round: dict[int, list[dict[str, float]]] = {}
    for row in rows:
        by_round.setdefault(row[0], []).append(dict(zip(columns, row, strict=True)))
    assert sorted(by_round) == list(range(1, ROUNDS + 1))
    for round_row in metrics_rows(logged_run):
        clients = by_round[int(round_row["round"])]
        assert len(clients) == CLIENTS_PER_ROUND
        assert len({c["client"] for c in clients}) == CLIENTS_PER_ROUND
        samples = sum(c["num_samples"] for c in clients)
        mean_loss = sum(c["train_loss"] * c["num_samples"] for c in clients) / samples
        assert mean_loss == pytest.approx(float(round_row["train_loss"]), rel=1e-9)
        assert sum(c["bytes_up"] for c in clients) == int(round_row["bytes_up"])
        assert all(c["update_norm"] > 0 and not c["late"] and not c["rejected"] for c in clients)


def test_wandb_gets_the_final_model_ckpt_as_an_artifact(logged_run: Path) -> None:
    record_log = next(offline_run(logged_run).glob("run-*.wandb"))
    run_id = record_log.stem.removeprefix("run-")
    digest = hashlib.md5((logged_run / LIGHTNING_CHECKPOINT_NAME).read_bytes()).digest()
    logged = record_log.read_bytes()
    assert f"model-{run_id}".encode() in logged  # the artifact, of type model
    assert LIGHTNING_CHECKPOINT_NAME.encode() in logged and b"final" in logged
    assert base64.b64encode(digest) in logged  # the manifest's entry is this run's model.ckpt


def test_tensorboard_gets_the_figures_as_images(logged_run: Path) -> None:
    from PIL import Image

    logged = events(logged_run)
    assert sorted(logged.Tags()["images"]) == [
        "figures/curves",
        "figures/label_histogram",
        "figures/participation",
    ]
    [curves] = logged.Images("figures/curves")
    with Image.open(logged_run / "curves.png") as drawn:
        assert (curves.width, curves.height) == drawn.size
    assert curves.step == ROUNDS


def test_tensorboard_gets_each_rounds_update_norms_as_a_histogram(logged_run: Path) -> None:
    logged = events(logged_run)
    columns, rows = client_table(logged_run)
    norm = columns.index("update_norm")
    for name in ("clients/update_norm", "clients/train_loss"):
        histograms = logged.Histograms(name)
        assert [h.step for h in histograms] == list(range(1, ROUNDS + 1))
        assert all(h.histogram_value.num == CLIENTS_PER_ROUND for h in histograms)
    for histogram in logged.Histograms("clients/update_norm"):
        norms = [row[norm] for row in rows if row[0] == histogram.step]
        assert histogram.histogram_value.min == pytest.approx(min(norms))
        assert histogram.histogram_value.max == pytest.approx(max(norms))


def test_each_is_optional_by_a_setting(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    off = [
        "logger.wandb.clients=off",
        "logger.wandb.log_model=false",
        "logger.tensorboard.client_histograms=false",
    ]
    run_job(make_job([*RUN, "fl.rounds=1", *off]), tmp_path)
    offline = offline_run(tmp_path)
    assert not list(offline.glob("files/media/table/*"))
    assert b"model-" not in next(offline.glob("run-*.wandb")).read_bytes()
    logged = events(tmp_path)
    assert logged.Tags()["histograms"] == []
    assert "figures/curves" in logged.Tags()["images"]


COUNTED_ROUNDS = 2
SHOWN = COUNTED_ROUNDS * CLIENTS_PER_ROUND  # a norm per participant and round


@pytest.mark.parametrize(
    ("loggers", "computed"),
    [
        (["logger=csv"], 0),
        (["logger=[csv,wandb]", "logger.wandb.mode=offline"], SHOWN),
        (["logger=[csv,wandb]", "logger.wandb.mode=offline", "logger.wandb.clients=off"], 0),
        (["logger=tensorboard"], SHOWN),
        (["logger=tensorboard", "logger.tensorboard.client_histograms=false"], 0),
    ],
)
def test_update_norms_are_computed_only_for_a_logger_that_shows_clients(
    make_job: Callable[[list[str]], Job],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    loggers: list[str],
    computed: int,
) -> None:
    """The norm is a float64 pass over each participant's weights: metrics.csv, the console and
    MLflow show no per-client row, nor a tracker whose rows are switched off, so a run logging
    to them alone does not pay for it."""
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    calls: list[float] = []

    def counted(weights: Any, start: Any) -> float:
        calls.append(update_norm(weights, start))
        return calls[-1]

    monkeypatch.setattr(synchronous, "update_norm", counted)
    run_job(make_job([*TINY, f"fl.rounds={COUNTED_ROUNDS}", *loggers]), tmp_path)
    assert len(calls) == computed
    assert all(norm > 0 for norm in calls)


def test_with_two_workers_every_participants_norm_reaches_the_histograms(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Only the main worker has loggers; the other worker, which trains half the participants,
    learns from it that they are shown and computes their norms too (a NaN has no bin)."""
    overrides = [*TINY, f"fl.rounds={COUNTED_ROUNDS}", "logger=tensorboard", "fl.workers=2"]
    run_job(make_job(overrides), tmp_path)
    norms = events(tmp_path).Histograms("clients/update_norm")
    assert [(h.step, h.histogram_value.num) for h in norms] == [
        (r, CLIENTS_PER_ROUND) for r in range(1, COUNTED_ROUNDS + 1)
    ]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "logger.wandb.clients=panel",
            "logger.wandb.clients=panel is not an option; choose from: table, off",
        ),
        ("logger.wandb.log_model=1", "logger.wandb.log_model=1 must be true or false"),
        (
            "logger.tensorboard.client_histograms=yes",
            "logger.tensorboard.client_histograms=yes must be true or false",
        ),
    ],
)
def test_bad_settings_are_refused_in_one_line(
    make_job: Callable[[list[str]], Job], override: str, message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        make_job([*RUN, override])
    assert str(refused.value) == message


def test_an_asynchronous_updates_arrivals_are_its_clients(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """FedBuff: each server update's histograms hold its buffer_size arrivals, whose losses
    weighted by examples are the update's train_loss."""
    buffered = [
        "algo=fedbuff",
        "algo.buffer_size=3",
        "algo.concurrency=4",
        "system=homogeneous",
        "logger=tensorboard",
    ]
    run_job(make_job([*TINY, "fl.num_clients=6", "fl.rounds=2", *buffered]), tmp_path)
    losses = events(tmp_path).Histograms("clients/train_loss")
    assert [(h.step, h.histogram_value.num) for h in losses] == [(1, 3), (2, 3)]
    for histogram, row in zip(losses, metrics_rows(tmp_path), strict=True):
        assert histogram.histogram_value.min <= float(row["train_loss"])
        assert float(row["train_loss"]) <= histogram.histogram_value.max
