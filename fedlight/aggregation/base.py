"""The interface between algorithms and aggregators, and one round's aggregation.

An algorithm declares the parts of its upload the server aggregates (`Algorithm.parts`): each part
either goes through the configured aggregator (FedAvg's model delta, SCAFFOLD's Δy) or keeps a
fixed rule that the method defines (SCAFFOLD's Δc is a plain mean; buffers take FedAvg's sample
weights). Each part has the weighting the paper uses, which `aggregator.weighting` may replace
for the configured parts. A linear aggregator accumulates each upload as it arrives, so a round
holds one running sum per part, not every client's upload; a non-linear one (median, Krum) must
hold them all and says so with `holds_updates`: it flattens each update into one row of a
preallocated matrix (`HeldUpdates`, fedlight.aggregation.robust_base) and combines the rows at once.

An update with a NaN or Inf entry is never aggregated, whatever the aggregator: `RoundAggregation`
rejects the whole upload (every part of it) and counts it. A robust aggregator that cannot act on
the round's number of updates (Krum needs n ≥ 2f + 3) refuses the round (`RoundRefused`): the loop
keeps the global model and says why.
"""

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from fedlight.core.errors import require
from fedlight.core.messages import Contributor
from fedlight.core.tensors import StateDict

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


@dataclass(frozen=True)
class Contribution:
    """One decoded upload as the server aggregates it: its sender and each part's tensors (the
    algorithm's `split`, done by the caller: aggregation knows parts, not algorithms)."""

    contributor: Contributor
    parts: Mapping[str, StateDict]


class RoundRefused(Exception):  # noqa: N818 - a refusal, not an error: the run goes on
    """An aggregator cannot act on this round's updates (too few for its assumption); the message
    says which assumption and the counts, on one line."""


class Accumulator(ABC):
    """One part's aggregation over one round."""

    @abstractmethod
    def add(self, update: StateDict, weight: float) -> None:
        """One client's update with its weight (> 0), in participant order.

        Args:
            update: the client's part, entry name → tensor.
            weight: its weight under the part's weighting, > 0.
        """

    @abstractmethod
    def result(self) -> StateDict | None:
        """The aggregate; None if no client contributed.

        Returns:
            The part's aggregate, entry name → tensor, or None.

        Raises:
            RoundRefused: the aggregator's assumption fails for the updates it holds.
        """

    def reject(self, weight: float) -> None:
        """A client of weight `weight`, counted in the round's total weight, sent an update that
        is not added (not finite): means renormalize over the others; a rule over the rows it
        holds has nothing to correct.

        Args:
            weight: the left-out client's weight.
        """
        return None

    def partial(self) -> StateDict | None:
        """What this accumulator holds, to be combined with other workers' (`fl.exchange=sums`);
        only linear aggregators have one.

        Returns:
            This worker's partial sum, or None where it holds nothing.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot be reduced per worker")

    def merge(self, partials: Sequence[StateDict | None]) -> None:
        """Becomes the sum of every worker's `partial` (this one's included), in rank order.

        Args:
            partials: every worker's `partial`, in rank order.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot be reduced per worker")

    def add_sum(self, weighted_sum: StateDict) -> None:
        """The sum Σ w_i u_i of the accepted updates, formed elsewhere (secure aggregation), in
        place of their `add`s; only linear aggregators take one.

        Args:
            weighted_sum: the weighted sum, entry name → tensor.
        """
        raise NotImplementedError(f"{type(self).__name__} needs each update, not their sum")


@dataclass
class Aggregator(ABC):
    """The `aggregator` config group: how the configured parts of the uploads are combined."""

    weighting: str = "algorithm"  # samples | uniform | algorithm (each part's own weighting)
    holds_updates: ClassVar[bool] = False  # True: memory grows with the clients per round
    # True: the aggregate is the weighted sum of the updates over the weights' total, so the sum
    # alone (formed by another mechanism: DP-FedAvg, secure aggregation) gives it
    sums_updates: ClassVar[bool] = False

    def __post_init__(self) -> None:
        require(
            self.weighting in (*WEIGHTINGS, "algorithm"),
            f"aggregator.weighting={self.weighting} is not a weighting; use samples (by training "
            "examples), uniform (every client with data alike) or algorithm (each method's own)",
        )

    @property
    def option(self) -> str:
        """The option's name in the `aggregator` group (its module's)."""
        return type(self).__module__.rsplit(".", 1)[-1]

    def weighting_of(self, part: Part) -> str:
        """The weighting this aggregator gives a part: the part's own under `algorithm`.

        Args:
            part: one of an algorithm's `parts`.

        Returns:
            "samples" or "uniform".
        """
        return part.weighting if self.weighting == "algorithm" else self.weighting

    def check(self, clients_per_round: int) -> None:
        """Refuse (ConfigError) settings that cannot work with `clients_per_round` uploads a
        round, before any training; a later round with fewer updates is refused by `result`.
        A mean works with any number.

        Args:
            clients_per_round: the uploads a round has at most (`fl.clients_per_round`).

        Raises:
            ConfigError: the rule cannot combine that many updates.
        """
        return None

    @abstractmethod
    def accumulator(self, total_weight: float, count: int) -> Accumulator:
        """A fresh accumulation for a round of at most `count` updates whose weights sum to
        `total_weight`.

        Args:
            total_weight: the sum of the round's participants' weights, known before any upload.
            count: the round's participants.

        Returns:
            The accumulator of one part for this round.
        """


