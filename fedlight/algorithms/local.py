"""Local training only: the "Local" baseline of federated-learning papers (e.g. the SCAFFOLD
tutorial's "Local" row, and NIID-Bench's SOLO).

Each client keeps and trains its own model on its own data for the same rounds × local epochs as
the federated run, starting from the same initial weights (every client builds them from the
run's seed: `Federation.initial_weights`); nothing is communicated and the server never changes.
The reported test metrics are the mean over all N client models on the global test set (a client
that has not trained yet counts with the initial model), and `test_accuracy_std` is their spread.
"""

from dataclasses import dataclass
from typing import ClassVar

from fedlight.algorithms.base import Algorithm, OwnModel
from fedlight.core.context import RoundContext
from fedlight.core.messages import ClientUpload, LocalResult, ServerState
from fedlight.core.tensors import StateDict, detached_copy


@dataclass
class Local(OwnModel, Algorithm):
    fixed_server: ClassVar[str | None] = "it trains no global model and aggregates nothing"
    per_client_models: ClassVar[bool] = True

    def download(self, ctx: RoundContext, server: ServerState) -> StateDict:
        return {}

    def start_weights(
        self, ctx: RoundContext, received: StateDict, client_state: StateDict | None
    ) -> StateDict:
        return ctx.federation.initial_weights if client_state is None else client_state

    def upload(
        self,
        ctx: RoundContext,
        received: StateDict,
        local: LocalResult,
        client_state: StateDict | None,
    ) -> tuple[ClientUpload, StateDict | None]:
        return ClientUpload(local.client_id, local.num_samples, local.num_steps, {}), detached_copy(
            local.weights
        )
