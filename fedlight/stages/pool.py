"""What a selector may learn of the clients, at a cost: `ClientPool` and the questions it asks.

A selector may ask clients how a model does on their own data before choosing, and a participant
may report such numbers with its upload; every question is paid for like training: the pool
counts the clients' compute and bytes, and each question's work for the system model's clock.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import Tensor

from fedlight.core.messages import REPORTED_NUMBER_BYTES
from fedlight.core.tensors import StateDict, nbytes


@dataclass(frozen=True)
class Question:
    """One client's work for a question: bytes it received, examples it evaluated, bytes it sent
    (what `Speeds.seconds` turns into virtual time)."""

    client: int
    bytes_down: int
    examples: int
    bytes_up: int


@dataclass(frozen=True)
class ModelQuality:
    """How a model does on one client's own training data."""

    loss: float
    accuracy: float


class ClientPool:
    """The clients as a selector sees them: their training-set sizes (the server knows them, as
    FedAvg's weighting does) and, at a cost, a model's loss and accuracy on a client's own data."""

    def __init__(
        self,
        client_indices: Sequence[Tensor],
        evaluate: Callable[[StateDict, Tensor], ModelQuality],
    ) -> None:
        self.client_indices = client_indices
        self.sizes = tuple(len(indices) for indices in client_indices)
        self._evaluate = evaluate
        self.seconds = 0.0  # the clients' compute for the questions asked since `reset`
        self.questions: list[Question] = []  # asked since `reset`, in order

    def reset(self) -> None:
        self.seconds, self.questions = 0.0, []

    @property
    def bytes_up(self) -> int:
        return sum(q.bytes_up for q in self.questions)

    @property
    def bytes_down(self) -> int:
        return sum(q.bytes_down for q in self.questions)

    def evaluate(self, weights: StateDict, client: int, sent: bool = True) -> ModelQuality:
        """`client` evaluates `weights` on its training data. `sent`: a candidate that is sent
        the weights first and answers with one number; otherwise a participant evaluating its
        own trained model, whose numbers travel in its report (`Selection.client_report`)."""
        started = time.perf_counter()
        indices = self.client_indices[client]
        quality = self._evaluate(weights, indices)
        self.seconds += time.perf_counter() - started
        down, up = (nbytes(weights), REPORTED_NUMBER_BYTES) if sent else (0, 0)
        self.questions.append(Question(client, down, len(indices), up))
        return quality
