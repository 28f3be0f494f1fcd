"""The FedAvg tutorial's CIFAR-10 data choices (issue 67 item 6), on tiny CIFAR-format batches:
§1.1's `Normalize((0.5,)*3, (0.5,)*3)` as `data.statistics=half` (pixels onto [-1, 1]), and §1.3's
split function as written (`examples/tutorial_split`) through `partition=callable`, whose
independent draws give clients shared examples: counted from the construction, and said by the
run."""

import json
from pathlib import Path

import numpy as np
import pytest

from examples.tutorial_split.split import flat_split, split
from fedlight.core.errors import ConfigError
from fedlight.core.rng import Stream, numpy_generator
from fedlight.data.cifar10 import CIFAR10
from fedlight.runs.experiment import run_job
from tests.data.test_data import skip_cifar_md5, write_cifar_batches  # noqa: F401 - fixture

PER_CLASS = 20  # training images per class of the fixture: CIFAR-10's 5,000 in small
CLIENTS = 4  # shard size 200 // 8 = 25: a client draws 12 of a class's 20 images, twice


def tiny_split(labels: np.ndarray, num_clients: int, generator: np.random.Generator) -> list:
    """The tutorial's split with the fixture's 20 images a class in place of CIFAR-10's 5,000."""
    return split(labels, num_clients, generator, class_block=PER_CLASS)


def shuffled_labels(seed: int = 0) -> np.ndarray:
    """PER_CLASS labels of each of the 10 classes, in a random order."""
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(10), PER_CLASS))


