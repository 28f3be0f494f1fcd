"""Power-of-choice selection (Cho, Wang & Joshi 2022, "Towards understanding biased client
selection in federated learning", AISTATS; the `pow-d` rule).

Each round the server draws d candidates without replacement with probability proportional to
their data size, sends them the current global model, and each returns its local loss F_k(w) on
its own training data; the K candidates with the highest loss train. The candidates' evaluation
is client compute and traffic: the loop counts it in `client_seconds`, `bytes_down` (the model,
sent to every candidate) and `bytes_up` (one number each), and with a `system` model the round's
training starts on the virtual clock only once the slowest candidate has answered.
"""

from dataclasses import dataclass
from typing import ClassVar

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.stages.selection.base import Population, Selection, draw_by_size


@dataclass
class PowerOfChoice(Selection):
    measures_training_data: ClassVar[str | None] = "the global model's loss on each candidate's"
    candidates: int = 20  # d, at least fl.clients_per_round and at most fl.num_clients

    def check(self, num_clients: int, clients_per_round: int) -> None:
        require(
            clients_per_round <= self.candidates <= num_clients,
            f"selection.candidates={self.candidates} must be between fl.clients_per_round="
            f"{clients_per_round} and fl.num_clients={num_clients}",
        )

    def select(self, ctx: RoundContext, clients_per_round: int, seen: Population) -> list[int]:
        # a client without data has no loss to report: never a candidate
        drawn = draw_by_size(ctx, seen.pool.sizes, self.candidates)
        losses = {c: seen.pool.evaluate(seen.global_weights, c).loss for c in drawn}
        highest = sorted(losses, key=lambda c: (-losses[c], c))[:clients_per_round]
        return sorted(highest)
