"""LightningModules and a DataModule written as their authors write them
(`tests/helpers/wild_modules.py`, with `import lightning` and again with `import pytorch_lightning`)
train and evaluate unchanged:
their constructors, `self.trainer`, their metrics on the right splits, a DataModule's validation
set, an autoencoder scored by its loss."""

import csv
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from torch import Tensor
from torch.nn import functional as F  # noqa: N812

from fedlight.core.errors import ConfigError
from fedlight.data.digits import Digits
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.store.checkpoint import load_checkpoint
from tests.conftest import TINY
from tests.helpers import wild_modules, wild_modules_pl

PACKAGES = pytest.mark.parametrize(
    "package",
    ["tests.helpers.wild_modules", "tests.helpers.wild_modules_pl"],
    ids=["lightning", "pl"],
)
# The template's module, its network, optimizer and OneCycleLR from the config (Hydra's way)
TEMPLATE = [
    "+model.net._target_=tests.helpers.wild_modules.SimpleDenseNet",
    "+model.optimizer._target_=torch.optim.Adam",
    "+model.optimizer._partial_=true",
    "+model.optimizer.lr=0.01",
    "+model.scheduler._target_=torch.optim.lr_scheduler.OneCycleLR",
    "+model.scheduler._partial_=true",
    "+model.scheduler.max_lr=0.05",
    "+model.compile=false",
]


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def test_the_two_packages_classes_are_distinct() -> None:
    """What the issue's refusals came from: a class of one package is no subclass of the other's."""
    assert not issubclass(wild_modules.LitAutoEncoder, wild_modules_pl.L.LightningModule)
    assert issubclass(wild_modules_pl.LitAutoEncoder, wild_modules_pl.L.LightningModule)


@PACKAGES
def test_the_readme_autoencoder_trains_and_is_evaluated_by_its_loss(
    make_job: Callable[[list[str]], Job], tmp_path: Path, package: str, capsys
) -> None:
    """No constructor arguments, no `test_step`, a 3-d code from forward: test_loss is its own
    training loss (MSE) on the test set, no accuracy (the console shows its loss, not "acc
    nan"); its `train_loss` kept as model/train_loss."""
    run_job(make_job([*TINY, "fl.rounds=2", f"model._target_={package}.LitAutoEncoder"]), tmp_path)
    printed = capsys.readouterr()
    assert "round 2: loss " in printed.out + printed.err and "nan" not in printed.out + printed.err
    rows = read_rows(tmp_path)
    module = wild_modules.LitAutoEncoder()
    module.load_state_dict(load_checkpoint(tmp_path / "checkpoint.pt")["server_weights"])
    test_x = Digits().load().test_x.flatten(1)
    with torch.no_grad():
        by_hand = F.mse_loss(module.decoder(module.encoder(test_x)), test_x).item()
    assert float(rows[-1]["test_loss"]) == pytest.approx(by_hand, rel=1e-5)
    assert math.isnan(float(rows[-1]["test_accuracy"]))
    assert float(rows[-1]["model/train_loss"]) > 0


@PACKAGES
def test_the_hydra_template_module_trains_with_its_config_and_self_trainer(
    make_job: Callable[[list[str]], Job], tmp_path: Path, package: str
) -> None:
    """Its constructor takes none of fedlight's arguments; `configure_optimizers` reads
    `self.trainer.model` and `estimated_stepping_batches` (a OneCycleLR of a client's steps);
    its `train/`, `val/` and `test/` metrics fill their columns: `validation_step` on the
    validation split, `test_step` on the test set, each equal to fedlight's own there; its
    `val/acc_best` is each evaluation's `val/acc`, as the docs say."""
    args = [*TINY, "fl.rounds=2", "local.epochs=2", "data.validation_fraction=0.1"]
    run_job(make_job([*args, f"model._target_={package}.MNISTLitModule", *TEMPLATE]), tmp_path)
    rows = read_rows(tmp_path)
    for row in rows:
        assert float(row["test/acc"]) == pytest.approx(float(row["test_accuracy"]))
        assert float(row["val/acc"]) == pytest.approx(float(row["val_accuracy"]))
        # every Metric starts each evaluation empty (docs/data-and-models.md): the template's
        # MaxMetric "best" is the evaluation's own accuracy, the same float32 compute
        assert row["val/acc_best"] == row["val/acc"]
        assert {"train/loss", "train/acc_step", "train/acc_epoch", "test/loss"} <= set(row)
    assert float(rows[-1]["test_accuracy"]) > 0.5


class Recording(wild_modules.DocumentedAccuracy):
    """Records each step's predictions and labels (to compute the round's accuracy by hand) and
    its `self.current_epoch` and `self.global_step`."""

    steps: ClassVar[list[tuple[Tensor, Tensor]]] = []
    counts: ClassVar[list[tuple[int, int]]] = []

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        with torch.no_grad():  # a forward Opacus's per-example gradients do not see
            Recording.steps.append((self(batch[0]).argmax(1), batch[1]))
        Recording.counts.append((self.current_epoch, self.global_step))
        return super().training_step(batch, batch_idx)


