"""The server pipeline of one round, shared by the drivers: each arrived upload decoded by the
stages in reverse order → (once all are in, for a stage that needs them: an attack's forgery) →
added to the aggregation as already-split parts (the algorithm's `split`; a stage such as
DP-FedAvg may replace the aggregation) → the algorithm's server update through its server
optimizer → the stages' `finish_round` in reverse order (noise accounting, a selector's scores).

An upload with a NaN or Inf entry is rejected (counted, left out), and so is one its client
withheld for that reason (`ClientUpload.withheld`: secure aggregation sends no update unmasked); a
robust aggregator that cannot act on the round's updates refuses the round, and the global model
is kept.
"""

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from fedlight.aggregation.base import RoundAggregation, RoundRefused
from fedlight.algorithms.base import Algorithm
from fedlight.core.context import RoundContext
from fedlight.core.messages import ClientUpload, Contributor, Delivered, ServerState, StageStates
from fedlight.core.tensors import StateDict
from fedlight.stages.base import UploadStage, round_aggregation


@dataclass
class Arrived:
    """What the server knows of one participant once the round is gathered."""

    upload: ClientUpload  # encoded, with the stages' reports (tensors dropped once aggregated)
    rejected: bool = False  # not finite: left out of the aggregates
    late: bool = False  # missed the deadline: nothing of it arrived


@dataclass
class ServerRound:
    """One round's server side over `stages` (chain order), from the stages' states as the round
    began; `states` is updated as uploads are decoded and the round finishes."""

    ctx: RoundContext
    algorithm: Algorithm
    stages: Sequence[UploadStage]
    states: StageStates
    aggregation: RoundAggregation = field(init=False)

    @classmethod
    def start(
        cls,
        ctx: RoundContext,
        algorithm: Algorithm,
        stages: Sequence[UploadStage],
        states: StageStates,
        sample_counts: Sequence[int],
    ) -> "ServerRound":
        """The round's server side for participants with `sample_counts` (participant order):
        the first stage's aggregation that replaces the algorithm's, else the algorithm's, as
        each stage adapts it in chain order."""
        round_ = cls(ctx, algorithm, stages, dict(states))
        round_.aggregation = round_aggregation(ctx, algorithm, stages, states, sample_counts)
        return round_

    def holds_uploads(self) -> bool:
        """Whether a stage needs every upload of the round at once (no streaming)."""
        return any(stage.holds_uploads(self.ctx.federation) for stage in self.stages)

    def hides_uploads(self) -> bool:
        """Whether a stage shows the server only the round's sum (secure aggregation)."""
        return any(stage.hides_uploads() for stage in self.stages)

    def decode(self, upload: ClientUpload) -> ClientUpload:
        """One encoded upload through the stages' server sides, in reverse order."""
        for stage in reversed(self.stages):
            state = self.states.get(stage.name, {})
            upload, state = stage.server_side(self.ctx, upload, state)
            self.states[stage.name] = state
        return upload

    def add(self, encoded: ClientUpload) -> bool:
        """One arrived upload decoded and aggregated at once; False: rejected (not finite, or
        withheld by its client as such)."""
        if encoded.withheld:
            self.aggregation.reject(encoded.contributor)
            return False
        decoded = self.decode(encoded)
        return self.aggregation.add(self.algorithm.contribution(self.ctx, decoded))

    def drop_late(self, contributor: Contributor) -> None:
        self.aggregation.drop_late(contributor)

    def add_all(self, arrived: Sequence[Arrived]) -> None:
        """Every upload of the round, in participant order: decoded lazily, one at a time,
        unless a stage's `gathered` holds them all."""
        uploads: Iterable[ClientUpload] = self.decoded(arrived)
        for stage in reversed(self.stages):
            uploads = stage.gathered(self.ctx, uploads, self.algorithm)
        for upload in uploads:
            self.aggregation.add(self.algorithm.contribution(self.ctx, upload))

    def decoded(self, arrived: Sequence[Arrived]) -> Iterator[ClientUpload]:
        for item in arrived:
            if item.late:
                self.drop_late(item.upload.contributor)
                continue
            if item.upload.withheld:
                self.aggregation.reject(item.upload.contributor)
                continue
            yield self.decode(item.upload)

    def combine(
        self, partials: Sequence[dict[str, StateDict | None]], arrived: Sequence[Arrived]
    ) -> None:
        """Every worker's partial sums (rank order), the round's arrivals in participant order."""
        self.aggregation.combine(
            partials,
            [item.upload.contributor for item in arrived],
            [item.rejected for item in arrived],
            [item.late for item in arrived],
        )

    def server_update(self, server: ServerState) -> tuple[ServerState, str | None]:
        """The next server state from the aggregates, and why the round was refused (None: it was
        not); without contributors (no client held data, or all were left out) the global model
        is kept, unless the aggregation has public ones (DP-FedAvg noises every round)."""
        aggregation = self.aggregation
        if not aggregation.public_contributors:
            return server, None
        try:
            aggregates = aggregation.results()
        except RoundRefused as refusal:  # the aggregator's assumption fails: model kept
            self.ctx.metrics.report("aggregation_refused", 1)
            return server, str(refusal)
        updated = self.algorithm.server_update(
            self.ctx, server, aggregates, aggregation.public_contributors
        )
        return updated, None

    def finish(self, arrived: Sequence[Arrived]) -> StageStates:
        """Each stage's state after the round, in reverse order, from what the participants
        (`arrived`, participant order) delivered to it."""
        left_out = set(self.aggregation.rejected) | set(self.aggregation.late)
        left_out |= {item.upload.client_id for item in arrived if item.rejected or item.late}
        for stage in reversed(self.stages):
            delivered = [
                Delivered(
                    item.upload.client_id,
                    item.upload.num_steps,
                    {} if item.late else item.upload.reports.get(stage.name, {}),
                    item.upload.client_id not in left_out,
                    item.late,
                )
                for item in arrived
            ]
            state = self.states.get(stage.name, {})
            self.states[stage.name] = stage.finish_round(self.ctx, state, delivered)
        return self.states
