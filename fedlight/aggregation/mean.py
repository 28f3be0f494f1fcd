"""The weighted mean of client updates: FedAvg's aggregation (McMahan et al. 2017)."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from fedlight.aggregation.base import Accumulator, Aggregator
from fedlight.core.tensors import StateDict


class RunningMean(Accumulator):
    """Σ_i (w_i / W) u_i, added in the order given, so results are bit-reproducible. W is known in
    advance; float64 updates are summed in float64, everything else in float32. Rejected updates'
    weights R are taken out at the end: the result is scaled by W / (W − R)."""

    def __init__(self, total_weight: float) -> None:
        self.total = float(total_weight)
        self.rejected = 0.0
        self.sums: StateDict | None = None

    def add(self, update: StateDict, weight: float) -> None:
        if self.sums is None:
            self.sums = {
                name: torch.zeros_like(
                    t, dtype=torch.float64 if t.dtype == torch.float64 else torch.float32
                )
                for name, t in update.items()
            }
        for name, total in self.sums.items():
            total.add_(update[name], alpha=weight / self.total)

    def reject(self, weight: float) -> None:
        self.rejected += weight

    def add_sum(self, weighted_sum: StateDict) -> None:
        """Divided in float64, kept in float32: a sum formed elsewhere (decoded from a ring)
        carries no dtype of the updates, and float32 is that of every non-float64 one."""
        self.sums = {
            name: (t.to(torch.float64) / self.total).to(torch.float32)
            for name, t in weighted_sum.items()
        }

    def result(self) -> StateDict | None:
        if self.sums is None or not self.rejected:
            return self.sums
        scale = self.total / (self.total - self.rejected)
        return {name: total * scale for name, total in self.sums.items()}

    def partial(self) -> StateDict | None:
        return self.sums

    def merge(self, partials: Sequence[StateDict | None]) -> None:
        present = [partial for partial in partials if partial is not None]
        self.sums, self.rejected = None, 0.0
        if present:
            self.sums = {name: t.clone() for name, t in present[0].items()}
            for partial in present[1:]:
                for name, total in self.sums.items():
                    total.add_(partial[name])


@dataclass
class Mean(Aggregator):
    """`aggregator=mean`: the weighted mean (`aggregator.weighting`)."""

    sums_updates: ClassVar[bool] = True

    def accumulator(self, total_weight: float, count: int) -> Accumulator:
        return RunningMean(total_weight)


@dataclass
class WeightedMean:
    """The weighted mean of a list of updates at once (hand computations, tests)."""

    def __call__(self, updates: Sequence[StateDict], weights: Sequence[float]) -> StateDict:
        mean = RunningMean(float(sum(weights)))
        for update, weight in zip(updates, weights, strict=True):
            mean.add(update, weight)
        if mean.sums is None:
            raise ValueError("WeightedMean needs at least one update with a positive weight")
        return mean.sums