@pytest.mark.usefixtures("skip_cifar_md5")
def test_half_statistics_map_the_pixels_onto_minus_one_to_one(tmp_path: Path, make_job) -> None:
    """(p/255 − 0.5)/0.5 = 2p/255 − 1: 0 ↦ −1 and 255 ↦ 1 exactly (0.5 and 1 − 0.5 are exact,
    dividing by 0.5 is), every other pixel within 2⁻²² of 2p/255 − 1 (float32's rounding of
    p/255, at most 2⁻²⁵, and of the subtraction, at most 2⁻²⁵, both doubled); the crop's padding
    is black, −1. The job is built from the real config (data=cifar10 data.statistics=half)."""
    write_cifar_batches(tmp_path, shuffled_labels())
    job = make_job(["data=cifar10", f"data.root={tmp_path}", "data.statistics=half"])
    data = job.data.load()
    pixels = data.train_x
    assert int(pixels.min()) == 0 and int(pixels.max()) == 255
    inputs = data.prepare(pixels)
    assert float(inputs.min()) == -1.0 and float(inputs.max()) == 1.0
    assert bool((inputs[pixels == 0] == -1).all() and (inputs[pixels == 255] == 1).all())
    exact = pixels.double() * 2 / 255 - 1
    assert float((inputs.double() - exact).abs().max()) <= 2.0**-22
    assert data.augment is not None and data.augment.fill == (-1.0, -1.0, -1.0)
    default = CIFAR10(root=str(tmp_path), augment=False).load()
    assert float(default.prepare(pixels).min()) == pytest.approx(-0.4914 / 0.2470, rel=1e-6)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"statistics": "ones"}, "data.statistics=ones is not a choice; use dataset"),
        (
            {"statistics": "half", "normalize": False},
            "data.statistics=half standardizes, and data.normalize=false",
        ),
    ],
)
def test_statistics_refusals_are_one_line(settings: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as refused:
        CIFAR10(**settings)
    assert str(refused.value).startswith(expected) and "\n" not in str(refused.value)


def overlap_by_class(sets: list[np.ndarray], labels: np.ndarray) -> dict[int, tuple[int, int]]:
    """Each class's (listings, distinct examples) over the clients' sets."""
    listed = np.concatenate(sets)
    return {
        c: (int((labels[listed] == c).sum()), len(np.unique(listed[labels[listed] == c])))
        for c in range(10)
    }


@pytest.mark.parametrize("seed", range(20))
def test_the_split_as_written_overlaps_where_clients_draw_one_class(seed: int) -> None:
    """By construction: a client holds two classes of shard_size // 2 = 12 examples each (none
    twice), the flat list is the clients' runs one after the other, and the k_c clients that drew
    class c listed 12·k_c of its 20 examples independently, so at least 12·k_c − 20 of the
    listings repeat one (4 for two clients); a class one client drew is not shared."""
    labels = shuffled_labels(seed)
    sets = tiny_split(labels, CLIENTS, numpy_generator(seed, Stream.PARTITION))
    flat = flat_split(labels, CLIENTS, numpy_generator(seed, Stream.PARTITION), class_block=20)
    assert np.array_equal(np.concatenate(sets), flat)
    takers = {c: 0 for c in range(10)}
    for indices in sets:
        assert len(indices) == 24 and len(np.unique(indices)) == 24
        first, second = labels[indices[:12]], labels[indices[12:]]
        assert len(set(first)) == 1 and len(set(second)) == 1 and first[0] != second[0]
        takers[int(first[0])] += 1
        takers[int(second[0])] += 1
    for c, (listings, distinct) in overlap_by_class(sets, labels).items():
        assert listings == 12 * takers[c]
        assert listings - distinct >= max(0, 12 * takers[c] - PER_CLASS)
        assert (listings == distinct) if takers[c] <= 1 else (listings > distinct)


def seed_with_shared_examples(labels: np.ndarray) -> tuple[int, list[np.ndarray]]:
    """The first seed whose split shares examples (two clients drew one class), and its sets."""
    for seed in range(100):
        sets = tiny_split(labels, CLIENTS, numpy_generator(seed, Stream.PARTITION))
        if len(np.unique(np.concatenate(sets))) < 96:
            return seed, sets
    raise AssertionError("no seed of 100 drew one class for two clients")


@pytest.mark.usefixtures("skip_cifar_md5")
def test_the_split_runs_through_partition_callable_and_the_run_says_what_it_gave(
    tmp_path: Path, make_job, capsys
) -> None:
    """One round of the real config on the CIFAR-format fixture: each client's label histogram
    is the construction's (two classes, 12 each), and the run's line counts the listings, the
    distinct and shared examples and those no client holds as the sets do. Without
    partition.overlap=true the same split is refused in one line that names it."""
    labels = shuffled_labels()
    write_cifar_batches(tmp_path / "data", labels)
    seed, sets = seed_with_shared_examples(labels)
    overrides = [
        "data=cifar10",
        f"data.root={tmp_path / 'data'}",
        "data.augment=false",
        "model=mlp",
        f"fl.num_clients={CLIENTS}",
        f"fl.clients_per_round={CLIENTS}",
        "fl.rounds=1",
        "partition=callable",
        f"partition.function={__name__}.tiny_split",
        f"seed={seed}",
    ]
    run_job(make_job([*overrides, "partition.overlap=true"]), tmp_path / "run")
    histogram = json.loads((tmp_path / "run" / "label_histogram.json").read_text())
    for client, indices in enumerate(sets):
        expected = np.bincount(labels[indices], minlength=10).tolist()
        assert histogram[str(client)] == expected and sorted(expected)[-2:] == [12, 12]
    listed = np.bincount(np.concatenate(sets), minlength=len(labels))
    said = (
        f"the partition lists 96 examples, {int((listed > 0).sum())} distinct: "
        f"{int((listed > 1).sum())} held by more than one client (each holds a copy), "
        f"{int((listed == 0).sum())} of the 200 by none; clients hold 24 to 24 examples"
    )
    assert said in capsys.readouterr().err
    with pytest.raises(ConfigError) as refused:
        run_job(make_job(overrides), tmp_path / "refused")
    message = str(refused.value)
    assert "is listed twice" in message and "partition.overlap=true" in message
    assert "\n" not in message
