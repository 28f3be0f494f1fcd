"""Data sources loaded through the real loaders from tiny fixtures in the real on-disk formats.

No test touches ../shared or the network: an autouse fixture makes every socket connection and
DNS lookup fail (and records the attempt), so "download=False never goes online" is checked.
"""

import os
import pickle
import socket
import struct
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
import torchvision.datasets.cifar
import torchvision.transforms
from torchvision.io import encode_jpeg, write_jpeg, write_png

from fedlight.data import cifar10, fmnist, mnist
from fedlight.data.augment import CropFlip
from fedlight.data.base import DataError, Normalization, TensorDataset
from fedlight.data.cifar10 import CIFAR10
from fedlight.data.digits import Digits
from fedlight.data.fmnist import FashionMNIST
from fedlight.data.mnist import MNIST
from fedlight.data.torchvision_source import open_torchvision

MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


@pytest.fixture(autouse=True)
def network(monkeypatch) -> list[tuple]:
    """Block all network access; the returned list records every attempt."""
    attempts: list[tuple] = []

    def blocked(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket, "getaddrinfo", blocked)
    monkeypatch.setattr(socket, "create_connection", blocked)
    monkeypatch.setattr(socket.socket, "connect", blocked)
    return attempts


def assert_one_line(message: str) -> None:
    assert message
    assert "\n" not in message and "\r" not in message


# ---------------------------------------------------------------- base


def test_normalize_uint8_per_channel():
    images = torch.tensor([[[[0, 255]], [[51, 102]], [[255, 0]]]], dtype=torch.uint8)
    before = images.clone()
    normalization = Normalization((0.5, 0.2, 0.0), (0.5, 0.1, 2.0))
    out = normalization(images)
    assert out.dtype == torch.float32
    assert out.shape == (1, 3, 1, 2)
    expected = torch.tensor([[[[-1.0, 1.0]], [[0.0, 2.0]], [[0.5, 0.0]]]])
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.equal(images, before)
    # several clients' batches stacked (the vectorized engine's [clients, B, C, H, W])
    stacked = torch.stack([images, images.flip(-1)])
    assert torch.equal(normalization(stacked), torch.stack([out, out.flip(-1)]))


def test_uint8_batches_equal_the_float_path_bit_for_bit():
    """Normalizing each batch where it is used gives exactly the values the float path, which
    normalized the whole set at load time, indexed; augmentation then sees the same inputs."""
    generator = torch.Generator().manual_seed(3)
    images = torch.randint(0, 256, (64, 3, 8, 8), generator=generator, dtype=torch.uint8)
    mean, std = cifar10.MEAN, cifar10.STD
    whole = (images.float() / 255.0 - torch.tensor(mean).view(1, -1, 1, 1)).div_(
        torch.tensor(std).view(1, -1, 1, 1)
    )
    data = TensorDataset(
        images, torch.zeros(64), images, torch.zeros(64), 10, None, Normalization(mean, std)
    )
    for indices in torch.randperm(64, generator=generator).split(10):
        assert torch.equal(data.prepare(data.train_x[indices]), whole[indices])
    black = tuple(-m / s for m, s in zip(mean, std, strict=True))
    crop = CropFlip(padding=2, fill=black)
    indices = torch.arange(16)
    augmented_uint8 = crop(data.prepare(data.train_x[indices]), torch.Generator().manual_seed(1))
    augmented_float = crop(whole[indices], torch.Generator().manual_seed(1))
    assert torch.equal(augmented_uint8, augmented_float)


def test_tensor_dataset_input_shape_and_to():
    augment = CropFlip(padding=1, fill=(0.0,))
    data = TensorDataset(
        torch.zeros(4, 1, 5, 6),
        torch.arange(4),
        torch.ones(2, 1, 5, 6),
        torch.arange(2),
        3,
        augment,
    )
    assert data.input_shape == (1, 5, 6)
    moved = data.to(torch.device("cpu"))
    assert moved is not data
    assert torch.equal(moved.train_x, data.train_x) and torch.equal(moved.test_y, data.test_y)
    assert moved.num_classes == 3 and moved.augment is augment


# ---------------------------------------------------------------- digits


DIGITS_COUNTS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
DIGITS_TEST_COUNTS = [36, 36, 35, 37, 36, 36, 36, 36, 35, 36]  # round(0.2 * count)


def test_digits_shapes_classes_and_stratified_split():
    data = Digits().load()
    assert data.train_x.shape == (1438, 1, 8, 8)
    assert data.test_x.shape == (359, 1, 8, 8)
    assert len(data.train_x) + len(data.test_x) == 1797
    assert data.train_x.dtype == data.test_x.dtype == torch.float32
    assert data.train_y.dtype == data.test_y.dtype == torch.int64
    assert data.input_shape == (1, 8, 8)
    assert data.num_classes == 10
    assert data.augment is None
    assert torch.bincount(data.test_y, minlength=10).tolist() == DIGITS_TEST_COUNTS
    train_counts = [c - t for c, t in zip(DIGITS_COUNTS, DIGITS_TEST_COUNTS, strict=True)]
    assert torch.bincount(data.train_y, minlength=10).tolist() == train_counts


