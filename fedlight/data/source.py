"""What `data._target_` names: a data source, a class whose `load()` returns fedlight's
`TensorDataset`. A torch Dataset or a LightningDataModule named there instead is refused in one
line that says how to use it (`data=torch_dataset`, `data=datamodule`), before anything is built.
"""

from torch.utils.data import Dataset

from fedlight.core.dotted import locate
from fedlight.core.errors import ConfigError
from fedlight.data.datamodule import is_datamodule

OWN_DATA = "docs/data-and-models.md, 'Your own data'"


def check_data_target(target: str) -> None:
    """`target` is importable and has a `load()`; else a ConfigError naming `data._target_` and
    what to write instead."""
    found = locate(
        target,
        "data._target_",
        "a data source (a class with load()), or use a data option: data=digits, mnist, fmnist, "
        "cifar10, torch_dataset (data.dataset=<your Dataset class>) or datamodule",
    )
    if callable(getattr(found, "load", None)):
        return
    if is_datamodule(found):
        fix = f"data=datamodule data.datamodule={target} (its arguments: data.kwargs={{...}})"
    elif isinstance(found, type) and issubclass(found, Dataset):
        fix = f"data=torch_dataset data.dataset={target} data.root=<its folder>"
    else:
        fix = (
            "a class whose load() returns fedlight.data.base.TensorDataset, or a torch Dataset "
            "through data=torch_dataset data.dataset=<module.Class>"
        )
    raise ConfigError(
        f"data._target_={target} is not a fedlight data source (it has no load()); write {fix} "
        f"({OWN_DATA})"
    )
