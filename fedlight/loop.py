"""The FederatedLoop: one round of federated training, written out top to bottom in `run_round`.

select clients → broadcast → local training by the client engine (`fl.engine`, see
`fedlight.engines`) → aggregate → (evaluate → log → checkpoint) in `run`. The loop describes each
participant's local training as a task; the engine yields their results one by one, and each
client's upload is made before the next result is asked for. With several workers (`fl.workers`,
see `fedlight.workers`) each trains its share of the participants and all of them aggregate the
gathered outcomes identically; with one worker, sharing and gathering are the identity.
"""

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.nn import functional as F  # noqa: N812

from fedlight.algorithms.base import (
    Algorithm,
    ClientUpload,
    LocalCallback,
    LocalResult,
    ServerState,
)
from fedlight.checkpoint import save_checkpoint
from fedlight.client_states import ClientStates, MemoryClientStates, Written
from fedlight.config import RunSettings
from fedlight.data.base import TensorDataset
from fedlight.engines import LocalTask, first_optimizer, make_engine
from fedlight.loggers.base import MetricsRow, RoundLogger
from fedlight.lr_schedules.base import LRSchedule
from fedlight.rng import Stream, numpy_generator
from fedlight.selection.base import Selection
from fedlight.tensors import StateDict, detached_copy, nbytes
from fedlight.workers import OneWorker, Workers

Item = TypeVar("Item")


def timed(items: Iterator[Item]) -> Iterator[tuple[Item, float]]:
    """Each item with the seconds spent producing it: an engine's training time per result."""
    while True:
        started = time.perf_counter()
        item = next(items, None)
        if item is None:
            return
        yield item, time.perf_counter() - started


@dataclass
class Outcome:
    """What the worker that trained a participant tells every worker about it."""

    upload: ClientUpload
    written: Written | None  # the new client state as its store wrote it; None: unchanged
    train_loss: float
    num_samples: int
    seconds: float  # local training time


@dataclass
class RoundStats:
    train_loss: float
    lr: float
    bytes_up: int
    bytes_down: int
    client_seconds: float  # summed local-training time of the round's participants


@dataclass
class History:
    """Everything a resumed run needs to reproduce the rows and totals of the uninterrupted run."""

    completed_rounds: int = 0
    rows: list[MetricsRow] = field(default_factory=list)
    bytes_up: int = 0
    bytes_down: int = 0
    wall_seconds: float = 0.0
    client_seconds: float = 0.0


