"""What every partition scheme shares: the split of the training pool into client sets, and of
each client's set into its training part, its local test part (`client_test_fraction`) and its
local validation part (`client_validation_fraction`).

A client's local test set comes from its own data distribution, so a personalized model can be
judged where it is used; it is held out per label (stratified) with a generator derived from
(seed, LOCAL_TEST, client), so it does not depend on any other client or on the scheme's draws.
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedlight.core.errors import ConfigError, require
from fedlight.core.rng import Stream, numpy_generator
from fedlight.data.base import DataSource, TensorDataset
from fedlight.data.validation import stratified_sample


@dataclass(frozen=True)
class ClientCount:
    """The number of clients a scheme takes from the data or a file, and what it counted."""

    number: int
    counted: str  # e.g. "distinct client ids of the training set (data.client_key)"


@dataclass
class Partition(ABC):
    """The `partition` config group: how the training pool is split into client sets, and each
    client's set into its training, local test and local validation parts."""

    client_test_fraction: float = 0.0  # share of each client's examples held out, per label
    # share of each client's examples held out, per label, as its local validation part
    client_validation_fraction: float = 0.0
    # what a checkpoint written before a setting existed ran with (`same_config.value_before`)
    settings_before: ClassVar[dict[str, Any]] = {"client_validation_fraction": 0.0}

    def __post_init__(self) -> None:
        require(
            0 <= self.client_test_fraction < 1,
            f"partition.client_test_fraction={self.client_test_fraction} must lie in [0, 1); "
            "use e.g. 0.2, or 0 for no local test sets",
        )
        require(
            0 <= self.client_validation_fraction
            and self.client_test_fraction + self.client_validation_fraction < 1,
            f"partition.client_validation_fraction={self.client_validation_fraction} must lie "
            f"in [0, 1 - partition.client_test_fraction); use e.g. 0.1, or 0 for no local "
            "validation parts",
        )

    @abstractmethod
    def __call__(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        """Each client's sorted indices into the training pool, split by `labels` (what `keys`
        gives), drawing only from `rng`.

        Args:
            labels: one key per training example (what `keys` gives: the labels by default).
            num_clients: N.
            rng: the generator of (seed, PARTITION), the only randomness to draw from.

        Returns:
            One sorted index array per client.
        """

    def keys(self, data: TensorDataset) -> np.ndarray:
        """What the scheme splits by, one value per training example: the labels.

        Args:
            data: the run's data.

        Returns:
            One key per training example.
        """
        return data.train_y.cpu().numpy()

    def client_count(self, data: DataSource) -> ClientCount | None:
        """The number of clients the scheme itself gives, which `fl.num_clients` then takes;
        None where `fl.num_clients` decides it (every scheme that splits by labels).

        Args:
            data: the run's data source.

        Returns:
            The number and what was counted, or None by default.
        """
        return None

    def given_test_sets(self, data: TensorDataset, num_clients: int) -> list[np.ndarray] | None:
        """Each client's local test set as the data gives it (indices into its test set), where
        the scheme takes the data's own (`partition=natural`); None by default: `hold_out`
        draws them, or there are none.

        Args:
            data: the run's data.
            num_clients: N.

        Returns:
            One sorted index array per client, or None.
        """
        return None

    def allows_overlap(self) -> bool:
        """Whether two clients may hold one example (`partition.overlap=true` where a scheme has
        it); False by default: every built-in scheme's sets are disjoint.

        Returns:
            True where clients may hold copies of one example.
        """
        return False

    def hold_out(
        self, client_sets: list[np.ndarray], labels: np.ndarray, seed: int
    ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        """Each client's training and local test indices (sorted, disjoint, together its set);
        None for the test sets when `client_test_fraction` is 0.

        Args:
            client_sets: each client's indices, as the scheme split them.
            labels: the training examples' labels (the hold-out is stratified by them).
            seed: the run's seed.

        Returns:
            The clients' training parts and their local test sets (or None).
        """
        if self.client_test_fraction == 0:
            return client_sets, None
        train, test = [], []
        for client, indices in enumerate(client_sets):
            rng = numpy_generator(seed, Stream.LOCAL_TEST, 0, client)
            chosen = stratified_sample(indices, labels, self.client_test_fraction, rng)
            test.append(chosen)
            train.append(np.setdiff1d(indices, chosen, assume_unique=True))
        return train, test

    def hold_out_validation(
        self, train_sets: list[np.ndarray], labels: np.ndarray, seed: int
    ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        """Each client's training and local validation indices, the validation part drawn per
        label from its training part (what `hold_out` left) with a generator of its own, derived
        from (seed, LOCAL_VALIDATION, client): `client_validation_fraction` of the client's
        examples, about; None for the validation parts when it is 0. Model selection on a
        client's own distribution without its local test set.

        Args:
            train_sets: each client's training part, as `hold_out` left it.
            labels: the training examples' labels.
            seed: the run's seed.

        Returns:
            The clients' training parts and their local validation parts (or None).
        """
        if self.client_validation_fraction == 0:
            return train_sets, None
        share = self.client_validation_fraction / (1 - self.client_test_fraction)
        train, validation = [], []
        for client, indices in enumerate(train_sets):
            rng = numpy_generator(seed, Stream.LOCAL_VALIDATION, 0, client)
            chosen = stratified_sample(indices, labels, share, rng)
            validation.append(chosen)
            train.append(np.setdiff1d(indices, chosen, assume_unique=True))
        return train, validation


def checked_index_sets(
    sets: Sequence[Any],
    num_examples: int,
    num_clients: int,
    setting: str,
    overlap: bool = False,
    shared_hint: str = "",
) -> list[np.ndarray]:
    """Client sets a user gives (`partition=from_file`, `callable`) as sorted int64 arrays, refused
    in one line naming `setting` unless there is one per client, every index names an example of
    the training set and no example is listed twice (in two clients or in one): every built-in
    scheme's sets are disjoint, which the sample counts, `algo=central`'s pool and the label
    histogram rely on. With `overlap` (`partition.overlap=true`) two clients may list one example
    (each holds a copy: counted in both sizes, twice in the pool), one client still only once;
    `shared_hint` ends the refusal of a shared example (how to allow it). Examples no client lists
    stay unused."""
    require(
        len(sets) == num_clients,
        f"{setting} gives {len(sets)} client sets for fl.num_clients={num_clients}; give one "
        "index list per client",
    )
    checked = []
    for client, indices in enumerate(sets):
        try:
            array = np.asarray(indices)
        except ValueError:  # ragged nesting
            array = np.zeros((0, 0))
        require(
            array.ndim == 1 and (array.size == 0 or np.issubdtype(array.dtype, np.integer)),
            f"{setting}: client {client}'s set is not a list of integer indices; give each client "
            "a list of training-set indices",
        )
        outside = array[(array < 0) | (array >= num_examples)]
        if outside.size:
            raise ConfigError(
                f"{setting}: client {client} lists index {outside[0]} but the training set holds "
                f"{num_examples} examples; indices are 0..{num_examples - 1}"
            )
        checked.append(np.sort(array.astype(np.int64)))
    if overlap:
        for client, array in enumerate(checked):
            twice = array[1:][array[1:] == array[:-1]]
            if twice.size:
                raise ConfigError(
                    f"{setting}: client {client} lists index {twice[0]} twice; a client holds "
                    "each training example once"
                )
        return checked
    listed = times_listed(checked, num_examples)
    if listed.max(initial=0) > 1:
        index = int(np.argmax(listed > 1))
        owners = [client for client, part in enumerate(checked) if index in part]
        where = f"clients {owners[0]} and {owners[1]}" if len(owners) > 1 else f"client {owners[0]}"
        raise ConfigError(
            f"{setting}: index {index} is listed twice ({where}); each training example belongs "
            f"to one client at most{shared_hint}"
        )
    return checked


def times_listed(client_sets: Sequence[np.ndarray], num_examples: int) -> np.ndarray:
    """How many of the client sets list each of the `num_examples` training examples (0: none)."""
    return np.bincount(
        np.concatenate([*client_sets, np.zeros(0, np.int64)]), minlength=num_examples
    )
