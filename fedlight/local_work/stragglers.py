"""`local_work=stragglers`: FedProx's systems heterogeneity (Li et al., MLSys 2020, Section 5.2).

In each round a `fraction` of the selected clients, round(fraction · K) of them drawn without
replacement from the generator of (seed, STRAGGLERS, round), are stragglers: each trains a number
of epochs drawn uniformly from 1 … E − 1 (numpy's `randint(1, E)` in the authors' code,
flearn/trainers/fedprox.py), from (seed, LOCAL_WORK, round, client); the others train E
(`local.epochs`). With `drop: true` the round leaves its stragglers out, as the paper's FedAvg
baseline does ("simply drop the slow devices", flearn/trainers/fedavg.py); with `drop: false`
their partial updates are aggregated, as FedProx does. The stragglers are the same for every
algorithm at one seed, so cells that differ in the algorithm or `drop` compare the same rounds.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.rng import Stream
from fedlight.local_work.base import LocalWork


@dataclass
class Stragglers(LocalWork):
    full_epochs: int  # E: what the others train (the YAML's ${local.epochs})
    fraction: float = 0.5
    drop: bool = False

    def __post_init__(self) -> None:
        require(
            0 <= self.fraction <= 1,
            f"local_work.fraction={self.fraction} must lie in [0, 1] (the share of a round's "
            "clients that straggle)",
        )
        require(
            self.full_epochs >= 2 or self.fraction == 0,
            f"local_work=stragglers draws a straggler's epochs from 1 … local.epochs − 1 and "
            f"local.epochs={self.full_epochs} leaves none; use local.epochs >= 2",
        )

    def slow(self, ctx: RoundContext) -> frozenset[int]:
        """The round's stragglers among its selected clients."""
        selected = ctx.selected
        count = round(self.fraction * len(selected))
        chosen = ctx.generator(Stream.STRAGGLERS).choice(len(selected), count, replace=False)
        return frozenset(selected[i] for i in chosen)

    def epochs(self, ctx: RoundContext, client: int) -> int | None:
        if client not in self.slow(ctx):
            return self.full_epochs
        return int(ctx.generator(Stream.LOCAL_WORK, client).integers(1, self.full_epochs))

    def dropped(self, ctx: RoundContext) -> frozenset[int]:
        return self.slow(ctx) if self.drop else frozenset()

    def report(self, ctx: RoundContext, participants: Sequence[int], configured: int) -> None:
        """`local_epochs_mean` of those that train, `slow_clients` (the round's stragglers) and,
        with `drop`, `slow_dropped`."""
        super().report(ctx, participants, configured)
        slow = self.slow(ctx)
        ctx.metrics.report("slow_clients", len(slow))
        if self.drop:
            ctx.metrics.report("slow_dropped", len(slow))

    def asynchronous_refusal(self) -> str | None:
        return (
            "its stragglers are a fraction of a round's clients and an asynchronous algorithm "
            "has no rounds; use local_work=uniform"
        )
