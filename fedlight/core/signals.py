"""Signal handlers installed for the duration of a block, and put back after.

Three places of fedlight change handlers for a while: a file write defers SIGINT and SIGTERM
(`fedlight.store.files`), a run takes note of preemption signals (`fedlight.drivers.preemption`),
a launcher turns SIGTERM into an exception (`fedlight.runs.launch`). Each must put back what was
there, even when a signal that arrives while it does so runs a handler that raises, and must
change nothing off the main thread (Python runs handlers on the main thread only; `signal.signal`
refuses elsewhere).
"""

import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

# what `signal.signal` installs; what `signal.getsignal` finds may also be None (a handler not
# installed from Python)
Installable = Callable[[int, Any], Any] | int | signal.Handlers
Handler = Installable | None


@contextmanager
def installed(
    handlers: Mapping[signal.Signals, Installable],
) -> Iterator[dict[signal.Signals, Handler] | None]:
    """Each signal's handler set for the duration; yields the handlers found before (None where
    one was not installed from Python), or None off the main thread, where nothing is set. Every
    handler found is put back (one found as None as SIG_DFL), each by its own callback of an
    ExitStack, so that one restore interrupted by a pending signal's handler leaves the others
    to run."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    before: dict[signal.Signals, Handler] = {}
    with ExitStack() as restore:
        for number, handler in handlers.items():
            before[number] = signal.getsignal(number)
            restore.callback(signal.signal, number, before[number] or signal.SIG_DFL)
            signal.signal(number, handler)
        yield before
