"""MNIST-style IDX files, read and checked here so that every fault names its file.

torchvision's reader fails on a damaged file with a bare assertion or a reshape error that its
dataset classes report as "Dataset not found"; this one says which file is wrong and how.
"""

import struct
from math import prod
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedlight.data.base import DataError

IMAGE_MAGIC, LABEL_MAGIC = 0x0803, 0x0801  # unsigned bytes; 3 and 1 dimensions
IMAGE_SIZE = (28, 28)
NUM_CLASSES = 10
SPLITS = ("train", "t10k")


def split_files(raw: Path, split: str) -> tuple[Path, Path]:
    """The images and labels files of one split in torchvision's raw folder."""
    return raw / f"{split}-images-idx3-ubyte", raw / f"{split}-labels-idx1-ubyte"


def read_idx(
    path: Path, magic: int, item_shape: tuple[int, ...], what: str, setting: str
) -> Tensor:
    """The uint8 tensor in `path`, after checking its magic number, item shape and length."""
    data = np.fromfile(path, dtype=np.uint8)
    header = 4 * (1 + (magic & 0xFF))
    if len(data) < header:
        raise DataError(
            f"{setting}: {path}: truncated IDX file: {len(data)} bytes, shorter than its "
            f"{header}-byte header; re-copy the file"
        )
    found, count, *dims = struct.unpack(f">{header // 4}I", data[:header].tobytes())
    if found != magic:
        raise DataError(
            f"{setting}: {path}: not an IDX {what} file: magic number {found:#010x}, expected "
            f"{magic:#010x} (unsigned bytes, {magic & 0xFF} dimensions); put the uncompressed "
            f"original file there"
        )
    shape = "x".join(map(str, item_shape))
    if tuple(dims) != item_shape:
        raise DataError(
            f"{setting}: {path}: IDX {what} of {'x'.join(map(str, dims))}, expected {shape}; "
            f"put the original file there"
        )
    size = header + count * prod(item_shape)
    if len(data) != size:
        raise DataError(
            f"{setting}: {path}: {'truncated' if len(data) < size else 'overlong'} IDX file: "
            f"header promises {count} {what}{f' of {shape}' if shape else ''} ({size} bytes), "
            f"file has {len(data)}; re-copy the file"
        )
    return torch.from_numpy(data[header:]).view(count, *item_shape)


def read_idx_split(raw: Path, split: str, setting: str) -> tuple[Tensor, Tensor]:
    """uint8 images (N, 28, 28) and int64 labels of one split, checked to belong together."""
    images_path, labels_path = split_files(raw, split)
    images = read_idx(images_path, IMAGE_MAGIC, IMAGE_SIZE, "images", setting)
    labels = read_idx(labels_path, LABEL_MAGIC, (), "labels", setting)
    if len(images) != len(labels):
        raise DataError(
            f"{setting}: {images_path} holds {len(images)} images but {labels_path} holds "
            f"{len(labels)} labels; re-copy both files of the pair"
        )
    bad = torch.nonzero(labels >= NUM_CLASSES)
    if len(bad):
        index = int(bad[0])
        raise DataError(
            f"{setting}: {labels_path}: label {int(labels[index])} at position {index} is out "
            f"of range, labels must be 0..{NUM_CLASSES - 1}; re-copy the file"
        )
    return images, labels.long()
