"""`secure_aggregation=none`: the server sees every upload."""

from dataclasses import dataclass

from fedlight.stages.base import UploadStage


@dataclass
class SecureAggregation(UploadStage):
    """No secure aggregation: every hook of `UploadStage` as it is."""

    name = "secure_aggregation"
