"""Nested preemption watches (a sweep's command around each of its jobs): each leaves alone."""

import os
import signal

from fedlight.drivers.preemption import requested, watched, watches


def test_an_inner_watch_that_ends_leaves_the_outer_one_watching() -> None:
    """A job's watch inside its command's has the same fields; ending it removed the command's
    (equal, not the same) and a signal during the next job then failed the command's exit
    (`list.remove(x): x not in list`)."""
    with watched(["SIGUSR2"]) as outer:
        for _ in range(2):  # two jobs of a sweep, one after the other
            with watched(["SIGUSR2"]) as inner:
                assert watches[-2:] == [outer, inner]
            assert watches[-1] is outer
        os.kill(os.getpid(), signal.SIGUSR2)
        assert requested() == "SIGUSR2"
    assert outer not in watches
