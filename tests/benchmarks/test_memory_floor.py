"""benchmarks/memory_floor.py: its hand-written loop trains fedlight's `model=cifar_cnn` on images
stored as fedlight's decode cache stores them, and it counts a library's resident pages."""

import re
from pathlib import Path

import torch

from benchmarks import memory_floor
from fedlight.models.cifar_cnn import CifarCNN


def test_the_plain_loops_network_is_fedlights_cifar_cnn() -> None:
    plain = memory_floor.cifar_cnn()
    fedlight = CifarCNN((3, 32, 32), 10, lr=0.05).net
    shapes = [t.shape for t in fedlight.state_dict().values()]
    assert [t.shape for t in plain.state_dict().values()] == shapes
    weights = fedlight.state_dict().values()
    plain.load_state_dict(dict(zip(plain.state_dict(), weights, strict=True)))
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    assert torch.equal(plain(images), fedlight(images))


def test_the_plain_loop_reads_a_decode_cache(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    cache = tmp_path / "cifar10-tiny.pt"
    torch.save(
        {
            "fingerprint": "tiny",
            "train_x": torch.randint(0, 256, (200, 3, 32, 32), dtype=torch.uint8),
            "train_y": torch.randint(0, 10, (200,), generator=generator),
            "test_x": torch.randint(0, 256, (30, 3, 32, 32), dtype=torch.uint8),
            "test_y": torch.randint(0, 10, (30,), generator=generator),
        },
        cache,
    )
    memory_floor.plain_loop(cache)  # 2 rounds of 10 of 100 clients of 2 images


def test_a_librarys_resident_pages_are_counted() -> None:
    assert memory_floor.library_rss_mb(re.compile(r"libc[.-]|libpython|/python3")) > 0
    assert memory_floor.library_rss_mb(re.compile(r"no-such-library")) == 0
