"""The speed defaults: the channels-last layout (`fl.memory_format`) and `fl.workers=auto`.

What must hold: the layout is applied where it is chosen (the module's convolution weights and
the image batches channels-last in local training and in evaluation) and nowhere else; the weights
leaving an engine are contiguous; `fl.memory_format=contiguous` gives the numbers fedlight gave
before the layout became the default, digit for digit; `auto` workers pick as documented and give
the numbers of one single-threaded worker; summary.json records both choices.
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812
from torch.utils.data import Dataset

from fedlight.core.errors import ConfigError
from fedlight.core.layout import CONTIGUOUS, LAYOUTS, Layout, contiguous_state
from fedlight.models.cnn import CNN
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.runs.parallelism import Parallelism, auto_parallelism
from tests.conftest import REPO, TINY, rows_without_timings, run_cli

CHANNELS_LAST = torch.channels_last


def channels_last(t: Tensor) -> bool:
    """Stored channels-last and not also contiguous (which a tensor with one channel can be)."""
    return t.is_contiguous(memory_format=CHANNELS_LAST) and not t.is_contiguous()


class Colours(Dataset):
    """3-channel 8×8 float images of 2 classes (the class is the brighter channel)."""

    def __init__(self, root: str | None = None, train: bool = True) -> None:
        generator = torch.Generator().manual_seed(1 if train else 2)
        count = 40 if train else 20
        self.labels = torch.randint(0, 2, (count,), generator=generator)
        self.images = torch.randn(count, 3, 8, 8, generator=generator) * 0.3
        self.images[torch.arange(count), self.labels] += 1.0

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return self.images[index], int(self.labels[index])


class LayoutProbe(pl.LightningModule):
    """A user's convolutional module that records, at each forward, whether it was training and
    whether its input and its convolution's weight were channels-last."""

    seen: ClassVar[list[tuple[bool, bool, bool]]] = []

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__()
        self.conv = nn.Conv2d(input_shape[0], 4, 3, padding=1)
        self.head = nn.Linear(4 * input_shape[1] * input_shape[2], num_classes)

    def forward(self, x: Tensor) -> Tensor:
        LayoutProbe.seen.append((self.training, channels_last(x), channels_last(self.conv.weight)))
        return self.head(F.relu(self.conv(x)).flatten(1))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


PROBE = [
    "data=torch_dataset",
    "data.dataset=tests.core.test_speed.Colours",
    "model._target_=tests.core.test_speed.LayoutProbe",
    "fl.num_clients=4",
    "fl.clients_per_round=2",
    "fl.rounds=2",
    "fl.workers=1",
    "local.batch_size=8",
]


@pytest.mark.parametrize(
    ("setting", "expected"), [("auto", "channels_last"), ("contiguous", "contiguous")]
)
def test_the_layout_applies_to_training_and_evaluation_and_is_recorded(
    make_job: Callable[[list[str]], Job], tmp_path: Path, setting: str, expected: str
) -> None:
    LayoutProbe.seen.clear()
    summary = run_job(make_job([*PROBE, f"fl.memory_format={setting}"]), tmp_path)
    assert summary["environment"]["memory_format"] == expected
    modes = {training for training, _, _ in LayoutProbe.seen}
    assert modes == {True, False}  # local training and evaluation both ran
    wanted = expected == "channels_last"
    assert all(x == wanted and w == wanted for _, x, w in LayoutProbe.seen)
    weights = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["server_weights"]
    assert all(t.is_contiguous() for t in weights.values())  # what leaves the module


