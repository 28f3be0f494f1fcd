"""The sequential engine's batches, gathered several at a time (`stored_batches`), are the
examples and labels of `batch_indices`' batches, drawn from the same generator in the same order."""

import pytest
import torch

from fedlight.data.base import Normalization, TensorDataset
from fedlight.engines import base
from fedlight.engines.base import batch_indices, stored_batches


def dataset() -> TensorDataset:
    images = torch.randint(0, 256, (50, 1, 4, 4), generator=torch.Generator().manual_seed(1))
    labels = torch.arange(50) % 7
    return TensorDataset(
        images.to(torch.uint8),
        labels,
        images[:5],
        labels[:5],
        7,
        None,
        Normalization((0.5,), (0.2,)),
    )


@pytest.mark.parametrize("gather_bytes", [1, 16 * 5, 16 * 7, 2**20])  # 1, 5, 7 examples, all
@pytest.mark.parametrize("batch_size", [3, 5, None])
def test_the_gathered_batches_are_the_indexed_ones(monkeypatch, gather_bytes, batch_size):
    monkeypatch.setattr(base, "GATHER_BYTES", gather_bytes)
    data, indices = dataset(), torch.arange(3, 40)
    ours, theirs = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    expected = list(batch_indices(indices, theirs, 3, batch_size))
    gathered = list(stored_batches(data, indices, ours, 3, batch_size))
    assert len(gathered) == len(expected)
    for (x, y), batch in zip(gathered, expected, strict=True):
        assert torch.equal(x, data.train_x[batch]) and torch.equal(y, data.train_y[batch])
        assert x.is_contiguous() and x.dtype == torch.uint8
    assert torch.equal(ours.get_state(), theirs.get_state())  # the same draws
    assert list(stored_batches(data, indices[:0], ours, 3, batch_size)) == []
