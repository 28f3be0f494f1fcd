"""Stages of another package's stage kinds that break the contract of `client_side` (it returns
the upload passed on and the stage's client state), plugged in by
tests/stages/test_stage_kinds.py as `<kind> = "tests.helpers.fault_stages:<Class>"`."""

from typing import Any

from fedlight.core.messages import ClientUpload
from fedlight.core.tensors import StateDict
from fedlight.stages.base import ClientStep, UploadStage


class ReturnsNone(UploadStage):
    name = "returns_none"

    def client_side(self, step: ClientStep, upload: ClientUpload, state: StateDict | None) -> Any:
        return None


class ReturnsDict(UploadStage):
    """Two entries: unpacked as a pair, its keys would pass for the upload and the state."""

    name = "returns_dict"

    def client_side(self, step: ClientStep, upload: ClientUpload, state: StateDict | None) -> Any:
        return {"upload": upload, "state": state}


class ReturnsUpload(UploadStage):
    name = "returns_upload"

    def client_side(self, step: ClientStep, upload: ClientUpload, state: StateDict | None) -> Any:
        return upload
