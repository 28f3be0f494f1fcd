"""Partition schemes: disjointness, sizes, label skew, determinism and one-line config errors."""

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from fedlight.core.errors import ConfigError
from fedlight.partitions.dirichlet import Dirichlet
from fedlight.partitions.iid import IID
from fedlight.partitions.label_blocks import LabelBlocks
from fedlight.partitions.label_quantity import LabelQuantity
from fedlight.partitions.shards import Shards

NUM_CLASSES = 10
PER_CLASS = 200
NUM_SAMPLES = NUM_CLASSES * PER_CLASS


@pytest.fixture
def labels() -> np.ndarray:
    """2,000 samples, 200 per class, in shuffled order (so index order says nothing of labels)."""
    return np.random.default_rng(1234).permutation(np.repeat(np.arange(NUM_CLASSES), PER_CLASS))


def check_index_sets(parts: list[np.ndarray], num_clients: int, num_samples: int) -> np.ndarray:
    """Each part is a sorted, duplicate-free integer index array; parts are pairwise disjoint."""
    assert len(parts) == num_clients
    for part in parts:
        assert part.ndim == 1
        assert np.issubdtype(part.dtype, np.integer)
        assert np.all(np.diff(part) > 0), "indices must be sorted and unique"
        if len(part):
            assert part[0] >= 0 and part[-1] < num_samples
    union = np.concatenate(parts)
    assert len(np.unique(union)) == len(union), "client sets overlap"
    return np.sort(union)


def distinct_labels(parts: list[np.ndarray], labels: np.ndarray) -> list[int]:
    return [len(np.unique(labels[part])) for part in parts]


def effective_labels(part: np.ndarray, labels: np.ndarray) -> float:
    """exp(entropy) of a client's label histogram: 1 for a single class, 10 for a uniform mix."""
    counts = np.bincount(labels[part], minlength=NUM_CLASSES)
    p = counts[counts > 0] / counts.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


SCHEMES = [
    pytest.param(IID(), id="iid"),
    pytest.param(Shards(shards_per_client=2), id="shards"),
    pytest.param(Dirichlet(alpha=0.5, min_samples=10), id="dirichlet"),
    pytest.param(LabelQuantity(classes_per_client=2), id="label_quantity"),
    pytest.param(LabelBlocks(classes_per_client=2), id="label_blocks"),
]


# ---------------------------------------------------------------- common contract


@pytest.mark.parametrize("scheme", SCHEMES)
def test_client_sets_are_disjoint_sorted_index_arrays(scheme, labels):
    parts = scheme(labels, 20, np.random.default_rng(0))
    union = check_index_sets(parts, 20, NUM_SAMPLES)
    assert all(len(part) > 0 for part in parts)
    assert len(union) <= NUM_SAMPLES


@pytest.mark.parametrize("scheme", SCHEMES)
def test_same_seed_same_split_different_seed_different_split(scheme, labels):
    np.random.seed(1)  # the global numpy state must play no part
    first = scheme(labels, 20, np.random.default_rng(7))
    np.random.seed(2)
    again = scheme(labels, 20, np.random.default_rng(7))
    other = scheme(labels, 20, np.random.default_rng(8))
    assert len(first) == len(again) == len(other) == 20
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_labels_are_not_modified(scheme, labels):
    before = labels.copy()
    scheme(labels, 20, np.random.default_rng(0))
    assert np.array_equal(labels, before)


# ---------------------------------------------------------------- iid


@pytest.mark.parametrize("num_clients", [1, 7, 10, 30, 2000])
def test_iid_is_complete_with_sizes_within_one(labels, num_clients):
    parts = IID()(labels, num_clients, np.random.default_rng(0))
    union = check_index_sets(parts, num_clients, NUM_SAMPLES)
    assert np.array_equal(union, np.arange(NUM_SAMPLES))
    sizes = [len(part) for part in parts]
    assert sum(sizes) == NUM_SAMPLES
    assert max(sizes) - min(sizes) <= 1
    assert min(sizes) == NUM_SAMPLES // num_clients


def test_iid_clients_see_every_class(labels):
    parts = IID()(labels, 10, np.random.default_rng(0))
    assert [len(part) for part in parts] == [200] * 10
    # 200 uniform draws over 10 balanced classes: every client sees all 10 labels
    assert distinct_labels(parts, labels) == [10] * 10


def test_iid_is_not_the_identity_split(labels):
    parts = IID()(labels, 10, np.random.default_rng(0))
    assert not np.array_equal(parts[0], np.arange(200))


