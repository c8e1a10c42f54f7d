"""Lost-lock notices on the client side: what a client whose library tells its holder that a lock
is lost or in doubt implements (`Notices`), and what the worker does with what it is told
(`NoticeBoard`).

A client with notices is given a `Sink` once, before its first operation, and calls it from any
thread (its library's callback thread, the reader of a stdio program's output) with the lock, the
grant's token (None where it has none) and the library's words. What the worker does with them is
the client option `notices` (any client; `NOTICE_MODES`):

- `off` (the default): nothing; the history is what it was before notices existed. (A holder
  that heeded them would change what the classic runs find: a paused holder's stale write can
  come before or after its library's notice, by a hair.)
- `stop`, the strict holder: each notice is recorded in the worker's event log at once (`f:
  "notice"`, an invoke and its ok at one instant, under the worker's current process id), and
  before each read and write of a grant the worker asks, under the board's lock, whether that
  grant was told; if so it ends the section (and releases, as after a refused renewal). The
  question and the op's invoke are one step under the lock, so a notice is recorded either before
  the question (and the op is not made) or after the invoke (and the op is not after the notice):
  a strict holder never writes after its notice.
- `work`, the careless holder: notices are recorded, and the worker carries on; the checker's
  `write-after-notice` finds each write accepted after one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fencecheck.records.history import Notice
from fencecheck.workloads.base import Grant, WorkloadError

if TYPE_CHECKING:
    from fencecheck.workloads.eventlog import EventLog

NOTICE_MODES = ("off", "stop", "work")
Sink = Callable[[str, int | None, str], None]  # (lock, token, reason)


@runtime_checkable
class Notices(Protocol):
    """A client whose library says when a held lock is lost or in doubt. `on_notice` is called
    once, before the first operation; the client calls the sink from any thread, only about a
    grant it holds (a notice about a lock given up is news of nothing)."""

    def on_notice(self, sink: Sink) -> None: ...


def notice_mode(options: Mapping[str, Any]) -> str:
    """The client option `notices`: one of NOTICE_MODES (WorkloadError naming it otherwise)."""
    mode = options.get("notices", "off")
    if mode not in NOTICE_MODES:
        raise WorkloadError(f"options.notices must be one of {', '.join(NOTICE_MODES)}, not "
                            f"{mode!r}")
    return str(mode)


class NoticeBoard:
    """The notices one worker was told: recorded at once, remembered per (lock, token), in the
    `mode` of the client option `notices`."""

    def __init__(self, events: EventLog, process: Callable[[], int], mode: str = "off") -> None:
        self.events = events
        self.process = process
        self.mode = mode
        self._lock = threading.Lock()
        self._told: set[tuple[str, int | None]] = set()
        self.count = 0

    @classmethod
    def listen(cls, worker: Any) -> NoticeBoard:
        """The board of a worker (workloads/loops/worker.py: its client, event log, client
        options and current process id), given to its client if that has notices and they are
        not off."""
        board = cls(worker.events, lambda: int(worker.process),
                    notice_mode(worker.config.client_options))
        if board.mode != "off" and isinstance(worker.client, Notices):
            worker.client.on_notice(board.heard)
        return board

    def heard(self, lock: str, token: int | None, reason: str) -> None:
        """The sink a client calls (never when off): record the notice now, remember it."""
        notice = Notice(lock=str(lock), token=token if type(token) is int else None,
                        reason=str(reason))
        with self._lock:
            self.events.notice(self.process(), notice)
            self._told.add((notice.lock, notice.token))
            self.count += 1

    def granted(self, grant: Grant | None) -> None:
        """A new grant of a lock: notices without a token spoke of an older one."""
        if grant is None:
            return
        with self._lock:
            self._told.discard((grant.lock, None))

    def invoke(self, f: str, value: Mapping[str, Any], write: Callable[[], int]) -> int | None:
        """Write an op's invoke (`write`, returning its time), unless the worker stops at
        notices and the op is a read or write of a grant (`value`'s lock and token) that was
        told it is lost: then None, nothing written. The question and the write are one step
        under the board's lock, so no notice comes between them."""
        if self.mode != "stop" or f not in ("read", "write"):
            return write()
        lock, token = value.get("lock"), value.get("token")
        with self._lock:
            if (lock, token) in self._told or (lock, None) in self._told:
                return None
            return write()
