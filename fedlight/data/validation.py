"""The server's validation set (`data.validation_fraction`): a share of the training examples,
held out per label before the partition, so that rounds, models and hyperparameters can be chosen
without looking at the test set (NIID-Bench: Li et al. 2022 ICDE; FedOpt: Reddi et al. 2021 ICLR).

The draw comes from a generator of its own, derived from (seed, VALIDATION): it depends on the
seed and the data alone, so every worker of a run and every resume of it holds out the same
examples, and no other draw (the partition's, the clients' local test sets) moves with it.
"""

from dataclasses import replace

import numpy as np
import torch

from fedlight.core.errors import require
from fedlight.core.rng import Stream, numpy_generator
from fedlight.data.base import TensorDataset


def stratified_sample(
    indices: np.ndarray, labels: np.ndarray, fraction: float, rng: np.random.Generator
) -> np.ndarray:
    """round(`fraction` · n) of the `indices` of each label (n: how many of them have it), drawn
    by `rng` label by label in increasing label order; sorted. `labels` is indexed by `indices`."""
    of_indices = labels[indices]
    held = [
        rng.permutation(of_label)[: round(fraction * len(of_label))]
        for label in np.unique(of_indices)
        for of_label in [indices[of_indices == label]]
    ]
    return np.sort(np.concatenate(held)) if held else indices[:0]


def validation_indices(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """The training examples (indices, sorted) held out as the validation set."""
    everything = np.arange(len(labels))
    return stratified_sample(everything, labels, fraction, numpy_generator(seed, Stream.VALIDATION))


def split_validation(data: TensorDataset, fraction: float, seed: int) -> TensorDataset:
    """`data` with `fraction` of its training examples (per label) moved to its validation set
    (`val_x`, `val_y`), the rest its training set in their order; `data` itself for fraction 0,
    so that a run without a validation set computes what it did before, bit for bit (and one
    with the data's own validation set validates on it)."""
    if fraction == 0:
        return data
    require(
        data.val_x is None,
        f"data.validation_fraction={fraction} but the data has a validation set of its own (a "
        "DataModule's val_dataloader); set data.validation_fraction=0 to validate on it",
    )
    labels = data.train_y.cpu().numpy()
    held = validation_indices(labels, fraction, seed)
    require(
        0 < len(held) < len(labels),
        f"data.validation_fraction={fraction} holds out {len(held)} of the {len(labels)} training "
        "examples, leaving no validation set or no training set; give a fraction that holds out "
        "at least one example per label and leaves some",
    )
    kept = np.setdiff1d(np.arange(len(labels)), held, assume_unique=True)
    held_t, kept_t = torch.from_numpy(held), torch.from_numpy(kept)
    clients = data.train_clients
    return replace(
        data,
        train_x=data.train_x[kept_t.to(data.train_x.device)],
        train_y=data.train_y[kept_t.to(data.train_y.device)],
        train_clients=None if clients is None else clients[kept_t.to(clients.device)],
        val_x=data.train_x[held_t.to(data.train_x.device)],
        val_y=data.train_y[held_t.to(data.train_y.device)],
    )
