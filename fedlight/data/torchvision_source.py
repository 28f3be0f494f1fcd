"""torchvision's dataset classes, offline first, with a one-line error naming missing files."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedlight.data.base import DataError


def open_torchvision(
    dataset_class: Callable[..., Any],
    root: str,
    download: bool,
    expected_files: str,
    setting: str,
) -> tuple[Any, Any]:
    """Train and test splits; downloads only when files are missing and `download` is on."""
    try:
        return dataset_class(root, train=True), dataset_class(root, train=False)
    except RuntimeError as missing:
        if not download:
            raise DataError(
                f"{setting}: files not found under {Path(root).resolve()} ({missing}); put "
                f"{expected_files} there or set data.root to the folder that holds them"
            ) from None
    try:
        return (
            dataset_class(root, train=True, download=True),
            dataset_class(root, train=False, download=True),
        )
    except Exception as failure:  # noqa: BLE001 - any network or HTTP error means the same to the user
        raise DataError(
            f"{setting}: download failed ({type(failure).__name__}); put {expected_files} under "
            f"{Path(root).resolve()} or set data.root to the folder that holds them"
        ) from None