class RoundAggregation:
    """A round's accumulators, one per part of the algorithm's upload.

    The weights' total is known before any upload arrives (it comes from the participants'
    sample counts), so each upload is scaled by weight/total and added at once: the arithmetic of
    `WeightedMean` over the whole round, in the same order, without holding the uploads.
    """

    def __init__(
        self,
        parts: Mapping[str, Part],
        aggregator: Aggregator,
        fixed_rule: Aggregator,
        sample_counts: Sequence[int],
    ) -> None:
        self.weightings: dict[str, str] = {}
        self.accumulators: dict[str, Accumulator] = {}
        for name, part in parts.items():
            rule = aggregator if part.configurable else fixed_rule
            weighting = aggregator.weighting_of(part) if part.configurable else part.weighting
            total = sum(client_weight(weighting, n) for n in sample_counts)
            self.weightings[name] = weighting
            self.accumulators[name] = rule.accumulator(total, len(sample_counts))
        self.contributors: list[Contributor] = []  # of the accepted uploads, in order
        self.rejected: list[int] = []  # clients whose update was not finite, in order
        self.late: list[int] = []  # clients whose update missed the round's deadline, in order

    @property
    def public_contributors(self) -> Sequence[Contributor]:
        """The (client, samples, steps) the server update may depend on: the realized
        contributors, unless a private aggregation must hide them (DP-FedAvg's stand-ins)."""
        return self.contributors

    def add(self, contribution: Contribution) -> bool:
        """One decoded upload's parts, each added to its accumulator; an upload with a NaN or Inf
        entry is rejected instead (False), all its parts with it."""
        if not all_finite(contribution.parts):
            self.reject(contribution.contributor)
            return False
        self.contributors.append(contribution.contributor)
        self.accumulate(contribution)
        return True

    def accumulate(self, contribution: Contribution) -> None:
        """Adds an accepted upload's parts to their accumulators, each with its `weights`."""
        for name, weight in self.weights(contribution).items():
            if weight > 0:
                self.accumulators[name].add(contribution.parts[name], weight)

    def weights(self, contribution: Contribution) -> dict[str, float]:
        """Each part's weight for this upload: the client's for that part's weighting (a
        mechanism that scales uploads, DP-FedAvg's clip, overrides this)."""
        samples = contribution.contributor.num_samples
        return {name: client_weight(self.weightings[name], samples) for name in contribution.parts}

    def reject(self, contributor: Contributor) -> None:
        """An upload with non-finite entries: counted, and left out."""
        self.rejected.append(contributor.client)
        self.leave_out(contributor)

    def drop_late(self, contributor: Contributor) -> None:
        """An upload that missed the round's deadline (`system.deadline`): counted, left out."""
        self.late.append(contributor.client)
        self.leave_out(contributor)

    def leave_out(self, contributor: Contributor) -> None:
        """A participant counted in the weights' total whose upload is not added: means
        renormalize over the others."""
        for name, accumulator in self.accumulators.items():
            weight = client_weight(self.weightings[name], contributor.num_samples)
            if weight > 0:
                accumulator.reject(weight)

    def results(self) -> Mapping[str, StateDict | None]:
        """Each part's aggregate; raises `RoundRefused` if an aggregator refuses the round."""
        return {name: acc.result() for name, acc in self.accumulators.items()}

    def partials(self) -> dict[str, StateDict | None]:
        """This worker's partial aggregates, one per part."""
        return {name: acc.partial() for name, acc in self.accumulators.items()}

    def combine(
        self,
        partials: Sequence[dict[str, StateDict | None]],
        contributors: Sequence[Contributor],
        rejected: Sequence[bool],
        late: Sequence[bool],
    ) -> None:
        """Every worker's `partials` (rank order) summed into fresh accumulators, and the
        round's `contributors` (participant order), less those `rejected` (by the worker that
        aggregated them) or `late`."""
        for name, accumulator in self.accumulators.items():
            accumulator.merge([partial[name] for partial in partials])
        self.contributors, self.rejected, self.late = [], [], []
        for contributor, was_rejected, was_late in zip(contributors, rejected, late, strict=True):
            if was_rejected:
                self.reject(contributor)
            elif was_late:
                self.drop_late(contributor)
            else:
                self.contributors.append(contributor)


def all_finite(parts: Mapping[str, StateDict]) -> bool:
    """Whether every floating-point entry of every part is finite.

    A NaN or Inf entry makes its tensor's sum NaN or Inf (IEEE 754: Inf + finite = Inf,
    Inf - Inf = NaN, NaN propagates), so finite sums prove every entry finite: one cheap reduction
    per tensor and one device sync, where an elementwise `isfinite` writes a mask of the whole
    model per client. A sum that is not finite may also be an overflow of finite entries; only
    then are the entries checked one by one."""
    tensors = [t for part in parts.values() for t in part.values() if t.is_floating_point()]
    if not tensors or bool(torch.stack([t.sum().isfinite() for t in tensors]).all()):
        return True
    return bool(torch.stack([t.isfinite().all() for t in tensors]).all())
