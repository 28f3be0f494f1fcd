"""The FederatedLoop: one round of federated training, written out top to bottom in `run_round`.

select → download (algorithm, then the wire: encode, count, decode) → local training by the client
engine (`fl.engine`, see `fedlight.engines`; a malicious client may train on flipped labels) →
upload (algorithm; a second, personal training where the algorithm keeps one, e.g. Ditto; a
malicious client's attack; the privacy mechanism's clip; then the wire) →
aggregate as the uploads arrive (the algorithm's parts through the aggregator, or DP-FedAvg's noised
sum; an upload with NaN/Inf entries is rejected) → server update (algorithm, server optimizer) → the
privacy accountant → then, in `run`: evaluate → metrics (csv, W&B, console) → divergence check →
checkpoint → the privacy budget for the next round. Selected clients without data are left out (a
round of only such clients keeps the global model); a round whose training loss or weights are not
finite ends the run (`fl.on_divergence=stop`) before its checkpoint, so the last checkpoint is the
last good round. An attack that forges from the benign updates (`attack=alie`) acts after the
gather, so such a round aggregates once every upload is in, as with several workers.

Every stage is handed the round's `RoundContext`. The loop describes each participant's local
training as a task, made only when the engine asks for it; the engine yields results one by one and
each client's upload is encoded, decoded and added to the round's running aggregates before the
next result is asked for, so a round holds one model-sized sum per part, not one upload per client.
With several workers (`fl.workers`, see `fedlight.workers`) each trains its share of the
participants; `fl.exchange` says what they exchange: every encoded upload (then every worker
aggregates them all in participant order: the numbers of one worker, bit for bit) or one partial
sum per worker (each reduces its share first: one model per worker crosses, and the sums agree
with one worker's to float rounding).
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

from fedlight.aggregation.base import RoundRefused
from fedlight.algorithms.base import Algorithm, ClientUpload, ServerState
from fedlight.attacks.base import Attack
from fedlight.checkpoint import save_checkpoint
from fedlight.client_states import (
    ClientStates,
    MemoryClientStates,
    Written,
    algorithm_part,
    with_algorithm_part,
)
from fedlight.config import RunSettings
from fedlight.context import Federation, RoundContext, RoundMetrics
from fedlight.data.base import TensorDataset
from fedlight.engines import Engine, LocalTask, first_optimizer, make_engine
from fedlight.engines.base import LocalCallback, LocalResult
from fedlight.evaluation import ACCURACY, LOSS, Evaluator
from fedlight.loggers.base import MetricsRow, RoundLogger
from fedlight.lr_schedules.base import LRSchedule
from fedlight.privacy.base import STATE_PREFIX as PRIVACY_STATE
from fedlight.privacy.base import Privacy, Trained
from fedlight.rng import Stream
from fedlight.selection.base import (
    REPORTED_NUMBER_BYTES,
    ClientPool,
    ModelQuality,
    Population,
    Selection,
)
from fedlight.selection.base import STATE_PREFIX as SELECTION_STATE
from fedlight.system.base import System
from fedlight.tensors import StateDict, detached_copy, nbytes, on_device
from fedlight.wire.base import DOWNLOAD, UPLOAD, Wire
from fedlight.workers import OneWorker, Share, Workers

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
class Received:
    """What a participant's client holds while it trains: the decoded download and its state."""

    download: StateDict
    state: StateDict  # every namespace of the client's state
    bytes_down: int
    task: LocalTask  # its local training, as the engine was given it


