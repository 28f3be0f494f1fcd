"""The synchronous driver: a round selects its clients, dispatches their local training to the
engine and the workers, gathers what they sent, and hands it to the server pipeline; the
pipelines (`fedlight.pipeline`) do everything in between, the same for the asynchronous driver.

select (the selector; the system's failures; clients without data are left out) → dispatch: each
participant of this worker's share through the client pipeline (download decoded, local training
on the engine `fl.engine`, the algorithm's upload, the upload stages) → its upload aggregated at
once (streaming) or after the gather → the server pipeline (server update, the stages' round
end) → then, in `run`: evaluate → metrics (csv, W&B, console) → divergence check → checkpoint →
the privacy budget for the next round. A round whose training loss or weights are not finite ends
the run (`fl.on_divergence=stop`) before its checkpoint, so the last checkpoint is the last good
round.

The engine yields results one by one and each client's upload is encoded, decoded and added to
the round's running aggregates before the next result is asked for, so a round holds one
model-sized sum per part, not one upload per client; a stage that needs every upload at once (an
attack that forges from the benign updates) makes the round aggregate after the gather. With
several workers (`fl.workers`, see `fedlight.workers`) each trains its share of the participants;
`fl.exchange` says what they exchange: every encoded upload (then every worker aggregates them
all in participant order: the numbers of one worker, bit for bit) or one partial sum per worker
(each reduces its share first: one model per worker crosses, and the sums agree with one
worker's to float rounding).
"""

import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import pytorch_lightning as pl
import torch
from torch import Tensor

from fedlight.algorithms.base import ServerState
from fedlight.checkpoint import save_checkpoint
from fedlight.client_states import ClientStates, MemoryClientStates, Written
from fedlight.config import RunSettings
from fedlight.context import Federation, RoundContext, RoundMetrics
from fedlight.data.base import TensorDataset
from fedlight.engines import Engine, LocalTask, first_optimizer, make_engine
from fedlight.engines.base import LocalCallback, LocalResult
from fedlight.errors import ConfigError
from fedlight.evaluation import ACCURACY, LOSS, Evaluator
from fedlight.loggers.base import MetricsRow, RoundLogger
from fedlight.pipeline.client import ClientPipeline, Received
from fedlight.pipeline.server import Arrived, ServerRound
from fedlight.pipeline.stage import ClientState, StageSetup, StageStates, UploadStage
from fedlight.rng import Stream
from fedlight.selection.base import ClientPool, ModelQuality, Population
from fedlight.stages import Stages
from fedlight.tensors import StateDict, detached_copy, on_device
from fedlight.workers import OneWorker, Share, Workers

Item = TypeVar("Item")

# The layout of a checkpoint's state: 2 keeps each stage's server state under its name
# (`stage_states`); checkpoints without the key kept them in the server extras under prefixes.
STATE_FORMAT = 2


def timed(items: Iterator[Item]) -> Iterator[tuple[Item, float]]:
    """Each item with the seconds spent producing it: an engine's training time per result."""
    while True:
        started = time.perf_counter()
        item = next(items, None)
        if item is None:
            return
        yield item, time.perf_counter() - started


@dataclass(frozen=True)
class Clients:
    """The run's data as its clients hold it."""

    data: TensorDataset
    train: Sequence[Tensor]  # each client's training examples (indices into the pool)
    test: Sequence[Tensor] | None = None  # each client's local test set; None without them


@dataclass
class Outcome:
    """What the worker that trained a participant tells every worker about it."""

    arrived: Arrived  # its upload as encoded (`fl.exchange=uploads`), else without tensors
    written: Written | None  # the new client state as its store wrote it; None: unchanged
    train_loss: float
    num_samples: int
    seconds: float  # local training time
    bytes_up: int
    bytes_down: int
    metrics: dict[str, float] = field(default_factory=dict)  # reported by client-side stages
    virtual_seconds: float = 0.0  # its time on the system's clock (download, training, upload)


