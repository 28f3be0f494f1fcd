"""Ditto of Li et al., "Ditto: Fair and Robust Federated Learning Through Personalization", ICML
2021 (Algorithm 1), with FedAvg's server (any aggregator and server optimizer).

Each participant trains the global model w it received as in FedAvg, and sends that update; it
also trains its personal model v, which never leaves it, on the same data towards w: the gradient
of F_k(v) + λ/2 ‖v − w‖², so one SGD step is v ← v − η (∇F_k(v) + λ (v − w)). Variant
implemented: the personal training is `algo.personal_epochs` epochs of the configured local
optimizer, batch size and learning rate (the paper's s local steps; its code also counts epochs),
run after the global training on batches of their own (stream PERSONAL_TRAINING), with the
proximal gradient added as in FedProx. A client's first personal model is the global model it
received. λ = 0 is local training from the first global model received; λ → ∞ is FedAvg.

Reported: the global test accuracy is the global model's (Ditto trains one); each client's local
accuracy is its personal model's (the global model for a client that never trained).
"""

from dataclasses import dataclass

from fedlight.algorithms.base import OwnModel
from fedlight.algorithms.fedavg import FedAvg
from fedlight.algorithms.fedprox import ProximalTerm
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import LocalResult
from fedlight.core.tensors import StateDict, detached_copy
from fedlight.engines.base import LocalCallback


@dataclass
class Ditto(OwnModel, FedAvg):
    lam: float = 0.1  # λ, the pull of the personal model towards the global one
    personal_epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.lam >= 0, f"algo.lam={self.lam} must be >= 0 (0: unregularized)")
        require(
            self.personal_epochs > 0,
            f"algo.personal_epochs={self.personal_epochs} must be > 0 (Ditto trains a personal "
            "model every round; for none use algo=fedavg)",
        )

    def personal_training(
        self, ctx: RoundContext, received: StateDict, client_state: StateDict | None
    ) -> tuple[StateDict, list[LocalCallback]]:
        start = received if client_state is None else client_state
        return start, [ProximalTerm(self.lam, received, sorted(ctx.trainable))]

    def keep_personal(
        self, ctx: RoundContext, trained: LocalResult, client_state: StateDict | None
    ) -> StateDict:
        return detached_copy(trained.weights)