def test_digits_split_is_a_partition_of_the_standardized_images():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    data = Digits().load()
    everything = torch.cat([data.train_x, data.test_x])
    assert abs(everything.mean().item()) < 1e-5
    assert abs(everything.std().item() - 1.0) < 1e-4
    # undo the standardization: the 1797 train+test images are exactly sklearn's, each once
    raw = bunch.images / 16.0
    restored = everything.squeeze(1).numpy() * raw.std(ddof=1) + raw.mean()
    restored = np.round(restored * 16.0).astype(np.int64).reshape(1797, 64)
    labels = torch.cat([data.train_y, data.test_y]).numpy()
    got = np.unique(np.column_stack([restored, labels]), axis=0, return_counts=True)
    want = np.unique(
        np.column_stack([bunch.images.astype(np.int64).reshape(1797, 64), bunch.target]),
        axis=0,
        return_counts=True,
    )
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_digits_split_is_fixed_and_ignores_global_seeds():
    np.random.seed(1)
    torch.manual_seed(1)
    first = Digits().load()
    np.random.seed(2)
    torch.manual_seed(2)
    second = Digits(root="elsewhere", download=True).load()
    for name in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(first, name), getattr(second, name))


# ---------------------------------------------------------------- MNIST / Fashion-MNIST (IDX)


def write_idx(path: Path, array: np.ndarray) -> None:
    """IDX as distributed by LeCun: magic 2051 (images) / 2049 (labels), big-endian dims."""
    magic = {3: 2051, 1: 2049}[array.ndim]
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def idx_images(count: int, seed: int) -> np.ndarray:
    i, r, c = np.meshgrid(np.arange(count), np.arange(28), np.arange(28), indexing="ij")
    return ((7 * i + 3 * r + 5 * c + seed) % 256).astype(np.uint8)


TRAIN_LABELS = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4])
TEST_LABELS = np.array([9, 8, 7, 6, 5, 4, 3, 2, 1, 0])


def write_mnist_tree(root: Path, folder: str) -> tuple[np.ndarray, np.ndarray]:
    raw = root / folder / "raw"
    train, test = idx_images(20, 0), idx_images(10, 100)
    train[0], train[1] = 0, 255
    write_idx(raw / "train-images-idx3-ubyte", train)
    write_idx(raw / "train-labels-idx1-ubyte", TRAIN_LABELS)
    write_idx(raw / "t10k-images-idx3-ubyte", test)
    write_idx(raw / "t10k-labels-idx1-ubyte", TEST_LABELS)
    return train, test


IDX_SOURCES = [
    pytest.param(MNIST, "MNIST", 0.1307, 0.3081, id="mnist"),
    pytest.param(FashionMNIST, "FashionMNIST", 0.2860, 0.3530, id="fmnist"),
]


@pytest.mark.parametrize(("source", "folder", "mean", "std"), IDX_SOURCES)
@pytest.mark.parametrize("download", [False, True])
def test_idx_fixture_loads_and_normalizes(tmp_path, network, source, folder, mean, std, download):
    train, test = write_mnist_tree(tmp_path, folder)
    data = source(root=str(tmp_path), download=download).load()
    assert data.train_x.shape == (20, 1, 28, 28)
    assert data.test_x.shape == (10, 1, 28, 28)
    assert data.train_x.dtype == data.test_x.dtype == torch.uint8  # normalized per batch
    assert data.train_y.dtype == data.test_y.dtype == torch.int64
    assert data.train_y.tolist() == TRAIN_LABELS.tolist()
    assert data.test_y.tolist() == TEST_LABELS.tolist()
    assert data.num_classes == 10 and data.augment is None
    assert data.input_shape == (1, 28, 28)
    expected_train = (torch.from_numpy(train).float() / 255 - mean) / std
    expected_test = (torch.from_numpy(test).float() / 255 - mean) / std
    inputs = data.prepare(data.train_x)
    assert torch.allclose(inputs[:, 0], expected_train, atol=1e-5)
    assert torch.allclose(data.prepare(data.test_x)[:, 0], expected_test, atol=1e-5)
    # black and white pixels, by hand
    assert torch.allclose(inputs[0], torch.full((1, 28, 28), -mean / std), atol=1e-5)
    assert torch.allclose(inputs[1], torch.full((1, 28, 28), (1 - mean) / std), atol=1e-5)
    # a file that is present is used as is, even with download=True
    assert network == []


