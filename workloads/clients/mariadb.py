"""MariaDB named locks as a lock client: `MariadbGetLockClient` ("mariadb-get-lock", no token)
and `MariadbGetLockCounterClient` ("mariadb-get-lock-counter": a fencing counter bumped in the
statement that takes the lock), over pymysql.

`GET_LOCK(name, timeout)` is held as long as the session that took it lives (or until
`RELEASE_LOCK`); it has no lease. What ends it against the holder's will is the server ending the
session, and the server ends a session it cannot reach only through TCP keepalive or
`wait_timeout`. So the client sets them from the lease the worker asks for, as the
postgres-advisory client does, and `lease_ms` in the history means "the server keeps a session it
has heard from within the last lease_ms":

- keepalive, always: MariaDB has it only server-wide, applied to a connection when it is
  accepted, so before opening its session the client sets `GLOBAL tcp_keepalive_time =
  ceil(lease_s)`, `tcp_keepalive_interval = 1`, `tcp_keepalive_probes = 1` on a short setup
  connection (every worker of a run asks the same values; the server is the run's own). A peer
  that stopped answering (cut off, or its host gone) is dropped a little after a lease of
  silence; a peer whose kernel still answers keeps its lock, however long the process itself is
  stopped, as in real use (`wait_timeout` defaults to 8 hours);
- with the option `wait_timeout` (default off), also `SESSION wait_timeout = ceil(lease_s)`: a
  session that sends nothing for a lease is dropped even when its host is alive, which makes the
  lock a lease that a paused holder loses. Such a session, quiet for longer than that, may be
  gone on the server, so an acquire (which a worker sends holding nothing) opens a fresh one
  instead of learning it from a lost statement.

Each drops a session no earlier than lease_ms after the last packet the server got from the
client, and that packet came after the invoke of the last acquire or renew, so the checker's
surely-held stretch (invoke + lease) is a sound lower bound on the real one. A renew asking for a
longer lease than the session's keepalive was set for cannot keep that promise: Indeterminate,
and the session is closed. Keepalive runs only on a connection with nothing unacknowledged, and
MariaDB has no TCP_USER_TIMEOUT: a holder cut off within the delayed-ACK wait (about 40 ms) after
its grant left the reply unacknowledged on the server, which then kept the session, and the lock,
through minutes of retransmissions (measured: no drop in a 3 s cut; the holder-aware fault timing
lands right after a grant). So the client sends its ACK as soon as it has read a reply
(TCP_QUICKACK).

Acquire is one statement, `GET_LOCK(name, timeout_s)` waiting on the server (the socket's read
timeout is op_timeout_s past it). With the counter it is `INSERT ... SELECT ... WHERE
GET_LOCK(...) = 1 ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)` on
`fc_get_lock_fence`: the row moves only when the lock was granted, in the same autocommit
statement, and the new value comes back in the OK packet as the insert id, so the token comes
exactly with the grant in one round trip. Renew asks `IS_USED_LOCK(name) = CONNECTION_ID()` (also
the traffic that restarts the server's clocks); release is `RELEASE_LOCK`. Names longer than 64
characters (the server's limit) are replaced by their SHA-256.

Errors: a failed connect or session setup sent nothing about the lock: DefiniteFailure. A refused
acquire (0 or NULL from GET_LOCK) is DefiniteFailure("timeout" or "held"). A session the server
says it ended (killed, shutting down) surely holds nothing: DefiniteFailure("session-lost"). Any
other error on the wire (timeout, connection lost) is Indeterminate, and the connection is
closed: closing a session is what releases its locks once the server notices. No hidden retries
(pymysql does none).

Options: `endpoints` (host:port, the first is used), `database`, `user`, `op_timeout_s`,
`wait_timeout` (bool), `fence_counter` (bool; the "-counter" client sets it).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import socket
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
KEEPALIVE = ("SET GLOBAL tcp_keepalive_time = %s, GLOBAL tcp_keepalive_interval = 1, "
             "GLOBAL tcp_keepalive_probes = 1")
HELD = "SELECT IS_USED_LOCK(%(name)s) = CONNECTION_ID()"
RELEASE = "SELECT RELEASE_LOCK(%(name)s)"

# Server errors saying it ended this session: its locks are surely gone (ER_SERVER_SHUTDOWN,
# ER_CONNECTION_KILLED).
SESSION_ENDED = frozenset({1053, 1927})
MAX_NAME = 64


def lock_name(lock: str) -> str:
    """The server-side name of a lock: itself, or a hash where it exceeds the server's limit."""
    return lock if len(lock) <= MAX_NAME else hashlib.sha256(lock.encode()).hexdigest()


def lease_s(lease_ms: int) -> int:
    """A lease as the server's timeouts take it: whole seconds, never shorter than the lease."""
    return max(1, math.ceil(max(1, int(lease_ms)) / 1000))


