"""The data's own clients: one per distinct client id of the training set (FEMNIST's writers,
Shakespeare's speakers, StackOverflow's users), as LEAF and TensorFlow Federated split them.

The ids come with the data (`data.client_key` of `data=torch_dataset` or `data=datamodule`, a
LEAF or Hugging Face dataset's users); client i holds exactly the examples of the i-th id in
sorted order, and `fl.num_clients` is their number (taken from the data; a different number given
is refused). Nothing is drawn. Where the data splits each user's examples into training and test
itself (LEAF's per-user split, `TensorDataset.test_clients`), each client's local test set is its
user's test examples, as LEAF evaluates (Caldas et al. 2018, arXiv 1812.01097).
"""

from dataclasses import dataclass

import numpy as np

from fedlight.core.errors import require
from fedlight.data.base import DataSource, TensorDataset
from fedlight.partitions.base import ClientCount, Partition


@dataclass
class Natural(Partition):
    def keys(self, data: TensorDataset) -> np.ndarray:
        """Each training example's client id."""
        require(
            data.train_clients is not None,
            "partition=natural needs each training example's client id and the data gives none; "
            "use data=torch_dataset (or data=datamodule) with data.client_key=<your dataset's "
            "attribute of client ids> (docs/data-and-models.md, 'Your own data')",
        )
        return data.train_clients.cpu().numpy()  # type: ignore[union-attr]

    def client_count(self, data: DataSource) -> ClientCount:
        return ClientCount(
            len(np.unique(self.keys(data.load()))),
            "distinct client ids in the training data (data.client_key)",
        )

    def given_test_sets(self, data: TensorDataset, num_clients: int) -> list[np.ndarray] | None:
        """Each client's own test examples (indices into the test set), where the data has them;
        refused beside `client_test_fraction`, which would draw a second local test set."""
        if data.test_clients is None:
            return None
        require(
            self.client_test_fraction == 0,
            f"partition.client_test_fraction={self.client_test_fraction} but the data gives each "
            "client's local test set itself (its per-user test split); leave "
            "partition.client_test_fraction at 0",
        )
        codes = data.test_clients.cpu().numpy()
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(num_clients + 1))
        return [order[bounds[i] : bounds[i + 1]] for i in range(num_clients)]

    def __call__(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        ids, codes = np.unique(labels, return_inverse=True)
        require(
            len(ids) == num_clients,
            f"fl.num_clients={num_clients} but the data has {len(ids)} distinct client ids; "
            f"leave fl.num_clients out (partition=natural takes it from the data)",
        )
        codes = codes.reshape(-1)
        order = np.argsort(codes, kind="stable")  # each client's examples in index order
        return np.split(order, np.cumsum(np.bincount(codes, minlength=num_clients))[:-1])
