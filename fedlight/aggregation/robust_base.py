"""The robust rules' common ground: a round's updates held as the rows of one [n, d] matrix
(`HeldUpdates`, weights flattened and back) and `RobustAggregator`, whose rules combine the matrix
and refuse a round whose n breaks their assumption (`RoundRefused`)."""

from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from fedlight.aggregation.base import Accumulator, Aggregator, RoundRefused
from fedlight.core.errors import require
from fedlight.core.tensors import StateDict


def flatten(update: StateDict) -> Tensor:
    """One update as a float32 vector, its tensors in order."""
    return torch.cat([t.reshape(-1).to(torch.float32) for t in update.values()])


def unflatten(vector: Tensor, like: StateDict) -> StateDict:
    """`vector` cut back into tensors shaped (and typed) as `like`'s."""
    tensors: StateDict = {}
    start = 0
    for name, t in like.items():
        tensors[name] = vector[start : start + t.numel()].reshape(t.shape).to(t.dtype)
        start += t.numel()
    return tensors


class HeldUpdates(Accumulator):
    """Keeps every update of the round as one row of an [n, d] float32 matrix, allocated at the
    first update for the round's `count` clients, and combines them in `result`."""

    def __init__(self, aggregator: "RobustAggregator", count: int) -> None:
        self.aggregator = aggregator
        self.count = count
        self.rows: Tensor | None = None
        self.weights: list[float] = []
        self.like: StateDict = {}

    def add(self, update: StateDict, weight: float) -> None:
        row = flatten(update)
        if self.rows is None:
            self.like = {name: torch.empty_like(t, device="meta") for name, t in update.items()}
            self.rows = row.new_empty((self.count, row.numel()))
        self.rows[len(self.weights)] = row
        self.weights.append(weight)

    def result(self) -> StateDict | None:
        if self.rows is None or not self.weights:
            return None
        n = len(self.weights)
        refusal = self.aggregator.refusal(n)
        if refusal is not None:
            raise RoundRefused(refusal)
        weights = torch.tensor(self.weights, dtype=torch.float64, device=self.rows.device)
        combined = self.aggregator.combine(self.rows[:n], weights)
        return unflatten(combined, self.like)


@dataclass
class RobustAggregator(Aggregator):
    """An aggregator that must see every update of the round at once (median, Krum, ...).

    A subclass writes `combine` over the [n, d] matrix of flattened updates, and `refusal` when
    its assumption on n can fail; weights are the clients' (`aggregator.weighting`), which the
    coordinate-wise and distance-based rules of the papers ignore (their YAMLs say uniform)."""

    holds_updates: ClassVar[bool] = True
    uses_weights: ClassVar[bool] = False  # False: the rule treats every update alike

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.uses_weights or self.weighting != "samples",
            f"aggregator.weighting=samples does not apply to aggregator={self.option}: its rule "
            "treats every update alike; use aggregator.weighting=uniform",
        )

    def accumulator(self, total_weight: float, count: int) -> Accumulator:
        """Holds the round's updates as rows of one matrix and `combine`s them in `result`.

        Args:
            total_weight: the sum of the round's weights (a rule over rows does not need it).
            count: the round's participants: the matrix's rows.

        Returns:
            The accumulator of one part for this round.
        """
        return HeldUpdates(self, count)

    def refusal(self, n: int) -> str | None:
        """Why this rule cannot combine `n` updates, in one line; None when it can.

        Args:
            n: the number of updates.

        Returns:
            The reason, or None by default.
        """
        return None

    def check(self, clients_per_round: int) -> None:
        """Refuse, before any training, a `clients_per_round` that `refusal` refuses.

        Args:
            clients_per_round: the uploads a round has at most (`fl.clients_per_round`).

        Raises:
            ConfigError: the rule cannot combine that many updates.
        """
        refusal = self.refusal(clients_per_round)
        require(refusal is None, f"fl.clients_per_round={clients_per_round}: {refusal}")

    @abstractmethod
    def combine(self, updates: Tensor, weights: Tensor) -> Tensor:
        """The aggregate of the rows of `updates` [n, d] (float32) with `weights` [n] (float64,
        > 0): a [d] vector.

        Args:
            updates: one flattened update per row, [n, d], float32.
            weights: the clients' weights, [n], float64, each > 0.

        Returns:
            The aggregate, [d].
        """
