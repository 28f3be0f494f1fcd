"""Training augmentation applied to whole batches on the batch's device (no per-sample Python)."""

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class CropFlip:
    """Random crop with zero padding (of the raw image) plus horizontal flip, as for CIFAR-10.

    `fill` is the per-channel value of a black pixel after normalization, so padding matches
    torchvision's `RandomCrop(padding=4)` applied before `Normalize`.
    """

    padding: int
    fill: tuple[float, ...]

    def __call__(self, images: Tensor, generator: torch.Generator) -> Tensor:
        batch, channels, height, width = images.shape
        pad = self.padding
        padded = images.new_empty(batch, channels, height + 2 * pad, width + 2 * pad)
        padded[:] = torch.tensor(self.fill, device=images.device).view(1, -1, 1, 1)
        padded[:, :, pad : pad + height, pad : pad + width] = images
        offsets = torch.randint(0, 2 * pad + 1, (2, batch), generator=generator)
        flips = torch.rand(batch, generator=generator) < 0.5
        offsets, flips = offsets.to(images.device), flips.to(images.device)
        rows = (offsets[0].view(-1, 1) + torch.arange(height, device=images.device)).view(
            batch, 1, height, 1
        )
        cols = offsets[1].view(-1, 1) + torch.arange(width, device=images.device)
        cols = torch.where(flips.view(-1, 1), cols.flip(1), cols).view(batch, 1, 1, width)
        sample = torch.arange(batch, device=images.device).view(batch, 1, 1, 1)
        channel = torch.arange(channels, device=images.device).view(1, channels, 1, 1)
        return padded[sample, channel, rows, cols]