class FederatedLoop:
    def __init__(
        self,
        settings: RunSettings,
        data: TensorDataset,
        client_indices: Sequence[Tensor],
        module: pl.LightningModule,
        algorithm: Algorithm,
        selection: Selection,
        lr_schedule: LRSchedule,
        client_states: ClientStates | None = None,
        workers: Workers | None = None,
    ) -> None:
        """`client_states` defaults to a memory store on the client module's device, `workers`
        to this process alone."""
        self.settings = settings
        self.data = data
        self.client_indices = client_indices
        self.module = module
        self.algorithm = algorithm
        self.selection = selection
        self.lr_schedule = lr_schedule
        self.base_lrs = [
            g["lr"] for g in first_optimizer(module.configure_optimizers()).param_groups
        ]
        trainable = frozenset(name for name, _ in module.named_parameters())
        self.server: ServerState = algorithm.init_server(
            detached_copy(module.state_dict()), trainable, settings.fl.num_clients
        )
        device = next(module.parameters()).device
        self.workers = OneWorker(device) if workers is None else workers
        self.client_states = (
            MemoryClientStates(device)
            if client_states is None  # an empty store is falsy: it is a Mapping
            else client_states
        )
        self.history = History()
        self.engine = make_engine(module, data, settings)

    def run_round(self, round_index: int) -> RoundStats:
        """Select clients, send the download, train this worker's share of the participants,
        gather every participant's outcome, aggregate the uploads in participant order."""
        seed, fl = self.settings.seed, self.settings.fl
        clients = self.selection.select(
            round_index,
            fl.num_clients,
            fl.clients_per_round,
            numpy_generator(seed, Stream.SELECTION, round_index),
        )
        lrs = [self.lr_schedule(round_index, base) for base in self.base_lrs]
        bytes_down = len(clients) * nbytes(self.algorithm.download(self.server))

        participants = self.algorithm.participants(
            clients, self.client_indices, numpy_generator(seed, Stream.POOLING, round_index)
        )
        share = self.workers.share([len(indices) for _, indices in participants])

        tasks, states = [], {}
        for client, indices in share.mine(participants):
            states[client] = self.client_states.get(client)  # read once: it may come from disk
            start = self.algorithm.start_weights(self.server, states[client])
            callbacks = self.algorithm.local_callbacks(self.server, states[client])
            tasks.append(LocalTask(client, indices, start, callbacks))

        mine = []
        for local, seconds in timed(self.engine.train(tasks, round_index, lrs)):
            client, client_state = local.client_id, states[local.client_id]
            upload, new_state = self.algorithm.upload(self.server, local, client_state)
            changed = new_state is not None and new_state is not client_state  # else not rewritten
            written = self.client_states.write(client, round_index, new_state) if changed else None
            mine.append(Outcome(upload, written, local.train_loss, local.num_samples, seconds))

        outcomes: list[Outcome] = self.workers.gather(share, mine)
        for (client, _), outcome in zip(participants, outcomes, strict=True):
            if outcome.written is not None:
                self.client_states.commit(client, round_index, outcome.written)
        uploads = [outcome.upload for outcome in outcomes]
        self.server = self.algorithm.server_update(self.server, uploads)
        samples = sum(outcome.num_samples for outcome in outcomes)
        return RoundStats(
            train_loss=sum(o.train_loss * o.num_samples for o in outcomes) / max(samples, 1),
            lr=lrs[0],
            bytes_up=sum(nbytes(u.tensors) for u in uploads),
            bytes_down=bytes_down,
            client_seconds=sum(outcome.seconds for outcome in outcomes),
        )

    def train_client(
        self,
        client: int,
        indices: Tensor,
        round_index: int,
        start: StateDict,
        lrs: list[float],
        callbacks: list[LocalCallback],
    ) -> LocalResult:
        """Local training of one participant by the loop's engine (as in a round)."""
        task = LocalTask(client, indices, start, callbacks)
        (local,) = self.engine.train([task], round_index, lrs)
        return local

    def evaluate(self) -> tuple[float, float, float]:
        """Mean test accuracy, mean test loss and accuracy spread (population std) of the models
        the algorithm reports: the global model, or each client's own for `local` (evaluated as
        they stream in, one at a time)."""
        models = self.algorithm.evaluated_models(self.server, self.client_states)
        accuracies, losses = zip(*(self.evaluate_model(weights) for weights in models), strict=True)
        spread = torch.tensor(accuracies, dtype=torch.float64).std(correction=0).item()
        count = len(accuracies)
        return sum(accuracies) / count, sum(losses) / count, spread

    @torch.no_grad()
    def evaluate_model(self, weights: StateDict) -> tuple[float, float]:
        """Accuracy and mean cross-entropy of one model on the whole test set."""
        module, data = self.module, self.data
        module.load_state_dict(weights)
        module.eval()
        correct = torch.zeros((), dtype=torch.int64, device=data.test_y.device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=data.test_y.device)
        for x, y in zip(
            data.test_x.split(self.settings.eval.batch_size),
            data.test_y.split(self.settings.eval.batch_size),
            strict=True,
        ):
            logits = module(x)
            loss_sum += F.cross_entropy(logits, y, reduction="sum")
            correct += (logits.argmax(dim=1) == y).sum()
        count = len(data.test_y)
        return correct.item() / count, loss_sum.item() / count

    def run(
        self, loggers: Sequence[RoundLogger], checkpoint_path: Path, checkpoint_meta: dict[str, Any]
    ) -> History:
        """All remaining rounds; rows of rounds done before a resume are replayed to the loggers.

        `checkpoint_meta` is stored beside the state (the config, to check a resume against).
        Only the main worker evaluates and saves checkpoints (the others have no loggers): the
        others go on to the next round and meet it at its gather.
        """
        history, settings = self.history, self.settings
        for row in history.rows:
            for logger in loggers:
                logger.log_round(row)
        started = time.perf_counter() - history.wall_seconds
        for round_index in range(history.completed_rounds + 1, settings.fl.rounds + 1):
            stats = self.run_round(round_index)
            history.completed_rounds = round_index
            history.bytes_up += stats.bytes_up
            history.bytes_down += stats.bytes_down
            history.client_seconds += stats.client_seconds
            history.wall_seconds = time.perf_counter() - started
            last = round_index == settings.fl.rounds
            if self.workers.main and (last or round_index % settings.eval.every == 0):
                accuracy, loss, accuracy_std = self.evaluate()
                history.wall_seconds = time.perf_counter() - started
                row: MetricsRow = {
                    "round": round_index,
                    "test_accuracy": accuracy,
                    "test_loss": loss,
                    "train_loss": stats.train_loss,
                    "lr": stats.lr,
                    "bytes_up": stats.bytes_up,
                    "bytes_down": stats.bytes_down,
                    "wall_seconds": history.wall_seconds,
                    "test_accuracy_std": accuracy_std,
                    "client_seconds": stats.client_seconds,
                }
                history.rows.append(row)
                for logger in loggers:
                    logger.log_round(row)
            if last or round_index % settings.checkpoint.every == 0:
                if self.workers.main:
                    save_checkpoint(checkpoint_path, {**self.state_dict(), **checkpoint_meta})
                self.client_states.checkpoint_saved()
        return history

    def state_dict(self) -> dict[str, Any]:
        """Server state, client states (or, on disk, which file version each is), history and RNG
        state: only weights-only-safe types."""
        return {
            "server_weights": self.server.weights,
            "server_extras": self.server.extras,
            "client_states": self.client_states.state_dict(),
            "completed_rounds": self.history.completed_rounds,
            "rows": self.history.rows,
            "bytes_up": self.history.bytes_up,
            "bytes_down": self.history.bytes_down,
            "wall_seconds": self.history.wall_seconds,
            "client_seconds": self.history.client_seconds,
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any], run_dir: Path) -> None:
        """Restore the checkpoint (loaded on the CPU) of the run in `run_dir` onto the device of
        the client module."""
        device = next(self.module.parameters()).device

        def on_device(tensors: StateDict) -> StateDict:
            return {name: t.to(device) for name, t in tensors.items()}

        self.server = ServerState(
            on_device(state["server_weights"]), on_device(state["server_extras"])
        )
        self.client_states.load_state_dict(state["client_states"], run_dir)
        self.history = History(
            completed_rounds=state["completed_rounds"],
            rows=list(state["rows"]),
            bytes_up=state["bytes_up"],
            bytes_down=state["bytes_down"],
            wall_seconds=state["wall_seconds"],
            client_seconds=state["client_seconds"],
        )
        torch.set_rng_state(state["torch_rng"])
