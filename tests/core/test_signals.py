"""`fedlight.core.signals.installed`, the one way fedlight sets handlers for a while (file writes,
preemption watches, the launcher's SIGTERM)."""

import signal
import threading

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


def test_a_handler_that_raises_inside_the_block_still_finds_its_signal_restored() -> None:
    class TakenError(Exception):
        pass

    def raising(signum: int, frame: object) -> None:
        raise TakenError

    original = signal.getsignal(signal.SIGUSR1)
    try:
        with installed({signal.SIGUSR1: raising}):
            signal.raise_signal(signal.SIGUSR1)
    except TakenError:
        pass
    assert signal.getsignal(signal.SIGUSR1) == (original or signal.SIG_DFL)


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
