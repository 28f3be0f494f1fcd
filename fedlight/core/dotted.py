"""A user's own object named by its dotted path in a setting (`data.dataset=mypkg.MyDataset`),
imported here so that a wrong path is one line naming the setting, never an import traceback."""

import importlib
from typing import Any

from fedlight.core.errors import ConfigError

# The settings whose value is such a dotted path (each `locate` call names one; a `_target_` is
# Hydra's), and the Optuna sweeper's function of the searched space: what a run, sweep or study
# directory may not name for a resume to import (`fedlight.runs.recorded_code`).
CODE_SETTINGS = (
    "data.dataset",
    "data.datamodule",
    "partition.function",
    "hydra.sweeper.custom_search_space",
)


def locate(path: str, setting: str, expected: str) -> Any:
    """The object `path` (`package.module.name`) names; a ConfigError naming `setting` and what
    it `expected` when it cannot be imported."""
    module_path, _, name = str(path).rpartition(".")
    try:
        if not module_path:
            raise ImportError("not a dotted path package.module.name")
        module = importlib.import_module(module_path)
        if not hasattr(module, name):
            raise ImportError(f"module {module_path} has no {name}")
    except ImportError as error:
        reason = " ".join(str(error).split())
        raise ConfigError(
            f"{setting}={path} cannot be imported ({reason}); give the dotted path of {expected}"
        ) from None
    return getattr(module, name)