@dataclass
class Outcome:
    """What the worker that trained a participant tells every worker about it."""

    upload: ClientUpload  # as encoded for the wire (`fl.exchange=uploads`), else without tensors
    written: Written | None  # the new client state as its store wrote it; None: unchanged
    train_loss: float
    num_samples: int
    seconds: float  # local training time
    bytes_up: int
    bytes_down: int
    metrics: dict[str, float] = field(default_factory=dict)  # reported by client-side stages
    reports: dict[str, float] = field(default_factory=dict)  # sent to the selector
    private_reports: dict[str, float] = field(default_factory=dict)  # sent to the privacy stage
    rejected: bool = False  # its (streamed) upload was not finite: left out of the aggregates
    virtual_seconds: float = 0.0  # its time on the system's clock (download, training, upload)
    late: bool = False  # it missed the deadline: its update is lost, its state unchanged


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
    "server_weights",
    "server_extras",
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
        data: TensorDataset,
        client_indices: Sequence[Tensor],
        module: pl.LightningModule,
        algorithm: Algorithm,
        selection: Selection,
        lr_schedule: LRSchedule,
        client_states: ClientStates | None = None,
        workers: Workers | None = None,
        wire: Wire | None = None,
        attack: Attack | None = None,
        privacy: Privacy | None = None,
        client_test_indices: Sequence[Tensor] | None = None,
        system: System | None = None,
    ) -> None:
        """`client_states` defaults to a memory store on the client module's device, `workers`
        to this process alone, `wire` to sending everything as it is, `attack`, `privacy` and
        `system` to none; `client_test_indices` (into the training pool) are the clients' local
        test sets, None without them."""
        self.settings = settings
        self.data = data
        self.client_indices = client_indices
        self.client_test_indices = client_test_indices
        self.module = module
        self.algorithm = algorithm
        self.selection = selection
        self.lr_schedule = lr_schedule
        self.wire = Wire() if wire is None else wire
        self.attack = Attack() if attack is None else attack
        self.privacy = Privacy() if privacy is None else privacy
        self.system = System() if system is None else system
        self.speeds = (
            self.system.speeds(settings.fl.num_clients, settings.seed)
            if self.system.clocked
            else None
        )
        self.malicious = self.attack.malicious_clients(settings.fl.num_clients, settings.seed)
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
        )
        self.server = with_stage_state(
            algorithm.init_server(initial, self.federation),
            SELECTION_STATE,
            selection.init_state(self.federation),
        )
        privacy_state = self.privacy.init_state(
            settings, self.federation, [len(indices) for indices in client_indices]
        )
        self.server = with_stage_state(self.server, PRIVACY_STATE, privacy_state)
        self.workers = OneWorker(device) if workers is None else workers
        self.client_states = (
            MemoryClientStates(device)
            if client_states is None  # an empty store is falsy: it is a Mapping
            else client_states
        )
        self.history = History(participation=[0] * settings.fl.num_clients)
        self.saved_round = 0  # the rounds the last checkpoint holds
        self.engine = self.build_engine()
        self.personal_engine = self.side_engine(algorithm.personal_epochs, Stream.PERSONAL_TRAINING)
        tested = client_test_indices is not None
        self.finetune_engine = self.side_engine(
            settings.eval.finetune_epochs if tested else 0, Stream.FINE_TUNING
        )
        self.evaluator = Evaluator(module, settings.eval.batch_size, data.prepare)
        self.client_pool = ClientPool(client_indices, self.quality_on)

    def run_round(self, round_index: int) -> RoundStats:
        """Select clients, send the download, train this worker's share of the participants,
        aggregate each upload as it arrives, and update the server."""
        algorithm, wire, fl = self.algorithm, self.wire, self.settings.fl
        before = self.federation.round(round_index)
        pool = self.client_pool
        pool.reset()
        selection_state = stage_state(self.server.extras, SELECTION_STATE)
        privacy_state = stage_state(self.server.extras, PRIVACY_STATE)
        seen = Population(selection_state, pool, self.server.weights)
        clients = self.selection.select(before, fl.clients_per_round, seen)
        lrs = tuple(self.lr_schedule(before, base) for base in self.base_lrs)
        ctx = self.federation.round(round_index, tuple(clients), lrs)
        probe = self.probe_cost(pool)  # the selector's questions before anybody trained

        # A client without data takes no step and sends nothing: it is left out of the round.
        participants = algorithm.participants(ctx, self.client_indices)
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
        malicious = self.malicious
        if malicious:
            ctx.metrics.report("malicious", sum(1 for c, _ in participants if c in malicious))
        download = algorithm.download(ctx, self.server)
        share = self.workers.share([len(indices) for _, indices in participants])
        aggregation = self.privacy.start_aggregation(
            ctx, privacy_state, algorithm, [len(i) for _, i in participants]
        )
        server_extras = self.server.extras  # the upload chain's receiver state lives here
        # Whether this worker aggregates each of its uploads at once (alone, or exchanging sums)
        # rather than handing the encoded uploads to every worker (and to an attack that forges
        # from all of them).
        streaming = (self.workers.count == 1 or fl.exchange == "sums") and not (
            self.attack.after_gather and malicious
        )
        label_map = self.attack.label_map(self.data.num_classes, self.data.train_y.device)

        received: dict[int, Received] = {}
        client_metrics: dict[int, RoundMetrics] = {}

        def tasks() -> Iterator[LocalTask]:
            """Each participant of this worker's share as the engine asks for it: its state read
            once (it may come from disk), the download encoded, counted and decoded."""
            for client, indices in share.mine(participants):
                client_ctx = replace(ctx, metrics=client_metrics.setdefault(client, RoundMetrics()))
                state = self.client_states.get(client) or {}
                payload, _ = wire.send(DOWNLOAD, client_ctx, client, download, server_extras)
                decoded, state = wire.receive(DOWNLOAD, client_ctx, client, payload, state)
                own = algorithm_part(state)
                start = algorithm.start_weights(client_ctx, decoded, own)
                callbacks = algorithm.local_callbacks(client_ctx, decoded, own)
                labels = label_map if client in malicious else None
                task = LocalTask(client, indices, start, callbacks, labels)
                received[client] = Received(decoded, state, nbytes(payload), task)
                yield task

        mine: list[Outcome] = []
        for local, seconds in timed(self.engine.train(tasks(), round_index, list(lrs))):
            client = local.client_id
            client_ctx = replace(ctx, metrics=client_metrics[client])
            got = received.pop(client)
            own = algorithm_part(got.state)
            pool_seconds, asked = pool.seconds, len(pool.questions)
            reports = self.selection.client_report(client_ctx, client, local.weights, pool)
            upload, new_own = algorithm.upload(client_ctx, got.download, local, own)
            examples = local.examples + sum(q.examples for q in pool.questions[asked:])
            if self.personal_engine is not None:
                started = time.perf_counter()
                own_before = own if new_own is None else new_own
                new_own, personal_examples = self.train_personal(client_ctx, got, own_before)
                seconds += time.perf_counter() - started
                examples += personal_examples
            if client in malicious:
                keys = algorithm.model_update_keys(client_ctx, upload.tensors)
                upload = self.attack.corrupt_upload(client_ctx, upload, keys)
            upload, private_reports = self.privacy.clip_upload(
                client_ctx, privacy_state, algorithm, upload
            )
            payload, state = wire.send(UPLOAD, client_ctx, client, upload.tensors, got.state)
            encoded = replace(upload, tensors=payload)
            bytes_up = nbytes(payload) + REPORTED_NUMBER_BYTES * (
                len(reports) + len(private_reports)
            )
            virtual_seconds = (
                0.0
                if self.speeds is None
                else self.speeds.seconds(client, got.bytes_down, examples, bytes_up)
            )
            late = self.system.late(virtual_seconds)
            if new_own is not None and new_own is not own:
                state = with_algorithm_part(state, new_own)
            changed = state is not got.state and not late  # a straggler's work is lost
            written = self.client_states.write(client, round_index, state) if changed else None
            rejected = False
            if late:  # nothing of it reaches the server in time
                encoded = replace(encoded, tensors={})
                if streaming:
                    aggregation.drop_late(encoded)
            elif streaming:  # aggregated now, nothing of it kept
                decoded, server_extras = self.decode_upload(ctx, encoded, server_extras)
                rejected = not aggregation.add(ctx, decoded)
                encoded = replace(encoded, tensors={})
            mine.append(
                Outcome(
                    encoded,
                    written,
                    local.train_loss,
                    local.num_samples,
                    seconds + pool.seconds - pool_seconds,
                    bytes_up,
                    got.bytes_down,
                    client_metrics.pop(client).values,
                    {} if late else reports,
                    private_reports,
                    rejected,
                    virtual_seconds,
                    late,
                )
            )

        outcomes: list[Outcome] = self.workers.gather(share, mine)
        for (client, _), outcome in zip(participants, outcomes, strict=True):
            if outcome.written is not None:
                self.client_states.commit(client, round_index, outcome.written)
            for name, value in outcome.metrics.items():
                ctx.metrics.add(name, value)
        if not streaming:  # every worker aggregates every upload, in participant order

            def decoded_uploads() -> Iterator[ClientUpload]:
                nonlocal server_extras
                for outcome in outcomes:
                    if outcome.late:
                        aggregation.drop_late(outcome.upload)
                        continue
                    decoded, server_extras = self.decode_upload(ctx, outcome.upload, server_extras)
                    yield decoded

            def keys_of(upload: ClientUpload) -> list[str]:
                return algorithm.model_update_keys(ctx, upload.tensors)

            # lazily, one upload at a time, unless the attack forges from all of them
            for upload in self.attack.forge_uploads(ctx, decoded_uploads(), malicious, keys_of):
                aggregation.add(ctx, upload)
        elif self.workers.count > 1:  # one partial sum per worker, combined in rank order
            partials = self.workers.gather(one_per_worker(self.workers), [aggregation.partials()])
            uploads = [outcome.upload for outcome in outcomes]
            aggregation.combine(
                partials,
                uploads,
                [outcome.rejected for outcome in outcomes],
                [outcome.late for outcome in outcomes],
            )
        ctx.metrics.report("rejected", len(aggregation.rejected))
        if aggregation.rejected:
            self.tell_once(
                "rejected",
                f"round {round_index}: the update of client {aggregation.rejected[0]} has NaN or "
                "Inf entries; it is left out of the aggregate (rejected updates are counted in "
                "metrics.csv, column rejected)",
            )

        if aggregation.contributors:  # else no client held data: the global model is kept
            try:
                aggregates = aggregation.results()
            except RoundRefused as refusal:  # the aggregator's assumption fails: model kept
                ctx.metrics.report("aggregation_refused", 1)
                self.tell_once(
                    "refused",
                    f"round {round_index}: {refusal}; the global model is kept (refused rounds "
                    "are counted in metrics.csv, column aggregation_refused)",
                )
            else:
                updated = algorithm.server_update(
                    ctx, self.server, aggregates, aggregation.public_contributors
                )
                self.server = ServerState(
                    updated.weights,
                    updated.extras | stage_state(server_extras, "wire.", keep=True),
                )
        reports = {
            client: outcome.reports
            for (client, _), outcome in zip(participants, outcomes, strict=True)
            if outcome.reports
        }
        selection_state = self.selection.update(ctx, selection_state, reports)
        self.server = with_stage_state(self.server, SELECTION_STATE, selection_state)
        for client, _ in participants:
            self.history.participation[client] += 1
        # their loss says nothing of the global model
        rejected = set(aggregation.rejected) | set(aggregation.late)
        kept = [o for o in outcomes if o.upload.client_id not in rejected]
        trained = [
            Trained(
                o.upload.client_id,
                o.upload.num_steps,
                o.private_reports,
                o.upload.client_id not in rejected,
            )
            for o in outcomes
        ]
        round_seconds = 0.0
        if self.speeds is not None:
            finished = [o.virtual_seconds for o in outcomes if not o.late]
            stragglers = len(aggregation.late)
            # training starts once the probe's answers are in; a deadline counts from then
            round_seconds = probe.virtual_seconds + self.system.round_seconds(
                finished, stragglers, len(failed)
            )
            ctx.metrics.report("stragglers", stragglers)
            ctx.metrics.report("round_seconds", round_seconds)
        privacy_state = self.privacy.finish_round(ctx, privacy_state, trained)
        self.server = with_stage_state(self.server, PRIVACY_STATE, privacy_state)
        samples = sum(o.num_samples for o in kept)
        return RoundStats(
            train_loss=(
                sum(o.train_loss * o.num_samples for o in kept) / samples
                if samples
                else math.nan  # nobody trained, or every update was rejected
            ),
            num_samples=samples,
            every_update_rejected=bool(outcomes) and not kept and not aggregation.late,
            virtual_seconds=round_seconds,
            lr=lrs[0],
            bytes_up=sum(outcome.bytes_up for outcome in outcomes) + probe.bytes_up,
            bytes_down=sum(outcome.bytes_down for outcome in outcomes) + probe.bytes_down,
            client_seconds=sum(outcome.seconds for outcome in outcomes) + probe.seconds,
            metrics=ctx.metrics.values,
        )

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

    def decode_upload(
        self, ctx: RoundContext, upload: ClientUpload, server_extras: StateDict
    ) -> tuple[ClientUpload, StateDict]:
        """The server's side of one encoded upload: decoded by the wire, whose receiver state
        lives in the server extras."""
        tensors, server_extras = self.wire.receive(
            UPLOAD, ctx, upload.client_id, upload.tensors, server_extras
        )
        return replace(upload, tensors=tensors), server_extras

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

    def train_personal(
        self, ctx: RoundContext, got: Received, own: StateDict | None
    ) -> tuple[StateDict, int]:
        """A participant's second local training (Ditto's personal model), right after its
        upload was computed, on the personal engine: one client at a time, on the same examples
        (and labels) as its first; its new algorithm state and the examples it trained on."""
        assert self.personal_engine is not None
        start, callbacks = self.algorithm.personal_training(ctx, got.download, own)
        task = replace(got.task, start=start, callbacks=callbacks)
        (trained,) = self.personal_engine.train([task], ctx.round_index, list(ctx.lrs))
        return self.algorithm.keep_personal(ctx, trained, own), trained.examples

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
        return stage_state(self.server.extras, PRIVACY_STATE)

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
            "server_weights": self.server.weights,
            "server_extras": self.server.extras,
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
        device = next(self.module.parameters()).device
        # A privacy state key added since the checkpoint was written keeps its initial value.
        fresh = stage_state(self.server.extras, PRIVACY_STATE, keep=True)
        self.server = ServerState(
            on_device(state["server_weights"], device),
            fresh | on_device(state["server_extras"], device),
        )
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


