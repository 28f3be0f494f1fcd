"""A LightningDataModule of one's own as the data: its training and test sets, converted once into
fedlight's in-memory `TensorDataset` under the contract of `fedlight.data.torch_dataset`.

Lightning's own order: `prepare_data()`, `setup("fit")`, the dataset of `train_dataloader()`,
then `setup("test")` and the dataset of `test_dataloader()`. Its loaders' batching and shuffling
are not used: fedlight forms every client's batches from the tensors itself.
"""

from dataclasses import dataclass
from typing import Any

import pytorch_lightning as pl

from fedlight.data.base import TensorDataset
from fedlight.data.torch_dataset import check_arguments, check_num_classes, converted, to_tensors
from fedlight.dotted import locate
from fedlight.errors import require


@dataclass
class DataModule:
    datamodule: str  # dotted path of a LightningDataModule class
    kwargs: dict[str, Any] | None = None  # its constructor's arguments
    client_key: str | None = None  # the training set's attribute of client ids (partition=natural)
    num_classes: int | None = None  # None: the largest label + 1

    def __post_init__(self) -> None:
        module_class = locate(
            self.datamodule, "data.datamodule", "a LightningDataModule class, e.g. mypkg.MyData"
        )
        require(
            isinstance(module_class, type) and issubclass(module_class, pl.LightningDataModule),
            f"data.datamodule={self.datamodule} is not a LightningDataModule class; give one, or "
            f"a torch Dataset with data=torch_dataset data.dataset=<module.Class>",
        )
        check_arguments(
            module_class,
            self.kwargs or {},
            f"data.datamodule={self.datamodule}",
            "set data.kwargs to its constructor's arguments",
        )
        check_num_classes(self.num_classes)

    def load(self) -> TensorDataset:
        return converted(repr(self), self.convert)

    def convert(self) -> TensorDataset:
        module_class = locate(self.datamodule, "data.datamodule", "a LightningDataModule")
        module = module_class(**(self.kwargs or {}))
        module.prepare_data()
        module.setup("fit")
        train = module.train_dataloader().dataset
        module.setup("test")
        test = module.test_dataloader().dataset
        return to_tensors(
            train, test, f"data.datamodule={self.datamodule}", self.client_key, self.num_classes
        )
