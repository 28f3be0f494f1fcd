"""Client sets written by the user: a JSON file holding one list of training-set indices per
client (`[[0, 5, 9], [1, 2], ...]`), e.g. the split a paper published or another framework made.

The indices are positions in the training set as the data source orders it (a torch Dataset's
item order for `data=torch_dataset`, the files' order for the built-in datasets). There is one
client per list, which `fl.num_clients` takes (a different number given is refused); no index
may be listed twice, and examples no list names stay unused. Nothing is drawn.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedlight.core.errors import ConfigError
from fedlight.data.base import DataSource, require_regular_files
from fedlight.partitions.base import ClientCount, Partition, checked_index_sets

FORMAT = "a JSON list of lists of training-set indices, one list per client: [[0, 5], [1, 2]]"


def read_client_sets(path: Path, setting: str) -> list[list[int]]:
    """The file's lists, refused in one line when it is missing, unreadable or not FORMAT."""
    require_regular_files([path], setting)
    try:
        sets = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{setting}: no such file ({path.resolve()}); give {FORMAT}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{setting}: cannot read it ({error}); give {FORMAT}") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{setting}: not JSON ({error}); give {FORMAT}") from None
    if not isinstance(sets, list) or not sets or not all(isinstance(s, list) for s in sets):
        raise ConfigError(f"{setting}: holds {type(sets).__name__} {str(sets)[:40]}; give {FORMAT}")
    return sets


@dataclass
class FromFile(Partition):
    path: str = ""
    sets: list[list[int]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sets = read_client_sets(Path(self.path), self.setting)

    @property
    def setting(self) -> str:
        return f"partition.path={self.path}"

    def client_count(self, data: DataSource) -> ClientCount:
        return ClientCount(len(self.sets), f"index lists in {self.setting}")

    def __call__(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        return checked_index_sets(self.sets, len(labels), num_clients, self.setting)
