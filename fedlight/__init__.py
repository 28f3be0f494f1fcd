"""fedlight: reproducible federated-learning research on Lightning modules and Hydra configs.

The names in `__all__` are the public API, what code of one's own subclasses or calls (the
how-to guides, docs/howto/): `from fedlight import Algorithm`. They are imported on first use
(PEP 562), so `import fedlight` stays light: `fedlight report` and `fedlight --version` import
neither torch nor Lightning.
"""

import importlib
import os
import time
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
STARTED = time.time()  # this process's start (as near as Python lets us see it)
STARTED_VARIABLE = "FEDLIGHT_STARTED"  # the command's start, inherited by its workers

# Each public name → the module that defines it.
PUBLIC: dict[str, str] = {
    # algorithms (`algo=`)
    "Algorithm": "fedlight.algorithms.base",
    "ClientUpload": "fedlight.core.messages",
    "ServerState": "fedlight.core.messages",
    "LocalCallback": "fedlight.engines.base",
    "LocalResult": "fedlight.core.messages",
    # aggregators (`aggregator=`)
    "Accumulator": "fedlight.aggregation.base",
    "Aggregator": "fedlight.aggregation.base",
    "Part": "fedlight.aggregation.base",
    "RobustAggregator": "fedlight.aggregation.robust_base",
    "Mean": "fedlight.aggregation.mean",
    # server optimizers (`server_opt=`)
    "ServerOptimizer": "fedlight.server_opt.base",
    # upload stages and the round they see
    "UploadStage": "fedlight.stages.base",
    "ClientStep": "fedlight.stages.base",
    "Delivered": "fedlight.core.messages",
    "Plan": "fedlight.stages.base",
    "Federation": "fedlight.core.context",
    "RoundContext": "fedlight.core.context",
    "Stream": "fedlight.core.rng",
    # codecs (`upload=`, `download=`)
    "WireTransform": "fedlight.stages.wire.base",
    "LossyTransform": "fedlight.stages.wire.base",
    "Payload": "fedlight.stages.wire.base",
    "Quantizer": "fedlight.stages.compression.quantizer",
    # selection and learning-rate schedules (`selection=`, `lr_schedule=`)
    "Selection": "fedlight.stages.selection.base",
    "LRSchedule": "fedlight.lr_schedules.base",
    # data and partitions (`data=`, `partition=`)
    "DataSource": "fedlight.data.base",
    "TensorDataset": "fedlight.data.base",
    "Partition": "fedlight.partitions.base",
    # models' state and settings' refusals
    "StateDict": "fedlight.core.tensors",
    "ConfigError": "fedlight.core.errors",
    "require": "fedlight.core.errors",
}
__all__ = [
    "Accumulator",
    "Aggregator",
    "Algorithm",
    "ClientStep",
    "ClientUpload",
    "ConfigError",
    "DataSource",
    "Delivered",
    "Federation",
    "LRSchedule",
    "LocalCallback",
    "LocalResult",
    "LossyTransform",
    "Mean",
    "Part",
    "Partition",
    "Payload",
    "Plan",
    "Quantizer",
    "RobustAggregator",
    "RoundContext",
    "Selection",
    "ServerOptimizer",
    "ServerState",
    "StateDict",
    "Stream",
    "TensorDataset",
    "UploadStage",
    "WireTransform",
    "require",
]  # PUBLIC's names, sorted (tests/project/test_examples.py checks)

if TYPE_CHECKING:  # what type checkers see; at run time `__getattr__` imports each on first use
    from fedlight.aggregation.base import Accumulator, Aggregator, Part
    from fedlight.aggregation.mean import Mean
    from fedlight.aggregation.robust_base import RobustAggregator
    from fedlight.algorithms.base import Algorithm
    from fedlight.core.context import Federation, RoundContext
    from fedlight.core.errors import ConfigError, require
    from fedlight.core.messages import ClientUpload, Delivered, LocalResult, ServerState
    from fedlight.core.rng import Stream
    from fedlight.core.tensors import StateDict
    from fedlight.data.base import DataSource, TensorDataset
    from fedlight.engines.base import LocalCallback
    from fedlight.lr_schedules.base import LRSchedule
    from fedlight.partitions.base import Partition
    from fedlight.server_opt.base import ServerOptimizer
    from fedlight.stages.base import ClientStep, Plan, UploadStage
    from fedlight.stages.compression.quantizer import Quantizer
    from fedlight.stages.selection.base import Selection
    from fedlight.stages.wire.base import LossyTransform, Payload, WireTransform


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (PEP 562) and kept."""
    if name not in PUBLIC:
        raise AttributeError(f"module 'fedlight' has no attribute {name!r}")
    value = getattr(importlib.import_module(PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def command_seconds() -> float:
    """Seconds since the command started (`fedlight.cli.main.main` sets `STARTED_VARIABLE`),
    start-up included: imports, the config checks of every job, data loading."""
    return time.time() - float(os.environ.get(STARTED_VARIABLE, STARTED))
