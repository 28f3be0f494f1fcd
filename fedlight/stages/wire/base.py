"""The wire between server and clients, in the manner of FLSim's channels: before transmission
(encode), transmit and count, after reception (decode).

A `Wire` holds two chains of transforms, one for downloads and one for uploads. The sender applies
its chain in order, the bytes of the result are what the round counts, and the receiver undoes the
chain in reverse order; the client trains from the decoded download and the server aggregates the
decoded uploads. Both chains are empty by default (the identity: nothing is copied).

Down the chain a message is a `Payload`: its entries, and the names of those that are metadata
(what a transform needs to decode the others: a quantizer's norms, scales, zero points and shapes,
a sparse tensor's positions). A transform re-encodes values only and passes metadata bit for bit,
so a float16 cast after QSGD leaves its float32 norms as they are: a rounded norm would scale every
entry of its bucket by the same error, and one above 65504 would become infinite.

The wire is the last upload stage (`fedlight.stages.base`), named "wire": its `client_side`
encodes an upload, its `server_side` decodes it. A transform may keep state: the sender's in
`encode`, the receiver's in `decode`, under "<direction>.<name>/<key>" in the wire stage's state:
on a client its per-client state (in the client-state store, memory or disk), on the server the
wire's server state. Both travel in checkpoints, so a resumed run continues bit-exactly. A
transform's randomness comes from the round context's generators (stream WIRE, the round, the
client), the same on every worker.

A non-empty chain reports its time to the metrics channel, summed over the round's messages:
`wire.<direction>.encode_seconds` (on the sending side) and `wire.<direction>.decode_seconds`
(on the receiving side), so a sweep shows what a compressor costs besides what it saves.
"""

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload
from fedlight.core.tensors import StateDict
from fedlight.stages.base import ClientStep, UploadStage


class Payload(dict[str, Tensor]):
    """A message's entries on their way down a chain, with the names of its `metadata` entries,
    which every later transform passes unchanged."""

    def __init__(
        self, entries: Mapping[str, Tensor] | None = None, metadata: Iterable[str] = ()
    ) -> None:
        super().__init__(entries or {})
        self.metadata = frozenset(metadata)
        unknown = self.metadata - self.keys()
        if unknown:
            raise ValueError(f"payload metadata names no entry: {sorted(unknown)}")


class WireTransform(ABC):
    """One step of a chain: `encode` on the sending side, `decode` on the receiving side."""

    # Whether the transform keeps state on the sending side; a download chain's sender is the
    # server, which sends the same model to every client, so such transforms are upload-only.
    sender_state: bool = False
    # Whether `decode` keeps state on the receiving side; on the server that state must see every
    # upload in order, so such upload transforms need `fl.exchange=uploads` with several workers.
    receiver_state: bool = False

    @abstractmethod
    def encode(
        self, ctx: RoundContext, client: int, tensors: Payload, state: StateDict | None
    ) -> tuple[Payload, StateDict | None]:
        """What travels instead of `tensors`, and the sender's new state (None: none kept); the
        entries `tensors.metadata` names pass unchanged and stay metadata.

        Args:
            ctx: the round (its generators: stream WIRE).
            client: the client that sends or receives the message.
            tensors: the message as the previous transforms left it.
            state: the sender's state of this transform; None where there is none yet.

        Returns:
            The payload that travels and the sender's new state.
        """

    @abstractmethod
    def decode(
        self, ctx: RoundContext, client: int, payload: StateDict, state: StateDict | None
    ) -> tuple[StateDict, StateDict | None]:
        """The tensors `payload` stands for, and the receiver's new state (None: none kept).

        Args:
            ctx: the round.
            client: the client that sent or receives the message.
            payload: what arrived, as the later transforms' decoding left it.
            state: the receiver's state of this transform; None where there is none yet.

        Returns:
            The decoded tensors and the receiver's new state.
        """


