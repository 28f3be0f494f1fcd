"""Top-k sparsification with error feedback: each upload keeps only its `ratio` largest-magnitude
entries (Stich, Cordonnier and Jaggi, "Sparsified SGD with Memory", NeurIPS 2018), and what it
drops stays with the client and is added to its next upload (error feedback; Karimireddy et al.,
"Error Feedback Fixes SignSGD", ICML 2019): e ← (Δ + e) − top_k(Δ + e).

The k entries are chosen per tensor (`scope: tensor`, k = ⌈ratio·n⌉ of each) or over the whole
update (`scope: update`, k = ⌈ratio·Σn⌉ shared by all tensors, so a tensor may send none). Each
float32 tensor travels as its kept values (float32) and their positions: a list of indices in the
narrowest integer type that holds n − 1 (uint8, int16 or int32), or a bitmap of n bits when that is
smaller (dense selections); its shape goes along (int32 per dimension), so the receiver needs
nothing but the payload (positions and shape are its metadata, which a later cast leaves alone).
Other dtypes travel unchanged. The residual is per-client state (the client-state store, memory
or disk, checkpointed).
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.tensors import StateDict
from fedlight.stages.compression.packing import pack_bits, unpack_bits
from fedlight.stages.wire.base import LossyTransform, Payload

SCOPES = ("tensor", "update")
VALUES, INDICES, BITMAP, SHAPE = ".values", ".indices", ".bitmap", ".shape"


def index_dtype(size: int) -> torch.dtype:
    """The narrowest integer type torch stores that holds the positions 0 … size − 1."""
    if size <= 2**8:
        return torch.uint8
    if size <= 2**15:
        return torch.int16
    return torch.int32


def encode_sparse(name: str, flat: Tensor, chosen: Tensor, shape: torch.Size) -> StateDict:
    """The payload of a tensor that keeps the entries at the sorted positions `chosen`: values,
    and positions as an index list or a bitmap, whichever takes fewer bytes."""
    size = flat.numel()
    dtype = index_dtype(size)
    payload = {name + VALUES: flat[chosen]}
    if math.ceil(size / 8) < chosen.numel() * torch.empty(0, dtype=dtype).element_size():
        mask = torch.zeros(size, dtype=torch.bool, device=flat.device)
        mask[chosen] = True
        payload[name + BITMAP] = pack_bits(mask.to(torch.int64), 1)
    else:
        payload[name + INDICES] = chosen.to(dtype)
    payload[name + SHAPE] = torch.tensor(list(shape), dtype=torch.int32)
    return payload


def decode_sparse(name: str, payload: StateDict) -> Tensor:
    """The dense float32 tensor of `encode_sparse`'s payload (zeros where nothing was sent)."""
    shape = torch.Size(payload[name + SHAPE].tolist())
    values = payload[name + VALUES]
    dense = torch.zeros(shape.numel(), dtype=values.dtype, device=values.device)
    if name + BITMAP in payload:
        dense[unpack_bits(payload[name + BITMAP], 1, shape.numel()).bool()] = values
    else:
        dense[payload[name + INDICES].to(torch.int64)] = values
    return dense.view(shape)


def sparse_names(payload: StateDict) -> list[str]:
    """The tensors a sparse payload stands for, in order."""
    return [key.removesuffix(SHAPE) for key in payload if key.endswith(SHAPE)]


@dataclass
class TopK(LossyTransform):
    ratio: float = 0.1  # share of entries kept
    scope: str = "tensor"  # tensor | update: k per tensor, or over the whole update
    error_feedback: bool = True

    def __post_init__(self) -> None:
        require(
            0 < self.ratio <= 1,
            f"compression.ratio={self.ratio} must be in (0, 1] (the share of entries sent)",
        )
        require(
            self.scope in SCOPES,
            f"compression.scope={self.scope} is not a scope; use tensor (k per tensor) or update "
            "(k over the whole update)",
        )

    def encode_values(self, ctx: RoundContext, client: int, tensors: Payload) -> Payload:
        values = {name: t for name, t in tensors.items() if self.compresses(name, t, tensors)}
        chosen = self.choose({name: t.reshape(-1) for name, t in values.items()})
        payload: StateDict = {}
        metadata = set(tensors.metadata)
        for name, t in tensors.items():
            if name not in values:
                payload[name] = t
                continue
            sparse = encode_sparse(name, t.reshape(-1), chosen[name], t.shape)
            payload |= sparse
            metadata |= sparse.keys() - {name + VALUES}
        return Payload(payload, metadata)

    def choose(self, flats: StateDict) -> dict[str, Tensor]:
        """The sorted positions each tensor keeps: its own top k, or its part of the update's."""
        if self.scope == "tensor":
            return {
                name: flat.abs().topk(math.ceil(self.ratio * flat.numel())).indices.sort().values
                for name, flat in flats.items()
            }
        if not flats:
            return {}
        magnitudes = torch.cat([flat.abs() for flat in flats.values()])
        kept = torch.zeros(magnitudes.numel(), dtype=torch.bool, device=magnitudes.device)
        kept[magnitudes.topk(math.ceil(self.ratio * magnitudes.numel())).indices] = True
        return {
            name: part.nonzero().view(-1)
            for name, part in zip(
                flats, kept.split([f.numel() for f in flats.values()]), strict=True
            )
        }

    def decode(
        self, ctx: RoundContext, client: int, payload: StateDict, state: StateDict | None
    ) -> tuple[StateDict, StateDict | None]:
        parts = {
            name + part for name in sparse_names(payload) for part in (VALUES, INDICES, BITMAP)
        }
        decoded: StateDict = {}
        for key, t in payload.items():
            if key.endswith(SHAPE):
                name = key.removesuffix(SHAPE)
                decoded[name] = decode_sparse(name, payload)
            elif key not in parts:
                decoded[key] = t
        return decoded, None
