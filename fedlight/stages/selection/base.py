"""The interface of a client-selection strategy, and what a strategy may learn of the clients.

A selector picks each round's clients from generators of (seed, round) and from its own state,
which lives in the server's extras under `selection/` (checkpointed with them, the same on every
worker). It may ask each participant to report numbers with its upload (`client_report`) and
update its state from them once the round's uploads are gathered (`update`), and it may ask
clients how the current global model does on their data before choosing (`ClientPool.evaluate`).
Every such question is paid for like training: the pool counts the clients' compute and bytes,
and each question's work for the system model's virtual clock.
"""

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedlight.core.context import Federation, RoundContext
from fedlight.core.messages import ClientUpload, Delivered
from fedlight.core.rng import Stream
from fedlight.core.tensors import StateDict
from fedlight.stages.base import ClientStep, StageSetup, UploadStage
from fedlight.stages.pool import ClientPool


@dataclass(frozen=True)
class Population:
    """The clients as the server sees them when it selects: the selector's own state, the pool
    it may question, and the global model it would send."""

    state: StateDict
    pool: ClientPool
    global_weights: StateDict


def draw_by_size(ctx: RoundContext, sizes: Sequence[int], count: int) -> list[int]:
    """`count` clients without replacement, each draw ∝ the remaining clients' data sizes (numpy's
    `choice(N, count, replace=False, p=n_k/n)`, as FedProx's code draws); at most as many as hold
    data, from (seed, SELECTION, round)."""
    weights = np.asarray(sizes, dtype=np.float64)
    count = min(count, int(np.count_nonzero(weights)))
    rng = ctx.generator(Stream.SELECTION)
    drawn = rng.choice(len(weights), size=count, replace=False, p=weights / weights.sum())
    return [int(c) for c in drawn]


class Selection(UploadStage, ABC):
    """The `selection` config group: which clients take part in a round; as an upload stage, the
    numbers a participant reports (`client_report`) and the selector's state after the round
    (`update`)."""

    name = "selection"

    # What the selector measures on the clients' training data to choose them (losses,
    # accuracies), in words; None: nothing (sizes at most). Example-level DP-SGD refuses it.
    measures_training_data: ClassVar[str | None] = None
    # Whether each client takes part independently with probability K/N (what DP-FedAvg's
    # accountant composes); declared here so that privacy need not know selectors' names.
    poisson_sampling: ClassVar[bool] = False
    # True where each client is drawn with probability ∝ its data size (FedProx's sampling)
    draws_by_size: ClassVar[bool] = False

    def check(self, num_clients: int, clients_per_round: int) -> None:
        """Refuse (ConfigError, one line) settings this selector cannot work with; every
        selector here works with any N and K unless it says otherwise."""
        return None

    def init_state(self, federation: Federation) -> StateDict:
        """The selector's state before round 1 (tensors)."""
        return {}

    def initial_state(self, setup: StageSetup) -> StateDict:
        return self.init_state(setup.federation)

    def asynchronous_refusal(self) -> str | None:
        return "its clients are drawn uniformly as slots free up; leave selection at its default"

    @abstractmethod
    def select(self, ctx: RoundContext, clients_per_round: int, seen: Population) -> list[int]:
        """The round's clients, sorted (the aggregation order, so rounding is reproducible);
        randomness from `ctx.generator(Stream.SELECTION)`."""

    def client_report(
        self, ctx: RoundContext, client: int, trained: StateDict, pool: ClientPool
    ) -> dict[str, float]:
        """Numbers a participant sends with its upload, from its trained model (none here)."""
        return {}

    def update(
        self, ctx: RoundContext, state: StateDict, reports: Mapping[int, Mapping[str, float]]
    ) -> StateDict:
        """The state after a round whose participants reported `reports` (client → numbers)."""
        return state

    def client_side(
        self, step: ClientStep, upload: ClientUpload, state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        reports = self.client_report(step.ctx, step.client, step.local.weights, step.pool)
        return upload.reporting(self.name, reports), state

    def finish_round(
        self, ctx: RoundContext, state: StateDict, delivered: Sequence[Delivered]
    ) -> StateDict:
        """`update` from the reports that arrived (a late participant's did not)."""
        reports = {d.client: d.reports for d in delivered if d.reports and not d.late}
        return self.update(ctx, state, reports)
