"""The synchronous driver: a round selects its clients, dispatches their local training to the
engine and the workers, gathers what they sent, and hands it to the server pipeline; the
pipelines (`fedlight.round`) do everything in between, the same for the asynchronous driver.

select (the selector; the system's failures, clients without data and the stragglers
`local_work` drops are left out) → dispatch: each
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
several workers (`fl.workers`, see `fedlight.drivers.workers`) each trains its share of the
participants; `fl.exchange` says what they exchange: every encoded upload (then every worker
aggregates them all in participant order: the numbers of one worker, bit for bit) or one partial sum
per worker (each reduces its share first: one model per worker crosses, and the sums agree with one
worker's to float rounding).
"""

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from torch import Tensor

from fedlight.core.context import RoundContext, RoundMetrics
from fedlight.core.messages import LocalResult
from fedlight.core.tensors import StateDict
from fedlight.drivers.base import Driver
from fedlight.drivers.history import RoundStats
from fedlight.engines.base import LocalTask
from fedlight.engines.module_logs import round_means
from fedlight.loggers.base import MetricsRow
from fedlight.loggers.clients import logged_means, update_norm
from fedlight.round.client import Received
from fedlight.round.server import Arrived, ServerRound
from fedlight.stages.pool import ClientPool
from fedlight.stages.selection.base import Population
from fedlight.store.client_states import Written

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

    arrived: Arrived  # its upload as encoded (`fl.exchange=uploads`), else without tensors
    written: Written | None  # the new client state as its store wrote it; None: unchanged
    train_loss: float
    num_samples: int
    seconds: float  # local training time
    bytes_up: int
    bytes_down: int
    metrics: dict[str, float] = field(default_factory=dict)  # reported by client-side stages
    virtual_seconds: float = 0.0  # its time on the system's clock (download, training, upload)
    # what its module logged in training_step: name → (weighted sum, weight), see
    # fedlight.engines.lightning
    logged: dict[str, tuple[float, float]] = field(default_factory=dict)
    # of its trained weights less those it started from; nan (not computed) where no logger
    # shows it or the uploads are masked (`client_update_norm`)
    update_norm: float = math.nan
    local_epochs: int = 0  # the epochs it trained (`local_work`)
    local_steps: int = 0  # the optimizer steps they took

    def client_row(self, rejected: set[int]) -> MetricsRow:
        """Its per-client row for the loggers (`fedlight.loggers.clients`)."""
        client = self.arrived.upload.client_id
        return {
            "client": client,
            "train_loss": self.train_loss,
            "num_samples": self.num_samples,
            "client_seconds": self.seconds,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "update_norm": self.update_norm,
            "local_epochs": self.local_epochs,
            "local_steps": self.local_steps,
            "late": int(self.arrived.late),
            "rejected": int(client in rejected),
            **self.metrics,
            **logged_means(self.logged),
        }


@dataclass(frozen=True)
class Probe:
    """What the selector's questions before a round's training cost the clients."""

    seconds: float  # measured compute, summed over the clients asked
    bytes_up: int
    bytes_down: int
    virtual_seconds: float  # on the system's clock: until the last answer is in (0 without)


class FederatedLoop(Driver):
    """The synchronous driver: rounds of selected clients (module docstring)."""

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
        my_participants = share.mine(participants)
        self.progress.clients_chosen(len(my_participants), len(participants))
        mine = self.train_share(ctx, my_participants, download, server, streaming)
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
            partials = self.workers.each(server.aggregation.partials())
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
        hidden = self.hides_uploads()
        rejected = set(server.aggregation.rejected)
        revealed = refusal is None or not hidden
        stats = round_stats(ctx, outcomes, probe, round_seconds, rejected, revealed)
        if not hidden:  # the loggers' per-client rows; none of a round whose uploads are masked
            stats.clients = [o.client_row(rejected) for o in outcomes]
        return stats

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
        ctx = self.federation.round(round_index, tuple(clients), self.round_lrs(round_index))
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
        dropped = self.local_work.dropped(ctx)  # stragglers a round leaves out (`local_work`)
        if dropped:
            participants = [(c, indices) for c, indices in participants if c not in dropped]
        self.local_work.report(ctx, [c for c, _ in participants], self.settings.local.epochs)
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
            self.progress.client_trained()
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
            local.logged,
            self.client_update_norm(local.weights, got.task.start),
            got.task.epochs_of(self.settings.local.epochs),
            local.num_steps,
        )

    def client_update_norm(self, weights: StateDict, start: StateDict) -> float:
        """A participant's update norm for its per-client row; nan (not computed) where no logger
        shows the rows or a stage hides the uploads."""
        if not self.shows_clients or self.hides_uploads():
            return math.nan
        return update_norm(weights, start)

    def hides_uploads(self) -> bool:
        """Whether a stage shows the server only the round's sum (secure aggregation, Bonawitz et
        al. 2017): then no client's update norm is computed and no per-client row reaches the
        loggers, since the protocol reveals nothing of one client's update."""
        return any(stage.hides_uploads() for stage in self.stages)

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
        if outcomes and stragglers == len(outcomes):
            self.tell_once(
                "all late",
                f"round {ctx.round_index}: none of its {stragglers} participants finished within "
                f"system.deadline={self.system.deadline:g} virtual seconds, so nothing was "
                "aggregated and the model is kept (stragglers are counted in metrics.csv, column "
                "stragglers); raise system.deadline",
            )
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


def round_stats(
    ctx: RoundContext,
    outcomes: Sequence[Outcome],
    probe: Probe,
    round_seconds: float,
    rejected: set[int],
    revealed: bool,
) -> RoundStats:
    """The round's totals; the loss, and what the module logged in training, of the
    participants whose updates were accepted (a rejected or late upload's loss says nothing of
    the global model), unless the round did not reveal them (`revealed`: a round that secure
    aggregation could not unmask tells the server nothing of its participants, Bonawitz et al.
    2017; its survivors' numbers would be one client's when one delivered)."""
    late = [o for o in outcomes if o.arrived.late]
    kept = [
        o for o in outcomes if not o.arrived.late and o.arrived.upload.client_id not in rejected
    ]
    reported = kept if revealed else []
    samples = sum(o.num_samples for o in reported)
    return RoundStats(
        train_loss=(
            sum(o.train_loss * o.num_samples for o in reported) / samples
            if samples
            else math.nan  # nobody trained, every update was rejected, or none was revealed
        ),
        num_samples=samples,
        every_update_rejected=bool(outcomes) and not kept and not late,
        virtual_seconds=round_seconds,
        lr=ctx.lrs[0],
        bytes_up=sum(o.bytes_up for o in outcomes) + probe.bytes_up,
        bytes_down=sum(o.bytes_down for o in outcomes) + probe.bytes_down,
        client_seconds=sum(o.seconds for o in outcomes) + probe.seconds,
        metrics=ctx.metrics.values,
        logged=round_means([o.logged for o in reported]),
    )
