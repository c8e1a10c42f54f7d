"""A lock table as a lock client, `GaleraLockTableClient` ("galera-lock-table"): the ShedLock/Quartz
pattern on a MariaDB Galera cluster, each worker writing through its own node.

One row per lock in `fc_lock_table (name, lock_until, locked_by, token)`, times by the node's
clock (`NOW(3)`; the nodes share the host's clock here). Acquire tries `INSERT` of the row (a
duplicate key means it exists) and otherwise `UPDATE ... SET lock_until = NOW(3) + lease,
locked_by = me, token = LAST_INSERT_ID(token + 1) WHERE name = ? AND lock_until <= NOW(3)`: one
changed row is a grant, whose token comes back in the OK packet; none is "held". Both run in
autocommit and are polled every `poll_ms` until the acquire's timeout. Renew is the same `UPDATE`
guarded by `locked_by = me AND lock_until > NOW(3)`; release sets `lock_until = NOW(3)` where
`locked_by = me` (ShedLock's unlock). The lease is counted by the node from when it ran the
statement, after the invoke, so the checker's surely-held stretch is not longer than what the
table promises (the nodes' clocks are one here). `locked_by` is unique per client object.

Galera certifies a transaction against the others at commit; the loser of a conflict is rolled
back with ER_LOCK_DEADLOCK (1213): a definite "conflict". A node not ready for use (1047, not in
the primary component) refused before running anything: DefiniteFailure("unavailable"). Any other
error on the wire is Indeterminate and the connection is closed. No hidden retries.

Options: `endpoints` (the worker uses `endpoints[worker % len]`), `worker`, `database`, `user`,
`op_timeout_s`, `poll_ms` (default 20).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import pymysql  # type: ignore[import-untyped,unused-ignore]

from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate, WorkloadError
from fencecheck.workloads.clients.mariadb import connect, lock_name
from fencecheck.workloads.clients.polling import poll

log = logging.getLogger(__name__)

TABLE = "fc_lock_table"
CREATE = (f"CREATE TABLE IF NOT EXISTS {TABLE} (name VARCHAR(64) PRIMARY KEY, "
          "lock_until TIMESTAMP(3) NOT NULL, locked_by VARCHAR(64) NOT NULL, "
          "token BIGINT NOT NULL) ENGINE=InnoDB")
INSERT = (f"INSERT INTO {TABLE} (name, lock_until, locked_by, token) "
          "VALUES (%(name)s, NOW(3) + INTERVAL %(us)s MICROSECOND, %(me)s, LAST_INSERT_ID(1))")
TAKE = (f"UPDATE {TABLE} SET lock_until = NOW(3) + INTERVAL %(us)s MICROSECOND, "
        "locked_by = %(me)s, token = LAST_INSERT_ID(token + 1) "
        "WHERE name = %(name)s AND lock_until <= NOW(3)")
RENEW = (f"UPDATE {TABLE} SET lock_until = NOW(3) + INTERVAL %(us)s MICROSECOND "
         "WHERE name = %(name)s AND locked_by = %(me)s AND lock_until > NOW(3)")
RELEASE = (f"UPDATE {TABLE} SET lock_until = NOW(3) "
           "WHERE name = %(name)s AND locked_by = %(me)s AND lock_until > NOW(3)")

DUPLICATE, DEADLOCK, NOT_READY = 1062, 1213, 1047


def endpoint_for(options: Mapping[str, Any]) -> tuple[str, int]:
    """The worker's own node: endpoints[worker % len(endpoints)]."""
    eps = list(options.get("endpoints") or [])
    if not eps:
        raise WorkloadError("galera: no endpoints in the client options")
    ep = str(eps[int(options.get("worker", 0)) % len(eps)])
    host, _, port = ep.rpartition(":")
    return (host, int(port)) if host else (ep, 3306)


class GaleraLockTableClient:
    """A lock table on Galera through one node. See the module docstring."""

    name = "galera-lock-table"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.host, self.port = endpoint_for(options)
        self.database = str(options.get("database", "fencecheck"))
        self.user = str(options.get("user", "fencecheck"))
        self.op_timeout_s = float(options.get("op_timeout_s", 2.0))
        self.poll_s = float(options.get("poll_ms", 20)) / 1000.0
        self.me = f"w{options.get('worker', 0)}-{uuid.uuid4().hex[:12]}"
        self.conn: Any = None

    def _session(self) -> Any:
        """The open connection (made, with the table, if need be): failures here are definite."""
        if self.conn is not None and self.conn.open:
            return self.conn
        conn = connect(self.host, self.port, self.user, self.database, self.op_timeout_s)
        try:
            with conn.cursor() as cur:
                cur.execute(CREATE)  # IF NOT EXISTS: the workers' race is harmless
        except pymysql.MySQLError as e:
            with contextlib.suppress(Exception):
                conn.close()
            raise DefiniteFailure("unavailable", f"create table: {e}".strip()) from None
        self.conn = conn
        return conn

    def _drop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None

    def _execute(self, sql: str, params: dict[str, Any], what: str) -> tuple[int, int]:
        """One autocommit statement; (affected rows, insert id), errors mapped (docstring).
        A duplicate key is returned as (-1, 0): the row exists, nothing changed."""
        conn = self._session()
        try:
            with conn.cursor() as cur:
                affected = cur.execute(sql, params)
                return int(affected), int(cur.lastrowid or 0)
        except pymysql.MySQLError as e:
            code = e.args[0] if e.args and isinstance(e.args[0], int) else None
            detail = f"{what}: {e}".strip()
            if code == DUPLICATE:
                return -1, 0
            if code == DEADLOCK:
                raise DefiniteFailure("conflict", detail) from None
            if code == NOT_READY:
                raise DefiniteFailure("unavailable", detail) from None
            self._drop()
            if isinstance(e, pymysql.OperationalError) and code in (2006, 2013, 2055):
                raise Indeterminate("connection-lost", detail) from None
            raise Indeterminate("error", detail) from None

    # -- LockClient

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        name = lock_name(lock)
        params = {"name": name, "us": int(lease_ms) * 1000, "me": self.me}

        def attempt() -> int | None:
            affected, token = self._execute(INSERT, params, "acquire")
            if affected == 1:
                return token
            affected, token = self._execute(TAKE, params, "acquire")
            return token if affected == 1 else None

        token, sent = poll(lock, timeout_s, attempt, self.poll_s)
        return Grant(lock, token, lease_ms, name, attempt_ns=sent)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        params = {"name": grant.handle, "us": int(lease_ms) * 1000, "me": self.me}
        if self._execute(RENEW, params, "renew")[0] != 1:
            raise DefiniteFailure("not-owner", grant.lock)
        return Grant(grant.lock, grant.token, lease_ms, grant.handle)

    def release(self, grant: Grant) -> None:
        if self._execute(RELEASE, {"name": grant.handle, "me": self.me}, "release")[0] != 1:
            raise DefiniteFailure("not-owner", grant.lock)

    def close(self) -> None:
        self._drop()
