"""Per-client rows of a round, for the trackers that show them (W&B's table, TensorBoard's
histograms): metrics.csv keeps one row per round, so a client that trains badly, sends a large
update or lags is visible only here.

A row holds the client's id, its training loss and examples, its local training time, its bytes
each way, the epochs and steps it trained (`local_work`), the norm of its update (how far local
training moved its weights: an outlier is a diverging or attacking client), whether its upload
came late or was rejected, and what its own client-side stages reported and its module logged in
training. An asynchronous server update's rows are its arrivals, with their staleness and without
`update_norm` (an upload arrives encoded, its trained weights are not at hand). The rows are the
main worker's (every worker's participants, gathered); rounds a resume replays have none. The
update norm is computed only in a run with a logger that shows the rows (`shows_clients`: W&B's
table, TensorBoard's histograms); under the CSV, console and MLflow loggers alone it is nan.

What they publish: under secure aggregation (a stage that `hides_uploads`) nothing, as the
protocol reveals nothing of one client (Bonawitz et al. 2017); under DP, values outside the
guarantee, listed in docs/configuration.md, "What a private run releases".
"""

from collections.abc import Mapping, Sequence

import torch

from fedlight.core.tensors import StateDict

# The columns every per-client row of a synchronous round has, in this order.
CLIENT_COLUMNS = (
    "client",
    "train_loss",
    "num_samples",
    "client_seconds",
    "bytes_up",
    "bytes_down",
    "update_norm",
    "local_epochs",
    "local_steps",
    "late",
    "rejected",
)


# Entries of a difference cast to float64 at a time on a CPU: a small buffer the allocator reuses,
# where the float64 copy of each whole tensor was fresh memory per client (on a GPU one cast per
# tensor stays: pieces would each launch kernels).
CHUNK = 1 << 16


def update_norm(weights: StateDict, start: StateDict) -> float:
    """The L2 norm of `weights` less `start` over the floating tensors both hold, in float64
    (one number per client, one device sync): the float64 sum of the squared norms of the
    pieces of each float32 difference."""
    squares = [
        torch.linalg.vector_norm(piece, dtype=torch.float64).square()
        for name, tensor in start.items()
        if name in weights and tensor.is_floating_point()
        for piece in pieces(weights[name] - tensor)
    ]
    return float(torch.stack(squares).sum().sqrt()) if squares else 0.0


def pieces(difference: torch.Tensor) -> tuple[torch.Tensor, ...]:
    flat = difference.reshape(-1)
    return flat.split(CHUNK) if flat.device.type == "cpu" else (flat,)


def logged_means(logged: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """What one client's module logged in training (name → weighted sum, weight) as means."""
    return {name: total / weight for name, (total, weight) in logged.items() if weight}