@pytest.mark.parametrize(("source", "folder", "mean", "std"), IDX_SOURCES)
def test_idx_normalize_false_gives_totensor_pixels_bit_for_bit(tmp_path, source, folder, mean, std):
    """`data.normalize=false`: the [0, 1] pixels of torchvision's ToTensor (Flower's niid_bench)."""
    train, test = write_mnist_tree(tmp_path, folder)
    data = source(root=str(tmp_path), download=False, normalize=False).load()
    to_tensor = torchvision.transforms.ToTensor()
    expected = torch.stack([to_tensor(image) for image in train])
    assert torch.equal(data.prepare(data.train_x), expected)
    assert torch.equal(data.prepare(data.test_x)[:, 0], torch.from_numpy(test).float() / 255)
    standardized = source(root=str(tmp_path), download=False).load().prepare(data.train_x)
    assert torch.allclose(standardized, (expected - mean) / std, atol=1e-5)


def test_idx_module_constants():
    assert (mnist.MEAN, mnist.STD) == ((0.1307,), (0.3081,))
    assert (fmnist.MEAN, fmnist.STD) == ((0.2860,), (0.3530,))


def test_mnist_missing_files_one_line_error(tmp_path, network):
    with pytest.raises(DataError) as excinfo:
        MNIST(root=str(tmp_path), download=False).load()
    message = str(excinfo.value)
    assert_one_line(message)
    assert message.startswith("data=mnist:")
    assert "MNIST/raw/" in message
    for name in MNIST_FILES:
        assert name in message
    assert str(tmp_path.resolve()) in message
    assert "data.root" in message
    assert network == []


def test_fmnist_missing_files_names_its_own_folder(tmp_path, network):
    write_mnist_tree(tmp_path, "MNIST")  # MNIST's files are not Fashion-MNIST's
    with pytest.raises(DataError) as excinfo:
        FashionMNIST(root=str(tmp_path), download=False).load()
    message = str(excinfo.value)
    assert_one_line(message)
    assert message.startswith("data=fmnist:")
    assert "FashionMNIST/raw/" in message and "t10k-labels-idx1-ubyte" in message
    assert network == []


def test_mnist_partial_files_is_missing(tmp_path, network):
    write_mnist_tree(tmp_path, "MNIST")
    (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError) as excinfo:
        MNIST(root=str(tmp_path), download=False).load()
    assert_one_line(str(excinfo.value))
    assert network == []


@pytest.mark.parametrize(
    ("source", "setting"), [(MNIST, "data=mnist"), (FashionMNIST, "data=fmnist")]
)
def test_idx_download_failure_is_one_line(tmp_path, network, source, setting):
    # torchvision's own error here lists every mirror over several lines
    with pytest.raises(DataError) as excinfo:
        source(root=str(tmp_path), download=True).load()
    message = str(excinfo.value)
    assert_one_line(message)
    assert message.startswith(f"{setting}: download failed")
    assert str(tmp_path.resolve()) in message
    assert network, "download=True should have tried the network"
    assert list(tmp_path.iterdir()) == []  # no empty <ClassName>/raw/ folders left behind
    with pytest.raises(DataError):  # nor a data.root that was not there, or the folders above it
        source(root=str(tmp_path / "new" / "data"), download=True).load()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_download_leaves_the_files_that_were_there(tmp_path):
    """What a failed download began is removed, what was there before is left as it was."""
    kept = tmp_path / "MNIST" / "raw" / "kept"
    kept.parent.mkdir(parents=True)
    kept.write_text("mine")

    def begins_then_fails(root: str, train: bool, download: bool = False) -> None:
        if download:
            (kept.parent / "train-images-idx3-ubyte.gz").write_bytes(b"half")
            (tmp_path / "MNIST" / "processed").mkdir()
            raise ConnectionError("the network is down")
        raise RuntimeError("Dataset not found")

    with pytest.raises(DataError):
        open_torchvision(begins_then_fails, str(tmp_path), True, "MNIST/raw/{...}", "data=mnist")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "MNIST",
        "MNIST/raw",
        "MNIST/raw/kept",
    ]


