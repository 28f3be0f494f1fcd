"""A Ctrl-C or SIGTERM that arrives while a checkpoint is written is taken once the file is whole.

Before, a KeyboardInterrupt raised inside `torch.save` left torch's zip writer half-written: torch
reported its own RuntimeError ("unexpected pos"), which the command ended on with exit 1 instead of
Ctrl-C's 130, or aborted the process. The signal is raised here from inside the write itself (an
object whose pickling raises it), so the test does not depend on timing.
"""

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from fedlight.runs.launch import Terminated, sigterm_raises_terminated
from fedlight.store.checkpoint import save_checkpoint
from fedlight.store.files import replaced


class SignalsWhilePickled:
    """Raises `number` when torch.save pickles it; saved as the integer 7."""

    def __init__(self, number: signal.Signals) -> None:
        self.number = number

    def __reduce__(self) -> tuple[Any, ...]:
        signal.raise_signal(self.number)
        return (int, (7,))


def whole(path: Path) -> dict[str, Any]:
    """The checkpoint read back (the integer comes from `int`, which weights-only loading refuses
    to call, so the test reads its own file in full)."""
    return torch.load(path, weights_only=False)


def state_with(number: signal.Signals) -> dict[str, Any]:
    return {"before": torch.arange(1000.0), "signal": SignalsWhilePickled(number), "after": 3}


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Python's own Ctrl-C handler, whatever the suite started with (a suite started in the
    background by a script has SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_inside_torch_save_interrupts_after_the_checkpoint_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, state_with(signal.SIGINT))
    saved = whole(path)
    assert torch.equal(saved["before"], torch.arange(1000.0))
    assert (saved["signal"], saved["after"]) == (7, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_inside_torch_save_stops_the_workers_after_the_checkpoint_is_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "checkpoint.pt"
    with pytest.raises(Terminated), sigterm_raises_terminated():
        save_checkpoint(path, state_with(signal.SIGTERM))
    assert whole(path)["signal"] == 7
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_signal_comes_once_the_file_is_whole_and_an_ignored_one_stays_ignored(
    tmp_path: Path,
) -> None:
    taken: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda number, _: taken.append(number))
    try:
        with replaced(tmp_path / "file") as file:
            signal.raise_signal(signal.SIGTERM)
            file.write(b"whole")
            assert taken == []
        assert taken == [signal.SIGTERM]
        assert (tmp_path / "file").read_bytes() == b"whole"
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with replaced(tmp_path / "file") as file:
            signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN and taken == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_block_that_fails_still_passes_the_signal_on_and_other_threads_change_nothing(
    tmp_path: Path,
) -> None:
    taken: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda number, _: taken.append(number))
    try:
        with pytest.raises(ValueError, match="failed"), replaced(tmp_path / "file"):
            signal.raise_signal(signal.SIGTERM)
            raise ValueError("failed")
        assert taken == [signal.SIGTERM] and not (tmp_path / "file").exists()
        handler = signal.getsignal(signal.SIGTERM)
        seen: list[object] = []

        def write_in_a_thread() -> None:
            with replaced(tmp_path / "other") as file:
                seen.append(signal.getsignal(signal.SIGTERM))  # not replaced: not the main thread
                file.write(b"x")

        thread = threading.Thread(target=write_in_a_thread)
        thread.start()
        thread.join()
        assert seen == [handler] and (tmp_path / "other").read_bytes() == b"x"
    finally:
        signal.signal(signal.SIGTERM, previous)
