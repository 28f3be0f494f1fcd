"""The layout never breaks a user's module (`fl.memory_format`, fedlight.core.layout).

What must hold: a CNN that flattens a convolution's output with `x.view(x.size(0), -1)`, as users
write it, trains under the default `auto` (which tries channels-last on one batch and falls back
to contiguous, saying so); forced `channels_last`, it fails in one line naming
`fl.memory_format=contiguous`; the trial touches neither the module nor the random state, and a
built-in model still gets channels-last.
"""

import json
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812

from fedlight.core.errors import ConfigError
from fedlight.core.layout import CONTIGUOUS, LAYOUTS, layout_for, trial_failures
from fedlight.models.cnn import CNN
from tests.conftest import REPO, run_cli


class ViewCNN(pl.LightningModule):
    """A small CNN as tutorials write one: conv → pool → `x.view(x.size(0), -1)` → linear."""

    def __init__(self, num_classes: int = 2, lr: float = 0.1, **kwargs: Any) -> None:
        super().__init__()
        self.lr = lr
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(8 * 4 * 4, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = x.view(x.size(0), -1)
        return self.fc1(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


VIEW_CNN = [
    "data=torch_dataset",
    "data.dataset=tests.core.test_speed.Colours",  # 3-channel 8×8 images of 2 classes
    "model._target_=tests.core.test_layout_trial.ViewCNN",
    "fl.num_clients=4",
    "fl.clients_per_round=2",
    "fl.rounds=2",
    "fl.workers=1",
    "local.batch_size=8",
]


def colour_batch() -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(8, 3, 8, 8, generator=generator), torch.arange(8) % 2


def test_a_view_flattening_cnn_trains_under_the_default_layout(tmp_path: Path) -> None:
    result = run_cli(*VIEW_CNN, f"hydra.run.dir={tmp_path}", cwd=REPO)
    said = [line for line in result.stdout.splitlines() if "fl.memory_format=auto" in line]
    assert len(said) == 1, result.stdout
    assert said[0].startswith(
        "fedlight: fl.memory_format=auto: contiguous (ViewCNN's training step fails in "
        "channels_last: view size is not compatible"
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["environment"]["memory_format"] == "contiguous"
    assert len((tmp_path / "metrics.csv").read_text().splitlines()) == 3  # 2 rounds trained


def test_forced_channels_last_fails_in_one_line_naming_contiguous(tmp_path: Path) -> None:
    result = run_cli(
        *VIEW_CNN,
        "fl.memory_format=channels_last",
        f"hydra.run.dir={tmp_path}",
        cwd=REPO,
        check=False,
    )
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("fedlight: error:")]
    assert len(errors) == 1, result.stderr
    assert "fl.memory_format=channels_last: ViewCNN's training step fails" in errors[0]
    assert errors[0].endswith("set fl.memory_format=contiguous (or auto, which tries it first)")
    assert "Traceback" not in result.stderr


def test_the_trial_touches_neither_the_module_nor_the_random_state() -> None:
    torch.manual_seed(0)
    module = ViewCNN()
    before = {name: t.clone() for name, t in module.state_dict().items()}
    rng = torch.get_rng_state()
    assert trial_failures(module, colour_batch(), CONTIGUOUS) == {}
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(t, before[name]) for name, t in module.state_dict().items())
    assert all(p.grad is None for p in module.parameters())
    assert module.conv1.weight.is_contiguous()


def test_a_built_in_cnn_keeps_channels_last_under_auto() -> None:
    module = CNN(input_shape=(3, 8, 8), num_classes=2, lr=0.1)
    chosen = layout_for("auto", module, torch.device("cpu"), colour_batch())
    assert chosen.layout is LAYOUTS["channels_last"]
    assert chosen.reason == "CNN's steps run in it"


def test_auto_tries_nothing_where_there_is_nothing_to_gain() -> None:
    chosen = layout_for("auto", nn.Linear(3, 2), torch.device("cpu"), colour_batch())
    assert (chosen.layout, chosen.reason) == (CONTIGUOUS, "Linear has no 2-D convolution")


def test_forced_channels_last_is_refused_only_where_contiguous_runs() -> None:
    with pytest.raises(ConfigError, match=r"set fl.memory_format=contiguous"):
        layout_for("channels_last", ViewCNN(), torch.device("cpu"), colour_batch())
