"""Casting float32 tensors to a 16-bit float for the wire: half the bytes of every float32 entry.

Decoding casts back to float32, so the receiver computes with exactly the values the 16-bit type
can hold. With `error_feedback` the sender keeps what the cast lost, e_i ← (u + e_i) − cast(u +
e_i), and adds it to its next message (`LossyTransform`: error feedback written once), so rounding
errors do not accumulate over rounds; e_i is per-client state. Other dtypes (float64, integer
buffers) and the payload's metadata (after a quantizer: its float32 norms, scales and zero points,
see `fedlight.stages.wire.base.Payload`) travel unchanged, so a cast after `qsgd`, `int8` or `sign`
(`upload=[qsgd,fp16]`) leaves their payload as it is. An entry that is already of the 16-bit type
(a model's own float16 buffer) also travels unchanged, marked by an empty entry
`<name>.kept_<dtype>` (no byte) so that decoding, which casts the rest back, leaves it in its
dtype: only what was encoded is decoded.

Reported per round (metrics channel): `wire.<dtype>.sq_error`, the squared rounding error Σ_i ‖v_i
− cast(v_i)‖² summed over the round's messages (v_i with error feedback included), so a sweep shows
what the cast cost."""

from dataclasses import dataclass
from typing import ClassVar

import torch

from fedlight.core.context import RoundContext
from fedlight.core.tensors import StateDict
from fedlight.stages.wire.base import LossyTransform, Payload


@dataclass
class Cast(LossyTransform):
    error_feedback: bool = False

    dtype: ClassVar[torch.dtype] = torch.float16

    def encode_values(self, ctx: RoundContext, client: int, tensors: Payload) -> Payload:
        payload: StateDict = {}
        marks = set()
        squared_error = 0.0
        for name, t in tensors.items():
            if self.compresses(name, t, tensors):
                payload[name] = t.to(self.dtype)
                residual = t - payload[name].to(torch.float32)
                squared_error += float(residual.double().square().sum())
                continue
            payload[name] = t
            if t.dtype == self.dtype:  # the sender's own: marked, so that decoding leaves it
                mark = self.mark(name)
                if mark in tensors:
                    raise ValueError(f"payload entry {mark!r} would be written twice")
                payload[mark] = torch.empty(0, dtype=torch.uint8, device=t.device)
                marks.add(mark)
        ctx.metrics.add(f"wire.{self.dtype_name()}.sq_error", squared_error)
        return Payload(payload, tensors.metadata | marks)

    def decode(
        self, ctx: RoundContext, client: int, payload: StateDict, state: StateDict | None
    ) -> tuple[StateDict, StateDict | None]:
        marks = {self.mark(name) for name in payload} & payload.keys()
        decoded = {
            name: t.to(torch.float32)
            if t.dtype == self.dtype and self.mark(name) not in marks
            else t
            for name, t in payload.items()
            if name not in marks
        }
        return decoded, None

    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def mark(self, name: str) -> str:
        """The empty entry that says `name` was of the 16-bit type before the cast."""
        return f"{name}.kept_{self.dtype_name()}"
