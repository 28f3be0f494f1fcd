"""A LightningDataModule of one's own as the data: its training, validation and test sets,
converted once into fedlight's in-memory `TensorDataset` under the contract of
`fedlight.data.torch_dataset`.

Lightning's own order: `prepare_data()`, `setup("fit")`, the datasets of `train_dataloader()` and
(where the DataModule defines it) `val_dataloader()`, the run's validation set, then
`setup("test")` and the dataset of `test_dataloader()`. Its loaders' batching and shuffling are
not used: fedlight forms every client's batches from the tensors itself, in batches of
`local.batch_size`, and says so where the training loader's batch size differs. A DataModule is
recognised by its hooks (either Lightning package's, or a class of neither with them).
"""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from torch.utils.data import DataLoader

from fedlight.core.dotted import locate
from fedlight.core.errors import one_line, require
from fedlight.data.base import DataError, TensorDataset
from fedlight.data.torch_dataset import (
    check_arguments,
    check_num_classes,
    converted,
    examples,
    require_data,
    to_tensors,
)
from fedlight.engines.lightning import overrides


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
            is_datamodule(module_class),
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

    @property
    def own_validation(self) -> bool:
        """Whether the DataModule brings a validation set (defines `val_dataloader`): what
        `eval.split=validation` needs where `data.validation_fraction` is 0."""
        module_class = locate(self.datamodule, "data.datamodule", "a LightningDataModule")
        return overrides(module_class, "val_dataloader", "LightningDataModule")

    def load(self) -> TensorDataset:
        return converted(repr(self), self.convert)

    def convert(self) -> TensorDataset:
        module_class = locate(self.datamodule, "data.datamodule", "a LightningDataModule")
        source = f"data.datamodule={self.datamodule}"
        module = called(source, "constructor", module_class, **(self.kwargs or {}))
        called(source, "prepare_data()", module.prepare_data)
        called(source, "setup('fit')", module.setup, "fit")
        train = called(source, "train_dataloader()", module.train_dataloader)
        validation = None
        if self.own_validation:
            validation = called(source, "val_dataloader()", module.val_dataloader)
        called(source, "setup('test')", module.setup, "test")
        test = called(source, "test_dataloader()", module.test_dataloader)
        data = to_tensors(
            dataset_of(source, "train_dataloader()", "training set", train),
            dataset_of(source, "test_dataloader()", "test set", test),
            source,
            self.client_key,
            self.num_classes,
        )
        data = replace(data, batch_size=train.batch_size)
        if validation is None:
            return data
        val_set = dataset_of(source, "val_dataloader()", "validation set", validation)
        val_x, val_y = examples(val_set, "validation", source)
        require_data(
            val_x.shape[1:] == data.train_x.shape[1:] and val_x.dtype == data.train_x.dtype,
            f"{source}: training inputs are {data.train_x.dtype} of shape "
            f"{tuple(data.train_x.shape[1:])}, validation inputs {val_x.dtype} of shape "
            f"{tuple(val_x.shape[1:])}; both splits need the same",
        )
        require_data(
            int(val_y.min()) >= 0 and int(val_y.max()) < data.num_classes,
            f"{source}: its validation set has labels outside 0..{data.num_classes - 1}, the "
            "training and test sets' classes; give it the same labels",
        )
        return replace(data, val_x=val_x, val_y=val_y)


def is_datamodule(found: Any) -> bool:
    """Whether `found` is a DataModule class by its hooks: either Lightning package's, or a class
    of neither that has them."""
    hooks = ("prepare_data", "setup", "train_dataloader", "test_dataloader")
    return isinstance(found, type) and all(callable(getattr(found, h, None)) for h in hooks)


def called(source: str, hook: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`function(*args, **kwargs)`, a hook of the user's DataModule: whatever it raises is one
    line naming the hook and the error (a setup that cannot find its files may raise an OSError
    naming no file, which the run would take for one it cannot write; a `sys.exit` would end the
    run silently, with an exit status that may be fedlight's for a divergence)."""
    try:
        return function(*args, **kwargs)
    except (Exception, SystemExit) as error:  # the user's code may raise (or exit) anything
        raise DataError(
            f"{source}: its {hook} failed ({type(error).__name__}: {one_line(error, limit=200)}); "
            "fix the DataModule or data.kwargs"
        ) from error


def dataset_of(source: str, hook: str, split: str, loader: Any) -> Any:
    """The dataset of the one DataLoader a `*_dataloader()` hook returned (not None, nor
    Lightning's several loaders: fedlight converts one set per split)."""
    require_data(
        isinstance(loader, DataLoader),
        f"{source}: its {hook} returned {'None' if loader is None else type(loader).__name__}, "
        f"not one DataLoader; return the DataLoader of the {split} (fedlight converts its dataset)",
    )
    return loader.dataset
