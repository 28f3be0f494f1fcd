"""Write the 2-classes-per-client split that Flower's niid_bench baseline trains on, for
`partition=from_file`.

Flower's merged Fashion-MNIST table (baselines/niid_bench) draws its "#C=2" split once, from numpy's
`default_rng(42)`, whatever the run's seed: client i holds class i mod 10 and one other class drawn
with `choice`, redrawn until it differs; each class's indices are shuffled by the same generator and
cut into equal parts, one per client holding it, in client order. This follows that description
draw for draw, so that fedlight can train on the very split Flower's numbers come from and a
difference in accuracy can be told apart from a difference in the draw (fedlight's
`partition=label_quantity` draws a split per seed from its own stream). Run from the repository
root:

    python -m scripts.flower_label_quantity_split \
        data/FashionMNIST/raw/train-labels-idx1-ubyte flower_c2.json
"""

import argparse
import json
from pathlib import Path

import numpy as np

IDX_LABELS_OFFSET = 8  # an IDX1 file: magic number and count (two big-endian int32), then bytes


def holdings(
    num_clients: int, num_classes: int, per_client: int, prng: np.random.Generator
) -> list[list[int]]:
    """Each client's classes: its own (i mod K) first, then distinct ones drawn one at a time."""
    held = []
    for client in range(num_clients):
        classes = [client % num_classes]
        while len(classes) < per_client:
            drawn = int(prng.choice(num_classes, 1)[0])
            if drawn not in classes:
                classes.append(drawn)
        held.append(classes)
    return held


def split(labels: np.ndarray, num_clients: int, per_client: int, seed: int) -> list[list[int]]:
    """Training-set indices per client, in the order Flower's generator produces them."""
    prng = np.random.default_rng(seed)
    num_classes = int(labels.max()) + 1
    held = holdings(num_clients, num_classes, per_client, prng)
    clients: list[list[int]] = [[] for _ in range(num_clients)]
    for label in range(num_classes):
        members = np.flatnonzero(labels == label)
        prng.shuffle(members)
        holders = [c for c in range(num_clients) if label in held[c]]
        if not holders:  # fewer clients than classes: this class stays unused
            continue
        for client, part in zip(holders, np.array_split(members, len(holders)), strict=True):
            clients[client] += part.tolist()
    return clients


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labels", type=Path, help="train-labels-idx1-ubyte of the dataset")
    parser.add_argument("output", type=Path, help="the JSON file to write")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--classes-per-client", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42, help="Flower's fixed partition seed")
    args = parser.parse_args()
    labels = np.frombuffer(args.labels.read_bytes(), np.uint8, offset=IDX_LABELS_OFFSET)
    clients = split(labels, args.clients, args.classes_per_client, args.seed)
    args.output.write_text(json.dumps(clients))
    for client, indices in enumerate(clients):
        classes = sorted(set(labels[indices].tolist()))
        print(f"client {client}: {len(indices)} examples, classes {classes}")


if __name__ == "__main__":
    main()
