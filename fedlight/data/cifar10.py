"""CIFAR-10 (Krizhevsky 2009) from torchvision's python batches or an ImageFolder tree.

An ImageFolder tree (`train/<class>/*`, `test/<class>/*`, e.g. the JPEG copy in ../shared/data) is
used when `data.root` holds `train/` and `test/`; otherwise torchvision's `cifar-10-batches-py`.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from torchvision import datasets
from torchvision.io import ImageReadMode, decode_image, read_file

from fedlight.data.augment import CropFlip
from fedlight.data.base import DataError, Normalization, TensorDataset
from fedlight.data.torchvision_source import open_torchvision

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
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


def read_image_folder(split_dir: Path, classes: list[str]) -> tuple[Tensor, Tensor]:
    """Decode every image of one split into a uint8 (N, 3, 32, 32) tensor, labels by class order."""
    files, labels = [], []
    for label, name in enumerate(classes):
        if not (split_dir / name).is_dir():
            raise DataError(
                f"data=cifar10: {split_dir / name} is missing; every split needs a folder per class"
            )
        members = sorted(
            p for p in (split_dir / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES
        )
        files += members
        labels += [label] * len(members)
    if not files:
        raise DataError(f"data=cifar10: no images under {split_dir}/<class>/; check data.root")
    with ThreadPoolExecutor() as pool:
        try:
            images = list(pool.map(decode, files))
        except DataError:
            pool.shutdown(cancel_futures=True)  # report a bad file without decoding the rest
            raise
    return torch.stack(images), torch.tensor(labels, dtype=torch.int64)


@dataclass
class CIFAR10:
    root: str = "data"
    download: bool = True
    augment: bool = True

    def load(self) -> TensorDataset:
        root = Path(self.root).resolve()
        if (root / "train").is_dir() and (root / "test").is_dir():
            classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
            train_images, train_labels = read_image_folder(root / "train", classes)
            test_images, test_labels = read_image_folder(root / "test", classes)
        else:
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
        black = tuple(-m / s for m, s in zip(MEAN, STD, strict=True))
        return TensorDataset(
            train_images,
            train_labels,
            test_images,
            test_labels,
            10,
            CropFlip(padding=4, fill=black) if self.augment else None,
            Normalization(MEAN, STD),
        )
