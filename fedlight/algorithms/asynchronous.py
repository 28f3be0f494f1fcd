"""What asynchronous algorithms share: they run on the asynchronous driver
(`fedlight.drivers.asynchronous`), which keeps `concurrency` clients training at once, each from
the model version it downloaded, and hands the server the arrivals of one server update at a time.

An arrival's staleness τ is the server's version when it arrives minus the version its client
started from; `algo.staleness` (with `staleness_a`, `staleness_b`, `staleness_base`) is the
function s(τ) that discounts it (`fedlight.algorithms.staleness`). `algo.staleness_from=
last_arrival` measures τ as the FedAvg tutorial's code does instead, to show what that costs:
the versions since the client's previous update arrived (0 at its first), which says nothing of
how old the model it trained from is.
"""

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from fedlight.algorithms.fedavg import FedAvg
from fedlight.algorithms.staleness import Staleness
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload, ServerState
from fedlight.core.tensors import StateDict


@dataclass
class Arrival:
    """One client's decoded update as it reaches the server."""

    upload: ClientUpload
    start: StateDict  # the global model the client trained from
    staleness: int


@dataclass
class AsynchronousFedAvg(FedAvg):
    concurrency: int = 10  # clients training at once
    staleness: str = "polynomial"
    staleness_a: float = 0.5
    staleness_b: int = 4
    staleness_base: float = 0.9
    staleness_from: str = "start"  # start (the model it trained from) | last_arrival (tutorial)
    weight_of: Staleness = field(init=False, repr=False)

    asynchronous: ClassVar[bool] = True
    # arrivals the server waits for before it updates the model (FedBuff's K; FedAsync: 1)
    arrivals_per_update: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.concurrency >= 1, f"algo.concurrency={self.concurrency} must be >= 1")
        require(
            self.staleness_from in ("start", "last_arrival"),
            f"algo.staleness_from={self.staleness_from} is not a staleness measure; use start "
            "(versions since the model the client trained from) or last_arrival (the FedAvg "
            "tutorial's: versions since its previous update arrived)",
        )
        self.weight_of = Staleness(
            self.staleness, self.staleness_a, self.staleness_b, self.staleness_base
        )

    @abstractmethod
    def apply_arrivals(
        self, ctx: RoundContext, server: ServerState, arrivals: Sequence[Arrival]
    ) -> ServerState:
        """The next server state from one update's `arrivals_per_update` arrivals."""
