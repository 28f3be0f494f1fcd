"""CIFAR-10 (Krizhevsky 2009) from torchvision's python batches or an ImageFolder tree.

An ImageFolder tree (`train/<class>/*`, `test/<class>/*`, e.g. a JPEG copy of the images) is
used when `data.root` holds `train/` and `test/`; otherwise torchvision's `cifar-10-batches-py`.
Decoding the tree's 60,000 images takes about 20 s on two cores, so the decoded uint8 tensors are
cached (`data.cache_dir`) under a name derived from the tree's path and checked against its files'
names, sizes and modification times: a second run loads them in about a second, and a stale or
unreadable cache is rebuilt with one line saying so.
"""

import hashlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor
from torchvision import datasets
from torchvision.io import ImageReadMode, decode_image, read_file

from fedlight.core.errors import require
from fedlight.data.augment import CropFlip
from fedlight.data.base import (
    DataError,
    TensorDataset,
    data_root,
    image_normalization,
    require_regular_files,
)
from fedlight.data.torchvision_source import open_torchvision

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
# `data.statistics`: each channel's (mean, std) that `normalize` standardizes with. `dataset`: the
# training set's; `half`: the FedAvg tutorial's §1.1 `Normalize((0.5,)*3, (0.5,)*3)`, which maps
# the pixels' [0, 1] onto [-1, 1] (p ↦ 2p − 1) whatever the images.
STATISTICS = {"dataset": (MEAN, STD), "half": ((0.5,) * 3, (0.5,) * 3)}
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}
IMAGE_SHAPE = (3, 32, 32)


def decode(path: Path) -> Tensor:
    """One image as uint8 (3, 32, 32); refused by name if undecodable or of another size.

    Checked here, where each file is decoded, so that a bad file among 60,000 is named at no cost.
    """
    try:
        image = decode_image(read_file(str(path)), mode=ImageReadMode.RGB)
    except RuntimeError as error:
        reason = " ".join(str(error).split(", ", 2)[-1].split())  # without "function, file:line, "
        raise DataError(
            f"data=cifar10: {path}: cannot decode the image ({reason}); replace or delete the file"
        ) from None
    if image.shape != IMAGE_SHAPE:
        raise DataError(
            f"data=cifar10: {path}: image of {image.shape[1]}x{image.shape[2]} pixels, "
            f"CIFAR-10 images are 32x32; replace or delete the file"
        )
    return image