def test_a_model_without_convolutions_keeps_the_contiguous_layout(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    summary = run_job(make_job([*TINY, "fl.rounds=1", "fl.workers=1"]), tmp_path)
    assert summary["environment"]["memory_format"] == "contiguous"


def test_contiguous_state_copies_only_what_is_not_contiguous() -> None:
    weight = torch.randn(4, 3, 2, 2).contiguous(memory_format=CHANNELS_LAST)
    bias = torch.randn(4)
    state = contiguous_state({"w": weight, "b": bias})
    assert state["b"] is bias and state["w"].is_contiguous() and torch.equal(state["w"], weight)


def test_an_unknown_memory_format_is_refused_in_one_line(
    make_job: Callable[[list[str]], Job],
) -> None:
    with pytest.raises(ConfigError, match=r"fl.memory_format=nhwc is not a layout; use auto"):
        make_job([*TINY, "fl.memory_format=nhwc"])


# A SCAFFOLD run with convolutions, momentum and 4 clients a round: the case where the layout
# changes the arithmetic. Whether a layout reproduces an earlier commit's numbers digit for digit
# depends on the CPU's kernels and torch's version, so that comparison is a migration check run
# by hand between two checkouts on one machine (benchmarks/same_numbers.py), never a test.
LAYOUT_COMMAND = [
    "data=digits",
    "model=cnn",
    "algo=scaffold",
    "fl.num_clients=10",
    "fl.clients_per_round=4",
    "fl.rounds=3",
    "local.batch_size=10",
    "optim.momentum=0.9",
    "fl.threads_per_worker=1",
]


def layout_rows(run_dir: Path) -> dict[str, tuple[float, float, float]]:
    return {
        row["round"]: (
            float(row["test_accuracy"]),
            float(row["test_loss"]),
            float(row["train_loss"]),
        )
        for row in rows_without_timings(run_dir)
    }


def test_the_contiguous_layout_reruns_to_the_same_digits(tmp_path: Path) -> None:
    """fl.memory_format=contiguous (the layout of the published tables) reruns to the same digits
    on one machine: the same kernels in the same order round alike."""
    for name in ("contiguous", "again"):
        extra = ["fl.memory_format=contiguous", "fl.workers=1"]
        run_cli(*LAYOUT_COMMAND, *extra, f"hydra.run.dir={tmp_path / name}", cwd=REPO)
    assert layout_rows(tmp_path / "again") == layout_rows(tmp_path / "contiguous")


def one_step(layout: Layout, batch: tuple[Tensor, Tensor]) -> dict[str, Tensor]:
    """McMahan et al.'s CNN after one local SGD step on `batch`, in `layout`, in float64."""
    torch.manual_seed(0)
    module = layout.apply(CNN(input_shape=(1, 28, 28), num_classes=10, lr=0.1).double())
    optimizer = module.configure_optimizers()
    x, y = batch
    loss = module.training_step((layout.inputs(x), y), 0)
    loss.backward()
    optimizer.step()
    return {name: t.detach().contiguous() for name, t in module.state_dict().items()}


def test_both_layouts_take_the_same_step_within_float64_rounding() -> None:
    """Channels-last (the CPU default for convolutions) and contiguous take the same local step.
    Compared after one step, in float64, against a bound derived from the operation, not a
    trajectory compared with a tolerance seen on one CPU: each entry of the step is a sum of at
    most n = batch × the largest fan-in (10 × 5·5·32) products, which each layout orders its own
    way; each order is within γ_n = n·u/(1 − n·u) (u = 2⁻⁵³) of the exact sum relative to the sum
    of the terms' magnitudes, allowed here 10³ times the step's own size (the terms of a gradient
    entry cancel to no less than a thousandth of their magnitudes here). A layout that permuted
    or dropped anything would differ by the step's own size."""
    generator = torch.Generator().manual_seed(1)
    batch = torch.rand(10, 1, 28, 28, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 10, (10,), generator=generator)
    torch.manual_seed(0)
    initial = CNN(input_shape=(1, 28, 28), num_classes=10, lr=0.1).double().state_dict()
    contiguous = one_step(CONTIGUOUS, (batch, labels))
    channels_last = one_step(LAYOUTS["channels_last"], (batch, labels))
    n, u = 10 * 5 * 5 * 32, 2.0**-53
    gamma = n * u / (1 - n * u)
    for name, weights in contiguous.items():
        step = (weights - initial[name]).abs().max().item()
        assert step > 0, name  # every parameter moved: the comparison below is not vacuous
        difference = (channels_last[name] - weights).abs().max().item()
        assert difference <= 2 * gamma * 1e3 * step, (name, difference, step)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("auto", None, 10, "cpu", None, 2), (2, 1)),
        (("auto", None, 10, "cpu", None, 16), (1, None)),  # 10 clients < 16 threads
        (("auto", None, 16, "cpu", None, 16), (16, 1)),
        (("auto", None, 10, "cpu", None, 1), (1, None)),
        (("auto", 2, 10, "cpu", None, 4), (2, 2)),
        (("auto", None, 1, "cpu", None, 2), (1, None)),
        (
            ("auto", None, 10, "cpu", "algo=fedasync runs its event queue in one process", 2),
            (1, None),
        ),
        (("auto", None, 10, "cuda", None, 8), (1, None)),
        ((3, None, 10, "cpu", None, 2), (3, None)),
    ],
)
def test_auto_workers_pick_as_documented(args: tuple[Any, ...], expected: tuple[int, Any]) -> None:
    chosen = auto_parallelism(*args)
    assert (chosen.workers, chosen.threads_per_worker) == expected
    assert bool(chosen.chosen) == (args[0] == "auto")


def test_auto_says_why_it_chose_one_worker() -> None:
    chosen = auto_parallelism("auto", None, 10, "cpu", "algo=fedbuff runs in one process", 2)
    assert chosen == Parallelism(1, None, "1 worker (algo=fedbuff runs in one process)")
    assert "2 workers × 1 torch thread" in auto_parallelism("auto", None, 4, "cpu", None, 2).chosen


def test_a_workers_setting_that_is_not_a_count_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"fl.workers=two is not a number of workers; use auto"):
        auto_parallelism("two", None, 10, "cpu", None, 2)


def test_auto_workers_give_the_numbers_of_one_single_threaded_worker(tmp_path: Path) -> None:
    """On two torch threads `auto` forks two single-threaded workers; metrics.csv equals one
    worker's with one thread, and the console and summary.json say what auto chose."""
    command = [*(o for o in TINY if not o.startswith("model=")), "model=cnn", "fl.rounds=2"]
    auto = run_cli(*command, f"hydra.run.dir={tmp_path / 'auto'}", cwd=REPO, threads=2)
    run_cli(
        *command,
        "fl.workers=1",
        "fl.threads_per_worker=1",
        f"hydra.run.dir={tmp_path / 'one'}",
        cwd=REPO,
    )
    said = "fedlight: fl.workers=auto: 2 workers × 1 torch thread (4 clients per round on 2 CPU"
    assert said in auto.stdout
    summary = json.loads((tmp_path / "auto" / "summary.json").read_text())
    assert summary["parallelism"] == {
        "workers": 2,
        "threads_per_worker": 1,
        "chosen_by": "auto",
        "why": "2 workers × 1 torch thread (4 clients per round on 2 CPU threads)",
    }
    assert (summary["environment"]["workers"], summary["environment"]["torch_threads"]) == (2, 1)
    assert rows_without_timings(tmp_path / "auto") == rows_without_timings(tmp_path / "one")