# ---------------------------------------------------------------- shards


def test_shards_aligned_give_every_client_at_most_two_labels(labels):
    # 100 clients x 2 shards = 200 shards of 10; class sizes (200) are multiples of 10, so each
    # shard holds one label and each client at most two.
    parts = Shards(shards_per_client=2)(labels, 100, np.random.default_rng(0))
    union = check_index_sets(parts, 100, NUM_SAMPLES)
    assert np.array_equal(union, np.arange(NUM_SAMPLES))
    assert [len(part) for part in parts] == [20] * 100
    counts = distinct_labels(parts, labels)
    assert max(counts) <= 2
    assert min(counts) >= 1
    # 20 shards per label spread over 100 clients: two shards of the same label are the rare case
    assert sum(c == 2 for c in counts) >= 80
    # each label contributes whole shards of 10 samples to a client
    for part in parts:
        assert set(np.bincount(labels[part]).tolist()) <= {0, 10, 20}


def test_shards_unaligned_class_sizes_bounded_label_count():
    sizes = [195, 205, 190, 210, 199, 201, 187, 213, 200, 200]
    labels = np.random.default_rng(5).permutation(np.repeat(np.arange(10), sizes))
    parts = Shards(shards_per_client=2)(labels, 100, np.random.default_rng(0))
    check_index_sets(parts, 100, 2000)
    assert [len(part) for part in parts] == [20] * 100
    counts = distinct_labels(parts, labels)
    # a shard of 10 straddles at most one of the 9 class boundaries, so at most 9 shards (and
    # hence at most 9 clients) have a second label inside a shard
    assert max(counts) <= 4
    assert sum(c > 2 for c in counts) <= 9
    assert sum(c <= 2 for c in counts) >= 91


@pytest.mark.parametrize(
    ("num_samples", "num_clients", "per_client"), [(2003, 7, 3), (1000, 3, 5), (50, 25, 2)]
)
def test_shards_size_and_unused_remainder(num_samples, num_clients, per_client):
    labels = np.random.default_rng(0).integers(0, 10, num_samples)
    parts = Shards(shards_per_client=per_client)(labels, num_clients, np.random.default_rng(3))
    union = check_index_sets(parts, num_clients, num_samples)
    shard_size = num_samples // (num_clients * per_client)
    assert [len(part) for part in parts] == [per_client * shard_size] * num_clients
    assert len(union) == num_clients * per_client * shard_size
    # the unused samples are fewer than one shard per client-shard slot
    assert num_samples - len(union) < num_clients * per_client


def test_shards_per_client_one_gives_one_label_each(labels):
    parts = Shards(shards_per_client=1)(labels, 10, np.random.default_rng(0))
    assert [len(part) for part in parts] == [200] * 10
    assert distinct_labels(parts, labels) == [1] * 10
    assert sorted(int(labels[part[0]]) for part in parts) == list(range(10))


# ---------------------------------------------------------------- dirichlet


def test_dirichlet_complete_and_min_samples(labels):
    scheme = Dirichlet(alpha=0.5, min_samples=30)
    parts = scheme(labels, 20, np.random.default_rng(0))
    union = check_index_sets(parts, 20, NUM_SAMPLES)
    assert np.array_equal(union, np.arange(NUM_SAMPLES))
    assert min(len(part) for part in parts) >= 30


@pytest.mark.parametrize("alpha", [0.05, 0.5, 5.0])
def test_dirichlet_fair_share_cap(labels, alpha):
    # a client at or above N / num_clients gets no more, so it overshoots by less than one class
    parts = Dirichlet(alpha=alpha, min_samples=0)(labels, 20, np.random.default_rng(1))
    assert max(len(part) for part in parts) < NUM_SAMPLES / 20 + PER_CLASS


def test_dirichlet_smaller_alpha_means_fewer_labels_per_client(labels):
    def mean_effective(alpha: float) -> float:
        values = []
        for seed in range(3):
            parts = Dirichlet(alpha=alpha, min_samples=10)(labels, 20, np.random.default_rng(seed))
            values += [effective_labels(part, labels) for part in parts]
        return float(np.mean(values))

    skewed, mild, near_iid = mean_effective(0.1), mean_effective(1.0), mean_effective(100.0)
    assert skewed < mild < near_iid
    assert skewed < 3.0
    assert near_iid > 9.0


