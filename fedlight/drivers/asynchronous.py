"""The asynchronous driver: FedAsync and FedBuff on the system's virtual clock, a sibling of the
synchronous driver over the same pipelines (`fedlight.round`: download, engine, the
algorithm's upload and every upload stage at each dispatch; the stages' server sides at each
arrival and their `finish_round` after each update) and the same run machinery (`Driver`:
evaluation, metrics, checkpoints). A "round" here is one server update, and its index the server
version it produces (`server_version` in metrics.csv). So client-side attacks (label flipping,
sign flipping, Gaussian and scaled updates), compression with per-client error feedback and
example-level DP-SGD (accounted per client's steps, at arrival, when its update is released) run
here as in synchronous rounds; what needs a synchronous round is refused in one line by the stage
(`UploadStage.asynchronous_refusal`: a forging attack, DP-FedAvg's accountant, a selector).
`system.dropout` makes a client drawn for a free slot unavailable with that probability (drawn
per seed, dispatch and client): the slot takes another idle client, and `dropped_out` counts them
per update; a deadline has no round to end and is refused.

Events. Up to `algo.concurrency` clients train at once. A free slot takes an idle client with
data, drawn uniformly from (seed, SELECTION, k) for the run's k-th dispatch; the client receives
the current global model through the wire, trains on the engine (batches from (seed,
LOCAL_TRAINING, j, client) for its j-th dispatch), computes its upload, sends it through the wire,
and arrives after its virtual time (`system`: bytes down, examples trained on, bytes up at its
speeds). Arrivals are taken in order of time, ties by client id; each is decoded by the wire as
it arrives. A server update takes `arrivals_per_update` arrivals (FedAsync 1, FedBuff K) and
hands them to the algorithm with their staleness τ = the server's version − the version the
client started from. Free slots are refilled after an arrival whenever the next arrival lies
strictly later (so simultaneous arrivals are all taken before anybody is sent a model), and only
after the server update once the buffer is full: a client always starts from the newest model.

Training happens at dispatch (its result depends only on the model the client received): an
in-flight client is its start version, arrival time and encoded upload, all in the checkpoint, so
a killed run resumes bit-exactly with clients in flight. An upload with NaN/Inf entries is
rejected on arrival (counted in `rejected`), as in a synchronous round.
"""

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fedlight.aggregation.base import all_finite
from fedlight.algorithms.asynchronous import Arrival, AsynchronousFedAvg
from fedlight.core.context import RoundContext
from fedlight.core.messages import ClientUpload
from fedlight.core.rng import Stream, numpy_generator
from fedlight.core.tensors import StateDict, on_device
from fedlight.drivers.base import Driver
from fedlight.drivers.history import RoundStats
from fedlight.engines.module_logs import round_means
from fedlight.loggers.base import MetricsRow
from fedlight.loggers.clients import logged_means
from fedlight.round.server import Arrived, ServerRound


@dataclass
class InFlight:
    """A client that has trained and whose upload has not reached the server yet."""

    arrival: float  # virtual time its upload reaches the server
    client: int
    start_version: int
    start: StateDict  # the global model it received (the server's copy)
    payload: StateDict  # its upload as encoded for the wire
    num_samples: int
    num_steps: int
    train_loss: float
    bytes_up: int
    # the numbers its upload stages reported, by stage (a privacy mechanism's, a selector's)
    reports: dict[str, dict[str, float]] = field(default_factory=dict)
    # what its module logged in training: name → [weighted sum, weight] (fedlight.engines.lightning)
    logged: dict[str, list[float]] = field(default_factory=dict)

    def client_row(self, rejected: bool) -> MetricsRow:
        """Its per-client row for the loggers (`fedlight.loggers.clients`), on arrival."""
        return {
            "client": self.client,
            "train_loss": self.train_loss,
            "num_samples": self.num_samples,
            "bytes_up": self.bytes_up,
            "rejected": int(rejected),
            **logged_means(self.logged),
        }

    def order(self) -> tuple[float, int]:
        return self.arrival, self.client

    def __lt__(self, other: "InFlight") -> bool:  # the event queue's order
        return self.order() < other.order()

    def as_state(self) -> dict[str, Any]:
        return dict(vars(self))


