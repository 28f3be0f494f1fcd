"""An algorithm's server side over a list of uploads, for computations checked by hand."""

from collections.abc import Sequence

from fedlight.algorithms.base import Algorithm
from fedlight.core.context import RoundContext
from fedlight.core.messages import ClientUpload, ServerState


def aggregate(
    algorithm: Algorithm, ctx: RoundContext, server: ServerState, uploads: Sequence[ClientUpload]
) -> ServerState:
    """`algorithm.server_update` of a list of decoded uploads (aggregation order), aggregated as
    a round would."""
    aggregation = algorithm.start_aggregation([u.num_samples for u in uploads])
    for upload in uploads:
        aggregation.add(algorithm.contribution(ctx, upload))
    return algorithm.server_update(
        ctx, server, aggregation.results(), aggregation.public_contributors
    )
