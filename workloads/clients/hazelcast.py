"""`HazelcastLockClient`: Hazelcast's `FencedLock` through hazelcast-python-client (the CP
Subsystem's, or the same API in unsafe mode on a cluster without CP members).

A lock is `cp_subsystem.get_lock(name)`; its holder is a CP session and a thread (this worker's
one thread makes every call). acquire = `try_lock(timeout)` (the server queues the
waiter until the timeout; the token is the fence, INVALID_FENCE = not granted). The lock is held
while the client's CP session lives: the library heartbeats it in the background (the reactor
thread of this worker process, which a pause stops with the rest), and every lock call refreshes
it at the Raft group's leader. renew = a re-entrant `try_lock(0)` and one `unlock`:
both carry our session, so a renew that answers ok refreshed it after it was invoked; a different
fence, none, or a lost session (`LockOwnershipLostError`) is not held. release = `unlock`.

Each worker connects to its own member first (`worker` picks it) without smart routing, so it
talks through that member only, as Jepsen's clients do: a partition that splits the members
splits the workers with them (the unsafe mode's split brain needs clients on both sides).

Every call waits for the library's future until the op's deadline (acquire: its timeout plus
half a second; others: `op_timeout_s`), then is `Indeterminate`. The lock is re-entrant, so
after any call on a lock with an unknown outcome (a release that may not have happened, an
acquire given up on that may yet be granted), and after a grant the worker dropped unreleased
(the library still records the hold; only once that grant's lease ran out, as the retired
process may still act under it: "unsettled" until then), the next acquire of it first lets go
of every hold this worker may have (`_settle`): otherwise it would be a re-entry, granted the
same fence.
Refusals: the lock held until the timeout, a lock lost with its session, the acquire limit ->
DefiniteFailure; an operation timeout, a lost connection, the client shutting down ->
Indeterminate.

Evidence (docs/history-format.md): an ok acquire records `cp_session`, the CP session the grant
was made under (the library's record of it), and a release, ok or refused, the session its
unlock carried: a lock is owned by a (session, thread) pair, so a history shows which session
each grant and unlock belonged to, to be set beside the members' logs ("Session: N is closed",
"active session: N does not exist").

Options: `endpoints`, `cluster_name`, `worker`, `op_timeout_s`, `connect_timeout_s` (how
long the first connection may take, default 30; the service gives `session_ttl_s` and `cp`,
read only for the log).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hazelcast import errors as hz_errors
from hazelcast.client import HazelcastClient
from hazelcast.future import Future
from hazelcast.proxy.cp.fenced_lock import FencedLock

from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate, WorkloadError
from fencecheck.workloads.evidence import EVIDENCE

log = logging.getLogger(__name__)

INVALID_FENCE = 0
# The most re-entrant holds a settle lets go of (an acquire, a renew's re-entry, an abandoned one).
_MAX_HOLDS = 4
# Errors after which the lock is surely not ours (or the call surely did nothing).
_NOT_HELD = (hz_errors.IllegalMonitorStateError, hz_errors.LockOwnershipLostError,
             hz_errors.LockAcquireLimitReachedError, hz_errors.WaitKeyCancelledError)


@dataclass(frozen=True, slots=True)
class HazelcastHandle:
    """Grant.handle of a FencedLock grant: the lock proxy it was granted on."""

    lock: FencedLock


class HazelcastLockClient:
    """LockClient over Hazelcast's FencedLock. See the module docstring."""

    name = "hazelcast"

    def __init__(self, options: Mapping[str, Any]) -> None:
        endpoints = [str(e) for e in options["endpoints"]]
        if not endpoints:
            raise WorkloadError("hazelcast: no endpoints")
        start = int(options.get("worker", 0)) % len(endpoints)
        self.op_timeout_s = float(options.get("op_timeout_s", 1.0))
        self._locks: dict[str, FencedLock] = {}
        # Locks whose last call's outcome is unknown (this worker may still hold them), and
        # acquires given up on that may still be granted.
        self._dirty: set[str] = set()
        self._pending: dict[str, Future[int]] = {}
        # lock -> time.monotonic() when the lease of this worker's last grant of it runs out
        self._held_until: dict[str, float] = {}
        try:
            self.client = HazelcastClient(
                cluster_name=str(options.get("cluster_name", "dev")),
                cluster_members=endpoints[start:] + endpoints[:start],
                smart_routing=False,
                shuffle_member_list=False,  # its own member first, as `worker` ordered them
                cluster_connect_timeout=float(options.get("connect_timeout_s", 30.0)),
                # connect and authenticate: 5 s, as the Java program's (a member may be warming up)
                connection_timeout=max(self.op_timeout_s, 5.0),
                # A lost member is noticed in seconds, and a call that cannot reach the cluster
                # gives up within about its deadline rather than retrying for two minutes.
                heartbeat_interval=1.0,
                heartbeat_timeout=5.0,
                invocation_timeout=max(2.0, self.op_timeout_s),
                statistics_enabled=False,
            )
        except hz_errors.HazelcastError as e:
            raise WorkloadError(f"hazelcast: cannot connect to {endpoints}: {e}") from e
        log.info("hazelcast: connected (cp=%s, session TTL %s s)", options.get("cp"),
                 options.get("session_ttl_s"))

    def _lock(self, name: str) -> FencedLock:
        lock = self._locks.get(name)
        if lock is None:
            fut = self.client.cp_subsystem.get_lock(f"fencecheck-{name}")
            lock = fut if isinstance(fut, FencedLock) else self._wait(fut, self.op_timeout_s,
                                                                    "get_lock")
            self._locks[name] = lock
        return lock

    def _wait(self, fut: Future[Any], timeout_s: float, what: str) -> Any:
        """The future's result within timeout_s; Indeterminate past it or on an uncertain
        error; DefiniteFailure("not-held") on a refusal."""
        done = threading.Event()
        fut.add_done_callback(lambda _: done.set())
        if not done.wait(timeout_s):
            raise Indeterminate("timeout", f"{what}: no answer in {timeout_s:.1f} s")
        try:
            return fut.result()
        except _NOT_HELD as e:
            raise DefiniteFailure("not-held", f"{what}: {type(e).__name__}") from None
        except hz_errors.HazelcastError as e:
            raise Indeterminate(_code(e), f"{what}: {type(e).__name__}: {e}") from None

    def _dropped(self, name: str) -> None:
        """The library still records a hold of this thread: the worker dropped a grant
        unreleased (its read or write had an unknown outcome, and its process retired). Without
        a settle the acquire would be a re-entry, granted the same fence; a settle before the
        dropped grant's lease ran out would free the lock while the retired process may still
        act under it (docs/findings/hazelcast.md, issue 26). So: DefiniteFailure("unsettled")
        until then (nothing is sent), and a settle after."""
        left_s = self._held_until.get(name, 0.0) - time.monotonic()
        if left_s > 0:
            raise DefiniteFailure("unsettled", f"{name}: a dropped grant's lease has "
                                               f"{left_s:.2f} s left")
        self._dirty.add(name)

    def _settle(self, name: str, proxy: FencedLock) -> None:
        """Before a new acquire of a lock whose last call had an unknown outcome: let go of any
        hold this worker may still have on it. A FencedLock is re-entrant, so without this an
        acquire after a release that did not take effect would be granted the same fence again
        (a re-entry, not a grant). Raises DefiniteFailure("unsettled") when that
        cannot be done now (nothing was sent for the acquire)."""
        pending = self._pending.get(name)
        if pending is not None and not pending.done():
            raise DefiniteFailure("unsettled", f"{name}: an abandoned acquire is still waiting")
        self._pending.pop(name, None)
        try:
            for _ in range(_MAX_HOLDS):
                if not self._wait(proxy.is_locked_by_current_thread(), self.op_timeout_s,
                                  "is_locked_by_current_thread"):
                    break
                self._wait(proxy.unlock(), self.op_timeout_s, "unlock (settle)")
        except DefiniteFailure:
            pass  # the session that held it is gone: nothing is held
        except Indeterminate as e:
            raise DefiniteFailure("unsettled", f"{name}: {e}") from None
        self._dirty.discard(name)

    # -- LockClient

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        proxy = self._lock(lock)
        if lock not in self._dirty and _grant_session(proxy) is not None:
            self._dropped(lock)
        if lock in self._dirty:
            self._settle(lock, proxy)
        fut = proxy.try_lock(max(timeout_s, 0.0))
        try:
            fence = self._wait(fut, timeout_s + 0.5, "try_lock")
        except Indeterminate:
            self._dirty.add(lock)
            self._pending[lock] = fut
            raise
        except DefiniteFailure as e:
            raise DefiniteFailure("lock-lost", str(e)) from None
        if fence == INVALID_FENCE:
            raise DefiniteFailure("timeout" if timeout_s > 0 else "held", lock)
        self._held_until[lock] = time.monotonic() + lease_ms / 1000
        return Grant(lock, int(fence), lease_ms, HazelcastHandle(proxy),
                     evidence=_session_evidence(_grant_session(proxy)))

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        proxy = hazelcast_handle(grant).lock
        try:
            fence = self._wait(proxy.try_lock(0), self.op_timeout_s, "renew")
            if fence == INVALID_FENCE:
                raise DefiniteFailure("not-held", f"{grant.lock}: held by another")
            # Back to the hold count before (none, had this call taken the lock anew).
            self._wait(proxy.unlock(), self.op_timeout_s, "renew (unlock)")
        except Indeterminate:
            self._dirty.add(grant.lock)
            raise
        if fence != grant.token:
            raise DefiniteFailure("not-held", f"{grant.lock}: fence {fence}, not {grant.token}")
        return Grant(grant.lock, grant.token, lease_ms, grant.handle)

    def release(self, grant: Grant) -> Mapping[str, Any] | None:
        proxy = hazelcast_handle(grant).lock
        # the session the unlock carries (the library reads it the same way as it sends it)
        session = _current_session(proxy)
        try:
            self._wait(proxy.unlock(), self.op_timeout_s, "unlock")
        except Indeterminate:
            self._dirty.add(grant.lock)
            raise
        except DefiniteFailure as e:
            ev = None if session is None else {"cp_session": session}
            raise DefiniteFailure(e.error, str(e), ev) from None
        return _session_evidence(session)

    def close(self) -> None:
        self.client.shutdown()


