"""FedPer of Arivazhagan et al., "Federated Learning with Personalization Layers", 2019: FedAvg on
the base layers, while the personalization layers (by default the classifier head: the last layer
with parameters) never leave the client.

The download and the upload hold only the shared entries, so the bytes count only what is shared;
each client keeps its personal layers in its client state (memory or disk, checkpointed) and a
client that never trained starts them from the initial model. The model a client uses, on its
local test set and on the global test set (the reported mean over all N clients, as for `local`),
is the global shared layers with its own personal ones.

`train_shared=false` is the FedAvg tutorial's §4.3 as its snippet writes it (a local optimizer
over the personal layers only): each client trains only its personal layers, and the shared
parameters stay exactly as received. Nobody then trains the shared layers, so the global model's
parameters stay the initial ones and every upload's parameter entries are a zero delta (still sent
and counted, as the snippet's clients would send their shared layers). Parameters only: a shared
BatchNorm's running statistics still change in train mode, so their deltas are not zero.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import pytorch_lightning as pl
from torch.nn import Parameter

from fedlight.algorithms.fedavg import FedAvg
from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload, LocalResult, ServerState
from fedlight.core.tensors import StateDict, detached_copy, subtract
from fedlight.engines.base import LocalCallback


def layers_in_order(weights: StateDict) -> list[str]:
    """The model's layers (state-dict prefixes before the last dot) in the module's order."""
    return list(dict.fromkeys(name.rpartition(".")[0] for name in weights))


class PersonalOnly(LocalCallback):
    """Local training of the personal layers alone: after each backward pass the shared
    parameters' gradients are dropped, so the optimizer skips them (no step, no momentum, no
    weight decay) as one built over the personal parameters only would. The sequential engine
    only (the vectorized one refuses a callback without `correct_gradients`). One callback per
    local training (`FedPer.local_callbacks`), so the shared parameters are looked up once, on
    its first step, not by name on every batch."""

    def __init__(self, shared: frozenset[str]) -> None:
        self.shared = shared
        self.shared_parameters: list[Parameter] | None = None

    def on_after_backward(self, module: pl.LightningModule) -> None:
        if self.shared_parameters is None:
            self.shared_parameters = [
                param for name, param in module.named_parameters() if name in self.shared
            ]
        for param in self.shared_parameters:
            param.grad = None


@dataclass
class FedPer(FedAvg):
    # The personal layers by name (e.g. ["net.5"]); empty: the last `personal_last` layers.
    personal_layers: list[str] = field(default_factory=list)
    personal_last: int = 1
    # False: each client trains only its personal layers (the FedAvg tutorial's §4.3 snippet)
    train_shared: bool = True
    # evaluated: every client's model (the global model alone has no personal layers of its own)
    per_client_models: ClassVar[bool] = True
    # the personal entries, worked out once per run (the model does not change)
    personal_entries: frozenset[str] | None = field(default=None, init=False, repr=False)

    def personal_of(self, layers: list[str]) -> list[str]:
        """The personal layers among the model's `layers` (in order)."""
        if self.personal_layers:
            return list(self.personal_layers)
        return layers[-self.personal_last :]

    def personal_keys(self, federation: Federation) -> frozenset[str]:
        """The state-dict entries that stay on the client; a name the model lacks, or a split
        that leaves nothing to share or nothing personal, is refused in one line."""
        if self.personal_entries is not None:
            return self.personal_entries
        weights = federation.initial_weights
        layers = [layer for layer in layers_in_order(weights) if layer]
        personal = self.personal_of(layers)
        unknown = [name for name in personal if name not in layers]
        if unknown:
            raise ConfigError(
                f"algo.personal_layers names {unknown[0]}, which the model does not have; its "
                f"layers are {', '.join(layers)}"
            )
        if not 0 < len(personal) < len(layers):
            raise ConfigError(
                f"{self.option_setting()} keeps {len(personal)} of the model's {len(layers)} "
                "layers on the client; keep at least one and share at least one"
            )
        self.personal_entries = frozenset(k for k in weights if k.rpartition(".")[0] in personal)
        return self.personal_entries

    def option_setting(self) -> str:
        if self.personal_layers:
            return f"algo.personal_layers={self.personal_layers}"
        return f"algo.personal_last={self.personal_last}"

    def init_server(self, weights: StateDict, federation: Federation) -> ServerState:
        self.personal_keys(federation)  # refused now, before any round
        return super().init_server(weights, federation)

    def download(self, ctx: RoundContext, server: ServerState) -> StateDict:
        personal = self.personal_keys(ctx.federation)
        return {k: t for k, t in server.weights.items() if k not in personal}

    def own_layers(self, federation: Federation, client_state: StateDict | None) -> StateDict:
        """The client's personal entries: its own, or the initial model's before it trained."""
        if client_state is not None:
            return client_state
        personal = self.personal_keys(federation)
        return {k: t for k, t in federation.initial_weights.items() if k in personal}

    def start_weights(
        self, ctx: RoundContext, received: StateDict, client_state: StateDict | None
    ) -> StateDict:
        return self.with_own(ctx.federation, received, client_state)

    def local_callbacks(
        self, ctx: RoundContext, received: StateDict, client_state: StateDict | None
    ) -> list[LocalCallback]:
        if self.train_shared:
            return []
        return [PersonalOnly(frozenset(received))]

    def with_own(
        self, federation: Federation, shared: StateDict, client_state: StateDict | None
    ) -> StateDict:
        """The whole model, in the module's order: `shared` entries and the client's own."""
        own = self.own_layers(federation, client_state)
        return {k: own[k] if k in own else shared[k] for k in federation.initial_weights}

    def upload(
        self,
        ctx: RoundContext,
        received: StateDict,
        local: LocalResult,
        client_state: StateDict | None,
    ) -> tuple[ClientUpload, StateDict | None]:
        personal = self.personal_keys(ctx.federation)
        shared = {k: t for k, t in local.weights.items() if k not in personal}
        own = detached_copy({k: t for k, t in local.weights.items() if k in personal})
        delta = subtract(shared, received)
        return ClientUpload(local.client_id, local.num_samples, local.num_steps, delta), own

    def model_of_client(
        self,
        federation: Federation,
        server: ServerState,
        client_states: Mapping[int, StateDict],
        client: int,
    ) -> StateDict:
        return self.with_own(federation, server.weights, client_states.get(client))
