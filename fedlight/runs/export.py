"""The run's final model in the ecosystem's formats, written at the end of a run:

- model.pt: a plain state_dict of the LightningModule (the keys of `Module().state_dict()`), so
  `Module(...).load_state_dict(torch.load("model.pt"))` restores it;
- model.ckpt: a Lightning checkpoint of it (state_dict, hyper_parameters, the Lightning version),
  so `Module.load_from_checkpoint("model.ckpt")` builds and restores it; the built-in models save
  their init arguments (`save_hyperparameters`), a user's module needs them passed unless it
  saves its own.

The model is `Algorithm.global_model`: the server's (the pooled trainer's for `central`); for the
personalized methods the shared model alone, no client's own parts. Both files hold CPU tensors
and are written whole or not at all. Unlike checkpoint.pt (fedlight's resume state), they are
results: a resumed run rewrites them from the same final weights.
"""

import pickle
import sys
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from fedlight.core.errors import one_line
from fedlight.core.tensors import StateDict
from fedlight.store.checkpoint import save_checkpoint
from fedlight.store.run_files import LIGHTNING_CHECKPOINT_NAME, MODEL_NAME


def lightning_checkpoint(module: pl.LightningModule, weights: StateDict) -> dict[str, Any]:
    """What `LightningModule.load_from_checkpoint` reads, as a Trainer's checkpoint holds it: the
    weights, the module's saved hyperparameters (its init arguments) and the Lightning version."""
    checkpoint: dict[str, Any] = {
        "state_dict": weights,
        "pytorch-lightning_version": pl.__version__,
        pl.LightningModule.CHECKPOINT_HYPER_PARAMS_KEY: dict(module.hparams),
    }
    name = getattr(module, "_hparams_name", None)
    if module.hparams and name:
        checkpoint[pl.LightningModule.CHECKPOINT_HYPER_PARAMS_NAME] = name
    return checkpoint


def write_model(output_dir: Path, module: pl.LightningModule, weights: StateDict) -> None:
    """model.pt and model.ckpt of `weights` (entries of `module`'s state_dict) in `output_dir`.
    A user's module whose saved hyperparameters cannot be pickled (a lambda) gets no model.ckpt,
    said in one line: the run's results are written all the same."""
    on_cpu = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights.items()}
    save_checkpoint(output_dir / MODEL_NAME, on_cpu)
    checkpoint = lightning_checkpoint(module, on_cpu)
    try:
        save_checkpoint(output_dir / LIGHTNING_CHECKPOINT_NAME, checkpoint)
    except (pickle.PicklingError, TypeError, AttributeError) as error:
        print(
            f"fedlight: warning: {LIGHTNING_CHECKPOINT_NAME} not written: the module's saved "
            f"hyperparameters cannot be pickled ({one_line(error, separator=' ', limit=120)}); "
            f"{MODEL_NAME} holds the model",
            file=sys.stderr,
            flush=True,
        )
