"""Local training only: the "Local" baseline of federated-learning papers (e.g. the SCAFFOLD
tutorial's "Local" row, and NIID-Bench's SOLO).

Each client keeps and trains its own model on its own data for the same rounds × local epochs as
the federated run, starting from the same initial weights; nothing is communicated and the server
never changes. The reported test metrics are the mean over all N client models on the global test
set (a client that has not trained yet counts with the initial model), and `test_accuracy_std` is
their spread.
"""

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from fedlight.algorithms.base import Algorithm, ClientUpload, LocalResult, ServerState
from fedlight.tensors import StateDict, detached_copy


@dataclass
class Local(Algorithm):
    def download(self, server: ServerState) -> StateDict:
        return {}

    def start_weights(self, server: ServerState, client_state: StateDict | None) -> StateDict:
        return server.weights if client_state is None else client_state

    def upload(
        self, server: ServerState, local: LocalResult, client_state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        return ClientUpload(local.client_id, local.num_samples, local.num_steps, {}), detached_copy(
            local.weights
        )

    def server_update(self, server: ServerState, uploads: Sequence[ClientUpload]) -> ServerState:
        return server

    def evaluated_models(
        self, server: ServerState, client_states: Mapping[int, StateDict]
    ) -> Iterator[StateDict]:
        """All N client models: O(N) by definition, since the reported metric is their mean.
        Yielded one at a time, so a disk store reads each model as it is evaluated instead of
        holding all N."""
        for client in range(self.num_clients):
            yield client_states.get(client, server.weights)
