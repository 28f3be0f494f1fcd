"""`fedlight.core.signals.installed`, the one way fedlight sets handlers for a while (file writes,
preemption watches, the launcher's SIGTERM)."""

import signal
import threading
from typing import Any

import pytest

from fedlight.core.signals import installed


def test_handlers_are_set_for_the_block_and_those_found_put_back() -> None:
    def before(signum: int, frame: object) -> None: ...

    def during(signum: int, frame: object) -> None: ...

    previous = signal.signal(signal.SIGUSR1, before)
    other = signal.getsignal(signal.SIGUSR2)  # whatever the test process has
    try:
        with installed({signal.SIGUSR1: during, signal.SIGUSR2: signal.SIG_IGN}) as found:
            assert found == {signal.SIGUSR1: before, signal.SIGUSR2: other}
            assert signal.getsignal(signal.SIGUSR1) is during
            assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGUSR1) is before
        assert signal.getsignal(signal.SIGUSR2) == (other or signal.SIG_DFL)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        signal.signal(signal.SIGUSR2, other or signal.SIG_DFL)


def test_a_restore_that_fails_leaves_the_others_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pending signal's handler may raise while handlers are put back: each restore is its own
    callback, so the one interrupted does not keep the others from running."""
    real = signal.signal
    originals = {n: signal.getsignal(n) for n in (signal.SIGUSR1, signal.SIGUSR2)}

    def during(signum: int, frame: object) -> None: ...

    def interrupted(number: int, handler: Any) -> Any:
        if number == signal.SIGUSR2 and handler is not during:  # SIGUSR2's restore
            raise KeyboardInterrupt
        return real(number, handler)

    monkeypatch.setattr(signal, "signal", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            with installed({signal.SIGUSR1: during, signal.SIGUSR2: during}):
                pass
        assert signal.getsignal(signal.SIGUSR1) == (originals[signal.SIGUSR1] or signal.SIG_DFL)
    finally:
        for number, handler in originals.items():
            real(number, handler or signal.SIG_DFL)


def test_a_handler_not_installed_from_python_is_put_back_as_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`getsignal` answers None for a handler set outside Python; `signal.signal` takes no None,
    so the default is put back."""
    original = signal.getsignal(signal.SIGUSR1)
    monkeypatch.setattr(signal, "getsignal", lambda number: None)
    try:
        with installed({signal.SIGUSR1: signal.SIG_IGN}) as found:
            assert found == {signal.SIGUSR1: None}
        monkeypatch.undo()
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGUSR1, original or signal.SIG_DFL)


def test_off_the_main_thread_nothing_is_installed() -> None:
    seen: list[object] = []
    original = signal.getsignal(signal.SIGUSR1)

    def elsewhere() -> None:
        with installed({signal.SIGUSR1: signal.SIG_IGN}) as found:
            seen.extend([found, signal.getsignal(signal.SIGUSR1)])

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert seen == [None, original]