def load_idx_fault(tmp_path, monkeypatch, download: bool = False) -> str:
    """The one-line DataError of MNIST loaded from a relative root; the path in it is absolute."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as excinfo:
        MNIST(root=".", download=download).load()
    message = str(excinfo.value)
    assert_one_line(message)
    assert message.startswith("data=mnist: ")
    return message


@pytest.mark.parametrize("download", [False, True])
@pytest.mark.parametrize(
    ("name", "keep", "words"),
    [
        (
            "train-images-idx3-ubyte",
            1234,
            "truncated IDX file: header promises 20 images of 28x28 (15696 bytes), file has 1234;",
        ),
        ("t10k-labels-idx1-ubyte", 3, "truncated IDX file: 3 bytes, shorter than its 8-byte"),
        (
            "t10k-images-idx3-ubyte",
            7856,
            "overlong IDX file: header promises 10 images of 28x28 (7856 bytes), file has 7857;",
        ),
    ],
    ids=["images-cut", "labels-header-cut", "images-extra-byte"],
)
def test_idx_wrong_length_names_the_file(
    tmp_path, monkeypatch, network, name, keep, words, download
):
    # once "files not found" (or, with download=True, "download failed")
    write_mnist_tree(tmp_path, "MNIST")
    path = tmp_path / "MNIST" / "raw" / name
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep < len(data) else data + b"\0")
    message = load_idx_fault(tmp_path, monkeypatch, download)
    assert f"{path.resolve()}: {words}" in message and "re-copy" in message
    assert network == []


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (
            struct.pack(">4I", 0x12345678, 20, 28, 28),
            "magic number 0x12345678, expected 0x00000803",
        ),
        (b"\x1f\x8b\x08\x00" + bytes(12), "magic number 0x1f8b0800, expected 0x00000803"),
        (struct.pack(">4I", 2051, 20, 28, 27), "IDX images of 28x27, expected 28x28"),
    ],
    ids=["garbage", "gzip", "dims"],
)
def test_idx_garbled_header_names_the_file(tmp_path, monkeypatch, header, words):
    # once a bare AssertionError from torchvision's reader
    write_mnist_tree(tmp_path, "MNIST")
    path = tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte"
    path.write_bytes(header + path.read_bytes()[16:])
    assert f"{path.resolve()}: " in (message := load_idx_fault(tmp_path, monkeypatch))
    assert words in message


def test_idx_label_out_of_range_names_the_file(tmp_path, monkeypatch):
    # once a numpy ValueError, far from the file
    write_mnist_tree(tmp_path, "MNIST")
    path = tmp_path / "MNIST" / "raw" / "train-labels-idx1-ubyte"
    write_idx(path, np.where(np.arange(20) == 5, 12, TRAIN_LABELS))
    message = load_idx_fault(tmp_path, monkeypatch)
    assert f"{path.resolve()}: label 12 at position 5 is out of range" in message
    assert "0..9" in message


def test_idx_label_count_mismatch_names_both_files(tmp_path, monkeypatch):
    # once silently accepted
    write_mnist_tree(tmp_path, "MNIST")
    raw = tmp_path.resolve() / "MNIST" / "raw"
    write_idx(raw / "t10k-labels-idx1-ubyte", TEST_LABELS[:9])
    message = load_idx_fault(tmp_path, monkeypatch)
    assert f"{raw / 't10k-images-idx3-ubyte'} holds 10 images" in message
    assert f"{raw / 't10k-labels-idx1-ubyte'} holds 9 labels" in message


# ---------------------------------------------------------------- open_torchvision control flow


class FakeDataset:
    def __init__(self, root, train=True, download=False, present=False, fail=None, calls=None):
        calls.append((train, download))
        if download and fail is not None:
            raise fail
        if not (present or download):
            raise RuntimeError("Dataset not found. You can use download=True to download it")
        self.train = train


def fake(calls: list, **kwargs):
    return lambda root, **kw: FakeDataset(root, calls=calls, **kwargs, **kw)


def test_open_torchvision_present_never_downloads(tmp_path):
    calls: list = []
    train, test = open_torchvision(fake(calls, present=True), str(tmp_path), True, "F", "data=x")
    assert (train.train, test.train) == (True, False)
    assert calls == [(True, False), (False, False)]


def test_open_torchvision_missing_without_download(tmp_path):
    calls: list = []
    with pytest.raises(DataError) as excinfo:
        open_torchvision(fake(calls), str(tmp_path), False, "x/{a, b}", "data=x")
    message = str(excinfo.value)
    assert_one_line(message)
    assert message.startswith("data=x: files not found under")
    assert "x/{a, b}" in message and "Dataset not found" in message
    assert calls == [(True, False)]


def test_open_torchvision_downloads_when_missing(tmp_path):
    calls: list = []
    train, test = open_torchvision(fake(calls), str(tmp_path), True, "F", "data=x")
    assert (train.train, test.train) == (True, False)
    assert calls == [(True, False), (True, True), (False, True)]


@pytest.mark.parametrize("failure", [ConnectionError("a\nb"), ValueError("bad md5\nline 2")])
def test_open_torchvision_download_failure(tmp_path, failure):
    calls: list = []
    with pytest.raises(DataError) as excinfo:
        open_torchvision(fake(calls, fail=failure), str(tmp_path), True, "x/{a}", "data=x")
    message = str(excinfo.value)
    assert_one_line(message)
    assert f"download failed ({type(failure).__name__})" in message
    assert "x/{a}" in message and str(tmp_path.resolve()) in message


# ---------------------------------------------------------------- CIFAR-10 python batches

CIFAR_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship"]
CIFAR_NAMES.append("truck")


def cifar_rows(first: int, count: int) -> np.ndarray:
    """(count, 3072) uint8 rows in CIFAR's layout: 1024 red, 1024 green, 1024 blue, row-major."""
    g, c, r, w = np.meshgrid(
        np.arange(first, first + count), np.arange(3), np.arange(32), np.arange(32), indexing="ij"
    )
    return ((11 * g + 80 * c + 3 * r + 7 * w) % 256).astype(np.uint8).reshape(count, 3072)


