"""torchvision's dataset classes, offline first, with a one-line error naming missing files."""

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
        with undone_on_failure(Path(root).resolve()):
            return (
                dataset_class(root, train=True, download=True),
                dataset_class(root, train=False, download=True),
            )
    except Exception as failure:  # noqa: BLE001 - any network or HTTP error means the same to the user
        raise DataError(
            f"{setting}: download failed ({type(failure).__name__}); put {expected_files} under "
            f"{Path(root).resolve()} or set data.root to the folder that holds them"
        ) from None


@contextmanager
def undone_on_failure(root: Path) -> Iterator[None]:
    """A download into `root` that fails (or is interrupted) leaves nothing behind: the folders it
    made (`<root>/MNIST/raw/`, `root` itself and the folders above it that were not there) and
    the files it began are removed; what was there before stays as it was."""
    top = root  # the highest folder of root's path that is not there yet
    while not top.parent.exists():
        top = top.parent
    before = set(root.rglob("*")) if root.exists() else None
    try:
        yield
    except BaseException:
        if before is None:
            shutil.rmtree(top, ignore_errors=True)
        else:
            for path in sorted(set(root.rglob("*")) - before, key=lambda p: len(p.parts)):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        raise
