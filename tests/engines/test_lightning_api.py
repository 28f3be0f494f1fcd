"""Lightning's own API works on a client module as under a Trainer, and nothing a module logs
breaks fedlight's bookkeeping (issue 62): Lightning's README autoencoder verbatim,
`self.optimizers()`, `self.lr_schedulers()`, `self.global_rank`, `self.print`, `batch_idx` and
`current_epoch` as a real `Trainer.fit` gives them, a test step's names beside fedlight's
columns, a torchmetrics Metric logged for the epoch or under two names, and
`fl.memory_format=auto` on modules that flatten with `.view` only in evaluation or from a later
batch."""

import csv
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import lightning as L  # noqa: N812 - the package the modules derive from
import numpy as np
import pytest
import torch
from torch import Tensor
from torch.nn import functional as F  # noqa: N812
from torch.utils.data import DataLoader, TensorDataset

from fedlight.core.errors import ConfigError
from fedlight.data.base import DataError
from fedlight.data.digits import Digits
from fedlight.data.mnist import MNIST
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.store.checkpoint import load_checkpoint
from tests.conftest import REPO, TINY, run_cli
from tests.data.test_data import write_idx
from tests.helpers import lightning_api, wild_modules
from tests.helpers.lightning_api import CountsBatches, UpdatedAccuracy