def write_cifar_batches(
    root: Path, train_labels: Sequence[int] = (7, 2, 9, 0, 4, 4, 1, 8, 3, 6)
) -> tuple[np.ndarray, list[int], np.ndarray, list[int]]:
    """Five training batches holding `train_labels`' images (a fifth each; 2 by default) and a
    test batch of 4, pickled like the originals.

    torchvision unpickles with encoding="latin1" and indexes entry["data"] / entry["labels"], so
    the keys are str (what the original Python 2 pickles decode to), not bytes.
    """
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    labels, per_batch = [int(label) for label in train_labels], len(train_labels) // 5
    for k in range(5):
        first = k * per_batch
        batch = {
            "batch_label": f"training batch {k + 1} of 5",
            "labels": labels[first : first + per_batch],
            "data": cifar_rows(first, per_batch),
            "filenames": [f"img_{first + j}.png" for j in range(per_batch)],
        }
        with open(folder / f"data_batch_{k + 1}", "wb") as f:
            pickle.dump(batch, f, protocol=2)
    test_labels = [5, 0, 9, 3]
    test = {"batch_label": "testing batch 1 of 1", "labels": test_labels}
    test["data"] = cifar_rows(100, 4)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump(test, f, protocol=2)
    meta = {"label_names": CIFAR_NAMES, "num_cases_per_batch": per_batch, "num_vis": 3072}
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(meta, f, protocol=2)
    return cifar_rows(0, 5 * per_batch), labels, cifar_rows(100, 4), test_labels


@pytest.fixture
def skip_cifar_md5(monkeypatch):
    """Accept fixture batches in place of the real ones.

    torchvision's CIFAR10 md5-checks every batch (`_check_integrity`) and `batches.meta`
    (`_load_meta`) against the published CIFAR-10 files, both through
    `torchvision.datasets.cifar.check_integrity`; our tiny batches can never match. Replace it
    with a plain existence check, so pickle parsing, reshaping and the HWC transpose stay real.
    """
    monkeypatch.setattr(
        torchvision.datasets.cifar, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath)
    )


@pytest.mark.usefixtures("skip_cifar_md5")
@pytest.mark.parametrize("download", [False, True])
def test_cifar_batches_load(tmp_path, network, download):
    train_rows, train_labels, test_rows, test_labels = write_cifar_batches(tmp_path)
    data = CIFAR10(root=str(tmp_path), download=download, augment=False).load()
    assert data.train_x.shape == (10, 3, 32, 32)
    assert data.test_x.shape == (4, 3, 32, 32)
    assert data.train_x.dtype == torch.uint8
    assert data.train_y.dtype == torch.int64
    assert data.train_y.tolist() == train_labels
    assert data.test_y.tolist() == test_labels
    assert data.num_classes == 10 and data.augment is None
    # channel-major rows come back as (C, H, W) in batch order
    expected_train = torch.from_numpy(train_rows).view(10, 3, 32, 32)
    expected_test = torch.from_numpy(test_rows).view(4, 3, 32, 32)
    assert torch.equal(data.train_x, expected_train)
    assert torch.equal(data.test_x, expected_test)
    # pixel (image 3, green, row 2, col 5) = (33 + 80 + 6 + 35) % 256 = 154
    assert data.train_x[3, 1, 2, 5].item() == 154
    assert data.prepare(data.train_x)[0, 0, 0, 0].item() == pytest.approx(
        -0.4914 / 0.2470, abs=1e-5
    )
    assert network == []


def test_cifar_batches_rejected_by_md5_without_download(tmp_path, network):
    # without the md5 bypass, torchvision treats fixture batches as corrupted: a one-line
    # DataError, and with download=False no attempt to fetch the real ones
    write_cifar_batches(tmp_path)
    with pytest.raises(DataError) as excinfo:
        CIFAR10(root=str(tmp_path), download=False).load()
    message = str(excinfo.value)
    assert_one_line(message)
    assert message.startswith("data=cifar10:")
    assert "corrupted" in message and "cifar-10-batches-py/" in message
    assert network == []


@pytest.mark.usefixtures("skip_cifar_md5")
def test_cifar_batches_missing_one_batch(tmp_path, network):
    write_cifar_batches(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DataError) as excinfo:
        CIFAR10(root=str(tmp_path), download=False).load()
    message = str(excinfo.value)
    assert_one_line(message)
    assert "cifar-10-batches-py/" in message and "train/<class>/*" in message
    assert str(tmp_path.resolve()) in message
    assert network == []


