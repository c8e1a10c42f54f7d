"""PostgreSQL session-level advisory locks as a lock client: `PgAdvisoryClient` ("pg-advisory",
no token) and `PgAdvisoryCounterClient` ("pg-advisory-counter": a fencing counter bumped inside
the lock).

An advisory lock (`pg_try_advisory_lock(key)`) is held as long as the session that took it lives;
it has no lease. What ends it against the holder's will is the server dropping the session, and
the server drops a session it cannot reach only through its own timeouts. So the client sets them
on its session, per grant, from the lease the worker asks for, and `lease_ms` in the history means
"the server keeps a session it has heard from within the last lease_ms":

- `tcp_keepalives_idle = ceil(lease_s)`, `tcp_keepalives_interval = 1`, `tcp_keepalives_count = 1`
  and `tcp_user_timeout = lease_ms`: a peer that stopped answering (cut off, or its host gone)
  is dropped a little after a lease of silence; a peer whose kernel still answers keeps its lock,
  however long the process itself is stopped;
- with the option `idle_session_timeout` (default off), also `idle_session_timeout = lease_ms`
  (and `idle_in_transaction_session_timeout`): a session that sends nothing for a lease is
  dropped even when its host is alive, which makes the lock a lease that a paused holder loses.

Each of these drops a session no earlier than lease_ms after the last packet it got from the
client, and that packet came after the invoke of the last acquire or renew, so the checker's
surely-held stretch (invoke + lease) is a sound lower bound on the real one.

Acquire polls `pg_try_advisory_lock` every `poll_ms` (default 20) until `timeout_s`. The lock key
is the first 8 bytes of SHA-256 of the lock name (a signed 64-bit key). With the counter, the same
statement bumps `fc_advisory_fence(lock, token)` when the lock is granted, so the token comes
exactly with the grant and grows with every grant. Renew asks `pg_locks` whether this session
still holds the key (that query is also the traffic that keeps the session alive); release is
`pg_advisory_unlock`.

Errors: a failed connect or session setup sent nothing about the lock: DefiniteFailure. A session
the server ended by one of the timeouts above (SQLSTATE 57P05, 25P03) or an admin shutdown
(57P01..57P03) surely holds nothing: DefiniteFailure("session-lost"). Any other error on the wire
(timeout, connection lost) is Indeterminate, and the connection is closed: closing a session is
what releases its locks, so a retired process leaves nothing behind once the server notices.
No hidden retries (psycopg does none).

Options: `dsn` or `endpoints` (+ `database`), `op_timeout_s`, `poll_ms`, `idle_session_timeout`
(bool), `fence_counter` (bool; the "-counter" client sets it).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
from collections.abc import Mapping
from typing import Any

import psycopg

from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate
from fencecheck.workloads.clients.polling import poll
from fencecheck.workloads.resources.postgres import dsn_from

log = logging.getLogger(__name__)

FENCE_TABLE = "fc_advisory_fence"
CREATE = f"CREATE TABLE IF NOT EXISTS {FENCE_TABLE} (lock text PRIMARY KEY, token bigint NOT NULL)"
TRY_LOCK = "SELECT pg_try_advisory_lock(%(k)s)"
# The counter moves only when the lock was granted, in the same statement.
TRY_LOCK_COUNTER = f"""WITH l AS (SELECT pg_try_advisory_lock(%(k)s) AS got)
    INSERT INTO {FENCE_TABLE} AS f (lock, token) SELECT %(lock)s, 1 FROM l WHERE l.got
    ON CONFLICT (lock) DO UPDATE SET token = f.token + 1 RETURNING f.token"""
# A bigint key is stored in pg_locks as classid (high 32 bits), objid (low 32), objsubid 1.
HELD = """SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
    AND granted AND objsubid = 1 AND classid = %(hi)s::oid AND objid = %(lo)s::oid"""
UNLOCK = "SELECT pg_advisory_unlock(%(k)s)"

# SQLSTATEs with which the server says it ended this session: its locks are surely gone.
SESSION_ENDED = frozenset({"57P05", "25P03", "57P01", "57P02", "57P03"})


def lock_key(lock: str) -> int:
    """The signed 64-bit advisory key of a lock name (stable across processes and hosts)."""
    return int.from_bytes(hashlib.sha256(lock.encode()).digest()[:8], "big", signed=True)


def session_settings(lease_ms: int, idle_timeout: bool) -> dict[str, str]:
    """The server-side timeouts that make a dead session end no sooner than lease_ms after the
    last packet from its client (see the module docstring)."""
    lease_ms = max(1, int(lease_ms))
    settings = {
        "tcp_keepalives_idle": str(max(1, math.ceil(lease_ms / 1000))),
        "tcp_keepalives_interval": "1",
        "tcp_keepalives_count": "1",
        "tcp_user_timeout": str(lease_ms),
        "idle_session_timeout": "0",
        "idle_in_transaction_session_timeout": "0",
    }
    if idle_timeout:
        settings["idle_session_timeout"] = str(lease_ms)
        settings["idle_in_transaction_session_timeout"] = str(lease_ms)
    return settings


class PgAdvisoryClient:
    """A session-level advisory lock on one PostgreSQL server. See the module docstring."""

    name = "pg-advisory"
    fence_counter = False

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.dsn = dsn_from(options)
        self.op_timeout_s = float(options.get("op_timeout_s", 2.0))
        self.poll_s = float(options.get("poll_ms", 20)) / 1000.0
        self.idle_timeout = bool(options.get("idle_session_timeout", False))
        self.counter = bool(options.get("fence_counter", self.fence_counter))
        self.conn: psycopg.Connection[Any] | None = None
        self._lease_ms: int | None = None  # the lease the session's timeouts are set for

    # -- the session

    def _session(self, lease_ms: int) -> psycopg.Connection[Any]:
        """The open session, with its timeouts set for lease_ms. Nothing here touches a lock,
        so every failure is definite."""
        if self.conn is None or self.conn.closed:
            self._lease_ms = None
            ms = int(self.op_timeout_s * 1000)
            try:
                self.conn = psycopg.connect(
                    self.dsn, autocommit=True,
                    connect_timeout=max(1, math.ceil(self.op_timeout_s)),
                    tcp_user_timeout=ms, keepalives=1, keepalives_idle=1,
                    keepalives_interval=1, keepalives_count=max(1, math.ceil(self.op_timeout_s)),
                    options=f"-c statement_timeout={ms}",
                )
            except psycopg.Error as e:
                raise DefiniteFailure("connection-refused", str(e).strip()) from None
            if self.counter:
                try:
                    # Workers race to create the table; losing that race is fine.
                    with contextlib.suppress(psycopg.errors.UniqueViolation,
                                             psycopg.errors.DuplicateTable):
                        self.conn.execute(CREATE)
                except psycopg.Error as e:
                    self._drop()
                    raise DefiniteFailure("unavailable", f"create table: {e}".strip()) from None
        if self._lease_ms != lease_ms:
            settings = session_settings(lease_ms, self.idle_timeout)
            sql = "SELECT " + ", ".join(f"set_config('{k}', %s, false)" for k in settings)
            try:
                self.conn.execute(sql, list(settings.values()))
            except psycopg.Error as e:
                self._drop()
                raise DefiniteFailure("session-setup", str(e).strip()) from None
            self._lease_ms = lease_ms
        return self.conn

    def _drop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error as e:
                log.debug("pg-advisory: close: %s", e)
        self.conn = None
        self._lease_ms = None

    def _execute(self, sql: str, params: dict[str, Any], what: str) -> list[tuple[Any, ...]]:
        """Run one statement on the open session, mapping errors (module docstring)."""
        conn = self.conn
        if conn is None or conn.closed:
            raise DefiniteFailure("session-lost", f"{what}: no session")
        try:
            return conn.execute(sql, params).fetchall()
        except psycopg.Error as e:
            self._drop()
            detail = f"{what}: {e}".strip()
            if e.sqlstate in SESSION_ENDED:
                raise DefiniteFailure("session-lost", detail) from None
            if isinstance(e, psycopg.errors.QueryCanceled):
                raise Indeterminate("timeout", detail) from None
            if isinstance(e, psycopg.OperationalError):
                raise Indeterminate("connection-lost", detail) from None
            raise Indeterminate("error", detail) from None

    # -- LockClient

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        key = lock_key(lock)

        def attempt() -> tuple[int | None] | None:
            self._session(lease_ms)
            if self.counter:
                rows = self._execute(TRY_LOCK_COUNTER, {"k": key, "lock": lock}, "acquire")
                return (int(rows[0][0]),) if rows else None
            return (None,) if self._execute(TRY_LOCK, {"k": key}, "acquire")[0][0] else None

        (token,), sent = poll(lock, timeout_s, attempt, self.poll_s)
        return Grant(lock, token, lease_ms, key, attempt_ns=sent)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        key = int(grant.handle)
        if self.conn is None or self.conn.closed:
            raise DefiniteFailure("session-lost", grant.lock)
        self._session(lease_ms)
        unsigned = key & 0xFFFFFFFFFFFFFFFF
        rows = self._execute(HELD, {"hi": unsigned >> 32, "lo": unsigned & 0xFFFFFFFF}, "renew")
        if not rows[0][0]:
            raise DefiniteFailure("not-owner", grant.lock)
        return Grant(grant.lock, grant.token, lease_ms, grant.handle)

    def release(self, grant: Grant) -> None:
        if not self._execute(UNLOCK, {"k": int(grant.handle)}, "release")[0][0]:
            raise DefiniteFailure("not-owner", grant.lock)

    def close(self) -> None:
        self._drop()


class PgAdvisoryCounterClient(PgAdvisoryClient):
    """`PgAdvisoryClient` with the fencing counter: token = the grant's bump of a per-lock row."""

    name = "pg-advisory-counter"
    fence_counter = True
