"""What both drivers share: the run's parts, built once from typed settings (the federation,
the server's and the stages' states, the client-state store, the engine, the client pipeline,
the evaluations), and the loop over rounds: run a round (the driver's `run_round`: a synchronous
round, or one server update of the asynchronous event queue) → evaluate when due → metrics (csv,
W&B, console) → divergence check → checkpoint (and stop, after a preemption signal) → the
privacy budget for the next round.

A round whose training loss or weights are not finite ends the run (`fl.on_divergence=stop`)
before its checkpoint, so the last checkpoint is the last good round. Only the main worker
evaluates and saves checkpoints; the others go on to the next round and meet it at its gather.
"""

import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor

from fedlight.core.allocator import release_freed
from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ServerState, StageStates
from fedlight.core.rng import Stream
from fedlight.core.settings import RunSettings
from fedlight.core.tensors import StateDict, detached_copy, on_device
from fedlight.data.base import TensorDataset
from fedlight.drivers.evaluation import Evaluated, RunEvaluation
from fedlight.drivers.history import (
    STATE_FORMAT,
    History,
    RoundStats,
    history_state,
    passed_multiple,
    restored_history,
)
from fedlight.drivers.preemption import Preempted, requested
from fedlight.drivers.rows import NOT_EVALUATED, non_finite_loss, not_finite, round_row
from fedlight.drivers.workers import OneWorker, Workers
from fedlight.engines import make_engine
from fedlight.engines.base import Engine
from fedlight.engines.module_optim import Optimization, configured_optimization
from fedlight.loggers.base import (
    RoundLogger,
    RoundProgress,
    SilentProgress,
    evaluated,
    judged_stop,
)
from fedlight.round.client import ClientPipeline
from fedlight.round.stages import Stages
from fedlight.stages.base import StageSetup, UploadStage
from fedlight.stages.pool import ClientPool
from fedlight.store.checkpoint import save_checkpoint
from fedlight.store.client_states import ClientStates, MemoryClientStates


@dataclass(frozen=True)
class Clients:
    """The run's data as its clients hold it."""

    data: TensorDataset
    train: Sequence[Tensor]  # each client's training examples (indices into the pool)
    test: Sequence[Tensor] | None = None  # each client's local test set; None without them
    validation: Sequence[Tensor] | None = None  # each client's local validation part, or None


def federation_of(settings: RunSettings, module: pl.LightningModule, stages: Stages) -> Federation:
    """The run's fixed facts: the client module's initial weights and trainable entries, the
    attack's malicious clients (drawn from the seed)."""
    return Federation(
        num_clients=settings.fl.num_clients,
        trainable=frozenset(name for name, _ in module.named_parameters()),
        seed=settings.seed,
        device=next(module.parameters()).device,
        initial_weights=detached_copy(module.state_dict()),
        rounds=settings.fl.rounds,
        malicious=stages.attack.malicious_clients(settings.fl.num_clients, settings.seed),
    )