def test_cifar_missing_everything_download_fails_one_line(tmp_path, network):
    with pytest.raises(DataError) as excinfo:
        CIFAR10(root=str(tmp_path), download=True).load()
    message = str(excinfo.value)
    assert_one_line(message)
    assert message.startswith("data=cifar10: download failed (")
    assert network


# ---------------------------------------------------------------- CIFAR-10 ImageFolder


def folder_image(seed: int) -> torch.Tensor:
    c, r, w = torch.meshgrid(torch.arange(3), torch.arange(32), torch.arange(32), indexing="ij")
    return ((17 * seed + 60 * c + 5 * r + w) % 256).to(torch.uint8)


def write_png_file(path: Path, image: torch.Tensor) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_png(image, str(path))


def write_small_tree(root: Path) -> None:
    for split, count in (("train", 2), ("test", 1)):
        for label, name in enumerate(("cat", "dog")):
            for k in range(count):
                write_png_file(root / split / name / f"{k}.png", folder_image(10 * label + k))


def test_cifar_decode_cache_hit_miss_stale_and_corrupt(tmp_path, capsys, monkeypatch):
    """A miss decodes and writes the cache; a hit decodes nothing; a changed image makes it stale
    and an unreadable file is rebuilt, each said in one line; the tensors are always the tree's."""
    tree, cache = tmp_path / "tree", tmp_path / "cache"
    write_small_tree(tree)
    source = CIFAR10(root=str(tree), augment=False, cache_dir=str(cache))
    first = source.load()
    [cache_file] = cache.glob("cifar10-*.pt")
    assert capsys.readouterr().err == ""

    with monkeypatch.context() as patch:
        patch.setattr(cifar10, "decode", lambda path: pytest.fail(f"decoded {path} on a hit"))
        hit = source.load()
    assert all(torch.equal(getattr(hit, k), getattr(first, k)) for k in ("train_x", "test_x"))
    assert hit.train_y.tolist() == first.train_y.tolist() == [0, 0, 1, 1]
    assert capsys.readouterr().err == ""

    write_png_file(tree / "train" / "cat" / "0.png", folder_image(99))
    stale = source.load()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cache {cache_file} is stale" in err
    assert torch.equal(stale.train_x[0], folder_image(99))

    cache_file.write_bytes(b"not a torch file")
    rebuilt = source.load()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cache {cache_file} is unreadable" in err
    assert torch.equal(rebuilt.train_x, stale.train_x)
    source.load()
    assert capsys.readouterr().err == ""  # rebuilt: a hit again


def test_cifar_decode_cache_that_cannot_be_written_is_said_and_skipped(tmp_path, capsys):
    tree = tmp_path / "tree"
    write_small_tree(tree)
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    data = CIFAR10(root=str(tree), augment=False, cache_dir=str(blocked / "cache")).load()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write the decoded-image cache" in err
    assert "data.cache_dir" in err and data.train_x.shape == (4, 3, 32, 32)


