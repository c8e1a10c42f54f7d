"""SIGINT/SIGTERM during a run: the first one raises `Interrupted` (so the controller's
ExitStack unwinds and every fault is healed); later ones are logged and ignored so that cleanup
finishes."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from types import FrameType

log = logging.getLogger(__name__)


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGINT/SIGTERM raise Interrupted once; later ones are logged and ignored."""
    fired: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired:
            log.warning("%s received again: still cleaning up", signal.Signals(signum).name)
            return
        fired.append(signum)
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


