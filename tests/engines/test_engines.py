"""Client engines: the vectorized engine trains what the sequential one does, refuses the rest."""

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812

from fedlight.core.context import RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload, LocalResult, ServerState
from fedlight.core.tensors import StateDict, detached_copy
from fedlight.data.augment import CropFlip
from fedlight.data.base import TensorDataset
from fedlight.data.digits import Digits
from fedlight.drivers.base import Clients
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.engines import resolve_engine
from fedlight.engines.base import LocalCallback, LocalTask
from fedlight.engines.sequential import SequentialEngine
from fedlight.engines.vectorized import VectorizedEngine
from fedlight.models.classifier import Classifier
from fedlight.models.mlp import MLP
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.store.checkpoint import load_checkpoint
from tests.conftest import TINY, rows_without_timings, run_cli, run_killed_in_round
from tests.helpers.commands import validate_command_line
from tests.helpers.user_module import RecordingModule

# Unequal clients, one without data: with B=16 and E=2 they take 6, 2, 0, 10 and 4 steps, the
# first, second and last with a partial last batch, so padding and masking are exercised.
CLIENT_SIZES = (45, 7, 0, 80, 23)
ATOL = 1e-5


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """On a shared, busy CPU one thread is much faster for these tiny models than two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@dataclass
class Recorded:
    """What a loop did over its rounds: each client's local result and upload, the server."""

    steps: list[tuple[int, int]] = field(default_factory=list)  # (client, num_steps)
    weights: list[StateDict] = field(default_factory=list)
    uploads: list[StateDict] = field(default_factory=list)
    initial: StateDict = field(default_factory=dict)
    server: ServerState | None = None


def unequal_clients(data: TensorDataset) -> list[Tensor]:
    order = torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(0))
    bounds = torch.tensor((0, *CLIENT_SIZES)).cumsum(0).tolist()
    return [order[a:b] for a, b in itertools.pairwise(bounds)]


def run_rounds(
    make_job: Callable[[list[str]], Job],
    overrides: list[str],
    rounds: int = 2,
    augment: bool = False,
) -> Recorded:
    """`rounds` rounds of a loop over `CLIENT_SIZES` (every client with data takes part),
    recording each client's local result and upload (copied: local weights may be live)."""
    job = make_job(
        [
            f"fl.num_clients={len(CLIENT_SIZES)}",
            f"fl.clients_per_round={len(CLIENT_SIZES)}",
            "local.batch_size=16",
            "local.epochs=2",
            "optim.momentum=0.9",
            "optim.weight_decay=0.001",
            *overrides,
        ]
    )
    data = Digits().load()
    if augment:
        data.augment = CropFlip(padding=2, fill=(0.0,))
    torch.manual_seed(0)
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    loop = FederatedLoop(job.settings, Clients(data, unequal_clients(data)), module, job.stages)
    recorded = Recorded(initial=detached_copy(loop.server.weights))
    upload = job.algorithm.upload

    def recording_upload(
        ctx: RoundContext, received: StateDict, local: LocalResult, client_state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        sent, new_state = upload(ctx, received, local, client_state)
        recorded.steps.append((local.client_id, local.num_steps))
        recorded.weights.append(detached_copy(local.weights))
        recorded.uploads.append(detached_copy(sent.tensors))
        return sent, new_state

    job.algorithm.upload = recording_upload  # type: ignore[method-assign]
    for round_index in range(1, rounds + 1):
        loop.run_round(round_index)
    recorded.server = loop.server
    return recorded


def assert_close(actual: list[StateDict], expected: list[StateDict]) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert got.keys() == want.keys()
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=0, atol=ATOL)


@pytest.mark.parametrize(
    "algo",
    [["algo=fedavg"], ["algo=fedprox", "algo.mu=0.1"], ["algo=scaffold"]],
    ids=["fedavg", "fedprox", "scaffold"],
)
def test_vectorized_matches_sequential_with_momentum_and_unequal_clients(
    make_job: Callable[[list[str]], Job], algo: list[str]
) -> None:
    sequential = run_rounds(make_job, [*algo, "fl.engine=sequential"])
    vectorized = run_rounds(make_job, [*algo, "fl.engine=vectorized"])
    assert vectorized.steps == sequential.steps
    # the client without data is left out of the round: it trains and sends nothing
    assert sequential.steps[:4] == [(0, 6), (1, 2), (3, 10), (4, 4)]
    assert_close(vectorized.weights, sequential.weights)
    assert_close(vectorized.uploads, sequential.uploads)
    assert vectorized.server is not None and sequential.server is not None
    assert_close(
        [vectorized.server.weights, vectorized.server.extras],
        [sequential.server.weights, sequential.server.extras],
    )
    # Training moved the model far beyond the tolerance: the comparison is not vacuous.
    moved = sequential.server.weights["net.1.weight"] - sequential.initial["net.1.weight"]
    assert moved.abs().max() > 1000 * ATOL