def test_dirichlet_tiny_alpha_no_nan_and_cap_holds():
    # Regression: with alpha=0.001 every eligible client's share can underflow to 0.0; the
    # normalization then divided 0 by 0 and the NaN cuts dumped the whole class on the last
    # client, however full it already was.
    labels = np.repeat(np.arange(100), 20)
    for seed in range(10):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            parts = Dirichlet(alpha=0.001, min_samples=0)(labels, 5, np.random.default_rng(seed))
        union = check_index_sets(parts, 5, len(labels))
        assert np.array_equal(union, np.arange(len(labels)))
        assert max(len(part) for part in parts) < len(labels) / 5 + 20


def test_dirichlet_min_samples_zero_allows_any_split(labels):
    parts = Dirichlet(alpha=0.1, min_samples=0)(labels, 50, np.random.default_rng(0))
    union = check_index_sets(parts, 50, NUM_SAMPLES)
    assert np.array_equal(union, np.arange(NUM_SAMPLES))


# ---------------------------------------------------------------- label blocks


def test_label_blocks_is_the_scaffold_tutorials_split(labels):
    """10 clients × 2 labels of 10 classes: client i holds labels 2i, 2i+1 mod 10 (client_0: 0, 1;
    client_1: 2, 3; client_9: 8, 9), clients i and i+5 split each of their labels in halves at
    random, every example is used; which labels a client holds does not depend on the seed."""
    for seed in (0, 1):
        parts = LabelBlocks(classes_per_client=2)(labels, 10, np.random.default_rng(seed))
        union = check_index_sets(parts, 10, NUM_SAMPLES)
        assert np.array_equal(union, np.arange(NUM_SAMPLES))
        for client, part in enumerate(parts):
            assert set(labels[part].tolist()) == {2 * client % 10, (2 * client + 1) % 10}
            assert len(part) == PER_CLASS  # half of each of its two labels
    assert not np.array_equal(parts[0], LabelBlocks()(labels, 10, np.random.default_rng(0))[0])


def test_label_blocks_without_wrapping_are_disjoint_in_labels(labels):
    """N·k ≤ L: no two clients share a label, each holds all of its labels' examples; the labels
    no client holds stay unused."""
    parts = LabelBlocks(classes_per_client=3)(labels, 3, np.random.default_rng(0))
    for client, part in enumerate(parts):
        held = [3 * client, 3 * client + 1, 3 * client + 2]
        assert np.array_equal(part, np.flatnonzero(np.isin(labels, held)))
    assert not np.isin(labels[np.concatenate(parts)], [9]).any()


def test_label_blocks_refuses_more_labels_than_the_dataset_has(labels):
    with pytest.raises(ConfigError, match=r"^partition.classes_per_client=11 exceeds the 10"):
        LabelBlocks(classes_per_client=11)(labels, 10, np.random.default_rng(0))


# ---------------------------------------------------------------- label quantity


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_label_quantity_exactly_k_labels(labels, k):
    parts = LabelQuantity(classes_per_client=k)(labels, 20, np.random.default_rng(0))
    union = check_index_sets(parts, 20, NUM_SAMPLES)
    assert distinct_labels(parts, labels) == [k] * 20
    # client i always holds class i mod 10
    for client, part in enumerate(parts):
        assert client % NUM_CLASSES in set(labels[part].tolist())
    # every sample of a held class is used, and nothing else
    held = np.unique(labels[union])
    assert np.array_equal(union, np.flatnonzero(np.isin(labels, held)))


def test_label_quantity_splits_each_class_evenly(labels):
    parts = LabelQuantity(classes_per_client=3)(labels, 20, np.random.default_rng(0))
    for label in range(NUM_CLASSES):
        shares = [int((labels[part] == label).sum()) for part in parts]
        shares = [s for s in shares if s > 0]
        assert sum(shares) == PER_CLASS
        assert max(shares) - min(shares) <= 1


def test_label_quantity_all_classes_is_complete(labels):
    parts = LabelQuantity(classes_per_client=NUM_CLASSES)(labels, 20, np.random.default_rng(0))
    union = check_index_sets(parts, 20, NUM_SAMPLES)
    assert np.array_equal(union, np.arange(NUM_SAMPLES))
    assert [len(part) for part in parts] == [100] * 20


def test_label_quantity_one_class_fewer_clients_than_classes(labels):
    parts = LabelQuantity(classes_per_client=1)(labels, 4, np.random.default_rng(0))
    for client, part in enumerate(parts):
        assert np.array_equal(part, np.flatnonzero(labels == client))


