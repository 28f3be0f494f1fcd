"""Stages of a user's own that encode each upload on the client and decode it on the server (a
shift by one, a lossless codec): `Shift` as a plugged-in stage kind (`fedlight.stage_kinds`
entry point `shift = "tests.helpers.user_stage:Shift"`), `ShiftedPrivacy` as an option of the
built-in `privacy` kind (`privacy._target_=tests.helpers.user_stage.ShiftedPrivacy`)."""

from dataclasses import replace

from fedlight.core.context import RoundContext
from fedlight.core.messages import ClientUpload
from fedlight.core.tensors import StateDict
from fedlight.stages.base import ClientStep, UploadStage
from fedlight.stages.privacy.none import NoPrivacy


class Shifting(UploadStage):
    """Every floating-point entry plus one on the client, minus one on the server."""

    def client_side(
        self, step: ClientStep, upload: ClientUpload, state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        return replace(upload, tensors=shifted(upload.tensors, 1.0)), state

    def server_side(
        self, ctx: RoundContext, upload: ClientUpload, state: StateDict
    ) -> tuple[ClientUpload, StateDict]:
        return replace(upload, tensors=shifted(upload.tensors, -1.0)), state


def shifted(tensors: StateDict, by: float) -> StateDict:
    return {key: t + by if t.is_floating_point() else t for key, t in tensors.items()}


class Shift(Shifting):
    """The plugged-in kind `shift`'s default stage."""

    name = "shift"


class ShiftedPrivacy(Shifting, NoPrivacy):
    """`privacy=none` with the shift."""
