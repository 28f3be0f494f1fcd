"""The contract between the FederatedLoop and an algorithm.

Following fedjax, an algorithm is a few functions over explicit state: the server's `ServerState`
and, for stateful methods, a per-client state; every hook is handed the round's `RoundContext`
(round, N, trainable names, generators). Client-side hooks see only what the client received (the
decoded download) and its own state; the server side sees the aggregates of the parts it declares
(`parts`, `split`) and applies them in `server_update`, with the aggregator and the server optimizer
passed in rather than inherited. The loop owns everything else (selection, the wire, local
training, logging, checkpoints), so adding an algorithm never changes the loop.
"""

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar

from torch import Tensor

from fedlight.aggregation.base import Aggregator, Contribution, Part, RoundAggregation
from fedlight.aggregation.mean import Mean
from fedlight.core.context import Federation, RoundContext
from fedlight.core.messages import ClientUpload, LocalResult, ServerState
from fedlight.core.tensors import StateDict
from fedlight.engines.base import LocalCallback


class Algorithm(ABC):
    """Server and client rules of one federated algorithm.

    `parts` names what the server aggregates from each upload, with the weighting the paper uses
    and whether the configured aggregator may replace the method's fixed rule (see
    `fedlight.aggregation.base`). An algorithm without parts sends nothing to aggregate.
    """

    parts: ClassVar[dict[str, Part]] = {}
    # The aggregator of the configurable parts (injected by the config into algorithms that
    # aggregate; those without parts never use it).
    aggregator: Aggregator = Mean()
    # Set where `server_opt` and `aggregator` cannot be chosen: why (the config refuses them).
    fixed_server: ClassVar[str | None] = None
    # True where every client uses a model of its own: all N are evaluated (`evaluated_models`).
    per_client_models: ClassVar[bool] = False
    # True for algorithms that run on the asynchronous driver (`fedlight.drivers.asynchronous`).
    asynchronous: ClassVar[bool] = False
    # Why a configured variant's aggregation assumes clients drawn ∝ n_k (FedProx's plain mean
    # is unbiased only then), which the selector declares (`Selection.draws_by_size`); None: any.
    needs_sampling_by_size: str | None = None
    # True where a round's trainer learns from examples pooled across clients, drawn afresh each
    # round (`central`), not each selected client from its own data.
    pools_data: ClassVar[bool] = False
    # Epochs of a second local training of each participant, of a model it keeps (Ditto's
    # personal model), after its upload; 0: none (`personal_training`).
    personal_epochs: int = 0

    def init_server(self, weights: StateDict, federation: Federation) -> ServerState:
        """Server state for the initial global model.

        Args:
            weights: the initial global model, entry name → tensor.
            federation: the run's fixed facts (N, trainable entries, seed, device).

        Returns:
            The server state before round 1: by default the weights with no extras.
        """
        return ServerState(weights)

    def participants(
        self, ctx: RoundContext, client_indices: Sequence[Tensor]
    ) -> list[tuple[int, Tensor]]:
        """Who trains this round and on which training examples: each selected client on its own
        data. Algorithms that resample draw from `ctx.generator(Stream.POOLING)`.

        Args:
            ctx: the round, with its selected clients.
            client_indices: every client's training-example indices, by client.

        Returns:
            (client, indices of its examples) of each participant, in aggregation order.
        """
        return [(client, client_indices[client]) for client in ctx.selected]

    def download(self, ctx: RoundContext, server: ServerState) -> StateDict:
        """Everything sent to each selected client (encoded and counted by the wire): the global
        model.

        Args:
            ctx: the round.
            server: the server state as the round begins.

        Returns:
            The broadcast, entry name → tensor: by default the global model's weights.
        """
        return server.weights

    def start_weights(
        self, ctx: RoundContext, received: StateDict, client_state: StateDict | None
    ) -> StateDict:
        """The weights a client's local training starts from: the model it received, unless the
        algorithm keeps a model of the client's own (local training, personalization).

        Args:
            ctx: the round.
            received: the decoded download.
            client_state: the client's own state; None before its first round.

        Returns:
            The start weights, entry name → tensor (read, never modified by the engine).
        """
        return received

    def local_callbacks(
        self, ctx: RoundContext, received: StateDict, client_state: StateDict | None
    ) -> list[LocalCallback]:
        """Hooks into the local training of one client; `client_state` is None before its first
        round.

        Args:
            ctx: the round.
            received: the decoded download.
            client_state: the client's own state; None before its first round.

        Returns:
            The callbacks of its local training (SCAFFOLD's gradient correction); none by default.
        """
        return []

    @abstractmethod
    def upload(
        self,
        ctx: RoundContext,
        received: StateDict,
        local: LocalResult,
        client_state: StateDict | None,
    ) -> tuple[ClientUpload, StateDict | None]:
        """What the client sends, and its new persistent state (None for stateless methods).

        Args:
            ctx: the round.
            received: the decoded download the client trained from.
            local: what its local training produced (weights valid until the next client's).
            client_state: the client's state before this round; None before its first round.

        Returns:
            The upload (its tensors counted byte for byte) and the client's new state.
        """

    def personal_training(
        self, ctx: RoundContext, received: StateDict, client_state: StateDict | None
    ) -> tuple[StateDict, list[LocalCallback]]:
        """Start weights and callbacks of a participant's second local training (with
        `personal_epochs` > 0), given its state after `upload`.

        Args:
            ctx: the round.
            received: the decoded download.
            client_state: the client's state as `upload` left it.

        Returns:
            The weights the second training starts from and its callbacks.
        """
        raise NotImplementedError

    def keep_personal(
        self, ctx: RoundContext, trained: LocalResult, client_state: StateDict | None
    ) -> StateDict:
        """The client's state after its second local training produced `trained` (whose weights
        the engine reuses: copy what is kept).

        Args:
            ctx: the round.
            trained: what the second local training produced.
            client_state: the client's state as `upload` left it.

        Returns:
            The client's new state.
        """
        raise NotImplementedError

    def split(self, ctx: RoundContext, upload: ClientUpload) -> dict[str, StateDict]:
        """The server's view of one decoded upload: each of `parts`' tensors.

        Args:
            ctx: the round.
            upload: one decoded upload.

        Returns:
            Part name → its tensors, for each part in `parts`; none by default.
        """
        return {}

    def upload_units(self, steps: int) -> float:
        """How many units of the upload's model part make the model update of a client that took
        `steps` local steps: 1 where the upload is the model update (FedNova's d_i = Δ_i/‖a_i‖₁
        needs ‖a‖₁). A private aggregation clips uploads to `privacy.clip` over this at its
        public step count, so that the clip bounds a model update whatever the upload is.

        Args:
            steps: the client's local steps.

        Returns:
            The factor from the upload's model part to the model update.
        """
        return 1.0

    def model_update_keys(self, ctx: RoundContext, tensors: StateDict) -> list[str]:
        """The entries of an upload that are the client's model update, what an attacking
        client forges (`fedlight.stages.attacks`): by default the trainable parameters' entries.

        Args:
            ctx: the round.
            tensors: an upload's tensors.

        Returns:
            The names of the entries that make the model update.
        """
        return [key for key in tensors if key in ctx.trainable]

    def server_update(
        self,
        ctx: RoundContext,
        server: ServerState,
        aggregates: Mapping[str, StateDict | None],
        contributors: Sequence[tuple[int, int, int]],
    ) -> ServerState:
        """The next server state from the round's aggregates (None: no client contributed to
        that part). `contributors` are (client, samples, steps) of the uploads, in order: the
        round's `public_contributors` (under a private aggregation, public stand-ins).

        Args:
            ctx: the round.
            server: the server state as the round began.
            aggregates: part name → its aggregate, None where no client contributed.
            contributors: (client, samples, steps) of the aggregated uploads, in order.

        Returns:
            The server state after the round.
        """
        return server

    def start_aggregation(self, sample_counts: Sequence[int]) -> RoundAggregation:
        """A round's accumulators for participants with these sample counts: the configurable
        parts through `aggregator`, the fixed ones as plain (weighted) means.

        Args:
            sample_counts: each participant's training examples, in aggregation order.

        Returns:
            The round's aggregation, one accumulator per part.
        """
        return RoundAggregation(self.parts, self.aggregator, Mean(), sample_counts)

    def contribution(self, ctx: RoundContext, upload: ClientUpload) -> Contribution:
        """One decoded upload as the server aggregates it: its sender and its `split` parts.

        Args:
            ctx: the round.
            upload: one decoded upload.

        Returns:
            Its contribution to the round's aggregation.
        """
        return Contribution(upload.contributor, self.split(ctx, upload))

    def evaluated_models(
        self, federation: Federation, server: ServerState, client_states: Mapping[int, StateDict]
    ) -> Iterable[StateDict]:
        """The models whose test metrics are reported (mean and spread): the global model, or
        with `per_client_models` all N clients' models (O(N) by definition, since the metric is
        their mean). The loop evaluates them one at a time as they are produced, so a disk store
        reads each model as it is evaluated instead of holding all N. `client_states` holds the
        algorithm's own client states.

        Args:
            federation: the run's fixed facts.
            server: the server state.
            client_states: the algorithm's client states, by client.

        Returns:
            The models to evaluate, each entry name → tensor, produced one at a time.
        """
        if not self.per_client_models:
            return [self.global_model(federation, server, client_states)]
        return (
            self.model_of_client(federation, server, client_states, client)
            for client in range(federation.num_clients)
        )

    def global_model(
        self, federation: Federation, server: ServerState, client_states: Mapping[int, StateDict]
    ) -> StateDict:
        """The run's one model, the one it exports (model.pt, model.ckpt) and, without
        `per_client_models`, the one it evaluates: the server's. With per-client models it is
        the shared model alone, no client's own parts (FedPer's and LG-FedAvg's personal layers
        stay at their initial weights in it, and `local` never changes it from the initial
        model); Ditto's is the global model it trains beside the personal ones.

        Args:
            federation: the run's fixed facts.
            server: the server state.
            client_states: the algorithm's client states, by client.

        Returns:
            The run's model, entry name → tensor.
        """
        return server.weights

    def model_of_client(
        self,
        federation: Federation,
        server: ServerState,
        client_states: Mapping[int, StateDict],
        client: int,
    ) -> StateDict:
        """The model client `client` would use, evaluated on its local test set: the global
        model, unless the method keeps a model of the client's own.

        Args:
            federation: the run's fixed facts.
            server: the server state.
            client_states: the algorithm's client states, by client.
            client: the client.

        Returns:
            Its model, entry name → tensor.
        """
        return server.weights


class OwnModel:
    """For algorithms whose client state is the client's whole model (local training, Ditto's
    personal model): that is the model it uses, the global one until it has trained."""

    def model_of_client(
        self,
        federation: Federation,
        server: ServerState,
        client_states: Mapping[int, StateDict],
        client: int,
    ) -> StateDict:
        return client_states.get(client, server.weights)