def test_label_quantity_non_contiguous_label_values():
    labels = np.random.default_rng(0).permutation(np.repeat([3, 7, 42], 30))
    parts = LabelQuantity(classes_per_client=2)(labels, 6, np.random.default_rng(0))
    check_index_sets(parts, 6, 90)
    assert distinct_labels(parts, labels) == [2] * 6
    for client, part in enumerate(parts):
        assert [3, 7, 42][client % 3] in set(labels[part].tolist())


# ---------------------------------------------------------------- config errors


def assert_one_line_config_error(excinfo: pytest.ExceptionInfo, *keys: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message
    for key in keys:
        assert key in message


@pytest.mark.parametrize("alpha", [0.0, -0.5])
def test_dirichlet_alpha_must_be_positive(alpha):
    with pytest.raises(ConfigError) as excinfo:
        Dirichlet(alpha=alpha)
    assert_one_line_config_error(excinfo, "partition.alpha")


def test_dirichlet_negative_min_samples():
    with pytest.raises(ConfigError) as excinfo:
        Dirichlet(alpha=0.5, min_samples=-1)
    assert_one_line_config_error(excinfo, "partition.min_samples")


def test_dirichlet_min_samples_beyond_dataset(labels):
    with pytest.raises(ConfigError) as excinfo:
        Dirichlet(alpha=0.5, min_samples=101)(labels, 20, np.random.default_rng(0))
    assert_one_line_config_error(excinfo, "partition.min_samples", "fl.num_clients", "2000")


def test_dirichlet_min_samples_exactly_dataset_is_allowed_by_count_check():
    # 10 clients x 10 = 100 samples passes the count check; alpha=0.01 can never split one class
    # into ten equal parts, so the draws give up with a one-line error naming both keys
    labels = np.zeros(100, dtype=np.int64)
    with pytest.raises(ConfigError) as excinfo:
        Dirichlet(alpha=0.01, min_samples=10)(labels, 10, np.random.default_rng(0))
    assert_one_line_config_error(excinfo, "partition.min_samples", "partition.alpha")


def test_shards_more_shards_than_samples():
    labels = np.arange(10) % 3
    with pytest.raises(ConfigError) as excinfo:
        Shards(shards_per_client=3)(labels, 4, np.random.default_rng(0))
    assert_one_line_config_error(excinfo, "partition.shards_per_client", "fl.num_clients")
    # exactly one sample per shard is still allowed
    parts = Shards(shards_per_client=2)(labels, 5, np.random.default_rng(0))
    assert [len(part) for part in parts] == [2] * 5


def test_shards_per_client_must_be_positive():
    with pytest.raises(ConfigError) as excinfo:
        Shards(shards_per_client=0)
    assert_one_line_config_error(excinfo, "partition.shards_per_client")


def test_label_quantity_more_classes_than_dataset(labels):
    with pytest.raises(ConfigError) as excinfo:
        LabelQuantity(classes_per_client=11)(labels, 20, np.random.default_rng(0))
    assert_one_line_config_error(excinfo, "partition.classes_per_client", "10 classes")


def test_label_quantity_classes_per_client_must_be_positive():
    with pytest.raises(ConfigError) as excinfo:
        LabelQuantity(classes_per_client=0)
    assert_one_line_config_error(excinfo, "partition.classes_per_client")


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_flower_label_quantity_split_script_writes_a_from_file_split(tmp_path, labels):
    """scripts/flower_label_quantity_split.py: #C=2 as Flower draws it, readable by from_file."""
    from fedlight.partitions.from_file import read_client_sets
    from scripts.flower_label_quantity_split import split

    labels_file = tmp_path / "train-labels-idx1-ubyte"
    header = np.array([2049, len(labels)], dtype=">i4").tobytes()
    labels_file.write_bytes(header + labels.astype(np.uint8).tobytes())
    output = tmp_path / "c2.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "scripts.flower_label_quantity_split",
            str(labels_file),
            str(output),
        ],
        check=True,
        cwd=Path(__file__).parents[2],
        capture_output=True,
    )
    sets = read_client_sets(output, "partition.path")
    assert sets == split(labels, 10, 2, 42)  # the file holds the drawn split, seed 42 by default
    parts = [np.sort(np.array(s)) for s in sets]
    check_index_sets(parts, 10, len(labels))
    for client, part in enumerate(parts):
        assert client % 10 in labels[part] and len(np.unique(labels[part])) == 2
    for label in range(10):  # each class cut into equal parts (within one) among its holders
        sizes = [np.sum(labels[p] == label) for p in parts if label in labels[p]]
        assert sum(sizes) == np.sum(labels == label) and max(sizes) - min(sizes) <= 1
    assert split(labels, 10, 2, 42) != split(labels, 10, 2, 43)
