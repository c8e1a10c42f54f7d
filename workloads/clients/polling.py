"""`poll`: the loop of every lock client that retries inside one acquire (SET NX, a library's
non-blocking try, `pg_try_advisory_lock`): try, and if the lock is held, wait and try again until
the acquire's timeout. It also keeps the send time of the winning attempt, which the history
records as `attempt_ns` (the lease cannot have started before it; DESIGN.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from fencecheck.workloads.base import DefiniteFailure

T = TypeVar("T")


def poll(lock: str, timeout_s: float, attempt: Callable[[], T | None],
         pause_s: float | Callable[[], float]) -> tuple[T, int]:
    """Call `attempt` until it returns something other than None; return that and the
    `time.monotonic_ns()` at which the winning attempt was sent. Between attempts sleep `pause_s`
    (or what it returns), never past the deadline. None after the deadline is a definite failure:
    "timeout", or "held" for a single try (timeout 0). Errors of `attempt` propagate."""
    deadline = time.monotonic() + max(timeout_s, 0.0)
    while True:
        sent = time.monotonic_ns()
        got = attempt()
        if got is not None:
            return got, sent
        now = time.monotonic()
        if now >= deadline:
            raise DefiniteFailure("timeout" if timeout_s > 0 else "held", lock)
        time.sleep(min(pause_s() if callable(pause_s) else pause_s, deadline - now))
