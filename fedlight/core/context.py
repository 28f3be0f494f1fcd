"""What every stage of a round is told: the run's fixed facts and the round's own.

A hook never reaches for global state: the round index, the federation size, which entries are
trainable parameters, the round's clients and learning rates, the device and every random
generator come from the context it is handed. Generators are derived from (seed, stream, round,
client) (see `fedlight.core.rng`), so a stage draws the same numbers on every worker and after a
resume.
"""

from dataclasses import dataclass, field

import numpy as np
import torch

from fedlight.core.rng import Stream, derive_seed, numpy_generator
from fedlight.core.tensors import StateDict


@dataclass(frozen=True)
class Federation:
    """Facts fixed for a whole run, given to algorithms explicitly instead of stored on them."""

    num_clients: int  # N
    trainable: frozenset[str]  # the model's parameters (state-dict entries that are not buffers)
    seed: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    # The model every client builds from the run's seed before any communication (the starting
    # point of methods that keep a model per client).
    initial_weights: StateDict = field(default_factory=dict, repr=False)
    rounds: int = 1  # the run's total rounds (`fl.rounds`), e.g. the horizon of a cosine schedule
    malicious: frozenset[int] = frozenset()  # the attack's clients (`fedlight.stages.attacks`)

    def round(
        self,
        round_index: int,
        selected: tuple[int, ...] = (),
        lrs: tuple[float, ...] = (),
        metrics: "RoundMetrics | None" = None,
    ) -> "RoundContext":
        return RoundContext(
            self, round_index, selected, lrs, RoundMetrics() if metrics is None else metrics
        )


class RoundMetrics:
    """The metrics channel: named numbers any stage reports during a round (the loop adds them to
    the round's row of metrics.csv, W&B and the console after its fixed columns)."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def report(self, name: str, value: float) -> None:
        """Sets `name` for this round; a second report of the same name in a round replaces it."""
        self.values[name] = float(value)

    def add(self, name: str, value: float) -> None:
        """Adds `value` to `name` for this round (0 before the first add), e.g. per client."""
        self.values[name] = self.values.get(name, 0.0) + float(value)


@dataclass(frozen=True)
class RoundContext:
    """One round as its stages see it."""

    federation: Federation
    round_index: int
    selected: tuple[int, ...]  # the round's selected clients, in aggregation order
    lrs: tuple[float, ...]  # the clients' learning rate per parameter group this round
    metrics: RoundMetrics = field(default_factory=RoundMetrics, compare=False)

    @property
    def num_clients(self) -> int:
        return self.federation.num_clients

    @property
    def trainable(self) -> frozenset[str]:
        return self.federation.trainable

    @property
    def seed(self) -> int:
        return self.federation.seed

    @property
    def device(self) -> torch.device:
        return self.federation.device

    @property
    def lr(self) -> float:
        """The first parameter group's learning rate (what `lr` in metrics.csv shows)."""
        return self.lrs[0]

    def seed_for(self, stream: Stream, client: int = 0) -> int:
        return derive_seed(self.seed, stream, self.round_index, client)

    def generator(self, stream: Stream, client: int = 0) -> np.random.Generator:
        """numpy generator of (seed, stream, this round, client)."""
        return numpy_generator(self.seed, stream, self.round_index, client)

    def torch_generator(self, stream: Stream, client: int = 0) -> torch.Generator:
        """CPU torch generator of (seed, stream, this round, client)."""
        return torch.Generator().manual_seed(self.seed_for(stream, client))
