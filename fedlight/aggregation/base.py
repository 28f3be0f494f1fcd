"""The interface between algorithms and aggregators, and one round's aggregation.

An algorithm declares the parts of its upload the server aggregates (`Algorithm.parts`): each part
either goes through the configured aggregator (FedAvg's model delta, SCAFFOLD's Δy) or keeps a
fixed rule that the method defines (SCAFFOLD's Δc is a plain mean; buffers take FedAvg's sample
weights). Each part has the weighting the paper uses, which `aggregator.weighting` may replace
for the configured parts. A linear aggregator accumulates each upload as it arrives, so a round
holds one running sum per part, not every client's upload; a non-linear one (median, Krum) must
hold them all and says so with `holds_updates`.
"""

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from fedlight.config import require
from fedlight.tensors import StateDict

if TYPE_CHECKING:
    from fedlight.algorithms.base import Algorithm, ClientUpload
    from fedlight.context import RoundContext

WEIGHTINGS = ("samples", "uniform")


def client_weight(weighting: str, num_samples: int) -> float:
    """A client's weight: its number of samples, or 1 for every client that has data. A client
    without data took no step and contributes nothing either way."""
    if weighting == "samples":
        return float(num_samples)
    return 1.0 if num_samples > 0 else 0.0


@dataclass(frozen=True)
class Part:
    """One aggregate the server forms from a round's uploads."""

    weighting: str  # the method's own: "samples" or "uniform"
    configurable: bool  # through the configured aggregator; else the method's fixed plain mean


class Accumulator(ABC):
    """One part's aggregation over one round."""

    @abstractmethod
    def add(self, update: StateDict, weight: float) -> None:
        """One client's update with its weight (> 0), in participant order."""

    @abstractmethod
    def result(self) -> StateDict | None:
        """The aggregate; None if no client contributed."""

    def partial(self) -> StateDict | None:
        """What this accumulator holds, to be combined with other workers' (`fl.exchange=sums`);
        only linear aggregators have one."""
        raise NotImplementedError(f"{type(self).__name__} cannot be reduced per worker")

    def merge(self, partials: Sequence[StateDict | None]) -> None:
        """Becomes the sum of every worker's `partial` (this one's included), in rank order."""
        raise NotImplementedError(f"{type(self).__name__} cannot be reduced per worker")


@dataclass
class Aggregator(ABC):
    """The `aggregator` config group: how the configured parts of the uploads are combined."""

    weighting: str = "algorithm"  # samples | uniform | algorithm (each part's own weighting)
    holds_updates: ClassVar[bool] = False  # True: memory grows with the clients per round

    def __post_init__(self) -> None:
        require(
            self.weighting in (*WEIGHTINGS, "algorithm"),
            f"aggregator.weighting={self.weighting} is not a weighting; use samples (by training "
            "examples), uniform (every client with data alike) or algorithm (each method's own)",
        )

    def weighting_of(self, part: Part) -> str:
        return part.weighting if self.weighting == "algorithm" else self.weighting

    @abstractmethod
    def accumulator(self, total_weight: float) -> Accumulator:
        """A fresh accumulation for a round whose contributing weights sum to `total_weight`."""


class RoundAggregation:
    """A round's accumulators, one per part of the algorithm's upload.

    The weights' total is known before any upload arrives (it comes from the participants'
    sample counts), so each upload is scaled by weight/total and added at once: the arithmetic of
    `WeightedMean` over the whole round, in the same order, without holding the uploads.
    """

    def __init__(
        self,
        algorithm: "Algorithm",
        aggregator: Aggregator,
        fixed_rule: Aggregator,
        sample_counts: Sequence[int],
    ) -> None:
        self.algorithm = algorithm
        self.weightings: dict[str, str] = {}
        self.accumulators: dict[str, Accumulator] = {}
        for name, part in algorithm.parts.items():
            rule = aggregator if part.configurable else fixed_rule
            weighting = aggregator.weighting_of(part) if part.configurable else part.weighting
            total = sum(client_weight(weighting, n) for n in sample_counts)
            self.weightings[name] = weighting
            self.accumulators[name] = rule.accumulator(total)
        self.contributors: list[tuple[int, int, int]] = []  # (client, samples, steps) in order

    def add(self, ctx: "RoundContext", upload: "ClientUpload") -> None:
        """The server's view of one decoded upload, added to every part."""
        self.contributors.append((upload.client_id, upload.num_samples, upload.num_steps))
        for name, update in self.algorithm.split(ctx, upload).items():
            weight = client_weight(self.weightings[name], upload.num_samples)
            if weight > 0:
                self.accumulators[name].add(update, weight)

    def results(self) -> Mapping[str, StateDict | None]:
        return {name: acc.result() for name, acc in self.accumulators.items()}

    def partials(self) -> dict[str, StateDict | None]:
        """This worker's partial aggregates, one per part."""
        return {name: acc.partial() for name, acc in self.accumulators.items()}

    def combine(
        self, partials: Sequence[dict[str, StateDict | None]], uploads: Sequence["ClientUpload"]
    ) -> None:
        """Every worker's `partials` (rank order) summed into fresh accumulators, and the
        round's contributors as `uploads` (participant order) list them."""
        for name, accumulator in self.accumulators.items():
            accumulator.merge([partial[name] for partial in partials])
        self.contributors = [(u.client_id, u.num_samples, u.num_steps) for u in uploads]