def split_files(split_dir: Path, classes: list[str]) -> tuple[list[Path], list[int]]:
    """One split's image files (per class, in name order) and their labels by class order."""
    files: list[Path] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        if not (split_dir / name).is_dir():
            raise DataError(
                f"data=cifar10: {split_dir / name} is missing; every split needs a folder per class"
            )
        members = sorted(
            p for p in (split_dir / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES
        )
        require_regular_files(members, "data=cifar10")
        files += members
        labels += [label] * len(members)
    if not files:
        raise DataError(f"data=cifar10: no images under {split_dir}/<class>/; check data.root")
    return files, labels


def read_image_folder(files: list[Path], labels: list[int]) -> tuple[Tensor, Tensor]:
    """Decode one split's images into a uint8 (N, 3, 32, 32) tensor, with their labels.

    Each image is written into its row of the one tensor as soon as it is decoded: the split is
    held once, not also as N decoded images to stack (which doubled the first run's peak)."""
    images = torch.empty((len(files), *IMAGE_SHAPE), dtype=torch.uint8)

    def decode_into(row: int) -> None:
        images[row] = decode(files[row])

    with ThreadPoolExecutor() as pool:
        try:
            for _ in pool.map(decode_into, range(len(files))):
                pass
        except DataError:
            pool.shutdown(cancel_futures=True)  # report a bad file without decoding the rest
            raise
    return images, torch.tensor(labels, dtype=torch.int64)


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/fedlight, else ~/.cache/fedlight: the user's cache, never the data root."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fedlight"


def fingerprint(root: Path, splits: dict[str, list[Path]]) -> str:
    """What the decoded tensors depend on: every image's path, size and modification time."""
    digest = hashlib.sha256()
    for split, files in splits.items():
        for path in files:
            stat = path.stat()
            digest.update(
                f"{split}/{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode()
            )
    return digest.hexdigest()


Decoded = dict[str, Tensor]  # train_x, train_y, test_x, test_y


def cached(path: Path, key: str) -> Decoded | None:
    """The tensors cached at `path` for the tree whose fingerprint is `key`; None (and one line on
    stderr) when there is no cache, or it is stale or unreadable."""
    if not path.is_file():
        return None
    try:
        content = torch.load(path, weights_only=True, mmap=True)
        tensors = {name: content[name] for name in ("train_x", "train_y", "test_x", "test_y")}
        stored_key = content["fingerprint"]
        complete = all(isinstance(t, Tensor) for t in tensors.values())
    except Exception as error:  # noqa: BLE001 - any unreadable file is rebuilt, never trusted
        reason = " ".join(str(error).split())[:120] or type(error).__name__
        print(
            f"fedlight: data=cifar10: cache {path} is unreadable ({reason}); rebuilding it",
            file=sys.stderr,
        )
        return None
    if stored_key != key or not complete:
        print(
            f"fedlight: data=cifar10: cache {path} is stale (the images changed); rebuilding it",
            file=sys.stderr,
        )
        return None
    return tensors


def store(path: Path, key: str, tensors: Decoded) -> None:
    """Writes the cache atomically; a cache directory that cannot be written is said and skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save({"fingerprint": key, **tensors}, partial)
        os.replace(partial, path)
    except OSError as error:
        print(
            f"fedlight: data=cifar10: cannot write the decoded-image cache {path} "
            f"({error.strerror}); set data.cache_dir to a writable folder to keep it",
            file=sys.stderr,
        )


def load_image_folder(root: Path, cache_dir: Path) -> Decoded:
    """The tree's splits decoded, from the cache when it is current."""
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    splits = {split: split_files(root / split, classes) for split in ("train", "test")}
    key = fingerprint(root, {split: files for split, (files, _) in splits.items()})
    name = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    path = cache_dir / f"cifar10-{name}.pt"
    tensors = cached(path, key)
    if tensors is None:
        train_x, train_y = read_image_folder(*splits["train"])
        test_x, test_y = read_image_folder(*splits["test"])
        tensors = {"train_x": train_x, "train_y": train_y, "test_x": test_x, "test_y": test_y}
        store(path, key, tensors)
    return tensors


@dataclass
class CIFAR10:
    root: str = "data"
    download: bool = True
    augment: bool = True
    normalize: bool = True  # False: pixels in [0, 1], not standardized
    cache_dir: str | None = None  # decoded ImageFolder images; None: the user's cache folder
    statistics: str = "dataset"  # dataset | half: the mean and std `normalize` uses
    # what a checkpoint written before a setting existed ran with (`same_config.value_before`)
    settings_before: ClassVar[dict[str, Any]] = {"statistics": "dataset"}

    def __post_init__(self) -> None:
        require(
            self.statistics in STATISTICS,
            f"data.statistics={self.statistics} is not a choice; use dataset (CIFAR-10's "
            "per-channel mean and std) or half (0.5 and 0.5: pixels in [-1, 1])",
        )
        require(
            self.normalize or self.statistics == "dataset",
            f"data.statistics={self.statistics} standardizes, and data.normalize=false leaves "
            "the pixels in [0, 1]; set data.normalize=true, or leave data.statistics=dataset",
        )

    def load(self) -> TensorDataset:
        root = data_root(self.root, "data=cifar10")
        if (root / "train").is_dir() and (root / "test").is_dir():
            cache_dir = default_cache_dir() if self.cache_dir is None else Path(self.cache_dir)
            decoded = load_image_folder(root, cache_dir)
            train_images, train_labels = decoded["train_x"], decoded["train_y"]
            test_images, test_labels = decoded["test_x"], decoded["test_y"]
        else:
            batches = root / datasets.CIFAR10.base_folder
            require_regular_files(sorted(batches.glob("*")), "data=cifar10")
            train, test = open_torchvision(
                datasets.CIFAR10,
                self.root,
                self.download,
                "cifar-10-batches-py/ (or an ImageFolder tree train/<class>/*, test/<class>/*)",
                "data=cifar10",
            )
            train_images = torch.from_numpy(train.data).permute(0, 3, 1, 2)
            test_images = torch.from_numpy(test.data).permute(0, 3, 1, 2)
            train_labels = torch.tensor(train.targets, dtype=torch.int64)
            test_labels = torch.tensor(test.targets, dtype=torch.int64)
        normalization = image_normalization(*STATISTICS[self.statistics], self.normalize)
        black = tuple(-m / s for m, s in zip(normalization.mean, normalization.std, strict=True))
        return TensorDataset(
            train_images,
            train_labels,
            test_images,
            test_labels,
            10,
            CropFlip(padding=4, fill=black) if self.augment else None,
            normalization,
        )