def test_cifar_decode_cache_defaults_to_the_users_cache_folder(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    write_small_tree(tree)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    CIFAR10(root=str(tree), augment=False).load()
    assert len(list((tmp_path / "xdg" / "fedlight").glob("cifar10-*.pt"))) == 1
    assert not list(tree.rglob("*.pt"))  # nothing written into the data root


def test_cifar_image_folder_labels_and_pixels(tmp_path, network):
    # class folders made in non-sorted order; labels must follow the sorted names
    expected_train: list[tuple[int, torch.Tensor]] = []
    for label, name in sorted(enumerate(["apple", "mango", "zebra"]), key=lambda x: -x[0]):
        for k, file in enumerate(["b.png", "a.png", "c.PNG"]):
            image = folder_image(10 * label + k)
            write_png_file(tmp_path / "train" / name / file, image)
            expected_train.append((label, file.lower(), image))
        (tmp_path / "train" / name / "notes.txt").write_text("not an image")
        write_png_file(tmp_path / "test" / name / "x.png", folder_image(50 + label))
    (tmp_path / "train" / "stray.png").write_bytes(b"")  # not a class folder
    # a grayscale PNG in the test split is decoded as RGB
    gray = torch.full((1, 32, 32), 77, dtype=torch.uint8)
    write_png_file(tmp_path / "test" / "mango" / "y.png", gray)

    data = CIFAR10(root=str(tmp_path), download=False, augment=False).load()
    assert data.train_x.shape == (9, 3, 32, 32)
    assert data.test_x.shape == (4, 3, 32, 32)
    assert data.train_y.dtype == torch.int64
    assert data.train_y.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert data.test_y.tolist() == [0, 1, 1, 2]
    # within a class, files in sorted name order: a.png, b.png, c.PNG
    order = sorted(expected_train, key=lambda x: (x[0], x[1]))
    assert torch.equal(data.train_x, torch.stack([img for _, _, img in order]))
    expected_test = [folder_image(50), folder_image(51), gray.expand(3, 32, 32), folder_image(52)]
    assert torch.equal(data.test_x, torch.stack(expected_test))
    assert network == []


def test_cifar_image_folder_jpeg(tmp_path):
    colors = {"cat": (200, 30, 90), "dog": (10, 240, 128)}
    for name, color in colors.items():
        image = torch.tensor(color, dtype=torch.uint8).view(3, 1, 1).expand(3, 32, 32).contiguous()
        for split in ("train", "test"):
            (tmp_path / split / name).mkdir(parents=True)
            write_jpeg(image, str(tmp_path / split / name / "0.jpg"), quality=100)
    data = CIFAR10(root=str(tmp_path), augment=False).load()
    assert data.train_y.tolist() == [0, 1] and data.test_y.tolist() == [0, 1]
    pixels = data.train_x.int()
    for label, color in enumerate(colors.values()):
        target = torch.tensor(color).view(3, 1, 1)
        assert (pixels[label] - target).abs().max().item() <= 3  # JPEG is lossy


def test_cifar_decoding_holds_a_split_once(monkeypatch):
    """Each decoded image goes into its row of the split's tensor at once: at no time are the
    split's images alive as separate tensors besides it (a list of them stacked at the end held
    the split twice: the first run's peak of memory)."""
    alive: weakref.WeakSet[torch.Tensor] = weakref.WeakSet()
    most = 0

    def fake_decode(path: Path) -> torch.Tensor:
        nonlocal most
        image = folder_image(int(path.stem))
        alive.add(image)
        most = max(most, len(alive))
        return image

    monkeypatch.setattr(cifar10, "decode", fake_decode)
    count = 300  # more than a thread pool's threads (at most 32), each holding one image
    images, labels = cifar10.read_image_folder(
        [Path(f"{k}.png") for k in range(count)], [k % 10 for k in range(count)]
    )
    assert torch.equal(images, torch.stack([folder_image(k) for k in range(count)]))
    assert labels.tolist() == [k % 10 for k in range(count)]
    assert most <= 32 < count


def test_cifar_image_folder_without_images(tmp_path, network):
    for split in ("train", "test"):
        (tmp_path / split / "cat").mkdir(parents=True)
        (tmp_path / split / "cat" / "readme.txt").write_text("x")
    with pytest.raises(DataError) as excinfo:
        CIFAR10(root=str(tmp_path)).load()
    message = str(excinfo.value)
    assert_one_line(message)
    assert message.startswith("data=cifar10: no images under")
    assert str(tmp_path / "train") in message and "data.root" in message
    assert network == []


def jpeg_bytes(image: torch.Tensor) -> bytes:
    return encode_jpeg(image, quality=90).numpy().tobytes()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (lambda: jpeg_bytes(folder_image(1))[:300], "cannot decode the image (Image is incomplete"),
        (lambda: b"", "cannot decode the image (Expected a non empty file)"),
        (lambda: b"not a jpeg" * 20, "cannot decode the image (Unsupported image file."),
        (lambda: jpeg_bytes(torch.zeros(3, 40, 32, dtype=torch.uint8)), "image of 40x32 pixels"),
        (lambda: jpeg_bytes(torch.zeros(1, 32, 64, dtype=torch.uint8)), "image of 32x64 pixels"),
    ],
    ids=["truncated", "empty", "not-an-image", "40x32", "grey-32x64"],
)
def test_cifar_image_folder_bad_image_names_the_file(tmp_path, content, words):
    # once a RuntimeError (or torch.stack's size error) that named no file
    for split in ("train", "test"):
        for name in ("cat", "dog"):
            write_png_file(tmp_path / split / name / "a.png", folder_image(len(name)))
    bad = tmp_path / "test" / "dog" / "b.jpg"
    bad.write_bytes(content())
    with pytest.raises(DataError) as excinfo:
        CIFAR10(root=str(tmp_path)).load()
    message = str(excinfo.value)
    assert_one_line(message)
    assert message.startswith(f"data=cifar10: {bad.resolve()}: {words}")
    assert message.endswith("replace or delete the file")


def test_cifar_train_folder_alone_falls_back_to_batches(tmp_path, network):
    write_png_file(tmp_path / "train" / "cat" / "a.png", folder_image(0))
    with pytest.raises(DataError) as excinfo:
        CIFAR10(root=str(tmp_path), download=False).load()
    assert "cifar-10-batches-py/" in str(excinfo.value)
    assert network == []


