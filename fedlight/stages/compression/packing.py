"""Fixed-width bit packing, so a quantizer's payload holds exactly `bits` bits per entry, and the
payload layout the quantizers share: each float32 tensor `<name>` travels as entries
`<name>.<part>`, one of them `<name>.shape` (int32 dims), so the receiver needs no model.

Value i occupies stream bits i·bits … i·bits + bits − 1, least significant bit first, and stream
bit k is bit k mod 8 of byte k // 8 (little-endian bit order); the last byte is padded with zeros.
Vectorized: the only Python loops run over the bit positions, never over the entries.
"""

from collections.abc import Callable

import torch
from torch import Tensor

from fedlight.core.tensors import StateDict

MAX_BITS = 16


def packed_size(count: int, bits: int) -> int:
    """Bytes that `count` values of `bits` bits take: ⌈count·bits/8⌉."""
    return -(-count * bits // 8)


def pack_bits(values: Tensor, bits: int) -> Tensor:
    """`values` (integers in [0, 2^bits), any shape, flattened) as a uint8 stream of `bits` bits
    per value."""
    check_bits(bits)
    flat = values.reshape(-1).to(torch.int64)
    count = flat.numel()
    if count and (int(flat.min()) < 0 or int(flat.max()) >= 1 << bits):
        raise ValueError(f"pack_bits: values must lie in [0, {(1 << bits) - 1}] for {bits} bits")
    stream = torch.zeros(packed_size(count, bits) * 8, dtype=torch.uint8, device=flat.device)
    for j in range(bits):
        stream[j : count * bits : bits] = ((flat >> j) & 1).to(torch.uint8)
    stream = stream.view(-1, 8)
    packed = torch.zeros(stream.shape[0], dtype=torch.uint8, device=flat.device)
    for b in range(8):
        packed |= stream[:, b] << b
    return packed


def unpack_bits(packed: Tensor, bits: int, count: int) -> Tensor:
    """The first `count` values of `bits` bits in the uint8 stream `packed`, as int64."""
    check_bits(bits)
    if packed.dtype != torch.uint8 or packed.numel() != packed_size(count, bits):
        raise ValueError(
            f"unpack_bits: {count} values of {bits} bits need {packed_size(count, bits)} uint8 "
            f"bytes, got {packed.numel()} of {packed.dtype}"
        )
    flat = packed.reshape(-1)
    stream = torch.stack([(flat >> b) & 1 for b in range(8)], dim=1).reshape(-1)
    values = torch.zeros(count, dtype=torch.int64, device=packed.device)
    for j in range(bits):
        values |= stream[j : count * bits : bits].to(torch.int64) << j
    return values


def check_bits(bits: int) -> None:
    if not 1 <= bits <= MAX_BITS:
        raise ValueError(f"bits must be between 1 and {MAX_BITS}, got {bits}")


def shape_tensor(t: Tensor) -> Tensor:
    """The dims of `t` as an int32 tensor (what `<name>.shape` carries)."""
    return torch.tensor(t.shape, dtype=torch.int32, device=t.device)


def put(payload: StateDict, key: str, t: Tensor) -> None:
    """Sets `payload[key]`, refusing to overwrite an entry (a model entry literally named like
    another's part, e.g. "w.norm" next to "w", would otherwise be lost)."""
    if key in payload:
        raise ValueError(f"payload entry {key!r} would be written twice")
    payload[key] = t


def add_parts(payload: StateDict, name: str, parts: dict[str, Tensor]) -> None:
    """Puts `parts` into `payload` as `<name>.<part>`."""
    for part, t in parts.items():
        put(payload, f"{name}.{part}", t)


def decode_parts(
    payload: StateDict, parts: tuple[str, ...], decode: Callable[[str], Tensor]
) -> StateDict:
    """`payload` with every complete group `<name>.<part>` (all of `parts`) replaced by
    `decode(name)` at the place of its first part; other entries pass unchanged, in order."""
    names = {
        key.removesuffix(".shape")
        for key in payload
        if key.endswith(".shape")
        and all(f"{key.removesuffix('.shape')}.{part}" in payload for part in parts)
    }
    owned = {f"{name}.{part}": name for name in names for part in parts}
    decoded: StateDict = {}
    for key, t in payload.items():
        if key not in owned:
            decoded[key] = t
        elif owned[key] not in decoded:
            decoded[owned[key]] = decode(owned[key])
    return decoded