@dataclass(frozen=True)
class Probe:
    """What the selector's questions before a round's training cost the clients."""

    seconds: float  # measured compute, summed over the clients asked
    bytes_up: int
    bytes_down: int
    virtual_seconds: float  # on the system's clock: until the last answer is in (0 without)


@dataclass
class RoundStats:
    train_loss: float  # nan when no participant held data or every update was rejected
    num_samples: int  # trained on by the participants whose updates were accepted
    lr: float
    bytes_up: int
    bytes_down: int
    client_seconds: float  # summed local-training time of the round's participants
    metrics: dict[str, float] = field(default_factory=dict)  # the stages' reported numbers
    every_update_rejected: bool = False  # clients trained, and none sent finite numbers
    virtual_seconds: float = 0.0  # how long the round lasted on the system's clock


@dataclass
class History:
    """Everything a resumed run needs to reproduce the rows and totals of the uninterrupted run."""

    completed_rounds: int = 0
    rows: list[MetricsRow] = field(default_factory=list)
    bytes_up: int = 0
    bytes_down: int = 0
    wall_seconds: float = 0.0
    client_seconds: float = 0.0
    diverged_at_round: int | None = None  # the first round whose loss or weights were not finite
    divergence: str | None = None  # what was not finite then, in words
    participation: list[int] = field(default_factory=list)  # rounds each client trained in
    # [bytes up, bytes down] sent until the first evaluated round reaching eval.target_accuracy
    bytes_to_target: list[int] | None = None
    stopped: str | None = None  # why the run ended before fl.rounds (the privacy budget)
    # each client's accuracy on its local test set at the last evaluation (nan: no test data)
    local_accuracies: list[float] = field(default_factory=list)
    virtual_time: float = 0.0  # seconds on the system's clock (`system`), all rounds so far


# What a checkpoint holds besides the caller's meta data (`FederatedLoop.state_dict`).
STATE_KEYS = (
    "state_format",
    "server_weights",
    "server_extras",
    "stage_states",
    "client_states",
    "completed_rounds",
    "rows",
    "bytes_up",
    "bytes_down",
    "wall_seconds",
    "client_seconds",
    "diverged_at_round",
    "divergence",
    "participation",
    "bytes_to_target",
    "local_accuracies",
    "virtual_time",
    "torch_rng",
)


def not_finite(stats: RoundStats, weights: StateDict) -> str | None:
    """What of a round is not finite (every client's update, its training loss, if anybody
    trained, or the global weights), in words; None if everything is. A round whose every update
    was rejected kept the global model, but nothing its clients computed was a number: local
    training diverged (e.g. a learning rate far too high), or every participant attacked."""
    if stats.every_update_rejected:
        return "every client update had NaN/Inf entries (all rejected; the model was kept)"
    if stats.num_samples and not math.isfinite(stats.train_loss):
        return f"train_loss {stats.train_loss}"
    floating = {name: t for name, t in weights.items() if t.is_floating_point()}
    finite = torch.stack([t.isfinite().all() for t in floating.values()])
    if bool(finite.all()):  # one device sync per round
        return None
    return f"weights {list(floating)[int(finite.logical_not().nonzero()[0])]} not finite"


