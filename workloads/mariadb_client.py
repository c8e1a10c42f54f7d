"""MariaDB named locks as a lock client: `MariadbGetLockClient` ("mariadb-get-lock", no token)
and `MariadbGetLockCounterClient` ("mariadb-get-lock-counter": a fencing counter bumped in the
statement that takes the lock), over pymysql.

`GET_LOCK(name, timeout)` is held as long as the session that took it lives (or until
`RELEASE_LOCK`); it has no lease. What ends it against the holder's will is the server ending the
session, and the server ends a session it does not hear from only by `wait_timeout` (whole
seconds of silence between statements; MariaDB sets TCP keepalive only server-wide). So the
client sets `SESSION wait_timeout = ceil(lease_s)` on its session when it asks for a lock (and
when a renew asks for another lease), and `lease_ms` in the history means "the server keeps a
session it has heard from within the last lease_ms". The server starts that clock when it has
answered a statement, which is after the invoke of the last acquire or renew, so the checker's
surely-held stretch (invoke + lease) is a sound lower bound on the real one. Unlike the
postgres-advisory default (keepalives only) this is a lease in full: a paused holder loses its
lock as a cut-off one does, and the other workers' sessions wait, or idle, under the same rule.

A session quiet for longer than its wait_timeout may be gone on the server; an acquire (which a
worker sends holding nothing) opens a fresh one instead of learning that from a lost statement.

Acquire is one statement, `GET_LOCK(name, timeout_s)` waiting on the server (the socket's read
timeout is op_timeout_s past it). With the counter it is `INSERT ... SELECT ... WHERE
GET_LOCK(...) = 1 ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)` on
`fc_get_lock_fence`: the row moves only when the lock was granted, in the same autocommit
statement, and the new value comes back in the OK packet as the insert id, so the token comes
exactly with the grant in one round trip. Renew asks `IS_USED_LOCK(name) = CONNECTION_ID()` (also
the traffic that restarts the server's clock); release is `RELEASE_LOCK`. Names longer than 64
characters (the server's limit) are replaced by a SHA-256 prefix.

Errors: a failed connect or session setup sent nothing about the lock: DefiniteFailure. A refused
acquire (0 or NULL from GET_LOCK) is DefiniteFailure("timeout" or "held"). A session the server
says it ended (killed, shutting down) surely holds nothing: DefiniteFailure("session-lost"). Any
other error on the wire (timeout, connection lost) is Indeterminate, and the connection is
closed: closing a session is what releases its locks once the server notices. No hidden retries
(pymysql does none).

Options: `endpoints` (host:port, the first is used), `database`, `user`, `op_timeout_s`,
`fence_counter` (bool; the "-counter" client sets it).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import pymysql  # type: ignore[import-untyped,unused-ignore]

from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate, WorkloadError

log = logging.getLogger(__name__)

FENCE_TABLE = "fc_get_lock_fence"
CREATE = (f"CREATE TABLE IF NOT EXISTS {FENCE_TABLE} "
          "(lock_name VARCHAR(64) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB")
GET_LOCK = "SELECT GET_LOCK(%(name)s, %(wait)s)"
# The counter moves only when the lock was granted, in the same statement.
GET_LOCK_COUNTER = (
    f"INSERT INTO {FENCE_TABLE} (lock_name, token) SELECT %(name)s, LAST_INSERT_ID(1) FROM DUAL "
    "WHERE GET_LOCK(%(name)s, %(wait)s) = 1 "
    "ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)")
HELD = "SELECT IS_USED_LOCK(%(name)s) = CONNECTION_ID()"
RELEASE = "SELECT RELEASE_LOCK(%(name)s)"

# Server errors saying it ended this session: its locks are surely gone (ER_SERVER_SHUTDOWN,
# ER_CONNECTION_KILLED, ER_QUERY_INTERRUPTED's session form ER_NEW_ABORTING_CONNECTION).
SESSION_ENDED = frozenset({1053, 1927, 1184})
MAX_NAME = 64


def lock_name(lock: str) -> str:
    """The server-side name of a lock: itself, or a hash where it exceeds the server's limit."""
    return lock if len(lock) <= MAX_NAME else hashlib.sha256(lock.encode()).hexdigest()


def wait_timeout_s(lease_ms: int) -> int:
    """The session's wait_timeout for a lease: whole seconds, never shorter than the lease."""
    return max(1, math.ceil(max(1, int(lease_ms)) / 1000))


def endpoint(options: Mapping[str, Any]) -> tuple[str, int]:
    eps = list(options.get("endpoints") or [])
    if not eps:
        raise WorkloadError("mariadb: no endpoints in the client options")
    host, _, port = str(eps[0]).rpartition(":")
    return (host, int(port)) if host else (str(eps[0]), 3306)