def _code(e: Exception) -> str:
    if isinstance(e, hz_errors.OperationTimeoutError):
        return "timeout"
    if isinstance(e, hz_errors.HazelcastClientNotActiveError):
        return "client-not-active"
    return "connection-lost"


def _grant_session(proxy: FencedLock) -> int | None:
    """The CP session the library recorded this thread's hold under (it sets it as a grant's
    answer arrives, before the future completes); None if it has none. A private field of
    hazelcast-python-client's FencedLock, read defensively."""
    sessions = getattr(proxy, "_lock_session_ids", None)
    # keyed by the calling thread's ident (the library's util.thread_id)
    sid = sessions.get(threading.current_thread().ident) if isinstance(sessions, dict) else None
    return sid if isinstance(sid, int) else None


def _current_session(proxy: FencedLock) -> int | None:
    """The CP session this client's next call on the lock's group carries; None if it has
    none (-1 in the library) or the library has no such method."""
    get = getattr(proxy, "_get_session_id", None)
    sid = get() if callable(get) else None
    return sid if isinstance(sid, int) and sid >= 0 else None


def _session_evidence(session: int | None) -> dict[str, Any] | None:
    """What an ok op's value adds (Grant.evidence, release's mapping: merged into the value)
    to name a CP session: its "evidence" object; None when unknown."""
    return None if session is None else {EVIDENCE: {"cp_session": session}}


def hazelcast_handle(grant: Grant) -> HazelcastHandle:
    """The grant's HazelcastHandle; DefiniteFailure("not-owner") if it is not a FencedLock's."""
    if not isinstance(grant.handle, HazelcastHandle):
        raise DefiniteFailure("not-owner", "not a Hazelcast FencedLock grant")
    return grant.handle