class FederatedLoop:
    def __init__(
        self,
        settings: RunSettings,
        clients: Clients,
        module: pl.LightningModule,
        stages: Stages,
        client_states: ClientStates | None = None,
        workers: Workers | None = None,
    ) -> None:
        """`client_states` defaults to a memory store on the client module's device, `workers`
        to this process alone."""
        self.settings = settings
        self.data = clients.data
        self.client_indices = clients.train
        self.client_test_indices = clients.test
        self.module = module
        self.algorithm = algorithm = stages.algorithm
        self.selection = stages.selection
        self.lr_schedule = stages.lr_schedule
        self.privacy = stages.privacy
        self.system = stages.system
        # the upload stages in chain order; the wire encodes last
        self.stages: list[UploadStage] = [
            stages.selection,
            stages.attack,
            stages.privacy,
            stages.wire,
        ]
        self.speeds = (
            self.system.speeds(settings.fl.num_clients, settings.seed)
            if self.system.clocked
            else None
        )
        self.told: set[str] = set()  # the once-per-run console notes already printed
        self.base_lrs = [
            g["lr"] for g in first_optimizer(module.configure_optimizers()).param_groups
        ]
        device = next(module.parameters()).device
        initial = detached_copy(module.state_dict())
        self.federation = Federation(
            num_clients=settings.fl.num_clients,
            trainable=frozenset(name for name, _ in module.named_parameters()),
            seed=settings.seed,
            device=device,
            initial_weights=initial,
            rounds=settings.fl.rounds,
            malicious=stages.attack.malicious_clients(settings.fl.num_clients, settings.seed),
        )
        self.server = algorithm.init_server(initial, self.federation)
        setup = StageSetup(settings, self.federation, [len(i) for i in clients.train])
        self.stage_states: StageStates = {
            stage.name: stage.initial_state(setup) for stage in self.stages
        }
        self.workers = OneWorker(device) if workers is None else workers
        self.client_states = (
            MemoryClientStates(device)
            if client_states is None  # an empty store is falsy: it is a Mapping
            else client_states
        )
        self.history = History(participation=[0] * settings.fl.num_clients)
        self.saved_round = 0  # the rounds the last checkpoint holds
        self.engine = self.build_engine()
        tested = clients.test is not None
        self.finetune_engine = self.side_engine(
            settings.eval.finetune_epochs if tested else 0, Stream.FINE_TUNING
        )
        self.client = ClientPipeline(
            algorithm,
            self.stages,
            stages.wire,
            stages.attack.label_map(self.data.num_classes, self.data.train_y.device),
            self.side_engine(algorithm.personal_epochs, Stream.PERSONAL_TRAINING),
        )
        self.evaluator = Evaluator(module, settings.eval.batch_size, self.data.prepare)
        self.client_pool = ClientPool(clients.train, self.quality_on)

    def run_round(self, round_index: int) -> RoundStats:
        """Select clients, train this worker's share of them, aggregate each upload as it
        arrives (or after the gather), and finish the round on the server."""
        ctx, participants, failed, probe = self.select(round_index)
        download = self.algorithm.download(ctx, self.server)
        share = self.workers.share([len(indices) for _, indices in participants])
        server = ServerRound.start(
            ctx, self.algorithm, self.stages, self.stage_states, [len(i) for _, i in participants]
        )
        streaming = (
            self.workers.count == 1 or self.settings.fl.exchange == "sums"
        ) and not server.holds_uploads()
        mine = self.train_share(ctx, share.mine(participants), download, server, streaming)
        outcomes: list[Outcome] = self.workers.gather(share, mine)
        for (client, _), outcome in zip(participants, outcomes, strict=True):
            if outcome.written is not None:
                self.client_states.commit(client, round_index, outcome.written)
            for name, value in outcome.metrics.items():
                ctx.metrics.add(name, value)
            self.history.participation[client] += 1
        arrived = [outcome.arrived for outcome in outcomes]
        if not streaming:  # every worker aggregates every upload, in participant order
            server.add_all(arrived)
        elif self.workers.count > 1:  # one partial sum per worker, combined in rank order
            partials = self.workers.gather(
                one_per_worker(self.workers), [server.aggregation.partials()]
            )
            server.combine(partials, arrived)
        self.tell_rejected(ctx, server.aggregation.rejected)
        self.server, refusal = server.server_update(self.server)
        if refusal is not None:
            self.tell_once(
                "refused",
                f"round {round_index}: {refusal}; the global model is kept (refused rounds are "
                "counted in metrics.csv, column aggregation_refused)",
            )
        round_seconds = self.round_seconds(ctx, outcomes, probe, len(failed))
        self.stage_states = server.finish(arrived)
        return round_stats(ctx, outcomes, probe, round_seconds, set(server.aggregation.rejected))

    def select(
        self, round_index: int
    ) -> tuple[RoundContext, list[tuple[int, Tensor]], set[int], Probe]:
        """The round's context, its participants with their training examples (without the
        clients that hold no data or fail), the failed clients, and what the selector's
        questions cost."""
        before = self.federation.round(round_index)
        pool = self.client_pool
        pool.reset()
        seen = Population(self.stage_states[self.selection.name], pool, self.server.weights)
        clients = self.selection.select(before, self.settings.fl.clients_per_round, seen)
        lrs = tuple(self.lr_schedule(before, base) for base in self.base_lrs)
        ctx = self.federation.round(round_index, tuple(clients), lrs)
        probe = self.probe_cost(pool)  # the selector's questions before anybody trained
        # A client without data takes no step and sends nothing: it is left out of the round.
        participants = self.algorithm.participants(ctx, self.client_indices)
        without_data = sum(1 for _, indices in participants if len(indices) == 0)
        if without_data:
            participants = [(client, indices) for client, indices in participants if len(indices)]
            ctx.metrics.report("clients_without_data", without_data)
        failed = {client for client, _ in participants if self.system.fails(ctx, client)}
        if failed:  # a failed client trains and sends nothing
            participants = [(c, indices) for c, indices in participants if c not in failed]
        if self.speeds is not None:
            ctx.metrics.report("dropped_out", len(failed))
        ctx.metrics.report("participants", len(participants))
        malicious = self.federation.malicious
        if malicious:
            ctx.metrics.report("malicious", sum(1 for c, _ in participants if c in malicious))
        return ctx, participants, failed, probe

    def train_share(
        self,
        ctx: RoundContext,
        mine: Sequence[tuple[int, Tensor]],
        download: StateDict,
        server: ServerRound,
        streaming: bool,
    ) -> list[Outcome]:
        """This worker's participants through the client pipeline, each as the engine asks for
        it (its state read once, it may come from disk), and, streaming, its upload aggregated
        at once."""
        received: dict[int, Received] = {}
        client_metrics: dict[int, RoundMetrics] = {}
        wire_state = self.stage_states.get(self.client.wire.name, {})

        def tasks() -> Iterator[LocalTask]:
            for client, indices in mine:
                client_ctx = replace(ctx, metrics=client_metrics.setdefault(client, RoundMetrics()))
                stored = self.client_states.get(client)
                got = self.client.receive(client_ctx, client, indices, download, wire_state, stored)
                received[client] = got
                yield got.task

        outcomes: list[Outcome] = []
        for local, seconds in timed(self.engine.train(tasks(), ctx.round_index, list(ctx.lrs))):
            client = local.client_id
            client_ctx = replace(ctx, metrics=client_metrics.pop(client))
            got = received.pop(client)
            outcomes.append(
                self.deliver(client_ctx, got, local, seconds, server if streaming else None)
            )
        return outcomes

    def deliver(
        self,
        ctx: RoundContext,
        got: Received,
        local: LocalResult,
        seconds: float,
        server: ServerRound | None,
    ) -> Outcome:
        """One trained participant's upload through the client pipeline, its new state written
        (unless it missed the deadline: its work is lost) and, given the `server` round of a
        streaming round, its upload aggregated now."""
        client, pool = local.client_id, self.client_pool
        pool_seconds, asked = pool.seconds, len(pool.questions)
        sent = self.client.upload(ctx, got, local, self.stage_states, pool)
        examples = sent.examples + sum(q.examples for q in pool.questions[asked:])
        virtual_seconds = (
            0.0
            if self.speeds is None
            else self.speeds.seconds(client, got.bytes_down, examples, sent.bytes_up)
        )
        late = self.system.late(virtual_seconds)
        written = None
        if sent.state is not None and not late:
            written = self.client_states.write(client, ctx.round_index, sent.state.stored())
        arrived = Arrived(sent.upload, late=late)
        if server is not None or late:  # nothing of its tensors is kept
            arrived.upload = replace(sent.upload, tensors={})
        if server is not None and late:
            server.drop_late(sent.upload.contributor)
        elif server is not None:
            arrived.rejected = not server.add(sent.upload)
        return Outcome(
            arrived,
            written,
            local.train_loss,
            local.num_samples,
            seconds + sent.seconds + pool.seconds - pool_seconds,
            sent.bytes_up,
            got.bytes_down,
            ctx.metrics.values,
            virtual_seconds,
        )

    def tell_rejected(self, ctx: RoundContext, rejected: Sequence[int]) -> None:
        ctx.metrics.report("rejected", len(rejected))
        if rejected:
            self.tell_once(
                "rejected",
                f"round {ctx.round_index}: the update of client {rejected[0]} has NaN or Inf "
                "entries; it is left out of the aggregate (rejected updates are counted in "
                "metrics.csv, column rejected)",
            )

    def round_seconds(
        self, ctx: RoundContext, outcomes: Sequence[Outcome], probe: Probe, failed: int
    ) -> float:
        """How long the round lasted on the system's clock (0 without a system model): training
        starts once the probe's answers are in, and a deadline counts from then."""
        if self.speeds is None:
            return 0.0
        finished = [o.virtual_seconds for o in outcomes if not o.arrived.late]
        stragglers = sum(1 for o in outcomes if o.arrived.late)
        seconds = probe.virtual_seconds + self.system.round_seconds(finished, stragglers, failed)
        ctx.metrics.report("stragglers", stragglers)
        ctx.metrics.report("round_seconds", seconds)
        return seconds

    def probe_cost(self, pool: ClientPool) -> Probe:
        """What the questions asked so far this round cost the clients; on the system's clock
        they ran in parallel, so the probe lasts as long as its slowest client's work."""
        speeds, questions = self.speeds, pool.questions
        clock = (
            0.0
            if speeds is None
            else max(
                (speeds.seconds(q.client, q.bytes_down, q.examples, q.bytes_up) for q in questions),
                default=0.0,
            )
        )
        return Probe(pool.seconds, pool.bytes_up, pool.bytes_down, clock)

    def tell_once(self, topic: str, message: str) -> None:
        """`message` on the console (main worker), the first time `topic` comes up in this
        process."""
        if self.workers.main and topic not in self.told:
            self.told.add(topic)
            print(f"fedlight: {message}", file=sys.stderr, flush=True)

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
        """Mean test accuracy, mean test loss and accuracy spread of the evaluated models."""
        metrics = self.evaluate_all()
        return metrics[ACCURACY], metrics[LOSS], metrics["test_accuracy_std"]

    def evaluate_all(self) -> dict[str, float]:
        """Every test metric, averaged over the models the algorithm reports (the global model,
        or each client's own for `local`, evaluated as they stream in, one at a time), and
        `test_accuracy_std`, the population std of their accuracies."""
        states = AlgorithmStates(self.client_states)
        models = self.algorithm.evaluated_models(self.federation, self.server, states)
        results = [self.evaluate_weights(weights) for weights in models]
        accuracies = torch.tensor([r[ACCURACY] for r in results], dtype=torch.float64)
        count = len(results)
        names = list(dict.fromkeys(name for result in results for name in result))
        mean = {name: sum(r[name] for r in results) / count for name in names}
        spread = {"test_accuracy_std": accuracies.std(correction=0).item()}
        if self.client_test_indices is None:
            return mean | spread
        self.history.local_accuracies = self.local_accuracies(states)
        return mean | spread | local_accuracy_summary(self.history.local_accuracies)

    def local_accuracies(self, states: "AlgorithmStates") -> list[float]:
        """Each client's accuracy, with the model it would use (fine-tuned on its training part
        for `eval.finetune_epochs` first, if set), on its local test set (nan for a client without
        test data); one client's model at a time, so a disk store streams."""
        assert self.client_test_indices is not None
        data, accuracies = self.data, []
        for client, indices in enumerate(self.client_test_indices):
            if len(indices) == 0:
                accuracies.append(math.nan)
                continue
            weights = self.algorithm.model_of_client(self.federation, self.server, states, client)
            if self.finetune_engine is not None:
                weights = self.fine_tuned(client, weights)
            tested = self.evaluator.evaluate(weights, data.train_x[indices], data.train_y[indices])
            accuracies.append(tested[ACCURACY])
        return accuracies

    def side_engine(self, epochs: int, stream: Stream) -> Engine | None:
        """An engine of `fl.engine`'s kind for a training beside the round's (a personal model's,
        evaluation-time fine-tuning): `epochs` per call, batches drawn from `stream` (so the
        round's training never sees its draws); None for 0 epochs."""
        if not epochs:
            return None
        settings = self.settings
        side = replace(settings, local=replace(settings.local, epochs=epochs))
        return make_engine(self.module, self.data, side, stream)

    def fine_tuned(self, client: int, weights: StateDict) -> StateDict:
        """A copy of `weights` after the client's fine-tuning epochs on its training part at the
        configured learning rates (the global model and the client's state are not touched)."""
        assert self.finetune_engine is not None
        task = LocalTask(client, self.client_indices[client], weights, [])
        (tuned,) = self.finetune_engine.train([task], self.history.completed_rounds, self.base_lrs)
        return detached_copy(tuned.weights)

    def quality_on(self, weights: StateDict, indices: Tensor) -> ModelQuality:
        """Loss and accuracy of `weights` on the training examples `indices` (a client's)."""
        x, y = self.data.train_x[indices], self.data.train_y[indices]
        metrics = self.evaluator.evaluate(weights, x, y)
        return ModelQuality(metrics[LOSS], metrics[ACCURACY])

    def evaluate_weights(self, weights: StateDict) -> dict[str, float]:
        data = self.data
        return self.evaluator.evaluate(weights, data.test_x, data.test_y)

    def evaluate_model(self, weights: StateDict) -> tuple[float, float]:
        """Accuracy and mean cross-entropy of one model on the whole test set."""
        metrics = self.evaluate_weights(weights)
        return metrics[ACCURACY], metrics[LOSS]

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
        first_round = history.completed_rounds + 1
        described = self.privacy.describe(self.privacy_state())
        if described is not None and first_round <= settings.fl.rounds:
            self.tell_once("privacy", described)
        if first_round <= settings.fl.rounds:
            history.stopped = self.privacy.budget_refusal(self.privacy_state(), first_round)
        for round_index in range(first_round, settings.fl.rounds + 1):
            if history.stopped:
                break
            stats = self.run_round(round_index)
            history.completed_rounds = round_index
            history.bytes_up += stats.bytes_up
            history.bytes_down += stats.bytes_down
            history.client_seconds += stats.client_seconds
            history.virtual_time += stats.virtual_seconds
            history.wall_seconds = time.perf_counter() - started
            if round_index < settings.fl.rounds:  # the next round must stay within the budget
                history.stopped = self.privacy.budget_refusal(self.privacy_state(), round_index + 1)
            last = round_index == settings.fl.rounds or history.stopped is not None
            diverged = None if history.diverged_at_round else not_finite(stats, self.server.weights)
            evaluated_round = last or self.evaluation_due(round_index) or diverged
            if self.workers.main and evaluated_round:
                row = self.evaluated_row(round_index, stats, started)
                if not (diverged or history.diverged_at_round or math.isfinite(row["test_loss"])):
                    diverged = f"test_loss {row['test_loss']}"
                history.rows.append(row)
                target = settings.eval.target_accuracy
                if (
                    target is not None
                    and history.bytes_to_target is None
                    and row["test_accuracy"] >= target
                ):
                    history.bytes_to_target = [history.bytes_up, history.bytes_down]
                for logger in loggers:
                    logger.log_round(row)
            if self.workers.count > 1:
                diverged = self.workers.broadcast(diverged)  # the test loss is the main worker's
            if diverged:
                history.diverged_at_round, history.divergence = round_index, diverged
                if settings.fl.on_divergence == "stop":
                    break
            if last or round_index % settings.checkpoint.every == 0:
                self.save_checkpoint(checkpoint_path, checkpoint_meta)
        self.keep_resumed_checkpoint(first_round, checkpoint_path, checkpoint_meta)
        if history.stopped:
            self.tell_once("stopped", history.stopped)
        return history

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
        rows = self.history.rows
        previous = float(rows[-1]["virtual_time"]) if rows else 0.0
        return passed_multiple(previous, self.history.virtual_time, every_seconds)

    def privacy_state(self) -> StateDict:
        return self.stage_states[self.privacy.name]

    def build_engine(self) -> Engine:
        """The engine of local training: the privacy mechanism's, if it has one, else
        `fl.engine`'s."""
        engine = self.privacy.engine(self.module, self.data, self.settings, self.privacy_state())
        return make_engine(self.module, self.data, self.settings) if engine is None else engine

    def evaluated_row(self, round_index: int, stats: RoundStats, started: float) -> MetricsRow:
        """The round's row of metrics: the fixed columns, then the test metrics beyond accuracy
        and loss, then what the stages reported, each sorted by name."""
        evaluated = self.evaluate_all()
        self.history.wall_seconds = time.perf_counter() - started
        row: MetricsRow = {
            "round": round_index,
            "test_accuracy": evaluated.pop(ACCURACY),
            "test_loss": evaluated.pop(LOSS),
            "train_loss": stats.train_loss,
            "lr": stats.lr,
            "bytes_up": stats.bytes_up,
            "bytes_down": stats.bytes_down,
            "wall_seconds": self.history.wall_seconds,
            "test_accuracy_std": evaluated.pop("test_accuracy_std"),
            "client_seconds": stats.client_seconds,
        }
        if self.speeds is not None:
            row["virtual_time"] = self.history.virtual_time
        row |= {name: evaluated[name] for name in sorted(evaluated)}
        return row | {name: stats.metrics[name] for name in sorted(stats.metrics)}

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
            "completed_rounds": self.history.completed_rounds,
            "rows": self.history.rows,
            "bytes_up": self.history.bytes_up,
            "bytes_down": self.history.bytes_down,
            "wall_seconds": self.history.wall_seconds,
            "client_seconds": self.history.client_seconds,
            "diverged_at_round": self.history.diverged_at_round,
            "divergence": self.history.divergence,
            "participation": self.history.participation,
            "bytes_to_target": self.history.bytes_to_target,
            "local_accuracies": self.history.local_accuracies,
            "virtual_time": self.history.virtual_time,
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any], run_dir: Path) -> None:
        """Restore the checkpoint (loaded on the CPU) of the run in `run_dir` onto the device of
        the client module."""
        require_state_format(state)
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
        diverged = state["diverged_at_round"]
        kept = (settings.fl.rounds, diverged)  # evaluated off the grid of `eval.every`
        self.history = History(
            completed_rounds=state["completed_rounds"],
            # A finished run's last round was evaluated because it was last; extended, it is not.
            rows=due_rows(state["rows"], settings.eval.every, settings.eval.every_seconds, kept),
            bytes_up=state["bytes_up"],
            bytes_down=state["bytes_down"],
            wall_seconds=state["wall_seconds"],
            client_seconds=state["client_seconds"],
            diverged_at_round=diverged,
            divergence=state["divergence"],
            participation=list(state["participation"]),
            bytes_to_target=state.get("bytes_to_target"),  # absent in older checkpoints
            local_accuracies=list(state.get("local_accuracies", [])),
            virtual_time=state.get("virtual_time", 0.0),
        )
        self.saved_round = self.history.completed_rounds
        torch.set_rng_state(state["torch_rng"])
        self.engine.close()
        self.engine = self.build_engine()  # a mechanism's engine reads the restored state