def test_vectorized_matches_sequential_for_a_cnn_with_augmentation(
    make_job: Callable[[list[str]], Job],
) -> None:
    """Conv layers under vmap, and augmentation drawing from each client's generator between
    its epochs' permutations, as the sequential engine draws."""
    overrides = ["model=cifar_cnn", "algo=scaffold", "local.epochs=2"]
    sequential = run_rounds(make_job, [*overrides, "fl.engine=sequential"], augment=True)
    vectorized = run_rounds(make_job, [*overrides, "fl.engine=vectorized"], augment=True)
    assert vectorized.steps == sequential.steps
    assert_close(vectorized.weights, sequential.weights)
    assert_close(vectorized.uploads, sequential.uploads)


@pytest.mark.parametrize(
    "clipping",
    [
        ["local.gradient_clip_val=0.5"],
        ["local.gradient_clip_val=0.02", "local.gradient_clip_algorithm=value"],
    ],
    ids=["norm", "value"],
)
def test_vectorized_clips_gradients_as_the_sequential_engine(
    make_job: Callable[[list[str]], Job], clipping: list[str]
) -> None:
    """Each client's gradients clipped after the algorithm's correction (FedProx's), before
    momentum, as the sequential engine's configure_gradient_clipping."""
    algo = ["algo=fedprox", "algo.mu=0.1"]
    sequential = run_rounds(make_job, [*algo, *clipping, "fl.engine=sequential"])
    vectorized = run_rounds(make_job, [*algo, *clipping, "fl.engine=vectorized"])
    assert_close(vectorized.weights, sequential.weights)
    unclipped = run_rounds(make_job, [*algo, "fl.engine=sequential"])
    moved = sequential.weights[-1]["net.1.weight"] - unclipped.weights[-1]["net.1.weight"]
    assert moved.abs().max() > 100 * ATOL  # clipping changed the training


def test_train_loss_and_counts_match_the_sequential_engine(make_job) -> None:
    job = make_job(["local.batch_size=16", "local.epochs=2", "optim.momentum=0.9"])
    data = Digits().load()
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    tasks = [
        LocalTask(client, indices, detached_copy(module.state_dict()), [])
        for client, indices in enumerate(unequal_clients(data))
    ]
    sequential = [
        (r.client_id, r.num_samples, r.num_steps, r.lr, r.train_loss)
        for r in SequentialEngine(module, data, job.settings).train(tasks, 3, [0.02])
    ]
    vectorized = [
        (r.client_id, r.num_samples, r.num_steps, r.lr, r.train_loss)
        for r in VectorizedEngine(module, data, job.settings).train(tasks, 3, [0.02])
    ]
    assert [row[:4] for row in vectorized] == [row[:4] for row in sequential]
    assert [row[4] for row in vectorized] == pytest.approx([row[4] for row in sequential], abs=1e-6)
    assert sequential[2][2:] == (0, 0.02, 0.0)  # the client without data: no step, no loss


# Refusals -----------------------------------------------------------------------------------


class AdamClassifier(MLP):
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class NesterovClassifier(MLP):
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9, nesterov=True)


class BatchNormClassifier(Classifier):
    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.Linear(32, 10))


class DropoutClassifier(Classifier):
    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(64, num_classes))


class ScheduledClassifier(MLP):
    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


class EpochEndClassifier(MLP):
    def on_train_epoch_end(self) -> None:
        self.epochs = getattr(self, "epochs", 0) + 1


class SmoothedClassifier(MLP):
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y, label_smoothing=0.1)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            AdamClassifier,
            "implements torch.optim.SGD only and the model's configure_optimizers() returned Adam",
        ),
        (NesterovClassifier, "implements SGD without dampening, nesterov or maximize"),
        (
            BatchNormClassifier,
            "needs a model without buffers (running statistics) and "
            "BatchNormClassifier has net.2.running_mean",
        ),
        (DropoutClassifier, "cannot reproduce dropout's per-client draws"),
        (
            SmoothedClassifier,
            "cross-entropy step only and SmoothedClassifier overrides training_step",
        ),
        (
            EpochEndClassifier,
            "cross-entropy step only and EpochEndClassifier overrides on_train_epoch_end",
        ),
        (
            ScheduledClassifier,
            "keeps each round's learning rate through local training and the model's "
            "configure_optimizers() returns a StepLR",
        ),
        (
            RecordingModule,
            "cross-entropy step only and RecordingModule is not a fedlight Classifier",
        ),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_vectorized_refuses_what_it_cannot_reproduce_in_one_line(
    make_job, model: type, message: str
) -> None:
    job = make_job(["fl.engine=vectorized"])
    data = Digits().load()
    module = model(input_shape=data.input_shape, num_classes=data.num_classes, lr=0.05)
    with pytest.raises(ConfigError) as error:
        FederatedLoop(job.settings, Clients(data, [torch.arange(10)]), module, job.stages)
    text = str(error.value)
    assert text.startswith("fl.engine=vectorized ") and message in text
    assert text.endswith("; use fl.engine=sequential") and "\n" not in text


