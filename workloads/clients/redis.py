"""Lock clients over a single Redis server: `SetnxClient` ("redis-setnx": SET NX PX plus a fencing
token from INCR in the same Lua script) and `RedisPyClient` ("redis-py": the library's
`redis.lock.Lock`, no token).

Both talk to `options["endpoints"][0]` with zero retries: redis-py 8 retries a failed command ten
times with exponential backoff by default (measured here: one INCR against a SIGSTOPped server
with a 0.5 s socket timeout took 9.8 s to fail), which would hide operations from the history.
Errors map as follows: failure to connect (nothing was sent) -> DefiniteFailure
("connection-refused", "connect-timeout" or "connect-failed"); an error reply from the server ->
DefiniteFailure(its code, e.g. "readonly", "loading"); a timeout or a connection lost after the
request may have been sent -> Indeterminate("timeout" or "connection-lost").

Options: `endpoints`, `op_timeout_s` (socket timeouts), `poll_ms` (acquire poll interval, default
5), `key_prefix` (default "fc:").
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import secrets
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.exceptions import (
    BusyLoadingError,
    LockError,
    LockNotOwnedError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.lock import Lock
from redis.retry import Retry

from fencecheck.workloads import options as opts
from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate
from fencecheck.workloads.clients.polling import poll

log = logging.getLogger(__name__)

T = TypeVar("T")

# KEYS: lock key, token counter key. ARGV: owner, lease in ms.
# SET NX and INCR in one script, so a token is handed out exactly when the lock is granted.
ACQUIRE_LUA = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false
"""
RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def connection_kwargs(timeout_s: float) -> dict[str, Any]:
    """redis-py connection arguments: never retry, time out after timeout_s, decode replies."""
    kw: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        # Retry(..., 0) also covers timeouts: retry_on_timeout is deprecated in redis-py 8.
        "retry": Retry(NoBackoff(), 0),
        "retry_on_error": [],
        "health_check_interval": 0,
        "decode_responses": True,
    }
    # CLIENT SETINFO on connect is an extra round trip that can fail for reasons of its own;
    # redis-py 8 turns it off with driver_info=None, older versions with lib_name=None.
    if "driver_info" in inspect.signature(redis.Redis.__init__).parameters:
        kw["driver_info"] = None
    else:
        kw["lib_name"] = kw["lib_version"] = None
    return kw


def make_redis(options: Mapping[str, Any]) -> redis.Redis:
    """A redis-py client for endpoints[0] that never retries and times out after op_timeout_s."""
    host, port = opts.endpoints(options)[0]
    return redis.Redis(host=host, port=port, **connection_kwargs(opts.op_timeout_s(options)))


def _error_code(e: ResponseError) -> str:
    first = str(e).split(" ", 1)[0].strip()
    return first.lower() if first.isupper() and first else "error-reply"


# Between two tries of a held lock, as the other polling clients (pg-advisory, galera, nats):
# a waiter is granted at most this long after the lease lapses or the holder releases. It was
# 5 ms, which spent a third of a waiting worker's CPU on SETs that could not succeed
# (docs/test-suite-cpu.md) for no gain in what a run finds: a pause lasts seconds.
POLL_MS = 20