def require_state_format(state: Mapping[str, Any]) -> None:
    """Refuse, in one line, a checkpoint written before the stage pipelines (format 1)."""
    found = state.get("state_format", 1)
    if found != STATE_FORMAT:
        raise ConfigError(
            f"resume: the checkpoint has state format {found} (stage states under name prefixes "
            f"in the server extras), this fedlight reads format {STATE_FORMAT} (each stage's "
            "state under its name); finish that run with the fedlight version that wrote it, "
            "or start it again"
        )


def round_stats(
    ctx: RoundContext,
    outcomes: Sequence[Outcome],
    probe: Probe,
    round_seconds: float,
    rejected: set[int],
) -> RoundStats:
    """The round's totals; the loss of the participants whose updates were accepted (a rejected
    or late upload's loss says nothing of the global model)."""
    late = [o for o in outcomes if o.arrived.late]
    kept = [
        o for o in outcomes if not o.arrived.late and o.arrived.upload.client_id not in rejected
    ]
    samples = sum(o.num_samples for o in kept)
    return RoundStats(
        train_loss=(
            sum(o.train_loss * o.num_samples for o in kept) / samples
            if samples
            else math.nan  # nobody trained, or every update was rejected
        ),
        num_samples=samples,
        every_update_rejected=bool(outcomes) and not kept and not late,
        virtual_seconds=round_seconds,
        lr=ctx.lrs[0],
        bytes_up=sum(o.bytes_up for o in outcomes) + probe.bytes_up,
        bytes_down=sum(o.bytes_down for o in outcomes) + probe.bytes_down,
        client_seconds=sum(o.seconds for o in outcomes) + probe.seconds,
        metrics=ctx.metrics.values,
    )


