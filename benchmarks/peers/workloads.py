"""The workloads every framework runs: the same data, model, client index sets, selection,
optimizer, batch size, epochs and rounds (issue 65). Sizes fit a shared 2-core CPU: few rounds.

W1: McMahan et al. (AISTATS 2017)'s pathological non-IID MNIST, 100 clients of 2 label-sorted
shards, 10 a round, E = 1, B = 10, SGD without momentum (the 2NN and the CNN).

N1: one round of fedlight's niid_bench preset (conf/experiment/niid_bench.yaml, Flower's niid_bench
baseline at NIID-Bench's settings, Li et al., ICDE 2022): Fashion-MNIST over 10 clients by a
Dirichlet(0.5) label split (its `partition=dirichlet`), all 10 a round, E = 10, B = 64, SGD 0.01
with momentum 0.9 and weight decay 1e-5, NIID-Bench's LeNet (`simple_cnn`). Two rounds, so that a
round after the first (the simulators' warm-up) is measured.

XD: pfl-research's cross-device CIFAR-10 benchmark (Granqvist et al., arXiv 2404.06430; its
benchmarks/image_classification, `cifar10_iid`): 1,000 users of 50 images drawn IID, 50 a round,
B = 10, E = 1, local SGD 0.1 without momentum, its CNN (`pfl_cnn`), no augmentation; a fixed
number of rounds (its benchmark runs 1,500). fedlight trains it in the peers' contiguous layout:
its CNN's dropout draws masks in memory order, so channels-last would drop other units.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Workload:
    """One federated training setting, in fedlight's words (the peers are handed what it draws)."""

    name: str
    data: str  # fedlight's data option
    model: str  # fedlight's model option (benchmarks.peers.peer_common builds its twin)
    partition: str  # fedlight's partition option (benchmarks.peers.spec draws with it)
    num_clients: int
    clients_per_round: int
    epochs: int
    batch_size: int
    lr: float
    rounds: int
    # the partition scheme's settings: spec.client_sets draws the index sets with them in this
    # process; fedlight reads those sets (partition=from_file), not these settings
    partition_settings: dict[str, float] = field(default_factory=dict)
    momentum: float = 0.0
    weight_decay: float = 0.0
    # fedlight's `data.<key>=<value>` beyond data.root (e.g. CIFAR-10 without augmentation)
    data_settings: dict[str, bool] = field(default_factory=dict)
    seed: int = 0
    eval_batch_size: int = 1000
    vectorized: str = ""  # why fl.engine=vectorized cannot train it ("" where it can)
    # fedlight's own settings the workload needs to do the peers' work (and why, for the page)
    fedlight_overrides: tuple[str, ...] = ()

    def settings(self) -> dict[str, str]:
        """The settings table's row: what every framework is given."""
        partition = ", ".join(f"{k} {v}" for k, v in self.partition_settings.items())
        data = ", ".join(f"{k} {v}".lower() for k, v in self.data_settings.items())
        optimizer = f"SGD, lr {self.lr}, " + (
            f"momentum {self.momentum}, weight decay {self.weight_decay}"
            if self.momentum or self.weight_decay
            else "no momentum"
        )
        return {
            "data": f"{self.data} ({data})" if data else self.data,
            "model": self.model,
            "partition": f"{self.partition} ({partition})" if partition else self.partition,
            "clients": str(self.num_clients),
            "clients per round": str(self.clients_per_round),
            "local epochs": str(self.epochs),
            "batch size": str(self.batch_size),
            "optimizer": optimizer,
            "rounds": str(self.rounds),
        }


WORKLOADS = {
    w.name: w
    for w in (
        Workload(
            "W1-2NN", "mnist", "mlp", "shards", 100, 10, 1, 10, 0.05, 5, {"shards_per_client": 2}
        ),
        Workload(
            "W1-CNN", "mnist", "cnn", "shards", 100, 10, 1, 10, 0.05, 3, {"shards_per_client": 2}
        ),
        Workload(
            "N1",
            "fmnist",
            "simple_cnn",
            "dirichlet",
            10,
            10,
            10,
            64,
            0.01,
            2,
            {"alpha": 0.5, "min_samples": 10},
            momentum=0.9,
            weight_decay=1e-5,
        ),
        Workload(
            "XD",
            "cifar10",
            "pfl_cnn",
            "iid",
            1000,
            50,
            1,
            10,
            0.1,
            6,
            data_settings={"augment": False},
            vectorized="pfl-research's CNN has dropout, which fl.engine=vectorized refuses",
            # dropout draws its mask in the memory order of its input: channels-last (what
            # fl.memory_format=auto picks for this CNN on a CPU) would drop other units than
            # the peers drop under the same seed
            fedlight_overrides=("fl.memory_format=contiguous",),
        ),
    )
}
