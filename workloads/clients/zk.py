"""`ZkClient`: ZooKeeper locks with kazoo's `Lock` recipe; the token is the lock node's czxid.

The lease is the ZooKeeper session: the client opens its session with timeout = lease_ms (the
ensemble must allow it: clusters/services/zookeeper.py sets maxSessionTimeout to 120 s and
minSessionTimeout to 400 ms, so shorter leases get a longer real session, never a shorter one).
The lock node is ephemeral, so it is deleted when the session expires, and the next waiter (the
lowest sequence number) is granted. A later grant's node was created later, so its czxid (the
zxid of the creating transaction) is higher: tokens strictly increase.

renew: ZooKeeper has no explicit lease extension; kazoo's own thread pings the server every
third of the timeout, which keeps the session, and so the lock, alive while the worker process
runs (a SIGSTOPped worker pings nothing, exactly like a GC pause). `renew` confirms the grant:
a `sync` and then an `exists` on the lock node. ZooKeeper serves reads from the server the client
is connected to, which may not yet have applied a commit the quorum has made (reads are
sequentially consistent, not linearizable): without the sync, a holder whose session the leader
had already expired, its node deleted and the lock granted to another, could be answered from
a follower's older state and told `ok` (what one run of the test command saw: a holder
SIGSTOPped past its session told `ok`; this is the cause that fits, not a proven one).
The sync makes that server catch up with the leader before the read, so a node with our czxid
means the lock was ours at a moment within the renew, and since the server heard
from us after the invoke, the session cannot expire before invoke + timeout. A missing node is
DefiniteFailure("lock-lost"); a client not connected sends nothing and is
DefiniteFailure("not-connected") after waiting op_timeout_s for a reconnect (the lease was
surely not extended); a timeout is Indeterminate.

release: delete our lock node (what the recipe's release does, minus swallowing "no node", which
here is the answer: the lock was no longer ours, DefiniteFailure("lock-lost")).

Notices (workloads/notices.py): kazoo tells its listeners when the session's connection is
SUSPENDED (the lock is in doubt: the session may expire while no server hears from it) and LOST
(the session expired: the lock node is gone); each is a notice about every grant held, with
kazoo's state as the reason.

No hidden retries. kazoo's retry counts are odd: `max_tries=1` means one attempt (0 would be
unlimited). `command_retry` and the recipe's internal retry get one attempt; `connection_retry`
keeps reconnecting *the session's transport* to another server, which re-sends nothing (a
request in flight when the connection drops fails with ConnectionLoss, recorded as info) and is
what keeps a ZooKeeper session (the lease) alive across a server crash.

An unknown acquire or release ends the session (`_retire`): the process that made it is retired
(DESIGN.md), and the next acquire opens a new session, as a restarted client would. A contender
node whose create's reply was lost, or a lock node whose delete's reply was lost, stays as long as
its session does, and kazoo keeps a session alive as long as the client runs: without this, one
lost reply held the lock for the rest of a run (a membership run on a loaded machine: a release
timed out while the leader was being removed, and no one was granted for the next 19 s). Closing
the session deletes them at once if a server hears the close, else when the session expires. An
unknown renew keeps the session: the checker holds the retired grant until its lease ends, and
the service must too.

acquire timeout: kazoo's recipe deletes its node on LockTimeout. As in the etcd client, the
acquire reads the owner (lowest contender) first; if, after the timeout, our node is gone and the
same owner node is still there, our node (created later, a higher sequence) was never the
lowest: DefiniteFailure("timeout"). A connection loss during the acquire is Indeterminate.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.recipe.lock import Lock
from kazoo.retry import KazooRetry

from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate
from fencecheck.workloads.notices import Sink

log = logging.getLogger(__name__)

LOCK_ROOT = "/fc/locks/"
_SEQ = re.compile(r"__lock__(\d{10})$")  # kazoo Lock node names: <uuid>__lock__<seq>


def lock_path(lock: str) -> str:
    return LOCK_ROOT + lock


@dataclass(frozen=True, slots=True)
class ZkHandle:
    """Grant.handle of a ZooKeeper grant."""

    recipe: Any  # the kazoo Lock that holds it
    path: str  # full path of our lock node
    session_id: int


def lowest_contender(children: list[str]) -> str | None:
    """The contender with the lowest sequence number, as the recipe orders them."""
    contenders = [(m.group(1), c) for c in children if (m := _SEQ.search(c))]
    return min(contenders)[1] if contenders else None


class ZkClient:
    """LockClient over kazoo's Lock recipe. Options: `endpoints`, `op_timeout_s`, optional
    `worker` (which server to try first)."""

    name = "zookeeper"

    def __init__(self, options: Mapping[str, Any]) -> None:
        endpoints = list(options["endpoints"])
        if not endpoints:
            raise ValueError("zookeeper: no endpoints")
        start = int(options.get("worker", 0)) % len(endpoints)
        self.hosts = ",".join(endpoints[start:] + endpoints[:start])
        self.op_timeout_s = float(options.get("op_timeout_s", 2.0))
        self.zk: KazooClient | None = None
        self.session_ms: int | None = None
        self.ensured: set[str] = set()
        self.held: dict[str, int] = {}  # lock -> token of its grant, for the notices
        self.sink: Sink | None = None

    def on_notice(self, sink: Sink) -> None:
        self.sink = sink

    def _state(self, state: str) -> None:
        """kazoo's session listener (on its own thread: must not block)."""
        if state in (KazooState.SUSPENDED, KazooState.LOST) and self.sink is not None:
            for lock, token in list(self.held.items()):
                self.sink(lock, token, str(state))

    # -- session

    def _client(self, lease_ms: int) -> KazooClient:
        """A connected client whose session timeout is lease_ms; DefiniteFailure if none."""
        if self.zk is not None and self.session_ms != lease_ms:
            self._stop()
        if self.zk is None:
            zk = KazooClient(
                hosts=self.hosts,
                timeout=lease_ms / 1000.0,
                randomize_hosts=False,
                connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=1.5, max_delay=1.0),
                command_retry=KazooRetry(max_tries=1),
            )
            zk.add_listener(self._state)
            try:
                zk.start(timeout=self.op_timeout_s)
            except KazooTimeoutError as e:
                zk.stop()
                zk.close()
                raise DefiniteFailure("connection-refused", f"{self.hosts}: {e}") from None
            self.zk, self.session_ms = zk, lease_ms
        self._wait_connected()
        return self.zk

    def _wait_connected(self) -> None:
        """Give a reconnecting session up to op_timeout_s (it sends nothing meanwhile), so a
        server crash costs one slow operation rather than a burst of instant failures."""
        deadline = time.monotonic() + self.op_timeout_s
        while self.zk is not None and self.zk.state != KazooState.CONNECTED:
            if time.monotonic() > deadline:
                raise DefiniteFailure("not-connected", f"session state {self.zk.state}")
            time.sleep(0.02)

    def _stop(self) -> None:
        self.held.clear()  # kazoo says LOST when it is stopped: news of our own doing
        if self.zk is not None:
            try:
                self.zk.stop()
                self.zk.close()
            except KazooException as e:  # closing a broken client must not mask the op
                log.debug("zookeeper: close: %s", e)
            self.zk = None

    def _get(self, async_result: Any) -> Any:
        """Wait for an async kazoo call at most op_timeout_s (kazoo's sync calls never time
        out while the client is reconnecting)."""
        return async_result.get(timeout=self.op_timeout_s)

    # -- LockClient

    # What acquire says in its outcomes: "locking" / "acquire" / "granted" here; the election
    # client changes these, the path and the recipe (`_recipe`), nothing else.
    verbs = ("locking", "acquire", "granted")

    def _path(self, lock: str) -> str:
        return lock_path(lock)

    def _recipe(self, zk: KazooClient, path: str) -> Lock:
        return Lock(zk, path)

    def _retire(self, e: Indeterminate) -> Indeterminate:
        """End the session of an unknown acquire or release (see the module's text)."""
        self._stop()
        return e

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        try:
            return self._acquire(lock, lease_ms, timeout_s)
        except Indeterminate as e:
            raise self._retire(e) from None

    def _acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        zk = self._client(lease_ms)
        path = self._path(lock)
        waiting, call, granted = self.verbs
        try:
            if path not in self.ensured:
                self._get(zk.ensure_path_async(path))
                self.ensured.add(path)
            before = lowest_contender(self._get(zk.get_children_async(path)))
        except (KazooException, KazooTimeoutError) as e:
            raise DefiniteFailure("unavailable", f"before {waiting}: {e!r}") from None
        recipe = self._recipe(zk, path)
        # One attempt: the recipe's own retry is unlimited by default.
        recipe._retry = KazooRetry(max_tries=1, ignore_expire=False)
        try:
            got = recipe.acquire(blocking=True, timeout=timeout_s)
        except LockTimeout as e:
            raise self._timed_out(zk, recipe, path, before, e) from None
        except (KazooException, KazooTimeoutError) as e:
            raise Indeterminate("connection-lost", f"{call}: {e!r}") from None
        if not got:  # the recipe swallowed a ConnectionLoss/OperationTimeout and cleaned up
            raise Indeterminate("connection-lost", f"{call}: retry failed")
        node = f"{path}/{recipe.node}"
        try:
            stat = self._get(zk.exists_async(node))
        except (KazooException, KazooTimeoutError) as e:
            raise Indeterminate("token-unknown", f"{granted}, then exists failed: {e!r}") from None
        if stat is None:
            raise Indeterminate("lock-lost", f"{granted}, but the node was gone before its token")
        self.held[lock] = int(stat.czxid)
        return Grant(lock, int(stat.czxid), lease_ms, ZkHandle(recipe, node, zk.client_id[0]))

    def _timed_out(
        self, zk: KazooClient, recipe: Lock, path: str, before: str | None, e: Exception
    ) -> Exception:
        try:
            children = self._get(zk.get_children_async(path))
            ours = [c for c in children if c.startswith(recipe.prefix)]
            for c in ours:  # the recipe's cleanup is best effort
                self._get(zk.delete_async(f"{path}/{c}"))
            if ours:
                children = self._get(zk.get_children_async(path))
        except (KazooException, KazooTimeoutError) as e2:
            return Indeterminate("timeout", f"{e}; cleanup failed: {e2!r}")
        if before is not None and before in children:
            return DefiniteFailure("timeout", f"held by {before} throughout")
        return Indeterminate("timeout", str(e))

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        handle = zk_handle(grant)
        if self.session_ms is not None and lease_ms > self.session_ms:
            raise DefiniteFailure("lease-too-long", f"{lease_ms} ms > session {self.session_ms}")
        self._wait_connected()
        if self.zk is None:
            raise DefiniteFailure("not-connected", "no session")
        if self.zk.client_id is None or self.zk.client_id[0] != handle.session_id:
            # kazoo opened a new session after the old one expired, deleting our node.
            raise DefiniteFailure("lock-lost", "the session that held it expired")
        try:
            self._get(self.zk.sync_async(handle.path))  # see the module's text: no stale read
            stat = self._get(self.zk.exists_async(handle.path))
        except (KazooException, KazooTimeoutError) as e:
            raise Indeterminate("timeout", f"sync/exists: {e!r}") from None
        if stat is None or stat.czxid != grant.token:
            raise DefiniteFailure("lock-lost", f"{handle.path} is gone")
        return Grant(grant.lock, grant.token, lease_ms, handle)

    def release(self, grant: Grant) -> None:
        handle = zk_handle(grant)
        self.held.pop(grant.lock, None)
        self._wait_connected()
        if self.zk is None:
            raise DefiniteFailure("not-connected", "no session")
        handle.recipe.is_acquired = False
        try:
            self._get(self.zk.delete_async(handle.path))
        except NoNodeError:
            raise DefiniteFailure("lock-lost", f"{handle.path} was already gone") from None
        except (KazooException, KazooTimeoutError) as e:
            raise self._retire(Indeterminate("timeout", f"delete: {e!r}")) from None

    def close(self) -> None:
        self._stop()


def zk_handle(grant: Grant) -> ZkHandle:
    """The grant's ZkHandle; DefiniteFailure("not-owner") if it is not a zookeeper grant."""
    if not isinstance(grant.handle, ZkHandle):
        raise DefiniteFailure("not-owner", "not a zookeeper grant")
    return grant.handle
