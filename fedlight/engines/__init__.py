"""Client engines: how the participants of a round train locally (`fl.engine`).

- `sequential` (`sequential.py`): one client after another on the one client module, calling its
  Lightning hooks; any LightningModule and optimizer.
- `vectorized` (`vectorized.py`): all clients of a round at once with torch.func (vmap over
  stacked weights); built-in models without running statistics, SGD, and algorithms whose
  callbacks have a functional form (fedavg, fedprox, scaffold, fednova, the server optimizers,
  local, central). Same results to float rounding.
- `auto` picks per device type from measurements (`benchmarks/engines.py`; the figures are in the
  docs/speed-and-memory.md, "Client engines"): sequential on CPUs, where the vectorized engine is
  not reliably faster, and on CUDA until the benchmark has been run on a GPU and shows a clear gain;
  then the "cuda" entry of `AUTO_ENGINE` changes, nothing else.
"""

import pytorch_lightning as pl
import torch

from fedlight.core.rng import Stream
from fedlight.core.settings import RunSettings
from fedlight.data.base import TensorDataset
from fedlight.engines.base import Engine, LocalTask, first_optimizer
from fedlight.engines.sequential import SequentialEngine
from fedlight.engines.vectorized import VectorizedEngine

ENGINES: dict[str, type[Engine]] = {
    "sequential": SequentialEngine,
    "vectorized": VectorizedEngine,
}
# The engine `fl.engine=auto` runs on each device type; any other type gets the sequential one.
AUTO_ENGINE: dict[str, str] = {"cpu": "sequential", "cuda": "sequential"}

__all__ = ["ENGINES", "Engine", "LocalTask", "first_optimizer", "make_engine", "resolve_engine"]


def resolve_engine(setting: str, device: torch.device) -> str:
    """The engine `fl.engine` names, `auto` resolved for `device`."""
    return AUTO_ENGINE.get(device.type, "sequential") if setting == "auto" else setting


def make_engine(
    module: pl.LightningModule,
    data: TensorDataset,
    settings: RunSettings,
    stream: Stream = Stream.LOCAL_TRAINING,
) -> Engine:
    """The engine of `fl.engine` for the data's device, drawing its batches from `stream`; it
    refuses what it cannot train."""
    name = resolve_engine(settings.fl.engine, data.train_x.device)
    return ENGINES[name](module, data, settings, stream)