class ModuleOnlyCallback(LocalCallback):
    """Corrects gradients on a module only: there is no functional form to vectorize."""

    def on_after_backward(self, module: nn.Module) -> None:
        for param in module.parameters():
            param.grad.mul_(0.5)


def test_vectorized_refuses_callbacks_without_correct_gradients(make_job) -> None:
    job = make_job(["fl.engine=vectorized"])
    data = Digits().load()
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    task = LocalTask(0, torch.arange(20), module.state_dict(), [ModuleOnlyCallback()])
    with pytest.raises(ConfigError) as error:
        list(VectorizedEngine(module, data, job.settings).train([task], 1, [0.05]))
    assert str(error.value) == (
        "fl.engine=vectorized needs algorithm callbacks with correct_gradients and stack and "
        "ModuleOnlyCallback has none; use fl.engine=sequential"
    )


def test_a_refusal_stops_the_job_before_any_round(make_job, tmp_path: Path) -> None:
    job = make_job(
        [*TINY, "fl.engine=vectorized", "model._target_=tests.helpers.user_module.RecordingModule"]
    )
    RecordingModule.calls.clear()
    with pytest.raises(ConfigError, match=r"^fl\.engine=vectorized .* RecordingModule "):
        run_job(job, tmp_path)
    assert RecordingModule.calls == []


# Choosing an engine --------------------------------------------------------------------------


def test_bad_engine_setting_fails_in_one_line() -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line(["fl.engine=fast"])
    assert str(error.value) == "fl.engine=fast is not an engine; use auto, sequential, vectorized"


def test_auto_is_sequential_on_the_cpu(make_job) -> None:
    assert make_job([]).settings.fl.engine == "auto"
    assert resolve_engine("auto", torch.device("cpu")) == "sequential"
    assert resolve_engine("vectorized", torch.device("cpu")) == "vectorized"
    job = make_job(TINY)
    data = Digits().load()
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    loop = FederatedLoop(job.settings, Clients(data, [torch.arange(10)]), module, job.stages)
    assert type(loop.engine) is SequentialEngine


def test_cli_run_with_the_vectorized_engine_matches_the_sequential_one(
    make_job, tmp_path: Path
) -> None:
    overrides = [*TINY, "algo=scaffold", "optim.momentum=0.5", "partition=dirichlet"]
    run_cli(*overrides, "fl.engine=vectorized", f"hydra.run.dir={tmp_path / 'vec'}", cwd=tmp_path)
    run_job(make_job([*overrides, "fl.engine=sequential"]), tmp_path / "seq")
    vectorized = json.loads((tmp_path / "vec" / "summary.json").read_text())
    sequential = json.loads((tmp_path / "seq" / "summary.json").read_text())
    assert vectorized["rounds"] == 4
    assert vectorized["final_accuracy"] == pytest.approx(sequential["final_accuracy"], abs=0.01)
    rows = [(tmp_path / run / "metrics.csv").read_text().splitlines()[1:] for run in ("vec", "seq")]
    for vec_row, seq_row in zip(*rows, strict=True):
        # round, test_accuracy, test_loss, train_loss: equal to float rounding
        vec_values = [float(v) for v in vec_row.split(",")[:4]]
        seq_values = [float(v) for v in seq_row.split(",")[:4]]
        assert vec_values == pytest.approx(seq_values, abs=1e-4)


def test_vectorized_resume_after_a_kill_is_bit_exact(
    make_job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = [
        *TINY,
        "fl.engine=vectorized",
        "algo=scaffold",
        "partition=dirichlet",
        "optim.momentum=0.9",
        "checkpoint.every=2",
    ]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 4, monkeypatch)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    rows = rows_without_timings(tmp_path / "full")
    assert rows_without_timings(tmp_path / "resumed") == rows and len(rows) == 4
    full = load_checkpoint(tmp_path / "full" / "checkpoint.pt")
    resumed = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")
    for key in ("server_weights", "server_extras"):
        assert all(torch.equal(full[key][k], resumed[key][k]) for k in full[key])