def test_the_documented_metric_pattern_gives_the_rounds_accuracy_and_counts_epochs_and_steps(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """`train_acc_step` and `train_acc_epoch` (one Metric logged in training_step and again in
    on_train_epoch_end) are the accuracy over every local batch of the round, by hand (the epoch
    one was 0); `current_epoch`/`global_step` count the client's local epochs and steps."""
    Recording.steps.clear()
    args = ["fl.num_clients=2", "fl.clients_per_round=2", "fl.rounds=1", "local.epochs=2"]
    run_job(
        make_job([*TINY, *args, "model._target_=tests.engines.test_wild_modules.Recording"]),
        tmp_path,
    )
    (row,) = read_rows(tmp_path)
    correct = sum(int((p == y).sum()) for p, y in Recording.steps)
    examples = sum(len(y) for _, y in Recording.steps)
    assert float(row["train_acc_epoch"]) == pytest.approx(correct / examples)
    assert float(row["train_acc_step"]) == pytest.approx(correct / examples)
    assert "val_loss" not in row  # validation_step ran on no test set


@pytest.mark.parametrize("privacy", ["none", "dp_sgd"])
def test_current_epoch_and_global_step_count_a_clients_local_training(
    make_job: Callable[[list[str]], Job], tmp_path: Path, privacy: str
) -> None:
    """Both were 0 at every step (no Trainer); dp_sgd's engine counts them too."""
    Recording.counts.clear()
    args = ["fl.num_clients=1", "fl.clients_per_round=1", "fl.rounds=2", "local.epochs=3"]
    args += ["local.batch_size=1000", f"privacy={privacy}"]
    job = make_job([*TINY, *args, f"model._target_={__name__}.Recording"])
    run_job(job, tmp_path)
    # 2 batches per epoch (about 1437 examples in batches of 1000), 3 epochs, counted each round
    assert Recording.counts == [(0, 0), (0, 1), (1, 2), (1, 3), (2, 4), (2, 5)] * 2


def test_validation_step_runs_on_the_validation_split_only(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """The module's `val_loss` is the validation split's (fedlight computes none of its own
    there), never the test set's."""
    args = [*TINY, "fl.rounds=1", "model._target_=tests.helpers.wild_modules.DocumentedAccuracy"]
    run_job(make_job([*args, "data.validation_fraction=0.2"]), tmp_path)
    (row,) = read_rows(tmp_path)
    assert set(row) >= {"val_loss", "val_accuracy", "test_loss", "test_accuracy"}
    assert float(row["val_loss"]) != pytest.approx(float(row["test_loss"]))


@PACKAGES
def test_a_datamodules_validation_loader_is_the_validation_set(
    make_job: Callable[[list[str]], Job],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    package: str,
) -> None:
    data = ["data=datamodule", f"data.datamodule={package}.DigitsDataModule"]
    args = ["fl.num_clients=4", "fl.clients_per_round=2", "fl.rounds=1", "model=mlp"]
    # eval.split=validation picks by it (refused before: data.validation_fraction was 0)
    run_job(make_job([*data, *args, "local.batch_size=32", "eval.split=validation"]), tmp_path)
    (row,) = read_rows(tmp_path)
    assert float(row["val_accuracy"]) > 0
    said = "the data's own loaders batch 64 examples; fedlight forms each client's batches of "
    assert said + "local.batch_size=32 (set local.batch_size=64" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model._target_=tests.helpers.wild_modules.MNISTLitModule", *TEMPLATE[:-1]],
            "model._target_=tests.helpers.wild_modules.MNISTLitModule: its constructor requires "
            "'compile', which neither the model config nor fedlight (input_shape, num_classes, "
            "lr, momentum, weight_decay) gives; set +model.compile=<value>",
        ),
        (
            ["model._target_=tests.helpers.wild_modules.LitAutoEncoder", "+model.hidden=3"],
            "model.hidden: tests.helpers.wild_modules.LitAutoEncoder's constructor takes no "
            "'hidden'",
        ),
        (
            ["model._target_=tests.engines.test_wild_modules.ReadsStrategy"],
            "the model reads self.trainer.strategy.barrier, which fedlight's Trainer stand-in "
            "does not have (it builds no Trainer); its strategy serves self.optimizers() alone",
        ),
        (
            [
                "data=datamodule",
                "data.datamodule=tests.helpers.wild_modules.DigitsDataModule",
                "data.validation_fraction=0.1",
            ],
            "data.validation_fraction=0.1 but the data has a validation set of its own",
        ),
    ],
    ids=["required_argument", "argument_not_taken", "trainer_field", "two_validation_sets"],
)
def test_what_a_module_asks_and_fedlight_cannot_give_is_one_line(
    make_job: Callable[[list[str]], Job], tmp_path: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        run_job(make_job([*TINY, "fl.rounds=1", *overrides]), tmp_path)
    assert message in str(error.value) and "\n" not in str(error.value)


class ReadsStrategy(wild_modules.DocumentedAccuracy):
    def configure_optimizers(self) -> Any:
        self.trainer.strategy.barrier()
        return super().configure_optimizers()


def test_a_name_fedlight_writes_is_kept_under_the_models_prefix(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """`self.log("train_loss")` (refused before) is the column model/train_loss; fedlight's own
    train_loss stays."""
    args = [*TINY, "fl.rounds=1", "model._target_=tests.helpers.lightning_modules.LogsTrainLoss"]
    run_job(make_job(args), tmp_path)
    (row,) = read_rows(tmp_path)
    assert float(row["model/train_loss"]) == pytest.approx(float(row["train_loss"]), rel=0.05)
