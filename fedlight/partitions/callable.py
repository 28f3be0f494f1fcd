"""A split of one's own: `partition.function=mypkg.split`, called as
`split(labels, num_clients, generator)` with the training labels (read-only), the number of clients
and the numpy Generator the run derives for partitioning from `seed` (stream PARTITION); it returns
one array (or list) of training-set indices per client.

Drawing only from `generator` makes the split the same for the same seed and independent of
anything else the process drew; the sets it returns are checked as `partition=from_file`'s are
(one per client, indices in range, none listed twice). `partition.overlap=true` lets two clients
list one example, each then holding a copy, for a split that draws each client's examples
independently (the FedAvg tutorial's §1.3, `examples/tutorial_split`); the run says how many are
shared.
"""

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fedlight.core.dotted import locate
from fedlight.core.errors import ConfigError, require
from fedlight.partitions.base import Partition, checked_index_sets

SIGNATURE = "(labels, num_clients, generator) -> one index array per client"


@dataclass
class UserFunction(Partition):
    function: str = ""
    overlap: bool = False  # True: two clients may list one example (each holds a copy)
    split: Callable[..., Any] = field(init=False, repr=False)
    settings_before: ClassVar[dict[str, Any]] = {**Partition.settings_before, "overlap": False}

    def __post_init__(self) -> None:
        super().__post_init__()
        self.split = locate(self.function, "partition.function", f"a function {SIGNATURE}")
        require(
            callable(self.split),
            f"partition.function={self.function} is not callable ({type(self.split).__name__}); "
            f"give a function {SIGNATURE}",
        )
        try:
            inspect.signature(self.split).bind(None, 0, None)
        except TypeError as error:
            raise ConfigError(
                f"partition.function={self.function} cannot take (labels, num_clients, "
                f"generator) ({error}); give a function {SIGNATURE}"
            ) from None
        except ValueError:  # no signature Python can read: it is called as it is
            pass

    def allows_overlap(self) -> bool:
        """`partition.overlap`: whether two clients may list one example."""
        return self.overlap

    def __call__(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        view = labels.view()
        view.flags.writeable = False
        sets = self.split(view, num_clients, rng)
        require(
            isinstance(sets, list | tuple),
            f"partition.function={self.function} returned a {type(sets).__name__}; return a list "
            "with one index array per client",
        )
        return checked_index_sets(
            sets,
            len(labels),
            num_clients,
            f"partition.function={self.function}",
            overlap=self.overlap,
            shared_hint=" (partition.overlap=true lets clients hold copies of one example)",
        )