class LossyTransform(WireTransform):
    """A transform whose decoding may differ from what was encoded, with error feedback written
    once for all of them (Seide et al. 2014; Stich et al., NeurIPS 2018; Karimireddy et al., "Error
    Feedback Fixes SignSGD", ICML 2019): with `error_feedback` the sender adds what it lost last
    time, e, to each value it compresses, and keeps e ← (v + e) − decode(encode(v + e)) as its
    state, so compression errors do not accumulate over rounds. A subclass writes `encode_values`
    (the payload of the corrected values) and `decode`; `compresses` says which entries it acts on
    (float32 values, not metadata)."""

    error_feedback: bool  # a dataclass field of each subclass

    @property
    def sender_state(self) -> bool:  # type: ignore[override]
        return self.error_feedback

    def compresses(self, name: str, t: Tensor, tensors: Payload) -> bool:
        """Whether the transform acts on one entry: float32 values, never metadata.

        Args:
            name: the entry's name.
            t: the entry.
            tensors: the whole message.

        Returns:
            True where it compresses the entry.
        """
        return t.dtype == torch.float32 and name not in tensors.metadata

    @abstractmethod
    def encode_values(self, ctx: RoundContext, client: int, tensors: Payload) -> Payload:
        """What travels instead of `tensors` (already corrected by the residual).

        Args:
            ctx: the round.
            client: the sending client.
            tensors: the message, corrected by the residual where there is error feedback.

        Returns:
            The payload that travels.
        """

    def encode(
        self, ctx: RoundContext, client: int, tensors: Payload, state: StateDict | None
    ) -> tuple[Payload, StateDict | None]:
        """`encode_values` of the values corrected by last time's residual, and the new residual.

        Args:
            ctx: the round.
            client: the sending client.
            tensors: the message as the previous transforms left it.
            state: the residual; None where there is none yet.

        Returns:
            The payload and the new residual (None without error feedback).
        """
        if not self.error_feedback:
            return self.encode_values(ctx, client, tensors), None
        compressed = [name for name, t in tensors.items() if self.compresses(name, t, tensors)]
        if state:
            corrected = {name: tensors[name] + state[name] for name in compressed if name in state}
            tensors = Payload(tensors | corrected, tensors.metadata)
        payload = self.encode_values(ctx, client, tensors)
        decoded, _ = self.decode(ctx, client, payload, None)
        return payload, {name: tensors[name] - decoded[name] for name in compressed}


def namespace_of(state: Mapping[str, object] | None, namespace: str) -> StateDict | None:
    """The entries of `state` under "<namespace>/", without the prefix; None if there are none."""
    if not state:
        return None
    prefix = namespace + "/"
    found = {key.removeprefix(prefix): t for key, t in state.items() if key.startswith(prefix)}
    return found or None  # type: ignore[return-value]


def with_namespace(state: StateDict, namespace: str, part: StateDict | None) -> StateDict:
    """`state` with its "<namespace>/" entries replaced by `part`."""
    prefix = namespace + "/"
    if part is None and not any(key.startswith(prefix) for key in state):
        return state  # unchanged: the caller can tell by identity
    kept = {key: t for key, t in state.items() if not key.startswith(prefix)}
    return kept | {prefix + key: t for key, t in (part or {}).items()}


@dataclass
class Wire(UploadStage):
    """The download and upload chains, each transform named (its state's namespace)."""

    name = "wire"
    upload: dict[str, WireTransform] = field(default_factory=dict)
    download: dict[str, WireTransform] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, transform in self.download.items():
            require(
                not transform.sender_state,
                f"wire.download.{name} keeps sender state (error feedback), which the server "
                "cannot keep per client while it sends one model to all; use it in wire.upload",
            )

    def encodes_uploads(self) -> bool:
        return bool(self.upload)

    def send(
        self,
        direction: str,
        ctx: RoundContext,
        client: int,
        tensors: StateDict,
        state: StateDict,
    ) -> tuple[StateDict, StateDict]:
        """The payload of `tensors` through the `direction` chain (a plain dict: what travels),
        and the sender's state."""
        chain = self.chain(direction)
        if not chain:
            return tensors, state
        started = time.perf_counter()
        payload = Payload(tensors)
        for name, transform in chain.items():
            namespace = f"{direction}.{name}"
            payload, part = transform.encode(ctx, client, payload, namespace_of(state, namespace))
            state = with_namespace(state, namespace, part)
        ctx.metrics.add(f"wire.{direction}.encode_seconds", time.perf_counter() - started)
        return dict(payload), state

    def receive(
        self,
        direction: str,
        ctx: RoundContext,
        client: int,
        payload: StateDict,
        state: StateDict,
    ) -> tuple[StateDict, StateDict]:
        """`send` undone (the chain in reverse), and the receiver's state."""
        chain = self.chain(direction)
        started = time.perf_counter()
        for name, transform in reversed(chain.items()):
            namespace = f"{direction}.{name}"
            payload, part = transform.decode(ctx, client, payload, namespace_of(state, namespace))
            state = with_namespace(state, namespace, part)
        if chain:
            ctx.metrics.add(f"wire.{direction}.decode_seconds", time.perf_counter() - started)
        return payload, state

    def client_side(
        self, step: ClientStep, upload: ClientUpload, state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        payload, sent = self.send(UPLOAD, step.ctx, step.client, upload.tensors, state or {})
        return replace(upload, tensors=payload), sent or None

    def server_side(
        self, ctx: RoundContext, upload: ClientUpload, state: StateDict
    ) -> tuple[ClientUpload, StateDict]:
        tensors, state = self.receive(UPLOAD, ctx, upload.client_id, upload.tensors, state)
        return replace(upload, tensors=tensors), state

    def chain(self, direction: str) -> dict[str, WireTransform]:
        return self.upload if direction == UPLOAD else self.download


UPLOAD = "upload"
DOWNLOAD = "download"