class MariadbGetLockClient:
    """A `GET_LOCK` named lock on one MariaDB server. See the module docstring."""

    name = "mariadb-get-lock"
    fence_counter = False

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.host, self.port = endpoint(options)
        self.database = str(options.get("database", "fencecheck"))
        self.user = str(options.get("user", "fencecheck"))
        self.op_timeout_s = float(options.get("op_timeout_s", 2.0))
        self.counter = bool(options.get("fence_counter", self.fence_counter))
        self.conn: Any = None  # pymysql.connections.Connection
        self._wait_s: int | None = None  # the session's wait_timeout, once set
        self._quiet_since = 0.0  # monotonic time of the server's last answer

    # -- the session

    def _connect(self) -> Any:
        """A fresh session. Nothing here touches a lock, so every failure is definite."""
        self._drop()
        try:
            conn = pymysql.connect(
                host=self.host, port=self.port, user=self.user, database=self.database,
                connect_timeout=max(1, math.ceil(self.op_timeout_s)),
                read_timeout=self.op_timeout_s, write_timeout=self.op_timeout_s,
                autocommit=True,
            )
        except pymysql.MySQLError as e:
            raise DefiniteFailure("connection-refused", str(e).strip()) from None
        self.conn = conn
        self._quiet_since = time.monotonic()
        if self.counter:
            try:
                # Workers race to create the table; IF NOT EXISTS makes the loser a no-op.
                with conn.cursor() as cur:
                    cur.execute(CREATE)
            except pymysql.MySQLError as e:
                self._drop()
                raise DefiniteFailure("unavailable", f"create table: {e}".strip()) from None
        return conn

    def _session(self, lease_ms: int, fresh_if_quiet: bool) -> Any:
        """The open session with its wait_timeout set for lease_ms (module docstring)."""
        conn = self.conn
        quiet = time.monotonic() - self._quiet_since
        if conn is None or not conn.open or (
                fresh_if_quiet and self._wait_s is not None and quiet > self._wait_s - 0.5):
            conn = self._connect()
        want = wait_timeout_s(lease_ms)
        if self._wait_s != want:
            try:
                with conn.cursor() as cur:
                    cur.execute("SET SESSION wait_timeout = %s", (want,))
            except pymysql.MySQLError as e:
                # On a session that may hold a lock (renew) this is as uncertain as any
                # statement; on a fresh one nothing was asked.
                self._drop()
                if fresh_if_quiet:
                    raise DefiniteFailure("session-setup", str(e).strip()) from None
                raise Indeterminate("connection-lost", f"session setup: {e}".strip()) from None
            self._wait_s = want
            self._quiet_since = time.monotonic()
        return conn

    def _drop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):  # closing a dead socket may raise anything
                self.conn.close()
        self.conn = None
        self._wait_s = None

    def _execute(self, sql: str, params: dict[str, Any], what: str,
                 extra_wait_s: float = 0.0) -> tuple[Any, int, int]:
        """Run one statement on the open session; return (first column of the first row,
        affected rows, insert id), mapping errors (module docstring)."""
        conn = self.conn
        if conn is None or not conn.open:
            raise DefiniteFailure("session-lost", f"{what}: no session")
        conn._read_timeout = self.op_timeout_s + extra_wait_s
        try:
            with conn.cursor() as cur:
                affected = cur.execute(sql, params)
                row = cur.fetchone()
                insert_id = int(cur.lastrowid or 0)
        except pymysql.MySQLError as e:
            self._drop()
            detail = f"{what}: {e}".strip()
            code = e.args[0] if e.args and isinstance(e.args[0], int) else None
            if code in SESSION_ENDED:
                raise DefiniteFailure("session-lost", detail) from None
            if isinstance(e, pymysql.OperationalError) and code in (2006, 2013, 2055):
                raise Indeterminate("connection-lost", detail) from None
            raise Indeterminate("error", detail) from None
        finally:
            if self.conn is not None:
                self.conn._read_timeout = self.op_timeout_s
        self._quiet_since = time.monotonic()
        return (row[0] if row else None), int(affected), insert_id

    # -- LockClient

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        self._session(lease_ms, fresh_if_quiet=True)
        name, wait = lock_name(lock), max(0.0, timeout_s)
        sent = time.monotonic_ns()
        if self.counter:
            _, affected, token = self._execute(GET_LOCK_COUNTER, {"name": name, "wait": wait},
                                               "acquire", extra_wait_s=wait)
            granted = affected > 0
        else:
            got, _, _ = self._execute(GET_LOCK, {"name": name, "wait": wait}, "acquire",
                                      extra_wait_s=wait)
            granted, token = got == 1, 0
        if not granted:
            raise DefiniteFailure("timeout" if timeout_s > 0 else "held", lock)
        return Grant(lock, token if self.counter else None, lease_ms, name, attempt_ns=sent)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        if self.conn is None or not self.conn.open:
            raise DefiniteFailure("session-lost", grant.lock)
        self._session(lease_ms, fresh_if_quiet=False)
        held, _, _ = self._execute(HELD, {"name": grant.handle}, "renew")
        if held != 1:
            raise DefiniteFailure("not-owner", grant.lock)
        return Grant(grant.lock, grant.token, lease_ms, grant.handle)

    def release(self, grant: Grant) -> None:
        if self.conn is None or not self.conn.open:
            raise DefiniteFailure("not-owner", f"{grant.lock}: no session")
        released, _, _ = self._execute(RELEASE, {"name": grant.handle}, "release")
        if released != 1:
            raise DefiniteFailure("not-owner", grant.lock)

    def close(self) -> None:
        self._drop()


class MariadbGetLockCounterClient(MariadbGetLockClient):
    """`MariadbGetLockClient` with the fencing counter: token = the grant's bump of a per-lock
    row."""

    name = "mariadb-get-lock-counter"
    fence_counter = True