API = "model._target_=tests.helpers.lightning_api."


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def tiny_mnist(root: Path) -> Path:
    """MNIST's four files under `root/MNIST/raw/`: 60 training and 30 test 28×28 images."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    generator = np.random.default_rng(0)
    for prefix, count in (("train", 60), ("t10k", 30)):
        images = generator.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(count, dtype=np.uint8) % 10)
    return root


# Lightning's README autoencoder ---------------------------------------------------------------


def test_the_readme_autoencoder_verbatim_trains_and_is_scored_by_its_loss(tmp_path: Path) -> None:
    """Its `forward` takes flattened images, so fedlight's look at `forward` on a batch crashed
    (`mat1 and mat2 shapes cannot be multiplied (30x28 and 784x128)`); it is no classifier and is
    scored by its own training loss: the test set's MSE, by hand, and no accuracy."""
    root = tiny_mnist(tmp_path / "data")
    args = ["data=mnist", f"data.root={root}", API + "LitAutoEncoder", "fl.num_clients=3"]
    args += ["fl.clients_per_round=2", "fl.rounds=2", "local.batch_size=16"]
    result = run_cli(*args, f"hydra.run.dir={tmp_path / 'run'}", cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr
    said = "fedlight: LitAutoEncoder is no classifier: it is scored by its training_step loss, "
    assert said + "with no accuracy; its forward fails on a batch of inputs (RuntimeError" in (
        result.stderr
    )
    (first, last) = read_rows(tmp_path / "run")
    assert math.isnan(float(last["test_accuracy"]))
    module = lightning_api.LitAutoEncoder()
    module.load_state_dict(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["server_weights"])
    data = MNIST(root=str(root), download=False).load()
    images = data.prepare(data.test_x).flatten(1)
    with torch.no_grad():
        by_hand = F.mse_loss(module.decoder(module.encoder(images)), images).item()
    # float32 means over 30 × 784 entries, in one batch or in fedlight's: a few ulps apart
    assert float(last["test_loss"]) == pytest.approx(by_hand, rel=1e-5)
    assert float(last["model/train_loss"]) > 0 and float(first["test_loss"]) > 0


# self.optimizers(), self.lr_schedulers(), ranks, self.print --------------------------------------

EPOCHS, BATCH = 2, 480  # one client holding the 1,438 digits: batches of 480, 480, 478 an epoch
ONE_CLIENT = ["fl.num_clients=1", "fl.clients_per_round=1", "fl.rounds=1"]
ONE_CLIENT += [f"local.epochs={EPOCHS}", f"local.batch_size={BATCH}"]


def test_lightnings_own_api_reads_the_clients_optimizer_scheduler_and_rank(
    make_job: Callable[[list[str]], Job], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`self.optimizers()` was refused ("reads self.trainer.strategy"), `self.global_rank` a
    false "has no attribute", `self.print` refused: now the rate each step ran at (0.1 in the
    first epoch, 0.05 in the second: their mean over equal epochs), the scheduler's rate after
    each epoch (0.05, 0.025) and the printed lines."""
    run_job(make_job([*TINY, *ONE_CLIENT, API + "ReadsItsRate"]), tmp_path)
    (row,) = read_rows(tmp_path)
    # a logged Python float becomes a float32 tensor, as under a Trainer: 2^-24 relative
    assert float(row["seen_lr"]) == pytest.approx(0.075, rel=1e-7)
    assert float(row["scheduled_lr"]) == pytest.approx(0.0375, rel=1e-7)
    assert float(row["lr"]) == 0.1
    printed = capsys.readouterr().out
    assert "epoch 0 done\n" in printed and "epoch 1 done\n" in printed


def test_batch_idx_and_current_epoch_are_a_trainers(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """`batch_idx` restarts at 0 each epoch (it counted on across epochs) and `current_epoch`
    is E in `on_train_end` (it was E - 1), as in a real `Trainer.fit` of the same batches."""
    CountsBatches.calls.clear()
    run_job(make_job([*TINY, *ONE_CLIENT, API + "CountsBatches"]), tmp_path / "run")
    fedlight_calls = list(CountsBatches.calls)
    CountsBatches.calls.clear()
    data = Digits().load()
    trainer = L.Trainer(
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
    trainer.fit(CountsBatches(), loader)
    assert fedlight_calls == CountsBatches.calls
    assert ("training_step", 0, 1, 3) in fedlight_calls
    assert fedlight_calls[-1] == ("on_train_end", None, EPOCHS, 6)


@pytest.mark.parametrize(
    ("module", "hook"),
    [("LogsInSetup", "setup"), ("LogsInConfigureOptimizers", "configure_optimizers")],
)
def test_self_log_where_a_trainer_refuses_it_is_one_line_naming_the_hook(
    make_job: Callable[[list[str]], Job], tmp_path: Path, module: str, hook: str
) -> None:
    """It was refused for `self.trainer.barebones`, a field the module never read."""
    with pytest.raises(ConfigError) as error:
        run_job(make_job([*TINY, "fl.rounds=1", API + module]), tmp_path)
    message = str(error.value)
    assert f"the model calls self.log in {hook}()" in message and "\n" not in message
    assert "barebones" not in message


# A module's logged names beside fedlight's columns ------------------------------------------------


def test_a_test_steps_names_never_replace_fedlights_columns_or_summary(tmp_path: Path) -> None:
    """A test_step logging `round`, `bytes_up`, `comm_mb`, `train_loss`, `lr`, `wall_seconds`
    replaced fedlight's columns (round 1000 in every row, summary.json's comm_mb the module's):
    each is kept as `test_<name>`, and the run's own columns equal those of the same module
    without the logging."""
    common = [*TINY, "fl.rounds=2"]
    for name in ("LogsFedlightsNames", "Softmax"):
        run_cli(*common, API + name, f"hydra.run.dir={tmp_path / name}", cwd=REPO)
    logged, plain = read_rows(tmp_path / "LogsFedlightsNames"), read_rows(tmp_path / "Softmax")
    for mine, theirs in zip(logged, plain, strict=True):
        for column in ("round", "bytes_up", "bytes_down", "train_loss", "lr", "test_accuracy"):
            assert mine[column] == theirs[column], column
        names = lightning_api.LogsFedlightsNames.NAMES
        assert [float(mine[f"test_{name}"]) for name in names] == [1000.0 + i for i in range(6)]
    summaries = [
        json.loads((tmp_path / name / "summary.json").read_text())
        for name in ("LogsFedlightsNames", "Softmax")
    ]
    assert summaries[0]["comm_mb"] == summaries[1]["comm_mb"] > 0
    assert summaries[0]["rounds"] == 2 and summaries[0]["test_comm_mb"] == 1002.0


class RecordsAccuracy(UpdatedAccuracy):
    """Records whether each training example was predicted right, as the Metric sees it."""

    hits: ClassVar[list[Tensor]] = []

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        with torch.no_grad():
            RecordsAccuracy.hits.append(self(batch[0]).argmax(1) == batch[1])
        return super().training_step(batch, batch_idx)


def test_a_metric_updated_then_logged_for_the_epoch_reads_the_rounds_accuracy(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """`self.acc.update(...)`, `self.log("train_acc", self.acc, on_epoch=True)` and the same
    object under a second name: every column is the accuracy over the round's batches, by hand
    (train_acc_epoch and same_acc read 0.0: the Metric computed and reset for the first name)."""
    RecordsAccuracy.hits.clear()
    args = [*TINY, "fl.num_clients=3", "fl.clients_per_round=3", "fl.rounds=1"]
    run_job(make_job([*args, f"model._target_={__name__}.RecordsAccuracy"]), tmp_path)
    (row,) = read_rows(tmp_path)
    hits = torch.cat(RecordsAccuracy.hits)
    by_hand = hits.double().mean().item()
    for column in ("train_acc_step", "train_acc_epoch", "same_acc"):
        # each client's accuracy in float32, weighted by its examples
        assert float(row[column]) == pytest.approx(by_hand, rel=1e-6), column


# fl.memory_format=auto --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "where"),
    [
        ("ViewsInEvalMode", "forward in eval mode"),
        ("ViewsInTestStep", "test_step"),
        ("ViewsFromTheSecondBatch", "training step"),
    ],
)
def test_auto_keeps_a_module_that_views_in_evaluation_or_later_batches_working(
    tmp_path: Path, module: str, where: str
) -> None:
    """`auto` tried one training batch only, then the run crashed at its first evaluation (or
    its second batch) with torch's `view size is not compatible`: now it tries evaluation and
    a second batch too, and trains contiguous, saying why."""
    args = [*TINY, "fl.rounds=1", API + module, f"hydra.run.dir={tmp_path}"]
    result = run_cli(*args, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stdout.splitlines() if "fl.memory_format=auto" in line]
    assert said == [
        f"fedlight: fl.memory_format=auto: contiguous ({module}'s {where} fails in "
        + said[0].split(" fails in ", 1)[1]
    ]
    assert "view size is not compatible" in said[0]


def test_auto_keeps_channels_last_for_a_module_whose_steps_run_in_it(tmp_path: Path) -> None:
    args = [*TINY, "fl.rounds=1", API + "Convolution", f"hydra.run.dir={tmp_path}"]
    result = run_cli(*args, cwd=REPO)
    assert "fedlight: fl.memory_format=auto: channels_last (Convolution's steps run in it)" in (
        result.stdout
    )


# What a Trainer's module may do: taken as a Trainer takes it, or one line ------------------------


def test_positional_only_constructor_arguments_are_offered(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """`def __init__(self, input_shape, num_classes=3, /)` crashed; its default hid fedlight's
    10 classes. Both are passed: the model scores 10 classes."""
    run_job(make_job([*TINY, "fl.rounds=1", API + "PositionalOnly"]), tmp_path)
    weights = load_checkpoint(tmp_path / "checkpoint.pt")["server_weights"]
    assert weights["layer.weight"].shape == (10, 64)


def test_a_returned_dicts_values_that_are_no_number_are_left_out(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """A Trainer logs nothing a step returns; fedlight takes a returned dict's numbers as
    columns and leaves out the rest (text crashed, a vector became its mean)."""
    run_job(make_job([*TINY, "fl.rounds=1", API + "ReturnsText"]), tmp_path)
    (row,) = read_rows(tmp_path)
    assert float(row["test_xent"]) == 1.5
    assert "test_note" not in row and "test_preds" not in row


def test_a_value_logged_with_neither_on_step_nor_on_epoch_is_logged_nowhere(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    run_job(make_job([*TINY, "fl.rounds=1", API + "LogsNowhere"]), tmp_path)
    assert "value" not in read_rows(tmp_path)[0]


class SetupExits(wild_modules.DigitsDataModule):
    def setup(self, stage: str) -> None:
        sys.exit(3)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [API + "PlainModule"],
            "model: PlainModule is no LightningModule (it has no training_step, "
            "configure_optimizers, setup, ...); derive it from lightning.LightningModule",
        ),
        (
            ["data=datamodule", f"data.datamodule={__name__}.SetupExits"],
            "its setup('fit') failed (SystemExit: 3)",
        ),
        ([API + "LogsHugeInt"], "the model logs 'value' as an int too large for a float"),
        ([API + "LogsComplexTensor"], "the model logs 'value' as a complex tensor"),
        ([API + "LogsEmptyName"], "the model logs a value under the name ''"),
        ([API + "LogsTwoLineName"], "the model logs a value under the name 'multi\\nline'"),
        (
            [API + "LogsStepInEpochEnd"],
            "the model logs 'late' with on_step=True outside a step",
        ),
        (
            [API + "LogsPerClassMetric"],
            "the model logs 'per_class_acc' as a Metric (MulticlassAccuracy) that computes 10 "
            "values",
        ),
    ],
    ids=[
        "not_a_lightning_module",
        "datamodule_exits",
        "huge_int",
        "complex_tensor",
        "empty_name",
        "two_line_name",
        "on_step_in_epoch_end",
        "vector_metric",
    ],
)
def test_what_a_trainer_would_refuse_or_fedlight_cannot_show_is_one_line(
    make_job: Callable[[list[str]], Job], tmp_path: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises((ConfigError, DataError)) as error:
        run_job(make_job([*TINY, "fl.rounds=1", *overrides]), tmp_path)
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)
