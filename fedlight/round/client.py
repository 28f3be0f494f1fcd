"""The client pipeline, one participant at a time, shared by the synchronous and asynchronous
drivers: decode the download → the local task the engine trains (its epochs: `local_work`'s) →
after training, the algorithm's upload → the upload stages in order (selection's report, an
attack, privacy's clip, the wire) → a second, personal training where the algorithm keeps a
personal model (Ditto).

Client state is typed (`ClientState`): the algorithm's part and each stage's, by name. The
pipeline reads it once before training and returns the new state only where something changed,
so a client whose stages and algorithm keep nothing writes nothing to its store.
"""

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from torch import Tensor

from fedlight.algorithms.base import Algorithm
from fedlight.core.context import RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.messages import REPORTED_NUMBER_BYTES, ClientState, ClientUpload, LocalResult
from fedlight.core.tensors import StateDict, nbytes
from fedlight.engines.base import Engine, LocalTask
from fedlight.local_work.base import LocalWork
from fedlight.local_work.fixed import Fixed
from fedlight.stages.base import ClientStep, UploadStage
from fedlight.stages.pool import ClientPool
from fedlight.stages.wire.base import DOWNLOAD, Wire


@dataclass
class Received:
    """What a participant holds while it trains: the decoded download and its state."""

    download: StateDict
    state: ClientState
    bytes_down: int  # the encoded download and the stages' protocol messages
    task: LocalTask  # its local training, as the engine is given it


@dataclass
class Sent:
    """A participant's side of the round once its upload is encoded."""

    upload: ClientUpload  # as encoded for the wire, with the stages' reports
    state: ClientState | None  # its new state; None: unchanged
    bytes_up: int  # the encoded tensors, every reported number, the stages' protocol messages
    examples: int  # examples trained on (its personal training included)
    seconds: float  # the personal training's time (the round's is the engine's)


def passed_on(stage: UploadStage, returned: Any) -> tuple[ClientUpload, StateDict | None]:
    """What a stage's `client_side` returned, checked: (upload, state), else one line naming the
    stage (a plugged-in stage's slip would end in a traceback far from it, or a dict of two
    entries would pass for its keys)."""
    if (
        isinstance(returned, tuple)
        and len(returned) == 2
        and isinstance(returned[0], ClientUpload)
        and (returned[1] is None or isinstance(returned[1], Mapping))
    ):
        return returned
    what = "None" if returned is None else f"a {type(returned).__name__}"
    raise ConfigError(
        f"{stage.name}: {type(stage).__qualname__}.client_side returned {what}, not (upload, "
        "state); return the ClientUpload it passes on and the stage's client state (None: none), "
        "as fedlight.UploadStage.client_side says"
    )


@dataclass
class ClientPipeline:
    """The client side of a round (module docstring); `stages` in chain order, the wire last."""

    algorithm: Algorithm
    stages: Sequence[UploadStage]
    wire: Wire
    label_map: Tensor | None = None  # a malicious client's labels (`Attack.label_map`)
    personal_engine: Engine | None = None  # the algorithm's second training, if any
    local_work: LocalWork = field(default_factory=Fixed)  # each participant's local epochs

    def receive(
        self,
        ctx: RoundContext,
        client: int,
        indices: Tensor,
        download: StateDict,
        server_wire: StateDict,
        stored: StateDict | None,
    ) -> Received:
        """The download encoded (server side), counted and decoded (client side), and the local
        task the client trains from it and from its `stored` state."""
        state = ClientState.of(stored)
        payload, _ = self.wire.send(DOWNLOAD, ctx, client, download, server_wire)
        wire_state = state.stages.get(self.wire.name, {})
        decoded, wire_state = self.wire.receive(DOWNLOAD, ctx, client, payload, wire_state)
        state = state.with_stage(self.wire.name, wire_state)
        own = state.algorithm
        start = self.algorithm.start_weights(ctx, decoded, own)
        callbacks = self.algorithm.local_callbacks(ctx, decoded, own)
        labels = self.label_map if client in ctx.federation.malicious else None
        epochs = self.local_work.epochs(ctx, client)
        task = LocalTask(client, indices, start, callbacks, labels, epochs)
        protocol = sum(stage.protocol_bytes(ctx, client)[1] for stage in self.stages)
        return Received(decoded, state, nbytes(payload) + protocol, task)

    def upload(
        self,
        ctx: RoundContext,
        got: Received,
        local: LocalResult,
        broadcast: Mapping[str, StateDict],
        pool: ClientPool,
    ) -> Sent:
        """The algorithm's upload through every stage in order, then the personal training."""
        own = got.state.algorithm
        upload, new_own = self.algorithm.upload(ctx, got.download, local, own)
        state = got.state
        if new_own is not None and new_own is not own:
            state = ClientState(new_own, state.stages)
        client = local.client_id
        step = ClientStep(ctx, client, local, self.algorithm, broadcast, pool, self.stages)
        for stage in self.stages:
            before = state.stages.get(stage.name)
            upload, after = passed_on(stage, stage.client_side(step, upload, before))
            if after is not before:
                state = state.with_stage(stage.name, after)
        examples, seconds = local.examples, 0.0
        if self.personal_engine is not None:
            started = time.perf_counter()
            personal, examples_personal = self.train_personal(ctx, got, state.algorithm)
            state = ClientState(personal, state.stages)
            seconds = time.perf_counter() - started
            examples += examples_personal
        bytes_up = nbytes(upload.tensors) + REPORTED_NUMBER_BYTES * upload.reported_numbers
        bytes_up += sum(stage.protocol_bytes(ctx, client)[0] for stage in self.stages)
        return Sent(upload, None if state is got.state else state, bytes_up, examples, seconds)

    def train_personal(
        self, ctx: RoundContext, got: Received, own: StateDict | None
    ) -> tuple[StateDict, int]:
        """A participant's second local training (Ditto's personal model), after its upload was
        computed, on the personal engine, on the same examples (and labels) as its first; its
        new algorithm state and the examples it trained on."""
        assert self.personal_engine is not None
        start, callbacks = self.algorithm.personal_training(ctx, got.download, own)
        task = replace(got.task, start=start, callbacks=callbacks)
        (trained,) = self.personal_engine.train([task], ctx.round_index, list(ctx.lrs))
        return self.algorithm.keep_personal(ctx, trained, own), trained.examples
