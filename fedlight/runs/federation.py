"""A run's clients: the partition of the training set with each client's held-out test and
validation parts as index tensors on the run's device, the label histogram, and the checks of the
federation's size (clients per example) and of clients left without data."""

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from fedlight.core.errors import require
from fedlight.core.rng import Stream, numpy_generator
from fedlight.core.settings import RunSettings
from fedlight.data.base import TensorDataset
from fedlight.drivers.base import Clients
from fedlight.drivers.workers import Workers
from fedlight.partitions.base import Partition, times_listed
from fedlight.runs.outputs import (
    label_histogram,
    write_label_histogram,
)

EMPTY_CLIENTS_WARNED = 0.1  # the share of clients without data above which a run warns


MAX_CLIENTS_PER_EXAMPLE = 100  # beyond it, > 99% of the clients are necessarily without data


LARGE_FEDERATION = 100_000  # from this many clients on, setup says what it is doing


def check_federation_size(
    num_clients: int, examples: int, choices: dict[str, str], main: bool
) -> None:
    """Refuse more than MAX_CLIENTS_PER_EXAMPLE clients per training example: more than 99% of
    them could never hold data or train, while setting them up takes time and memory linear in
    their number (10^6 clients: 100 s and 1.9 GB on 2 cores; 10^7 sat in setup for minutes,
    silently). Up to that, a large federation says what it is doing first (`main` worker)."""
    require(
        num_clients <= MAX_CLIENTS_PER_EXAMPLE * examples,
        f"fl.num_clients={num_clients} but data={choices['data']} has {examples} training "
        f"examples: more than {1 - 1 / MAX_CLIENTS_PER_EXAMPLE:.0%} of the clients could never "
        f"hold data or train; give fl.num_clients <= {MAX_CLIENTS_PER_EXAMPLE * examples} (at most "
        f"{examples}, so that every client can hold an example)",
    )
    if main and num_clients >= LARGE_FEDERATION:
        print(
            f"fedlight: setting up {num_clients:,} clients (partition, index sets, label "
            "histogram; time and memory grow with fl.num_clients)",
            file=sys.stderr,
            flush=True,
        )


def warn_of_empty_clients(client_sets: list[np.ndarray]) -> None:
    """One warning when the partition leaves more than EMPTY_CLIENTS_WARNED of the clients
    without data: they are left out of every round that selects them (a round of only them keeps
    the global model), so the effective clients per round is smaller than configured."""
    empty = sum(1 for client_set in client_sets if len(client_set) == 0)
    if empty > EMPTY_CLIENTS_WARNED * len(client_sets):
        print(
            f"fedlight: warning: the partition leaves {empty} of {len(client_sets)} clients "
            f"without data ({empty / len(client_sets):.0%}); rounds leave them out: lower "
            "fl.num_clients (or raise partition.min_samples where the partition has it)",
            file=sys.stderr,
            flush=True,
        )


def say_shared_examples(client_sets: list[np.ndarray], num_examples: int) -> None:
    """One line, where clients hold copies of one example (`partition.overlap=true`): how many
    are shared, how many no client holds, and the clients' sizes, what such a split gives."""
    listed = times_listed(client_sets, num_examples)
    shared = int((listed > 1).sum())
    if not shared:
        return
    sizes = [len(client_set) for client_set in client_sets]
    distinct, unheld = int((listed > 0).sum()), int((listed == 0).sum())
    print(
        f"fedlight: the partition lists {int(listed.sum()):,} examples, {distinct:,} distinct: "
        f"{shared:,} held by more than one client (each holds a copy), {unheld:,} of the "
        f"{num_examples:,} by none; clients hold {min(sizes):,} to {max(sizes):,} examples",
        file=sys.stderr,
        flush=True,
    )


def federation(
    settings: RunSettings,
    partition: Partition,
    data: TensorDataset,
    output_dir: Path,
    workers: Workers,
) -> Clients:
    """The clients' examples: the partition of the training set, each client's local test part
    held out of it (`partition.client_test_fraction`) or given by the data (LEAF's per-user test
    split: `with_given_test_sets`), then its local validation part
    (`partition.client_validation_fraction`); the main worker draws its histogram."""
    device = workers.device
    labels = data.train_y.cpu().numpy()
    client_sets, client_test_sets = partition.hold_out(
        partition(
            partition.keys(data),
            settings.fl.num_clients,
            numpy_generator(settings.seed, Stream.PARTITION),
        ),
        labels,
        settings.seed,
    )
    given = partition.given_test_sets(data, settings.fl.num_clients)
    if given is not None:
        data, client_test_sets = with_given_test_sets(data, given)
    client_sets, validation_sets = partition.hold_out_validation(client_sets, labels, settings.seed)
    if workers.main:
        histogram = label_histogram(client_sets, labels, data.num_classes)
        write_label_histogram(output_dir, histogram)
        warn_of_empty_clients(client_sets)
        if partition.allows_overlap():
            say_shared_examples(client_sets, len(labels))
    return Clients(
        data,
        index_tensors(client_sets, device),
        None if client_test_sets is None else index_tensors(client_test_sets, device),
        None if validation_sets is None else index_tensors(validation_sets, device),
    )


def with_given_test_sets(
    data: TensorDataset, test_sets: list[np.ndarray]
) -> tuple[TensorDataset, list[np.ndarray]]:
    """`data` with its test examples appended to the pool the clients' indices point into, and
    each client's given local test set (indices into the test set) as indices into that pool:
    every consumer of local test sets reads them from the pool, and no client's training part
    reaches the appended examples, which stay the global test set too."""
    offset = len(data.train_y)
    clients = data.train_clients
    pooled = replace(
        data,
        train_x=torch.cat([data.train_x, data.test_x]),
        train_y=torch.cat([data.train_y, data.test_y]),
        train_clients=None
        if clients is None or data.test_clients is None
        else torch.cat([clients, data.test_clients]),
    )
    return pooled, [indices + offset for indices in test_sets]


def index_tensors(sets: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Each client's example indices as a tensor on the run's device."""
    return [torch.as_tensor(s, dtype=torch.int64, device=device) for s in sets]
