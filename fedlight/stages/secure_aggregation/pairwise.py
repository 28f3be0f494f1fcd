"""Secure aggregation with pairwise additive masks, simulated (Bonawitz et al., "Practical Secure
Aggregation for Privacy-Preserving Machine Learning", CCS 2017, the semi-honest protocol).

Every client u of the round's selection U (`ctx.selected`: all of them take part in the key
agreement, so a client without data, one that fails, misses the deadline or whose update is not
finite is a dropout) uploads, per entry of each part the server aggregates,

    y_u = x_u + PRG(b_u) + Σ_{v ∈ U, u < v} PRG(s_uv) − Σ_{v ∈ U, v < u} PRG(s_uv)   (mod 2^bits)

where x_u is its part already weighted as the round's aggregation weighs it (its sample count, or
DP-FedAvg's weight 1), in fixed point (round(x · 2^fraction_bits)). A single y_u is uniform on the
ring whatever x_u is. In the sum over the survivors S the pairwise masks between survivors
cancel; the server removes the survivors' self masks b_s and the masks s_sd each survivor shared
with a dropout d, which the protocol lets it reconstruct from the survivors' Shamir shares when
|S| ≥ t; with fewer the round is refused (`RoundRefused`: the global model is kept). The server
then divides the unmasked sum by its weights' total, the algorithm's aggregation as usual (so
DP-FedAvg adds its noise to the sum's mean, and a dropout renormalizes the mean over the others).

A client whose update has a NaN or Inf entry sends none of it (`ClientUpload.withheld`; one NaN
would otherwise carry every other entry in the clear): the server counts it rejected and
recovers its masks as any dropout's. A stage before this one that decodes on the server
(`decodes_uploads`) is refused, as it would decode ring elements; so is one after it that
re-encodes them.

Simulated: the key agreement's secrets are the derived generators of (seed, SECURE_AGGREGATION,
round, client or pair) instead of Diffie-Hellman keys, and the shares are not computed; what the
protocol's messages cost is counted (`protocol_bytes`). What the server sees of each client
besides the masked tensors (its sample and step counts, training loss, logged values, stage
reports, saturated entries) is listed in docs/configuration.md, "What secure aggregation hides";
a round it cannot unmask reports no participant's training loss or logged value, and no round
gives the loggers per-client rows (`hides_uploads`), since the protocol reveals nothing of one
client.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import floor

import torch
from torch import Tensor

from fedlight.aggregation.base import (
    Accumulator,
    Contribution,
    RoundAggregation,
    RoundRefused,
    all_finite,
)
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload
from fedlight.core.rng import Stream
from fedlight.core.tensors import StateDict
from fedlight.stages.base import ClientStep, Plan, round_aggregation
from fedlight.stages.secure_aggregation.none import SecureAggregation

# Protocol message sizes (bytes): an X25519 public key, a Shamir share of a 32-byte secret, a
# client id, and AES-GCM's nonce and tag on each encrypted share message.
KEY_BYTES = 32
SHARE_BYTES = 32
ID_BYTES = 4
AEAD_BYTES = 28


def storage_dtype(bits: int) -> torch.dtype:
    """The smallest signed integer type holding a ring element of `bits` bits."""
    return torch.int32 if bits <= 31 else torch.int64


@dataclass
class PairwiseMasking(SecureAggregation):
    """`secure_aggregation=pairwise`: see the module docstring."""

    bits: int = 62  # the ring Z_2^bits
    fraction_bits: int = 32  # fixed point: x ↦ round(x · 2^fraction_bits)
    threshold: float = 0.5  # t = max(2, ⌊threshold·|U|⌋ + 1) survivors unmask a round

    def __post_init__(self) -> None:
        require(
            8 <= self.bits <= 62,
            f"secure_aggregation.bits={self.bits} must lie in [8, 62] (int64 ring arithmetic)",
        )
        require(
            0 <= self.fraction_bits < self.bits - 1,
            f"secure_aggregation.fraction_bits={self.fraction_bits} must lie in [0, "
            f"{self.bits - 2}] (below secure_aggregation.bits - 1)",
        )
        require(
            0 <= self.threshold < 1,
            f"secure_aggregation.threshold={self.threshold} must lie in [0, 1) (a fraction of "
            "the round's selected clients)",
        )

    @property
    def modulus_mask(self) -> int:
        return (1 << self.bits) - 1

    def check_run(self, plan: Plan) -> None:
        algorithm, choices = plan.algorithm, plan.choices
        require(
            bool(algorithm.parts),
            f"secure_aggregation=pairwise does not apply to algo={choices.get('algo')}: it "
            "aggregates no client updates; use an algorithm that does (e.g. algo=fedavg)",
        )
        require(
            algorithm.aggregator.sums_updates,
            f"secure_aggregation=pairwise shows the server only the sum of the uploads; "
            f"aggregator={algorithm.aggregator.option} needs each update; use aggregator=mean",
        )
        for stage in plan.before(self):
            require(
                not stage.needs_each_upload(),
                f"{stage.name}={choices.get(stage.name)} needs each decoded upload on the server, "
                "which secure_aggregation=pairwise hides; use secure_aggregation=none",
            )
            require(
                not stage.decodes_uploads(),
                f"{stage.name}={choices.get(stage.name)} ({type(stage).__name__}) decodes each "
                "upload on the server, which secure_aggregation=pairwise leaves masked (it would "
                f"decode ring elements); choose a {stage.name} option without a server side, or "
                "secure_aggregation=none",
            )
        for stage in plan.after(self):
            require(
                not stage.encodes_uploads(),
                f"upload={choices.get('upload')} with secure_aggregation=pairwise: the {stage.name}"
                " would re-encode the masked ring elements, which must reach the server as they "
                "are (secure_aggregation.bits sets their size); use upload=[]",
            )
        clients = plan.settings.fl.clients_per_round
        require(
            clients >= 2,
            f"fl.clients_per_round={clients}: secure_aggregation=pairwise needs at least 2 "
            "clients a round (one client's sum is its upload)",
        )
        require(
            self.bound(clients) >= 1 << self.fraction_bits,
            f"secure_aggregation.bits={self.bits} leaves no room for {clients} clients' values "
            f"at secure_aggregation.fraction_bits={self.fraction_bits}; raise bits or lower "
            "fraction_bits",
        )

    def hides_uploads(self) -> bool:
        return True

    def asynchronous_refusal(self) -> str | None:
        return (
            "its masks cancel only in the sum of one round's fixed set of clients, and an "
            "asynchronous server aggregates whoever arrives; use a synchronous algorithm"
        )

    def bound(self, clients: int) -> int:
        """The largest fixed-point magnitude one of `clients` may send: their sum stays within
        the ring's signed range."""
        return ((1 << (self.bits - 1)) - 1) // max(clients, 1)

    def survivors_needed(self, selected: int) -> int:
        return max(2, floor(self.threshold * selected) + 1)

    def protocol_bytes(self, ctx: RoundContext, client: int) -> tuple[int, int]:
        """The key agreement of Bonawitz et al.'s rounds 0-1 and 3 for |U| clients: two public
        keys up and everyone else's down; one encrypted message of two shares to and from each
        other client; one share per other client at unmasking, and the survivors' list down."""
        others = len(ctx.selected) - 1
        share_message = 3 * ID_BYTES + AEAD_BYTES + 2 * SHARE_BYTES
        up = 2 * KEY_BYTES + others * share_message + others * (ID_BYTES + SHARE_BYTES)
        down = others * (ID_BYTES + 2 * KEY_BYTES) + others * share_message
        return up, down + (others + 1) * ID_BYTES

    def client_side(
        self, step: ClientStep, upload: ClientUpload, state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        ctx, algorithm = step.ctx, step.algorithm
        parts = algorithm.split(ctx, upload)
        contribution = Contribution(upload.contributor, parts)
        if not all_finite(parts):  # no entry leaves unmasked: the client drops out
            return replace(upload, tensors={}, withheld=True), state
        aggregation = round_aggregation(
            ctx, algorithm, step.stages, step.broadcast, [upload.num_samples]
        )
        weights = aggregation.weights(contribution)
        where = {id(t): (name, key) for name, part in parts.items() for key, t in part.items()}
        masked: dict[str, StateDict] = {}
        saturated = 0
        for index, name in enumerate(sorted(parts)):
            part = parts[name]
            fixed, clipped = self.encode(part, weights[name], len(ctx.selected))
            saturated += clipped
            masked[name] = self.masked(ctx, step.client, index, len(parts), fixed)
        ctx.metrics.add("secure_aggregation.saturated", saturated)
        tensors = {
            key: masked[where[id(t)][0]][where[id(t)][1]]
            for key, t in upload.tensors.items()
            if id(t) in where
        }
        if len(tensors) != len(where):
            raise RuntimeError(
                f"{type(algorithm).__name__}.split must hand out the upload's own tensors (a "
                "partition of its entries) for secure aggregation to mask them"
            )
        return replace(upload, tensors=tensors), state

    def encode(self, part: StateDict, weight: float, clients: int) -> tuple[StateDict, int]:
        """The part's entries times `weight` in fixed point, each within `bound`, as signed
        int64; and how many entries were saturated to the bound."""
        bound, scale = self.bound(clients), float(1 << self.fraction_bits)
        fixed: StateDict = {}
        saturated = 0
        for key, t in part.items():
            value = torch.round(t.to(torch.float64) * (weight * scale))
            saturated += int((value.abs() > bound).sum())
            fixed[key] = value.clamp(-bound, bound).to(torch.int64)
        return fixed, saturated

    def masked(
        self, ctx: RoundContext, client: int, index: int, count: int, fixed: StateDict
    ) -> StateDict:
        """y_u of part `index` (of `count`): the fixed-point entries plus the client's self mask
        and its pairwise masks with every other selected client, on the ring, stored small."""
        keys = sorted(fixed)
        vector = torch.cat([fixed[key].reshape(-1) for key in keys]) if keys else None
        if vector is None:
            return {}
        mask = self.modulus_mask
        total = (vector + self.prg(ctx, self_code(client), index, count, vector.numel())) & mask
        for other in ctx.selected:
            if other == client:
                continue
            pad = self.prg(ctx, pair_code(ctx, client, other), index, count, vector.numel())
            total = (total + pad if client < other else total - pad) & mask
        dtype = storage_dtype(self.bits)
        out: StateDict = {}
        start = 0
        for key in keys:
            numel = fixed[key].numel()
            out[key] = total[start : start + numel].reshape(fixed[key].shape).to(dtype)
            start += numel
        return out

    def prg(self, ctx: RoundContext, code: int, index: int, count: int, numel: int) -> Tensor:
        """The pseudorandom ring vector of a shared secret (`code`: a client's self mask or a
        pair's), for part `index` of `count`, from the derived generator."""
        seed = ctx.seed_for(Stream.SECURE_AGGREGATION, code * count + index)
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(0, 1 << self.bits, (numel,), generator=generator, dtype=torch.int64)

    def adapt_aggregation(
        self, ctx: RoundContext, state: StateDict, aggregation: RoundAggregation
    ) -> RoundAggregation:
        """Each part's accumulator replaced by a masked sum over the ring, unmasked once the
        round is in and handed to the original accumulator as the weighted sum."""
        unmasking = Unmasking(self, ctx, aggregation)
        names = sorted(aggregation.accumulators)
        aggregation.accumulators = {
            name: MaskedSum(accumulator, unmasking, names.index(name), len(names))
            for name, accumulator in aggregation.accumulators.items()
        }
        return aggregation


def self_code(client: int) -> int:
    return client


def pair_code(ctx: RoundContext, a: int, b: int) -> int:
    """One number per unordered pair of clients, after the self masks' codes."""
    low, high = min(a, b), max(a, b)
    return ctx.num_clients * (1 + low) + high


@dataclass
class Unmasking:
    """What the server removes from a round's masked sums: the survivors' self masks and their
    pairwise masks with the dropouts, recovered from the survivors' shares."""

    masking: PairwiseMasking
    ctx: RoundContext
    aggregation: RoundAggregation

    def survivors(self) -> list[int]:
        """The clients whose masked upload was added; refuses the round when fewer than t."""
        survivors = [contributor.client for contributor in self.aggregation.contributors]
        selected = len(self.ctx.selected)
        needed = self.masking.survivors_needed(selected)
        if len(survivors) < needed:
            raise RoundRefused(
                f"secure aggregation: {len(survivors)} of the round's {selected} clients "
                f"delivered, fewer than the t={needed} needed to recover the dropped clients' "
                f"masks (secure_aggregation.threshold={self.masking.threshold})"
            )
        return survivors

    def correction(self, index: int, count: int, numel: int) -> Tensor:
        """Σ_s PRG(b_s) + Σ_{s,d} ±PRG(s_sd) over survivors s and dropouts d, for part `index`."""
        masking, ctx = self.masking, self.ctx
        survivors = self.survivors()
        dropouts = sorted(set(ctx.selected) - set(survivors))
        total = torch.zeros(numel, dtype=torch.int64)
        for survivor in survivors:
            total = (total + masking.prg(ctx, self_code(survivor), index, count, numel)) & (
                masking.modulus_mask
            )
            for dropout in dropouts:
                pad = masking.prg(ctx, pair_code(ctx, survivor, dropout), index, count, numel)
                total = (total + pad if survivor < dropout else total - pad) & (
                    masking.modulus_mask
                )
        return total


class MaskedSum(Accumulator):
    """One part's masked uploads summed over the ring (each was weighted by its client); the
    unmasked, decoded sum goes to the original accumulator (`add_sum`), which divides it by its
    total and renormalizes for the clients left out."""

    def __init__(self, inner: Accumulator, unmasking: Unmasking, index: int, count: int) -> None:
        self.inner, self.unmasking = inner, unmasking
        self.index, self.count = index, count
        self.sums: StateDict | None = None

    @property
    def mask(self) -> int:
        return self.unmasking.masking.modulus_mask

    def add(self, update: StateDict, weight: float) -> None:
        """A masked upload (its client applied `weight` before masking)."""
        if self.sums is None:
            self.sums = {key: t.to(torch.int64, copy=True) for key, t in update.items()}
            return
        for key, total in self.sums.items():
            total.add_(update[key]).bitwise_and_(self.mask)

    def reject(self, weight: float) -> None:
        self.inner.reject(weight)

    def partial(self) -> StateDict | None:
        return self.sums

    def merge(self, partials: Sequence[StateDict | None]) -> None:
        self.inner.merge([])  # its bookkeeping restarts; the round's rejections come again
        self.sums = None
        for partial in partials:
            if partial is not None:
                self.add(partial, 1.0)

    def result(self) -> StateDict | None:
        if not self.sums:  # nobody's, or an empty part (a model without buffers)
            if self.sums is not None:
                self.inner.add_sum({})
            return self.inner.result()
        keys = sorted(self.sums)
        flat = torch.cat([self.sums[key].reshape(-1) for key in keys])
        correction = self.unmasking.correction(self.index, self.count, flat.numel())
        masking = self.unmasking.masking
        unmasked = (flat - correction) & self.mask
        half = 1 << (masking.bits - 1)
        signed = torch.where(unmasked >= half, unmasked - (1 << masking.bits), unmasked)
        values = signed.to(torch.float64) / float(1 << masking.fraction_bits)
        offsets, start = {}, 0
        for key in keys:
            offsets[key] = start
            start += self.sums[key].numel()
        weighted = {
            key: values[offsets[key] : offsets[key] + t.numel()].reshape(t.shape)
            for key, t in self.sums.items()
        }
        self.inner.add_sum(weighted)
        return self.inner.result()