def stage_state(extras: StateDict, prefix: str, keep: bool = False) -> StateDict:
    """The entries of the server's extras under a stage's `prefix`: with the prefix (`keep`), or
    without it (the stage's own view)."""
    return {
        key if keep else key[len(prefix) :]: t
        for key, t in extras.items()
        if key.startswith(prefix)
    }


def with_stage_state(server: ServerState, prefix: str, state: StateDict) -> ServerState:
    """`server` with a stage's state stored under its `prefix` in the extras."""
    return ServerState(server.weights, server.extras | {prefix + k: t for k, t in state.items()})


def one_per_worker(workers: Workers) -> Share:
    """A share in which each worker contributes one item, gathered in rank order."""
    return Share(workers.rank, tuple((rank,) for rank in range(workers.count)))


class AlgorithmStates(Mapping[int, StateDict]):
    """The algorithm's part of each client's state (entries outside any stage's namespace), as
    the algorithm's `evaluated_models` reads it; clients holding none of it are absent."""

    def __init__(self, states: ClientStates) -> None:
        self.states = states

    def __getitem__(self, client: int) -> StateDict:
        own = algorithm_part(self.states[client])
        if own is None:
            raise KeyError(client)
        return own

    def __iter__(self) -> Iterator[int]:
        return (client for client in self.states if client in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, client: object) -> bool:
        return client in self.states and algorithm_part(self.states[client]) is not None


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
