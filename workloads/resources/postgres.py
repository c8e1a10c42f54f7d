"""`PgResource`: integer values in a PostgreSQL table with a fence column.

Table `fc_values(key text primary key, value bigint, fence bigint not null)`. With fencing on,
every request is one statement that raises the fence and acts only if the fence allows it:

    write: INSERT .. VALUES (key, value, held) ON CONFLICT (key) DO UPDATE
           SET value = excluded.value, fence = excluded.fence WHERE fc_values.fence <= held
    read:  INSERT .. VALUES (key, NULL, held) ON CONFLICT (key) DO UPDATE
           SET fence = excluded.fence WHERE fc_values.fence <= held RETURNING value

(the upsert form of `UPDATE .. SET fence = held .. WHERE key = .. AND fence <= held`, so the
first request for a key needs no separate insert). Zero rows = a higher token was seen: the
lease was lost, StaleToken. Reads raise the fence too, as the fenced store does, so a stale
holder cannot even read after a newer holder touched the key. A read of a key never written
returns None (it creates the row with a NULL value and the reader's fence).

With `fencing: false` the statements are a plain upsert and a plain SELECT. A read with token
None (the final observer read) is a plain SELECT and raises no fence; a fenced write with token
None is refused (StaleToken).

One autocommit connection per resource object, opened lazily. No hidden retries (psycopg does
none). A failed connect sent nothing: DefiniteFailure("connection-refused"). A connection lost
during a statement: Indeterminate; a statement cancelled by `statement_timeout` was rolled back:
DefiniteFailure("timeout"). Timeouts: `connect_timeout`, libpq's
`tcp_user_timeout` (unacknowledged data) and TCP keepalives (a silent peer) bound how long a
statement can hang on a partition, and `statement_timeout` how long the server may work.

Options: `dsn` (libpq string) or `endpoints` (["host:port"], first used) with `database`;
`fencing` (default true), `op_timeout_s`.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping
from typing import Any

import psycopg

from fencecheck.workloads.base import DefiniteFailure, Indeterminate, StaleToken
from fencecheck.workloads.resources.etcd import fencing_option

log = logging.getLogger(__name__)

TABLE = "fc_values"

CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    key text PRIMARY KEY, value bigint, fence bigint NOT NULL DEFAULT 0)"""
FENCED_WRITE = f"""INSERT INTO {TABLE} AS t (key, value, fence) VALUES (%(k)s, %(v)s, %(f)s)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value, fence = excluded.fence
    WHERE t.fence <= excluded.fence"""
FENCED_READ = f"""INSERT INTO {TABLE} AS t (key, value, fence) VALUES (%(k)s, NULL, %(f)s)
    ON CONFLICT (key) DO UPDATE SET fence = excluded.fence
    WHERE t.fence <= excluded.fence RETURNING t.value"""
PLAIN_WRITE = f"""INSERT INTO {TABLE} AS t (key, value, fence) VALUES (%(k)s, %(v)s, 0)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value"""
PLAIN_READ = f"SELECT value FROM {TABLE} WHERE key = %(k)s"


def dsn_from(options: Mapping[str, Any]) -> str:
    if "dsn" in options:
        return str(options["dsn"])
    host, _, port = str(next(iter(options["endpoints"]))).rpartition(":")
    db = options.get("database", "fencecheck")
    return f"host={host} port={port} dbname={db} user={options.get('user', 'postgres')}"


class PgResource:
    """Resource in PostgreSQL with a fence column. See the module docstring."""

    name = "postgres"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.fencing = fencing_option(options)
        self.op_timeout_s = float(options.get("op_timeout_s", 2.0))
        self.dsn = dsn_from(options)
        self.conn: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        ms = int(self.op_timeout_s * 1000)
        try:
            conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=max(1, math.ceil(self.op_timeout_s)),
                tcp_user_timeout=ms,
                keepalives=1,
                keepalives_idle=1,
                keepalives_interval=1,
                keepalives_count=max(1, math.ceil(self.op_timeout_s)),
                options=f"-c statement_timeout={ms}",
            )
        except psycopg.Error as e:
            raise DefiniteFailure("connection-refused", str(e).strip()) from None
        try:
            # Workers race to create the table; losing that race is fine.
            with contextlib.suppress(psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                conn.execute(CREATE)
        except psycopg.Error as e:
            conn.close()
            raise DefiniteFailure("unavailable", f"create table: {e}".strip()) from None
        self.conn = conn
        return conn

    def _run(self, sql: str, params: dict[str, Any], what: str) -> list[tuple[Any, ...]] | None:
        """Execute one statement; the rows if it returns any, else None when no row changed."""
        conn = self._connect()
        try:
            cur = conn.execute(sql, params)
            rows = cur.fetchall() if cur.description is not None else None
            changed = cur.rowcount
        except psycopg.errors.QueryCanceled as e:
            # statement_timeout aborted the (autocommit) transaction: nothing was applied.
            raise DefiniteFailure("timeout", f"{what}: {e}".strip()) from None
        except psycopg.OperationalError as e:
            self._drop()
            raise Indeterminate("connection-lost", f"{what}: {e}".strip()) from None
        except psycopg.Error as e:  # e.g. a constraint: the statement surely did nothing
            raise DefiniteFailure("refused", f"{what}: {e}".strip()) from None
        if rows is None:
            return [] if changed > 0 else None
        return rows

    def _drop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error as e:
                log.debug("postgres: close: %s", e)
            self.conn = None

    def read(self, key: str, token: int | None, lock: str) -> int | None:
        if not self.fencing or token is None:
            rows = self._run(PLAIN_READ, {"k": key}, "read") or []
        else:
            rows = self._run(FENCED_READ, {"k": key, "f": token}, "read") or []
            if not rows:
                raise StaleToken(f"{key}: fence is above {token}")
        value = rows[0][0] if rows else None
        return None if value is None else int(value)

    def write(self, key: str, value: int, token: int | None, lock: str) -> None:
        if not self.fencing:
            self._run(PLAIN_WRITE, {"k": key, "v": value}, "write")
            return
        if token is None:
            raise StaleToken("a fenced write needs a token")
        if self._run(FENCED_WRITE, {"k": key, "v": value, "f": token}, "write") is None:
            raise StaleToken(f"{key}: fence is above {token}")

    def close(self) -> None:
        self._drop()