class Driver(ABC):
    """The parts of a run and its loop over rounds; a driver writes `run_round`."""

    def __init__(
        self,
        settings: RunSettings,
        clients: Clients,
        module: pl.LightningModule,
        stages: Stages,
        client_states: ClientStates | None = None,
        workers: Workers | None = None,
        progress: RoundProgress | None = None,
    ) -> None:
        """`client_states` defaults to a memory store on the client module's device, `workers`
        to this process alone; `progress` (what the console shows within a round) to none."""
        self.settings = settings
        self.data = clients.data
        self.client_indices = clients.train
        self.client_test_indices = clients.test
        self.client_validation_indices = clients.validation
        self.module = module
        self.algorithm = algorithm = stages.algorithm
        self.selection = stages.selection
        self.lr_schedule = stages.lr_schedule
        self.privacy = stages.privacy
        self.system = stages.system
        self.local_work = stages.local_work
        self.stages: list[UploadStage] = stages.upload  # in chain order
        self.speeds = (
            self.system.speeds(settings.fl.num_clients, settings.seed)
            if self.system.clocked
            else None
        )
        self.told: set[str] = set()  # the once-per-run console notes already printed
        optimization = configured_optimization(module)
        self.base_lrs = [g["lr"] for g in optimization.optimizer.param_groups]
        self.federation = federation_of(settings, module, stages)
        self.refuse_two_lr_schedules(optimization)
        device = self.federation.device
        self.server = algorithm.init_server(self.federation.initial_weights, self.federation)
        setup = StageSetup(settings, self.federation, [len(i) for i in clients.train], algorithm)
        self.stage_states: StageStates = {
            stage.name: stage.initial_state(setup) for stage in self.stages
        }
        self.workers = OneWorker(device) if workers is None else workers
        self.privacy.agree_on_noise(self.workers.broadcast)  # before any noise is drawn
        self.progress = SilentProgress() if progress is None else progress
        # whether a logger shows per-client rows (`start_rounds` asks them): else no update norm
        # is computed
        self.shows_clients = False
        self.client_states = (
            MemoryClientStates(device)
            if client_states is None  # an empty store is falsy: it is a Mapping
            else client_states
        )
        self.history = History(
            participation=[0] * settings.fl.num_clients, split=settings.eval.split
        )
        self.saved_round = 0  # the rounds the last checkpoint holds
        self.engine = self.build_engine()
        self.client = self.build_client(stages)
        self.evaluation = self.build_evaluation()
        self.client_pool = ClientPool(clients.train, self.evaluation.quality_on)

    def build_client(self, stages: Stages) -> ClientPipeline:
        """What each selected client runs: decode, train, upload through the chain."""
        return ClientPipeline(
            self.algorithm,
            self.stages,
            stages.wire,
            stages.attack.label_map(self.data.num_classes, self.data.train_y.device),
            self.side_engine(self.algorithm.personal_epochs, Stream.PERSONAL_TRAINING),
            stages.local_work,
        )

    def build_evaluation(self) -> RunEvaluation:
        """The run's evaluations; with local test sets (validation parts, own labels) and
        `eval.finetune_epochs`, a side engine fine-tunes a copy of each client's model first."""
        local = (
            self.client_test_indices is not None
            or self.client_validation_indices is not None
            or self.settings.eval.own_labels
        )
        epochs = self.settings.eval.finetune_epochs if local else 0
        return RunEvaluation(
            module=self.module,
            data=self.data,
            batch_size=self.settings.eval.batch_size,
            algorithm=self.algorithm,
            federation=self.federation,
            client_indices=self.client_indices,
            client_test_indices=self.client_test_indices,
            finetune_engine=self.side_engine(epochs, Stream.FINE_TUNING),
            base_lrs=self.base_lrs,
            client_validation_indices=self.client_validation_indices,
            own_label_indices=self.own_label_indices() if self.settings.eval.own_labels else None,
            train_loss=self.settings.eval.train_loss,
        )

    def own_label_indices(self) -> list[Tensor]:
        """Each client's global test examples of the labels its training part holds."""
        test_y, train_y = self.data.test_y, self.data.train_y
        return [
            torch.isin(test_y, train_y[indices].unique()).nonzero().flatten()
            for indices in self.client_indices
        ]

    def refuse_two_lr_schedules(self, optimization: Optimization) -> None:
        """A module's lr schedulers restart with each local training (a client's local training
        is one fit, `fedlight.engines.lightning`) from the rate the round gives it. While
        `lr_schedule` keeps that rate at the configured one, they run exactly as under a Trainer;
        one that varies it over rounds or with the evaluations cannot be composed with every
        scheduler (many compute their rates from the one they were built with), so the two
        together are refused before any work."""
        if not optimization.schedulers:
            return
        varies = self.how_the_rate_varies()
        if varies is not None:
            kind = type(optimization.schedulers[0].scheduler).__name__
            raise ConfigError(
                f"the model's configure_optimizers() returns an lr scheduler ({kind}) and "
                f"lr_schedule={type(self.lr_schedule).__name__.lower()} varies the local rate "
                f"{varies}; use one of them: lr_schedule=constant, or a model without lr scheduler"
            )

    def how_the_rate_varies(self) -> str | None:
        """How the schedule varies the local rate, in words (None: it keeps the configured one):
        with the evaluations, or over rounds (the first round whose rate differs)."""
        schedule = self.lr_schedule
        if schedule.reads_evaluations:
            return "with the server's evaluations"
        for round_index in range(1, self.settings.fl.rounds + 1):
            ctx = self.federation.round(round_index)
            lrs = [schedule(ctx, base, ()) for base in self.base_lrs]
            if lrs != self.base_lrs:
                return f"over rounds (round {round_index}: {lrs[0]:g})"
        return None

    def round_lrs(self, round_index: int) -> tuple[float, ...]:
        """The clients' rate per parameter group in round `round_index`: the schedule's, given
        the rows of the rounds evaluated so far. Only the main worker evaluates: where the rate
        reads the evaluations, the others take its rates."""
        ctx, history = self.federation.round(round_index), self.history
        done = evaluated(history.rows, history.split)
        lrs = tuple(self.lr_schedule(ctx, base, done) for base in self.base_lrs)
        return self.workers.broadcast(lrs) if self.lr_schedule.reads_evaluations else lrs

    @abstractmethod
    def run_round(self, round_index: int) -> RoundStats:
        """Round `round_index`: what happened in it (metrics are reported to its context)."""

    def tell_once(self, topic: str, message: str) -> None:
        """`message` on the console (main worker), the first time `topic` comes up in this
        process."""
        if self.workers.main and topic not in self.told:
            self.told.add(topic)
            print(f"fedlight: {message}", file=sys.stderr, flush=True)

    def side_engine(self, epochs: int, stream: Stream) -> Engine | None:
        """An engine of `fl.engine`'s kind for a training beside the round's (a personal model's,
        evaluation-time fine-tuning): `epochs` per call, batches drawn from `stream` (so the
        round's training never sees its draws); None for 0 epochs."""
        if not epochs:
            return None
        settings = self.settings
        side = replace(settings, local=replace(settings.local, epochs=epochs))
        return make_engine(self.module, self.data, side, stream)

    def run(
        self, loggers: Sequence[RoundLogger], checkpoint_path: Path, checkpoint_meta: dict[str, Any]
    ) -> History:
        """All remaining rounds; rows of rounds done before a resume are replayed to the loggers.

        `checkpoint_meta` is stored beside the state (the config, to check a resume against).
        Only the main worker evaluates and saves checkpoints (the others have no loggers): the
        others go on to the next round and meet it at its gather.
        """
        history, settings = self.history, self.settings
        started = time.perf_counter() - history.wall_seconds
        first_round = self.start_rounds(loggers)
        for round_index in range(first_round, settings.fl.rounds + 1):
            if history.stopped:
                break
            self.progress.round_started(round_index)
            stats = self.run_round(round_index)
            release_freed(settings.fl.mmap_threshold_mb)  # what the round freed leaves the process
            history.add(round_index, stats, time.perf_counter() - started)
            if round_index < settings.fl.rounds:  # the next round must stay within the budget
                history.stopped = self.privacy.budget_refusal(self.privacy_state(), round_index + 1)
            last = round_index == settings.fl.rounds or history.stopped is not None
            diverged = None if history.diverged_at_round else not_finite(stats, self.server.weights)
            evaluated_round = last or self.evaluation_due(round_index) or diverged
            if self.workers.main:
                evaluated = (
                    self.evaluation_of_round(started, last or self.stops_at(diverged))
                    if evaluated_round
                    else NOT_EVALUATED
                )
                row = round_row(round_index, stats, evaluated, history, self.speeds is not None)
                if not (diverged or history.diverged_at_round):
                    diverged = non_finite_loss(row)
                history.add_row(row, evaluated.test, settings.eval.target_accuracy)
                history.add_validation(evaluated.validation)
                for logger in loggers:
                    logger.log_round(row)
                    logger.log_clients(round_index, stats.clients)
            judged = judged_stop(loggers)  # an Optuna trial's pruner (the main worker's loggers)
            if self.workers.count > 1:  # the test loss and the loggers are the main worker's
                diverged, judged = self.workers.broadcast((diverged, judged))
            if not last:
                history.stopped = self.target_stop() or judged
                last = history.stopped is not None
            if diverged:
                history.diverged_at_round, history.divergence = round_index, diverged
                if settings.fl.on_divergence == "stop":
                    break
            preempted = None if last else self.preempted()
            if last or round_index % settings.checkpoint.every == 0 or preempted:
                self.save_checkpoint(checkpoint_path, checkpoint_meta)
            if preempted:
                self.workers.barrier()  # the checkpoint is written before any worker leaves
                raise Preempted(preempted, round_index)
        self.keep_resumed_checkpoint(first_round, checkpoint_path, checkpoint_meta)
        if history.stopped:
            self.tell_once("stopped", history.stopped)
        return history

    def start_rounds(self, loggers: Sequence[RoundLogger]) -> int:
        """The first round to run; the rows of those a resume replays go to the loggers, and a
        privacy budget that allows no more rounds stops the run before it. Every worker learns
        whether the main worker's loggers show per-client rows."""
        history, rounds = self.history, self.settings.fl.rounds
        self.shows_clients = self.workers.broadcast(any(lg.shows_clients() for lg in loggers))
        for row in history.rows:
            for logger in loggers:
                logger.log_round(row)
        first_round = history.completed_rounds + 1
        described = self.privacy.describe(self.privacy_state())
        if described is not None and first_round <= rounds:
            self.tell_once("privacy", described)
        if first_round <= rounds:
            history.stopped = self.privacy.budget_refusal(self.privacy_state(), first_round)
            history.stopped = history.stopped or self.target_stop()
        return first_round

    def target_stop(self) -> str | None:
        """Why the run ends now that a round reached `eval.target_accuracy` under
        `eval.stop_at_target` (None: it goes on). Every worker answers alike: the main worker's
        history decides."""
        evaluation = self.settings.eval
        if not evaluation.stop_at_target:
            return None
        reached = self.history.bytes_to_target is not None
        if not (self.workers.broadcast(reached) if self.workers.count > 1 else reached):
            return None
        return (
            f"eval.stop_at_target: round {self.history.completed_rounds} reached "
            f"eval.target_accuracy={evaluation.target_accuracy:g}"
        )

    def stops_at(self, diverged: str | None) -> bool:
        """Whether a round that `diverged` (None: did not) ends the run (`fl.on_divergence`)."""
        return diverged is not None and self.settings.fl.on_divergence == "stop"

    def preempted(self) -> str | None:
        """The preemption signal that any worker received (`fedlight.drivers.preemption`): they all
        stop at the end of the same round."""
        if self.workers.count == 1:
            return requested()
        return next((name for name in self.workers.each(requested()) if name), None)

    def keep_resumed_checkpoint(self, first_round: int, path: Path, meta: dict[str, Any]) -> None:
        """A resume that ran no round (of a finished run, or one the privacy budget stops) leaves
        the checkpoint it resumed where it writes, so that it can be resumed in turn; resumed in
        place, that file stays as it was."""
        resume = self.settings.resume
        if self.history.completed_rounds >= first_round:
            return
        resumed = None if resume is None else Path(resume) / path.name
        if resumed is not None and path.exists() and resumed.exists() and path.samefile(resumed):
            return
        self.save_checkpoint(path, meta)

    def evaluation_due(self, round_index: int) -> bool:
        """Every `eval.every` rounds, or with `eval.every_seconds` the first round whose virtual
        time passes a multiple of it since the last evaluated round."""
        every_seconds = self.settings.eval.every_seconds
        if every_seconds is None:
            return round_index % self.settings.eval.every == 0
        previous = self.history.last_evaluated_time()
        return passed_multiple(previous, self.history.virtual_time, every_seconds)

    def privacy_state(self) -> StateDict:
        return self.stage_states[self.privacy.name]

    def build_engine(self) -> Engine:
        """The engine of local training: the privacy mechanism's, if it has one, else
        `fl.engine`'s."""
        engine = self.privacy.engine(self.module, self.data, self.settings, self.privacy_state())
        return make_engine(self.module, self.data, self.settings) if engine is None else engine

    def evaluation_of_round(self, started: float, final: bool) -> Evaluated:
        """The round just done evaluated: on the test set where `eval.test` asks for it (every
        evaluated round, or the `final` one), on the validation set where the run has one; the
        clients' local test accuracies kept in the history. A round whose validation loss is not
        finite ends a run with `fl.on_divergence=stop`: it is tested as the last. The wall time,
        counted from `started`, then includes the evaluation."""
        every_round = self.settings.eval.test == "every_round"
        evaluated = self.evaluation.evaluate_all(
            self.server, self.client_states, self.history.completed_rounds, every_round or final
        )
        if not evaluated.test and self.stops_at(non_finite_loss(evaluated.validation)):
            evaluated = self.evaluation.evaluate_all(
                self.server, self.client_states, self.history.completed_rounds
            )
        if evaluated.local is not None:
            self.history.local_accuracies = evaluated.local
        why = self.evaluation.evaluator.no_classifier
        if why is not None:
            name = type(self.module).__name__
            said = f"{name} is no classifier: it is scored by its training_step loss, with no "
            self.tell_once("scoring", f"{said}accuracy; {why}")
        self.history.wall_seconds = time.perf_counter() - started
        return evaluated

    def final_model(self) -> StateDict:
        """The run's model as it stands (after its last round): what model.pt holds."""
        return self.evaluation.final_model(self.server, self.client_states)

    def save_checkpoint(self, path: Path, meta: dict[str, Any]) -> None:
        """The main worker writes the checkpoint; every worker's client store learns of it."""
        if self.workers.main:
            save_checkpoint(path, {**self.state_dict(), **meta})
            self.saved_round = self.history.completed_rounds
        self.client_states.checkpoint_saved()

    def state_dict(self) -> dict[str, Any]:
        """Server state, client states (or, on disk, which file version each is), history and RNG
        state: only weights-only-safe types."""
        return {
            "state_format": STATE_FORMAT,
            "server_weights": self.server.weights,
            "server_extras": self.server.extras,
            "stage_states": self.stage_states,
            "client_states": self.client_states.state_dict(),
            **history_state(self.history),
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any], run_dir: Path) -> None:
        """Restore the checkpoint (loaded on the CPU) of the run in `run_dir` onto the device of
        the client module."""
        device = next(self.module.parameters()).device
        self.server = ServerState(
            on_device(state["server_weights"], device), on_device(state["server_extras"], device)
        )
        # A stage's state key added since the checkpoint was written keeps its initial value.
        self.stage_states = {
            name: initial | on_device(state["stage_states"].get(name, {}), device)
            for name, initial in self.stage_states.items()
        }
        self.client_states.load_state_dict(state["client_states"], run_dir)
        settings = self.settings
        self.history = restored_history(
            state, settings.fl.rounds, settings.eval, settings.fl.on_divergence == "stop"
        )
        self.saved_round = self.history.completed_rounds
        torch.set_rng_state(state["torch_rng"])
        self.engine.close()
        self.engine = self.build_engine()  # a mechanism's engine reads the restored state
