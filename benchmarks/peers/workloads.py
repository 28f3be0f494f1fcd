"""The workloads every framework runs: the same data, model, client index sets, selection,
optimizer, batch size, epochs and rounds (issue 65). Sizes fit a shared 2-core CPU: few rounds.

W1: McMahan et al. (AISTATS 2017)'s pathological non-IID MNIST, 100 clients of 2 label-sorted
shards, 10 a round, E = 1, B = 10, SGD without momentum (the 2NN and the CNN).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """One federated training setting, in fedlight's words (the peers are handed what it draws)."""

    name: str
    data: str  # fedlight's data option
    model: str  # a network of benchmarks.peers.models
    shards_per_client: int
    num_clients: int
    clients_per_round: int
    epochs: int
    batch_size: int
    lr: float
    rounds: int
    seed: int = 0
    eval_batch_size: int = 1000

    def settings(self) -> dict[str, str]:
        """The settings table's row: what every framework is given."""
        return {
            "data": self.data,
            "model": self.model,
            "partition": f"shards, {self.shards_per_client} per client",
            "clients": str(self.num_clients),
            "clients per round": str(self.clients_per_round),
            "local epochs": str(self.epochs),
            "batch size": str(self.batch_size),
            "optimizer": f"SGD, lr {self.lr}, no momentum",
            "rounds": str(self.rounds),
        }


WORKLOADS = {
    w.name: w
    for w in (
        Workload("W1-2NN", "mnist", "mlp", 2, 100, 10, 1, 10, 0.05, rounds=5),
        Workload("W1-CNN", "mnist", "cnn", 2, 100, 10, 1, 10, 0.05, rounds=3),
    )
}