class RedisConn:
    """One redis-py client plus the error mapping shared by the lock clients. Subclasses may
    refine the mapping (workloads/clients/sentinel.py: a client on the sentinels' primary).

    Two ways to send: `call(fn)` runs redis-py calls on the client's pool (for clients built on
    redis-py's own objects, such as `Lock`); `execute(*command)` sends one command on a
    connection of this object's own, made by the same pool. The pool checks a connection out
    and back in around every command (with a select(2) on it each time), which measured here
    cost as much as the command itself; the harness's lock cycle sends two per cycle."""

    def __init__(self, client: redis.Redis, host: str, port: int) -> None:
        self.client = client
        self.host, self.port = host, port
        self._own: Any = None  # execute's connection (redis-py's connection types are untyped)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RedisConn:
        """A connection to endpoints[0] (see `make_redis`)."""
        host, port = opts.endpoints(options)[0]
        return cls(make_redis(options), host, port)

    def connect_failure(self, e: RedisError) -> DefiniteFailure:
        """What a failure to connect (nothing was sent) is in the history."""
        if isinstance(e, RedisTimeoutError):
            return DefiniteFailure("connect-timeout", str(e))
        if isinstance(e, BusyLoadingError):
            return DefiniteFailure("loading", str(e))
        if isinstance(e, RedisConnectionError):
            refused = "refused" in str(e).lower() or "error 111 " in str(e).lower()
            return DefiniteFailure("connection-refused" if refused else "connect-failed", str(e))
        return DefiniteFailure("connect-failed", str(e))

    def request_failure(self, e: Exception) -> DefiniteFailure | Indeterminate | None:
        """What an error raised by a request on an open connection is in the history (None:
        not redis-py's, let it propagate)."""
        if isinstance(e, DefiniteFailure | Indeterminate):
            return e
        if isinstance(e, BusyLoadingError):
            return DefiniteFailure("loading", str(e))
        if isinstance(e, LockNotOwnedError):
            return DefiniteFailure("not-owner", str(e))
        if isinstance(e, LockError):
            return DefiniteFailure("lock-error", str(e))
        if isinstance(e, ResponseError):
            return DefiniteFailure(_error_code(e), str(e))
        if isinstance(e, RedisTimeoutError):
            return Indeterminate("timeout", str(e))
        if isinstance(e, RedisConnectionError):
            return Indeterminate("connection-lost", str(e))
        if isinstance(e, RedisError | OSError):
            return Indeterminate("error", f"{type(e).__name__}: {e}")
        return None

    def connect(self) -> None:
        """Make sure the pooled connection is up, so a later failure is surely mid-request."""
        pool = self.client.connection_pool
        try:
            conn = pool.get_connection()
        except RedisError as e:
            raise self.connect_failure(e) from e
        pool.release(conn)

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Map redis-py errors raised by the requests inside to Definite/Indeterminate."""
        try:
            yield
        except Exception as e:
            mapped = self.request_failure(e)
            if mapped is None or mapped is e:
                raise
            raise mapped from e

    def call(self, fn: Callable[[], T]) -> T:
        self.connect()
        with self.request():
            return fn()

    def execute(self, *command: str | int) -> Any:
        """Send one command and return its reply, on this object's own connection: connected
        first (a failure there is definite), then the request (mapped as in `request`). A
        connection that failed mid-request is closed, and made again next time."""
        conn = self._own
        if conn is None:
            conn = self._own = self.client.connection_pool.make_connection()
        try:
            conn.connect()  # nothing to do while it is up
            # As redis-py's pool does before lending a connection: one the server closed (it
            # was killed, say) is made again before anything is sent, not failed mid-request.
            try:
                stale = conn.can_read()
            except (RedisConnectionError, RedisTimeoutError, OSError):
                stale = True
            if stale:
                conn.disconnect()
                conn.connect()
        except RedisError as e:
            raise self.connect_failure(e) from e
        try:
            conn.send_command(*command)
            return conn.read_response()
        except BaseException as e:
            if not isinstance(e, ResponseError):
                # Its reply may still come and must not be read as the next command's: redis-py's
                # Redis drops the connection in its retry callback, and a sentinel-managed
                # connection does not drop it on its own.
                conn.disconnect()
            mapped = self.request_failure(e) if isinstance(e, Exception) else None
            if mapped is None or mapped is e:
                raise
            raise mapped from e

    def close(self) -> None:
        if self._own is not None:
            self._own.disconnect()
        self.client.close()


class SetnxClient:
    """SET NX PX with a random owner value; the fencing token is INCR of a per-lock counter in
    the same script. Renew and release check the owner in Lua."""

    name = "redis-setnx"

    def __init__(self, options: Mapping[str, Any], conn: RedisConn | None = None) -> None:
        """conn: the connection to use (default: one to endpoints[0] from the options)."""
        self._redis = conn if conn is not None else RedisConn.from_options(options)
        self.poll_s = float(options.get("poll_ms", POLL_MS)) / 1000.0
        self.prefix = str(options.get("key_prefix", "fc:"))

    # what acquire runs (KEYS: lock, token counter; ARGV: owner, lease_ms; returns the token)
    # and the handle it keeps: subclasses that store more in the lock's value change both
    acquire_script = ACQUIRE_LUA

    def _handle(self, token: int, owner: str) -> str:
        return owner

    def _keys(self, lock: str) -> tuple[str, str]:
        return f"{self.prefix}lock:{lock}", f"{self.prefix}token:{lock}"

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        lock_key, token_key = self._keys(lock)
        owner = secrets.token_hex(16)
        execute, script, lease = self._redis.execute, self.acquire_script, int(lease_ms)
        token, sent = poll(lock, timeout_s, lambda: execute(
            "EVAL", script, 2, lock_key, token_key, owner, lease), self.poll_s)
        return Grant(lock=lock, token=int(token), lease_ms=lease_ms,
                     handle=self._handle(int(token), owner), attempt_ns=sent)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        lock_key, _ = self._keys(grant.lock)
        done = self._redis.execute("EVAL", RENEW_LUA, 1, lock_key, str(grant.handle),
                                   int(lease_ms))
        if not done:
            raise DefiniteFailure("not-owner", grant.lock)
        return Grant(grant.lock, grant.token, lease_ms, grant.handle)

    def release(self, grant: Grant) -> Mapping[str, Any] | None:
        lock_key, _ = self._keys(grant.lock)
        done = self._redis.execute("EVAL", RELEASE_LUA, 1, lock_key, str(grant.handle))
        if not done:
            raise DefiniteFailure("not-owner", grant.lock)
        return None

    def close(self) -> None:
        self._redis.close()


class RedisPyClient:
    """redis-py's own `redis.lock.Lock`: blocking acquire with a timeout, `extend` with
    replace_ttl for renew, `release`. It has no fencing token."""

    name = "redis-py"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._redis = RedisConn.from_options(options)
        self.poll_s = float(options.get("poll_ms", POLL_MS)) / 1000.0
        self.prefix = str(options.get("key_prefix", "fc:"))

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        handle = Lock(
            self._redis.client,
            f"{self.prefix}lock:{lock}",
            timeout=lease_ms / 1000.0,
            sleep=self.poll_s,
            blocking=False,
            thread_local=False,
        )
        # Lock's own blocking loop, spelled out so that the winning attempt's send time is known
        _, sent = poll(lock, timeout_s, lambda: self._redis.call(handle.acquire) or None,
                       self.poll_s)
        return Grant(lock=lock, token=None, lease_ms=lease_ms, handle=handle, attempt_ns=sent)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        handle: Lock = grant.handle
        self._redis.call(lambda: handle.extend(lease_ms / 1000.0, replace_ttl=True))
        return Grant(grant.lock, grant.token, lease_ms, handle)

    def release(self, grant: Grant) -> None:
        handle: Lock = grant.handle
        self._redis.call(handle.release)

    def close(self) -> None:
        self._redis.close()
