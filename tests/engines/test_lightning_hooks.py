"""A client module written for a Lightning Trainer trains and evaluates as under one: torchmetrics
in test_step, self.log in training_step, lr schedulers, gradient clipping, the hook order."""

import csv
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from sklearn.metrics import f1_score
from torch.utils.data import DataLoader, TensorDataset

from fedlight.core.errors import ConfigError
from fedlight.core.settings import FLSettings, RunSettings
from fedlight.data.digits import Digits
from fedlight.runs.experiment import build_module, run_job
from fedlight.runs.job import Job
from fedlight.runs.launch import spawn_workers
from fedlight.store.checkpoint import load_checkpoint
from tests.conftest import TINY, rows_without_timings
from tests.helpers import lightning_modules, worker_targets
from tests.helpers.lightning_modules import MetricsModule, Recorder

MODULES = "model._target_=tests.helpers.lightning_modules."
# The process group a run on two workers joins (as torchrun would start it), one thread each.
GROUP = RunSettings(fl=FLSettings(workers=2, threads_per_worker=1), device="cpu")


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """One thread, as the spawned workers compared with one process use."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def final_module(module_type: type[pl.LightningModule], run_dir: Path) -> pl.LightningModule:
    data = Digits().load()
    module = module_type(data.input_shape, data.num_classes)
    module.load_state_dict(load_checkpoint(run_dir / "checkpoint.pt")["server_weights"])
    return module


# torchmetrics in evaluation ----------------------------------------------------------------------


def test_a_torchmetrics_f1_in_test_step_is_the_dataset_level_f1_every_round_on_two_workers(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """The issue's crash came after round 1; its per-batch mean was not the F1 of the test set.
    Two workers give one worker's numbers, training logs included: a Metric computed on the main
    worker alone does not wait for the others (a short fl.worker_timeout ends a regression)."""
    args = [*TINY, MODULES + "MetricsModule", "fl.rounds=2", "eval.batch_size=50"]
    two = make_job([*args, "fl.workers=2", "fl.worker_timeout=60"])
    spawn_workers(GROUP, worker_targets.run_jobs, ([(two, tmp_path / "two", None)],), ())
    run_job(make_job(args), tmp_path / "one")  # one torch thread, as each worker
    assert rows_without_timings(tmp_path / "two") == rows_without_timings(tmp_path / "one")
    rows = read_rows(tmp_path / "one")
    assert len(rows) == 2 and rows[0]["test_f1"] != rows[1]["test_f1"]
    assert float(rows[0]["one"]) == 1.0  # what it logs in training, too
    data = Digits().load()
    with torch.no_grad():
        predictions = final_module(MetricsModule, tmp_path / "one")(data.test_x).argmax(dim=1)
    truth = data.test_y
    expected = f1_score(truth.numpy(), predictions.numpy(), average="macro")
    assert float(rows[-1]["test_f1"]) == pytest.approx(expected, abs=1e-6)
    assert float(rows[-1]["test_f1_epoch_end"]) == pytest.approx(expected, abs=1e-6)
    accuracy = (predictions == truth).double().mean().item()
    assert float(rows[-1]["test_accuracy"]) == pytest.approx(accuracy, abs=1e-6)
    # What averaging per batch would have given is measurably different.
    per_batch = [
        f1_score(t.numpy(), p.numpy(), average="macro")
        for t, p in zip(truth.split(50), predictions.split(50), strict=True)
    ]
    assert abs(sum(per_batch) / len(per_batch) - expected) > 1e-3


def test_a_metric_logged_as_test_accuracy_gives_each_client_its_own_local_accuracy(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Per-client test sets: the Metric starts empty for each client's evaluation, so the local
    accuracies equal those fedlight computes itself for the same weights."""
    local = [*TINY, "fl.rounds=1", "partition.client_test_fraction=0.3"]
    run_job(make_job([*local, MODULES + "MetricsModule"]), tmp_path / "metric")
    run_job(make_job([*local, MODULES + "Linear"]), tmp_path / "plain")
    metric, plain = read_rows(tmp_path / "metric")[0], read_rows(tmp_path / "plain")[0]
    assert metric["train_loss"] == plain["train_loss"]  # the same training
    for column in ("test_accuracy", "local_accuracy_mean", "local_accuracy_p10"):
        assert float(metric[column]) == pytest.approx(float(plain[column]), abs=1e-6), column
    assert float(metric["local_accuracy_std"]) > 0


# self.log in training ----------------------------------------------------------------------------