class AsynchronousLoop(Driver):
    """The asynchronous driver: each "round" is one server update (module docstring)."""

    algorithm: AsynchronousFedAvg

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight: list[InFlight] = []
        self.dispatches = [0] * self.federation.num_clients  # per client, for its batches
        self.dispatched = 0  # in the run, for the draw of who is sent a model
        # per client, the server version its previous update arrived at (-1: none yet)
        self.arrived_at = [-1] * self.federation.num_clients
        self.staleness_counts: list[int] = []  # arrivals of the run so far with each τ
        self.dropped_out = 0  # clients drawn for a slot that were unavailable, this update
        self.now = 0.0

    def run_round(self, round_index: int) -> RoundStats:
        """Arrivals until the algorithm updates the model once (version `round_index`)."""
        algorithm, version = self.algorithm, round_index - 1
        ctx = self.federation.round(round_index, (), self.round_lrs(round_index))
        started_at = self.now
        stats = RoundStats(math.nan, 0, ctx.lrs[0], 0, 0, 0.0)
        if not self.in_flight:  # the first update of the run
            self.refill(version, stats)
        arrivals: list[Arrival] = []
        losses: list[tuple[float, int]] = []
        logged: list[dict[str, list[float]]] = []
        rejected = 0
        server = ServerRound.start(ctx, algorithm, self.stages, self.stage_states, [])
        arrived: list[Arrived] = []
        while len(arrivals) + rejected < algorithm.arrivals_per_update and self.in_flight:
            flying = heapq.heappop(self.in_flight)
            self.now = flying.arrival
            encoded = ClientUpload(
                flying.client, flying.num_samples, flying.num_steps, flying.payload, flying.reports
            )
            decoded = server.decode(encoded)
            stats.bytes_up += flying.bytes_up
            finite = all_finite({"upload": decoded.tensors})
            arrived.append(Arrived(replace(encoded, tensors={}), rejected=not finite))
            stats.clients.append(flying.client_row(rejected=not finite))
            if finite:
                staleness = self.staleness_of(flying, version)
                stats.clients[-1]["staleness"] = staleness
                arrivals.append(Arrival(decoded, flying.start, staleness))
                losses.append((flying.train_loss, flying.num_samples))
                logged.append(flying.logged)
            else:
                rejected += 1
            filled = len(arrivals) + rejected == algorithm.arrivals_per_update
            if not filled and self.next_is_later():
                self.refill(version, stats)
        if arrivals:
            self.server = algorithm.apply_arrivals(ctx, self.server, arrivals)
        self.stage_states = server.finish(arrived)
        if self.next_is_later():
            self.refill(round_index, stats)
        samples = sum(n for _, n in losses)
        stats.train_loss = sum(loss * n for loss, n in losses) / samples if samples else math.nan
        stats.num_samples = samples
        stats.every_update_rejected = rejected > 0 and not arrivals
        stats.virtual_seconds = self.now - started_at
        stats.logged = round_means(logged)
        self.report_update(ctx, arrived, [arrival.staleness for arrival in arrivals])
        stats.metrics = ctx.metrics.values
        return stats

    def report_update(
        self, ctx: RoundContext, arrived: Sequence[Arrived], staleness: Sequence[int]
    ) -> None:
        """An update's arrivals, rejections, malicious arrivals and staleness (of the update and
        of the run so far) to the metrics."""
        ctx.metrics.report("participants", len(arrived))
        ctx.metrics.report("rejected", sum(1 for a in arrived if a.rejected))
        ctx.metrics.report("server_version", ctx.round_index)
        if self.system.dropout:
            ctx.metrics.report("dropped_out", self.dropped_out)
            self.dropped_out = 0
        malicious = self.federation.malicious
        if malicious:
            ctx.metrics.report(
                "malicious", sum(1 for a in arrived if a.upload.client_id in malicious)
            )
        if staleness:
            ctx.metrics.report("staleness_mean", sum(staleness) / len(staleness))
            ctx.metrics.report("staleness_max", max(staleness))
        for tau in staleness:
            self.staleness_counts += [0] * (tau + 1 - len(self.staleness_counts))
            self.staleness_counts[tau] += 1
        for name, value in staleness_distribution(self.staleness_counts).items():
            ctx.metrics.report(name, value)

    def staleness_of(self, flying: InFlight, version: int) -> int:
        """τ of an arrival at server `version`: the versions since the model it trained from, or
        (`algo.staleness_from=last_arrival`, the tutorial's) since its previous arrival."""
        previous, self.arrived_at[flying.client] = self.arrived_at[flying.client], version
        if self.algorithm.staleness_from == "last_arrival":
            return 0 if previous < 0 else version - previous
        return version - flying.start_version

    def next_is_later(self) -> bool:
        """Whether no arrival is due at the current time (so free slots may be refilled)."""
        return not self.in_flight or self.in_flight[0].arrival > self.now

    def refill(self, version: int, stats: RoundStats) -> None:
        """Idle clients with data sent the model of `version` until `concurrency` are in flight."""
        busy = {flying.client for flying in self.in_flight}
        idle = [
            c
            for c in range(self.federation.num_clients)
            if c not in busy and len(self.client_indices[c])
        ]
        free = self.algorithm.concurrency - len(self.in_flight)
        while free > 0 and idle:
            generator = numpy_generator(self.settings.seed, Stream.SELECTION, self.dispatched)
            client = idle.pop(int(generator.integers(len(idle))))
            self.dispatched += 1
            if self.drops_out(client):  # unavailable: the slot takes another idle client
                self.dropped_out += 1
                continue
            heapq.heappush(self.in_flight, self.dispatch(client, version, stats))
            free -= 1

    def drops_out(self, client: int) -> bool:
        """Whether the client drawn for the run's latest dispatch is unavailable
        (`system.dropout`, drawn per (seed, SYSTEM, dispatch, client))."""
        dropout = self.system.dropout
        if not dropout:
            return False
        draw = numpy_generator(self.settings.seed, Stream.SYSTEM, self.dispatched, client)
        return bool(draw.random() < dropout)

    def dispatch(self, client: int, version: int, stats: RoundStats) -> InFlight:
        """One client's download, local training and upload, starting now from `version`."""
        self.dispatches[client] += 1
        ctx = self.federation.round(version + 1, (client,), self.round_lrs(version + 1))
        download = self.algorithm.download(ctx, self.server)
        wire_state = self.stage_states.get(self.client.wire.name, {})
        stored = self.client_states.get(client)
        indices = self.client_indices[client]
        got = self.client.receive(ctx, client, indices, download, wire_state, stored)
        began = time.perf_counter()
        (local,) = self.engine.train([got.task], self.dispatches[client], list(ctx.lrs))
        sent = self.client.upload(ctx, got, local, self.stage_states, self.client_pool)
        stats.client_seconds += time.perf_counter() - began
        self.progress.client_trained()  # an update's clients are not known before it: no K
        if sent.state is not None:
            self.client_states.put(client, version + 1, sent.state.stored())
        stats.bytes_down += got.bytes_down
        assert self.speeds is not None  # asynchronous algorithms need a system model
        duration = self.speeds.seconds(client, got.bytes_down, sent.examples, sent.bytes_up)
        return InFlight(
            self.now + duration,
            client,
            version,
            self.server.weights,
            sent.upload.tensors,
            sent.upload.num_samples,
            sent.upload.num_steps,
            local.train_loss,
            sent.bytes_up,
            sent.upload.reports,
            {name: list(sums) for name, sums in local.logged.items()},
        )

    def state_dict(self) -> dict[str, Any]:
        """The synchronous loop's state, the clients in flight and the dispatch counters."""
        return super().state_dict() | {
            "in_flight": [
                flying.as_state() for flying in sorted(self.in_flight, key=InFlight.order)
            ],
            "dispatches": list(self.dispatches),
            "dispatched": self.dispatched,
            "arrived_at": list(self.arrived_at),
            "staleness_counts": list(self.staleness_counts),
            "now": self.now,
        }

    def load_state_dict(self, state: dict[str, Any], run_dir: Path) -> None:
        super().load_state_dict(state, run_dir)
        device = self.federation.device
        self.in_flight = [
            replace(
                InFlight(**flying),
                start=on_device(flying["start"], device),
                payload=on_device(flying["payload"], device),
            )
            for flying in state["in_flight"]
        ]
        heapq.heapify(self.in_flight)
        self.dispatches = list(state["dispatches"])
        self.dispatched = state["dispatched"]
        self.arrived_at = list(state["arrived_at"])
        self.staleness_counts = list(state["staleness_counts"])
        self.now = state["now"]


def staleness_distribution(counts: list[int]) -> dict[str, float]:
    """Mean, 90th percentile (the smallest τ with at least 90% of arrivals at or below it) and
    maximum of the staleness of every arrival so far, from its counts per τ."""
    total = sum(counts)
    if not total:
        return {}
    cumulative, p90 = 0, 0
    for tau, count in enumerate(counts):
        cumulative += count
        if cumulative >= 0.9 * total:
            p90 = tau
            break
    return {
        "staleness_run_mean": sum(tau * c for tau, c in enumerate(counts)) / total,
        "staleness_run_p90": p90,
        "staleness_run_max": max(tau for tau, c in enumerate(counts) if c),
    }
