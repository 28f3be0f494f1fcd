"""What every framework is handed: fedlight draws the client index sets and each round's clients
(from its own generators of (seed, stream, round)), and writes them with the data as uint8 arrays
into a folder the peers' drivers read (`spec.json`, `data.npz`)."""

import json
from pathlib import Path

import numpy as np

from benchmarks.peers.workloads import Workload
from fedlight.core.rng import Stream, derive_seed, numpy_generator
from fedlight.data.base import TensorDataset
from fedlight.partitions.base import Partition
from fedlight.partitions.dirichlet import Dirichlet
from fedlight.partitions.iid import IID
from fedlight.partitions.shards import Shards

SPEC, DATA = "spec.json", "data.npz"
# fedlight's partition options the workloads use (conf/partition/<option>.yaml's classes)
PARTITIONS: dict[str, type[Partition]] = {"shards": Shards, "dirichlet": Dirichlet, "iid": IID}


def client_sets(workload: Workload, labels: np.ndarray) -> list[list[int]]:
    """fedlight's partition of the workload: its scheme with the workload's settings and the
    (seed, PARTITION) generator a run uses (`fedlight.runs.federation`)."""
    scheme = PARTITIONS[workload.partition](**workload.partition_settings)
    sets = scheme(labels, workload.num_clients, numpy_generator(workload.seed, Stream.PARTITION))
    return [[int(i) for i in s] for s in sets]


def selections(workload: Workload) -> list[list[int]]:
    """Each round's clients as fedlight's `selection=random` draws them (round r's generator of
    (seed, SELECTION, r); `fedlight.stages.selection.random`)."""
    chosen = []
    for round_index in range(1, workload.rounds + 1):
        rng = numpy_generator(workload.seed, Stream.SELECTION, round_index)
        draw = rng.choice(workload.num_clients, size=workload.clients_per_round, replace=False)
        chosen.append(sorted(int(c) for c in draw))
    return chosen


def shuffle_seeds(workload: Workload, chosen: list[list[int]]) -> dict[str, int]:
    """The seed of each round's client's local shuffling ("round/client"), as fedlight's engines
    seed it: (seed, LOCAL_TRAINING, round, client)."""
    return {
        f"{r}/{c}": derive_seed(workload.seed, Stream.LOCAL_TRAINING, r, c)
        for r, clients in enumerate(chosen, 1)
        for c in clients
    }


def spec(
    workload: Workload, data: TensorDataset, threads: int, device: str = "cpu"
) -> dict[str, object]:
    """spec.json's content: the workload, the index sets, the rounds' clients, the seeds, the
    device every framework trains on."""
    normalization = data.normalization
    chosen = selections(workload)
    if normalization is None:
        raise ValueError(f"{workload.data}: the peers are handed uint8 images and their statistics")
    if workload.eval_batch_size == workload.batch_size:
        raise ValueError(
            f"{workload.name}: eval_batch_size must differ from batch_size (pfl's driver tells a "
            "user's local training from pfl's evaluation of the user by the batch size)"
        )
    return {
        "workload": workload.name,
        "model": workload.model,
        "input_shape": list(data.input_shape),
        "num_classes": data.num_classes,
        "clients": client_sets(workload, data.train_y.numpy()),
        "selections": chosen,
        "epochs": workload.epochs,
        "batch_size": workload.batch_size,
        "lr": workload.lr,
        "momentum": workload.momentum,
        "weight_decay": workload.weight_decay,
        "rounds": workload.rounds,
        "eval_batch_size": workload.eval_batch_size,
        "init_seed": derive_seed(workload.seed, Stream.MODEL_INIT),
        "shuffle_seeds": shuffle_seeds(workload, chosen),
        "seed": workload.seed,
        "threads": threads,
        "device": device,
        "mean": list(normalization.mean),
        "std": list(normalization.std),
    }


def write(folder: Path, content: dict[str, object], data: TensorDataset) -> None:
    """The spec and the data (uint8 images, int64 labels) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SPEC).write_text(json.dumps(content))
    np.savez(
        folder / DATA,
        train_x=data.train_x.numpy(),
        train_y=data.train_y.numpy(),
        test_x=data.test_x.numpy(),
        test_y=data.test_y.numpy(),
    )


def samples_trained(content: dict[str, object]) -> int:
    """Training examples processed over the run: the rounds' clients' set sizes times epochs."""
    sets, chosen = content["clients"], content["selections"]
    return int(content["epochs"]) * sum(len(sets[c]) for r in chosen for c in r)  # type: ignore[index]
