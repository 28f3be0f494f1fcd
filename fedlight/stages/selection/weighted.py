"""Score-weighted selection: the FedAvg tutorial's dynamic selector (its §2.2), done properly.

Every client's score starts at 1. A participant reports the accuracy a of its trained model on its
own training data with its upload (a number on the wire, a forward pass of client compute), and
the server sets score ← d·score + (1−d)·a (d = `decay`). Each round draws K clients without
replacement with probabilities softmax(score / `temperature`). Clients that train well are drawn
more often; the run's participation.json and Jain's index show whom that starves.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch

from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import require
from fedlight.core.rng import Stream
from fedlight.core.tensors import StateDict
from fedlight.stages.pool import ClientPool
from fedlight.stages.selection.base import Population, Selection

SCORE = "score"
ACCURACY = "accuracy"


@dataclass
class Weighted(Selection):
    measures_training_data: ClassVar[str | None] = "each participant's accuracy on its own"
    decay: float = 0.95  # d: how much of its old score a client keeps per round it trains
    temperature: float = 1.0  # softmax temperature: lower favours high scores more

    def __post_init__(self) -> None:
        require(0 <= self.decay < 1, f"selection.decay={self.decay} must be in [0, 1)")
        require(self.temperature > 0, f"selection.temperature={self.temperature} must be > 0")

    def init_state(self, federation: Federation) -> StateDict:
        return {SCORE: torch.ones(federation.num_clients, dtype=torch.float64)}

    def probabilities(self, state: StateDict) -> torch.Tensor:
        return torch.softmax(state[SCORE].cpu() / self.temperature, dim=0)

    def select(self, ctx: RoundContext, clients_per_round: int, seen: Population) -> list[int]:
        probabilities = self.probabilities(seen.state).numpy()
        rng = ctx.generator(Stream.SELECTION)
        chosen = rng.choice(ctx.num_clients, size=clients_per_round, replace=False, p=probabilities)
        return sorted(int(c) for c in chosen)

    def client_report(
        self, ctx: RoundContext, client: int, trained: StateDict, pool: ClientPool
    ) -> dict[str, float]:
        return {ACCURACY: pool.evaluate(trained, client, sent=False).accuracy}

    def update(
        self, ctx: RoundContext, state: StateDict, reports: Mapping[int, Mapping[str, float]]
    ) -> StateDict:
        score = state[SCORE].clone()
        for client, report in reports.items():
            score[client] = self.decay * score[client] + (1 - self.decay) * report[ACCURACY]
        return {SCORE: score}