def endpoint(options: Mapping[str, Any]) -> tuple[str, int]:
    eps = list(options.get("endpoints") or [])
    if not eps:
        raise WorkloadError("mariadb: no endpoints in the client options")
    host, _, port = str(eps[0]).rpartition(":")
    return (host, int(port)) if host else (str(eps[0]), 3306)


def connect(host: str, port: int, user: str, database: str, op_timeout_s: float) -> Any:
    """An autocommit pymysql session whose every wait is bounded by op_timeout_s (the MariaDB
    and Galera clients'); a failed connect is definite: nothing was sent."""
    try:
        return pymysql.connect(
            host=host, port=port, user=user, database=database,
            connect_timeout=max(1, math.ceil(op_timeout_s)),
            read_timeout=op_timeout_s, write_timeout=op_timeout_s, autocommit=True,
        )
    except pymysql.MySQLError as e:
        raise DefiniteFailure("connection-refused", str(e).strip()) from None


class MariadbGetLockClient:
    """A `GET_LOCK` named lock on one MariaDB server. See the module docstring."""

    name = "mariadb-get-lock"
    fence_counter = False

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.host, self.port = endpoint(options)
        self.database = str(options.get("database", "fencecheck"))
        self.user = str(options.get("user", "fencecheck"))
        self.op_timeout_s = float(options.get("op_timeout_s", 2.0))
        self.wait_timeout = bool(options.get("wait_timeout", False))
        self.counter = bool(options.get("fence_counter", self.fence_counter))
        self.conn: Any = None  # pymysql.connections.Connection
        self._keepalive_s = 0  # the keepalive idle the server gave the open session
        self._wait_s: int | None = None  # its wait_timeout, once set (option wait_timeout)
        self._quiet_since = 0.0  # monotonic time of the server's last answer

    # -- the session

    def _open(self) -> Any:
        return connect(self.host, self.port, self.user, self.database, self.op_timeout_s)

    def _connect(self, lease_ms: int) -> Any:
        """A fresh session whose keepalive is set for lease_ms. Nothing here touches a lock, so
        every failure is definite."""
        self._drop()
        idle = lease_s(lease_ms)
        setup = self._open()
        try:
            with setup.cursor() as cur:
                cur.execute(KEEPALIVE, (idle,))
        except pymysql.MySQLError as e:
            raise DefiniteFailure("session-setup", f"keepalive: {e}".strip()) from None
        finally:
            with contextlib.suppress(Exception):
                setup.close()
        conn = self.conn = self._open()
        self._keepalive_s = idle
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

    def _session(self, lease_ms: int, holding: bool) -> Any:
        """The open session, its timeouts set for lease_ms (module docstring). `holding`: the
        session may hold a lock (renew), so it is never replaced and a failure is uncertain."""
        conn, want = self.conn, lease_s(lease_ms)
        if not holding and (conn is None or not conn.open or want > self._keepalive_s or (
                self._wait_s is not None
                and time.monotonic() - self._quiet_since > self._wait_s - 0.5)):
            conn = self._connect(lease_ms)
        if conn is None or not conn.open:
            raise DefiniteFailure("session-lost", "no session")
        if want > self._keepalive_s:
            self._drop()
            raise Indeterminate("lease-too-long", f"{lease_ms} ms is longer than the session's "
                                f"keepalive of {self._keepalive_s} s; session closed")
        if self.wait_timeout and self._wait_s != want:
            try:
                with conn.cursor() as cur:
                    cur.execute("SET SESSION wait_timeout = %s", (want,))
            except pymysql.MySQLError as e:
                self._drop()
                if holding:
                    raise Indeterminate("connection-lost", f"wait_timeout: {e}".strip()) from None
                raise DefiniteFailure("session-setup", f"wait_timeout: {e}".strip()) from None
            self._wait_s = want
            self._quiet_since = time.monotonic()
        return conn

    def _drop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):  # closing a dead socket may raise anything
                self.conn.close()
        self.conn = None
        self._keepalive_s = 0
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
        self._ack_now()
        self._quiet_since = time.monotonic()
        return (row[0] if row else None), int(affected), insert_id

    def _ack_now(self) -> None:
        """Send the ACK of the reply just read now, not after the delayed-ACK wait (module
        docstring: an unacknowledged reply keeps a cut-off session for minutes)."""
        sock = getattr(self.conn, "_sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)

    # -- LockClient

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        self._session(lease_ms, holding=False)
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
        self._session(lease_ms, holding=True)
        held, _, _ = self._execute(HELD, {"name": grant.handle}, "renew")
        if held != 1:
            raise DefiniteFailure("not-owner", grant.lock)
        return Grant(grant.lock, grant.token, lease_ms, grant.handle)

    def release(self, grant: Grant) -> None:
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