def one_per_worker(workers: Workers) -> Share:
    """A share in which each worker contributes one item, gathered in rank order."""
    return Share(workers.rank, tuple((rank,) for rank in range(workers.count)))


class AlgorithmStates(Mapping[int, StateDict]):
    """The algorithm's part of each client's state (entries outside any stage's namespace), as
    the algorithm's `evaluated_models` reads it; clients holding none of it are absent."""

    def __init__(self, states: ClientStates) -> None:
        self.states = states

    def __getitem__(self, client: int) -> StateDict:
        own = ClientState.of(self.states[client]).algorithm
        if own is None:
            raise KeyError(client)
        return own

    def __iter__(self) -> Iterator[int]:
        return (client for client in self.states if client in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, client: object) -> bool:
        return client in self.states and ClientState.of(self.states[client]).algorithm is not None


def local_accuracy_summary(accuracies: Sequence[float]) -> dict[str, float]:
    """Mean, 10th percentile (linear interpolation) and population std of the clients' local test
    accuracies, over the clients that have local test data."""
    tested = torch.tensor([a for a in accuracies if not math.isnan(a)], dtype=torch.float64)
    if not len(tested):
        return {}
    return {
        "local_accuracy_mean": tested.mean().item(),
        "local_accuracy_p10": torch.quantile(tested, 0.1).item(),
        "local_accuracy_std": tested.std(correction=0).item(),
    }


def passed_multiple(before: float, now: float, period: float) -> bool:
    """Whether the clock passed a multiple of `period` in (before, now]."""
    return math.floor(now / period) > math.floor(before / period)


def due_rows(
    rows: Sequence[MetricsRow], every: int, every_seconds: float | None, kept: tuple[Any, ...]
) -> list[MetricsRow]:
    """The checkpoint's rows the uninterrupted run would have evaluated: those on the grid of
    `eval.every` (or of `eval.every_seconds` on the virtual clock), and the rounds in `kept`."""
    due: list[MetricsRow] = []
    for row in rows:
        if every_seconds is None:
            on_grid = row["round"] % every == 0
        else:
            previous = float(due[-1]["virtual_time"]) if due else 0.0
            on_grid = passed_multiple(previous, float(row["virtual_time"]), every_seconds)
        if on_grid or row["round"] in kept:
            due.append(row)
    return due