def test_values_logged_in_training_step_are_the_rounds_means_over_every_example(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every client of the round, 2 epochs, partial last batches: the mean label over the
    round's trained examples is the mean label of the whole training set, as a tensor and
    through a MeanMetric; the loss is Σ batch size × loss / Σ batch size over every step."""
    steps: list[tuple[float, int]] = []
    training_step = MetricsModule.training_step

    def recording(self: MetricsModule, batch: tuple[torch.Tensor, ...], index: int):
        loss = training_step(self, batch, index)
        steps.append((loss.item(), len(batch[1])))
        return loss

    monkeypatch.setattr(MetricsModule, "training_step", recording)
    overrides = ["fl.num_clients=3", "fl.clients_per_round=3", "fl.rounds=1", "local.epochs=2"]
    run_job(
        make_job([*TINY, *overrides, "local.batch_size=64", MODULES + "MetricsModule"]), tmp_path
    )
    (row,) = read_rows(tmp_path)
    mean_label = Digits().load().train_y.double().mean().item()
    assert float(row["label_mean"]) == pytest.approx(mean_label, rel=1e-12)
    assert float(row["label_mean_metric"]) == pytest.approx(mean_label, rel=1e-6)  # float32
    assert float(row["one"]) == 1.0
    assert any(size != 64 for _, size in steps)  # weights matter
    by_hand = sum(loss * size for loss, size in steps) / sum(size for _, size in steps)
    assert float(row["my_loss"]) == pytest.approx(by_hand, rel=1e-6)


def test_the_asynchronous_driver_reports_the_updates_logged_means(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    overrides = ["algo=fedasync", "algo.concurrency=2", "system=homogeneous", "fl.rounds=2"]
    run_job(make_job([*TINY, *overrides, MODULES + "MetricsModule"]), tmp_path)
    rows = read_rows(tmp_path)
    assert [float(r["one"]) for r in rows] == [1.0, 1.0]
    assert all(0 < float(r["label_mean"]) < 9 for r in rows)


# lr schedulers and the hook order ----------------------------------------------------------------


EPOCHS, BATCH = 3, 480  # 1,438 digits: batches of 480, 480, 478 in each epoch


@pytest.mark.parametrize(
    ("module", "lrs"),
    [
        ("EpochHalving", [0.1] * 3 + [0.05] * 3 + [0.025] * 3),
        ("StepHalving", [0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125]),
        ("Warmup", [0.025, 0.04375, 0.0625, 0.08125] + [0.1] * 5),
    ],
)
def test_schedulers_and_hooks_run_as_under_a_lightning_trainer(
    make_job: Callable[[list[str]], Job], tmp_path: Path, module: str, lrs: list[float]
) -> None:
    """One client holding every example, 3 local epochs of 3 batches: fedlight's hook calls and
    learning rates per step are those of `Trainer.fit` on the same module and batches."""
    module_type: type[Recorder] = getattr(lightning_modules, module)
    overrides = ["fl.num_clients=1", "fl.clients_per_round=1", "fl.rounds=1"]
    job = make_job(
        [*TINY, *overrides, f"local.epochs={EPOCHS}", f"local.batch_size={BATCH}", MODULES + module]
    )
    Recorder.calls.clear()
    Recorder.lrs.clear()
    run_job(job, tmp_path / "run")
    start = Recorder.calls.index("on_train_start") - 1  # the engine's configure_optimizers
    fedlight_calls, fedlight_lrs = Recorder.calls[start:], list(Recorder.lrs)
    (row,) = read_rows(tmp_path / "run")
    assert float(row["lr"]) == fedlight_lrs[0]  # the rate local training starts at

    Recorder.calls.clear()
    Recorder.lrs.clear()
    data = Digits().load()
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path / "trainer",
    )
    loader = DataLoader(TensorDataset(data.train_x, data.train_y), batch_size=BATCH)
    trainer.fit(module_type(data.input_shape, data.num_classes), loader)
    assert fedlight_calls == Recorder.calls
    assert fedlight_lrs == pytest.approx(Recorder.lrs, rel=1e-12)
    assert fedlight_lrs == pytest.approx(lrs, rel=1e-12)


def test_a_scheduler_steps_under_dp_sgd_too(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """DP-SGD's engine calls no per-step hooks, but steps the schedulers: one halving per local
    epoch of each client."""
    steps = lightning_modules.CountsSchedulerSteps.steps
    steps.clear()
    overrides = ["privacy=dp_sgd", "fl.num_clients=2", "fl.clients_per_round=2", "fl.rounds=1"]
    module = MODULES + "CountsSchedulerSteps"
    run_job(make_job([*TINY, *overrides, "local.epochs=3", module]), tmp_path)
    assert steps == [0.05, 0.025, 0.0125] * 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [
                MODULES + "EpochHalving",
                "fl.rounds=2",
                "lr_schedule=step",
                "lr_schedule.step_rounds=1",
            ],
            "the model's configure_optimizers() returns an lr scheduler (StepLR) and "
            "lr_schedule=step varies the local rate over rounds (round 2: 0.05); use one of them",
        ),
        (
            [MODULES + "EpochHalving", "lr_schedule=plateau"],
            "the model's configure_optimizers() returns an lr scheduler (StepLR) and "
            "lr_schedule=plateau varies the local rate with the server's evaluations; use one of",
        ),
        (
            [MODULES + "Plateau"],
            "model: configure_optimizers() returned a ReduceLROnPlateau, which needs a monitored "
            "value that a client's local training does not produce; use lr_schedule=plateau",
        ),
        (
            [MODULES + "ManualOptimization"],
            "ManualOptimization sets automatic_optimization = False",
        ),
        ([MODULES + "OwnOptimizerStep"], "OwnOptimizerStep overrides optimizer_step"),
        (
            [MODULES + "Linear", "privacy=dp_sgd", "local.gradient_clip_val=1"],
            "privacy=dp_sgd clips each example's gradient to privacy.clip",
        ),
        (
            [MODULES + "ValueClipping", "local.gradient_clip_val=0.5"],
            "local.gradient_clip_val=0.5 and the model's configure_gradient_clipping passes "
            "gradient_clip_val=0.001; set only one of them",
        ),
        ([MODULES + "SumsItsLogs"], "the model logs 'loss_sum' with reduce_fx='sum'"),
        (
            [MODULES + "LogsText"],
            "the model logs 's' as a str ('abc'); log a number, a tensor of one element or a "
            "torchmetrics Metric",
        ),
        (
            [MODULES + "LogsPerClass"],
            "the model logs 'per_class' as a tensor of 10 elements; log one number per name, as a "
            "Lightning Trainer requires (e.g. self.log('per_class', value.mean()))",
        ),
        ([MODULES + "SkipsEpochs"], "on_train_batch_start returned -1"),
        (["local.gradient_clip_algorithm=max"], "local.gradient_clip_algorithm=max is not an"),
    ],
    ids=[
        "scheduler_and_lr_schedule",
        "scheduler_and_plateau",
        "plateau",
        "manual_optimization",
        "optimizer_step",
        "dp_sgd_clipping",
        "two_clip_values",
        "reduce_fx",
        "text",
        "vector",
        "skipped_batches",
        "clip_algorithm",
    ],
)
def test_what_fedlight_cannot_honour_is_refused_in_one_line(
    make_job: Callable[[list[str]], Job], tmp_path: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        run_job(make_job([*TINY, "fl.rounds=1", *overrides]), tmp_path)
    assert message in str(error.value) and "\n" not in str(error.value)


# Gradient clipping -------------------------------------------------------------------------------


CLIPPED = {
    "norm": lambda g, clip: g * min(1.0, clip / (g.norm().item() + 1e-6)),
    "value": lambda g, clip: g.clamp(-clip, clip),
}


@pytest.mark.parametrize(
    ("overrides", "lr", "clip", "algorithm"),
    [
        (["model=mlp", "local.gradient_clip_val=0.01"], 0.05, 0.01, "norm"),
        (
            ["model=mlp", "local.gradient_clip_val=0.001", "local.gradient_clip_algorithm=value"],
            0.05,
            0.001,
            "value",
        ),
        ([MODULES + "ValueClipping"], 0.1, lightning_modules.ValueClipping.CLIP, "value"),
    ],
    ids=["norm", "value", "configure_gradient_clipping"],
)
def test_gradient_clipping_changes_a_local_step_by_the_clipped_amount(
    make_job: Callable[[list[str]], Job],
    tmp_path: Path,
    overrides: list[str],
    lr: float,
    clip: float,
    algorithm: str,
) -> None:
    """One client holding every example, one local step on all of them, SGD without momentum,
    FedAvg of one: the global model is the start minus lr × the clipped full gradient."""
    args = [*TINY, "fl.num_clients=1", "fl.clients_per_round=1", "fl.rounds=1"]
    job = make_job([*args, "local.batch_size=2000", *overrides])
    run_job(job, tmp_path)
    final = load_checkpoint(tmp_path / "checkpoint.pt")["server_weights"]
    data = Digits().load()
    module = build_module(job, data, torch.device("cpu"))
    start = {name: t.detach().clone() for name, t in module.state_dict().items()}
    module.training_step((data.prepare(data.train_x), data.train_y), 0).backward()
    names = [name for name, _ in module.named_parameters()]
    flat = torch.cat([p.grad.flatten() for _, p in module.named_parameters()])
    clipped = CLIPPED[algorithm](flat, clip).split([start[n].numel() for n in names])
    for name, grad in zip(names, clipped, strict=True):
        expected = start[name] - lr * grad.view_as(start[name])
        torch.testing.assert_close(final[name], expected, rtol=1e-5, atol=1e-7)
    assert lr * (torch.cat(clipped) - flat).abs().max() > 100 * 1e-7  # clipping acted


def test_a_module_builds_its_layers_in_setup(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    summary = run_job(make_job([*TINY, "fl.rounds=2", MODULES + "BuiltInSetup"]), tmp_path)
    assert summary["final_accuracy"] > 0.5
    assert not math.isnan(float(read_rows(tmp_path)[-1]["train_loss"]))
