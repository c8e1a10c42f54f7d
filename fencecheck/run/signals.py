"""SIGINT/SIGTERM during a run: the first one raises `Interrupted` (so the controller's
ExitStack unwinds and every fault is healed); later ones are logged and ignored so that cleanup
finishes."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType

log = logging.getLogger(__name__)


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_THREAD_START = threading.Thread.start.__code__


def _in_thread_start(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code is _THREAD_START:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGINT/SIGTERM raise Interrupted once; later ones are logged and ignored."""
    fired: list[int] = []
    deferred: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            log.warning("%s received again: still cleaning up", signal.Signals(signum).name)
            return
        if _in_thread_start(frame):
            # Raised inside Thread.start, the exception can undo the new thread's registration
            # while that thread runs (CPython then prints "Exception ignored in thread started
            # by ... KeyError" on stderr: seen once under a membership run's SIGTERM). It is
            # raised 5 ms later instead (SIGALRM), when start() has returned.
            deferred[:] = [signum]
            signal.setitimer(signal.ITIMER_REAL, 0.005)
            return
        deferred.clear()
        fired.append(signum)
        raise Interrupted(signum)

    def again(_signum: int, frame: FrameType | None) -> None:
        if deferred:
            handler(deferred[0], frame)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    old[signal.SIGALRM] = signal.signal(signal.SIGALRM, again)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, h in old.items():
            signal.signal(s, h)