def test_cifar_augment_setting(tmp_path):
    for split in ("train", "test"):
        write_png_file(tmp_path / split / "cat" / "a.png", folder_image(0))
    augmented = CIFAR10(root=str(tmp_path), augment=True).load()
    assert isinstance(augmented.augment, CropFlip)
    assert augmented.augment.padding == 4
    # the fill is a black pixel after normalization
    black = Normalization(cifar10.MEAN, cifar10.STD)(torch.zeros(1, 3, 1, 1, dtype=torch.uint8))
    assert torch.allclose(torch.tensor(augmented.augment.fill), black.flatten(), atol=1e-6)
    assert CIFAR10(root=str(tmp_path), augment=False).load().augment is None
    raw = CIFAR10(root=str(tmp_path), normalize=False).load()
    assert raw.augment.fill == (0.0, 0.0, 0.0)  # black is 0 without standardization
    assert torch.equal(raw.prepare(raw.train_x), raw.train_x.float() / 255)


# ---------------------------------------------------------------- CropFlip


def match_crops(images, out, pad, fill):
    """For each sample, the (row, col, flipped) windows of the padded image equal to the output."""
    padded = torch.stack(
        [F.pad(images[:, c], (pad, pad, pad, pad), value=fill[c]) for c in range(len(fill))], 1
    )
    h, w = images.shape[2:]
    matches: list[list[tuple[int, int, bool]]] = [[] for _ in range(len(images))]
    for i in range(2 * pad + 1):
        for j in range(2 * pad + 1):
            window = padded[:, :, i : i + h, j : j + w]
            for flipped, candidate in ((False, window), (True, window.flip(3))):
                equal = (candidate == out).flatten(1).all(1)
                for b in torch.nonzero(equal).flatten().tolist():
                    matches[b].append((i, j, flipped))
    return matches


def crop_batch(batch: int = 200) -> torch.Tensor:
    # all values distinct and >= 0, so every window is unique and fill values (< 0) stand out
    return torch.arange(batch * 3 * 6 * 7, dtype=torch.float32).view(batch, 3, 6, 7)


def test_cropflip_is_a_shifted_window_of_the_padded_image():
    images, pad, fill = crop_batch(), 2, (-1.0, -2.0, -3.0)
    out = CropFlip(padding=pad, fill=fill)(images, torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == images.dtype
    matches = match_crops(images, out, pad, fill)
    assert all(len(m) == 1 for m in matches)
    rows = [m[0][0] for m in matches]
    cols = [m[0][1] for m in matches]
    flips = [m[0][2] for m in matches]
    assert set(rows) == set(range(5)) and set(cols) == set(range(5))
    assert 60 <= sum(flips) <= 140  # about half of 200
    assert len(set(zip(rows, cols, strict=True))) > 15  # offsets drawn per sample


def test_cropflip_fill_appears_in_padded_border():
    images, pad, fill = crop_batch(), 2, (-1.0, -2.0, -3.0)
    out = CropFlip(padding=pad, fill=fill)(images, torch.Generator().manual_seed(0))
    for c, value in enumerate(fill):
        channel = out[:, c]
        assert torch.all((channel >= 0) | (channel == value))
        assert (channel == value).any()
    matches = match_crops(images, out, pad, fill)
    top = [b for b, m in enumerate(matches) if m[0][:2] == (0, pad)]
    assert top
    for b in top:  # shifted down only: the first `pad` rows are fill, the rest is the image
        for c, value in enumerate(fill):
            assert torch.all(out[b, c, :pad] == value)
        assert torch.all(out[b, :, pad:] >= 0)


def test_cropflip_no_padding_only_flips():
    images = crop_batch(50)
    out = CropFlip(padding=0, fill=(0.0, 0.0, 0.0))(images, torch.Generator().manual_seed(3))
    same = (out == images).flatten(1).all(1)
    flipped = (out == images.flip(3)).flatten(1).all(1)
    assert torch.all(same ^ flipped)
    assert same.any() and flipped.any()


def test_cropflip_deterministic_for_a_seed():
    images = crop_batch(32)
    augment = CropFlip(padding=4, fill=(0.0, 0.5, 1.0))
    first = augment(images, torch.Generator().manual_seed(42))
    again = augment(images, torch.Generator().manual_seed(42))
    other = augment(images, torch.Generator().manual_seed(43))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    generator = torch.Generator().manual_seed(42)
    assert torch.equal(augment(images, generator), first)
    assert not torch.equal(augment(images, generator), first)  # the generator advances


def test_cropflip_single_channel_and_input_untouched():
    images = torch.rand(8, 1, 5, 5)
    before = images.clone()
    out = CropFlip(padding=1, fill=(-9.0,))(images, torch.Generator().manual_seed(0))
    assert out.shape == (8, 1, 5, 5)
    assert torch.equal(images, before)
    assert all(len(m) == 1 for m in match_crops(images, out, 1, (-9.0,)))
