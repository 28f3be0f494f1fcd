"""The contract of an attack: who is malicious, and where in the round the attack acts.

The malicious clients are a fixed set drawn once from the run's seed (stream ATTACK): the first
`count` (or `fraction` · N) of a seeded permutation of the clients, so every worker and every
resumed run agree on them. A malicious client is selected like any other; in the rounds it takes
part in, the attack acts at one of three places, each a hook that does nothing by default:

- on its data (`label_map`): local training reads its labels through a map, the dataset is never
  copied;
- on its upload, client side, before the wire (`corrupt`): it sees only its own update;
- after the gather, server side (`forge`, with `after_gather`): an omniscient attacker that knows
  the round's benign updates (ALIE, IPM). Every worker holds every decoded upload there, so the
  forgery is the same on all of them; the round cannot stream its uploads into running sums.

Attacks act on the entries of an upload that are the client's model update
(`Algorithm.model_update_keys`: FedAvg's parameter deltas, SCAFFOLD's Δy), not on buffers or
SCAFFOLD's control deltas. The test accuracy a run reports stays the clean accuracy of the global
model on the untouched test set.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from fedlight.aggregation.robust_base import flatten, unflatten
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload
from fedlight.core.rng import Stream, numpy_generator
from fedlight.core.tensors import StateDict
from fedlight.stages.base import ClientStep, UploadStage

if TYPE_CHECKING:
    from fedlight.algorithms.base import Algorithm
    from fedlight.core.context import Federation, RoundContext


@dataclass
class Attack(UploadStage):
    """`attack.fraction` of the N clients (or exactly `attack.count`) are malicious; as an
    upload stage it corrupts their uploads (`client_side`) or forges them (`gathered`)."""

    name = "attack"
    fraction: float = 0.0
    count: int | None = None

    after_gather: ClassVar[bool] = False  # acts in `forge`, on the gathered uploads

    def __post_init__(self) -> None:
        require(
            0 <= self.fraction <= 1,
            f"attack.fraction={self.fraction} must be in [0, 1] (the share of malicious clients)",
        )
        require(
            self.count is None or self.count >= 0,
            f"attack.count={self.count} must be ≥ 0 (or null to use attack.fraction)",
        )

    def num_malicious(self, num_clients: int) -> int:
        if self.count is not None:
            require(
                self.count <= num_clients,
                f"attack.count={self.count} exceeds fl.num_clients={num_clients}; lower it",
            )
            return self.count
        return round(self.fraction * num_clients)

    def malicious_clients(self, num_clients: int, seed: int) -> frozenset[int]:
        """The malicious clients: the first of a permutation drawn from (seed, ATTACK)."""
        order = numpy_generator(seed, Stream.ATTACK).permutation(num_clients)
        return frozenset(int(client) for client in order[: self.num_malicious(num_clients)])

    def label_map(self, num_classes: int, device: torch.device) -> Tensor | None:
        """A malicious client's label of each true label (None: it trains on its true labels)."""
        return None

    def corrupt(self, ctx: "RoundContext", client: int, update: StateDict) -> StateDict:
        """What a malicious client sends instead of its model update `update` (client side)."""
        return update

    def forge(self, ctx: "RoundContext", benign: Tensor, num_malicious: int) -> Tensor:
        """The update every malicious participant sends, from the round's benign updates as the
        rows of `benign` [b, d] and the number of malicious participants (after the gather)."""
        raise NotImplementedError(f"{type(self).__name__} does not act after the gather")

    def holds_uploads(self, federation: "Federation") -> bool:
        return self.after_gather and bool(federation.malicious)

    def needs_each_upload(self) -> bool:
        return self.after_gather and bool(self.count or self.fraction)

    def asynchronous_refusal(self) -> str | None:
        if not self.needs_each_upload():
            return None
        return (
            "it forges from a round's benign updates, which an asynchronous server never holds "
            "together; use a client-side attack (sign_flip, gaussian, scaled, label_flip)"
        )

    def client_side(
        self, step: ClientStep, upload: ClientUpload, state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        if step.client not in step.ctx.federation.malicious:
            return upload, state
        keys = step.algorithm.model_update_keys(step.ctx, upload.tensors)
        return self.corrupt_upload(step.ctx, upload, keys), state

    def gathered(
        self, ctx: "RoundContext", uploads: Iterable[ClientUpload], algorithm: "Algorithm"
    ) -> Iterable[ClientUpload]:
        def keys_of(upload: ClientUpload) -> list[str]:
            return algorithm.model_update_keys(ctx, upload.tensors)

        return self.forge_uploads(ctx, uploads, ctx.federation.malicious, keys_of)

    def corrupt_upload(
        self, ctx: "RoundContext", upload: ClientUpload, keys: Sequence[str]
    ) -> ClientUpload:
        """A malicious client's upload with its model-update entries `keys` corrupted."""
        corrupted = self.corrupt(ctx, upload.client_id, {key: upload.tensors[key] for key in keys})
        return replace(upload, tensors=upload.tensors | corrupted)

    def forge_uploads(
        self,
        ctx: "RoundContext",
        uploads: Iterable[ClientUpload],
        malicious: frozenset[int],
        keys_of: Callable[[ClientUpload], list[str]],
    ) -> Iterable[ClientUpload]:
        """The round's decoded uploads with the malicious participants' model updates replaced
        by `forge` of the benign ones (unchanged when the round has no malicious or no benign
        participant). Only an attack that acts here holds them all; otherwise they pass through
        one at a time."""
        if not (self.after_gather and malicious):
            return uploads
        uploads = list(uploads)
        bad = [upload for upload in uploads if upload.client_id in malicious]
        good = [upload for upload in uploads if upload.client_id not in malicious]
        if not (bad and good):
            return uploads
        keys = keys_of(good[0])
        benign = torch.stack([flatten({key: u.tensors[key] for key in keys}) for u in good])
        like = {key: good[0].tensors[key] for key in keys}
        forged = unflatten(self.forge(ctx, benign, len(bad)), like)
        return [
            replace(upload, tensors=upload.tensors | forged)
            if upload.client_id in malicious
            else upload
            for upload in uploads
        ]
