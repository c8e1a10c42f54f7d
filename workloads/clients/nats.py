"""`NatsKvClient`: a lock on a NATS JetStream KV bucket through nats-py (asyncio).

A lock is one key of the bucket (the lock's name). acquire = KV `create` (an update expecting the
key's last revision to be 0, or a delete marker's: the write is refused while anyone holds the
key), polled until the acquire's timeout; the token is the revision the create was stored at (a
stream sequence: it grows with every write to the bucket, so a later grant's create has a higher
one). renew = `update` expecting our last revision (refused once the key expired or was taken);
release = a delete marker expecting our last revision, so it cannot remove another's lock. The
lease is the bucket's `max_age`, set to the run's lease at setup (clusters/services/nats.py
says why not a per-key TTL), so a grant whose lease_ms exceeds the bucket's TTL is refused up
front rather than promised a lease the server does not keep.

nats-py is asyncio: each client runs one event loop in a thread of its own and every call waits
for its coroutine there (a SIGSTOPped worker freezes that thread with the rest). Its automatic
reconnect is off, because it would buffer a request sent while disconnected and deliver it
later behind the history's back; instead a dead connection is replaced at the start of the next
operation, on the next server in turn (nothing sent if that fails: DefiniteFailure).

Outcomes: a "wrong last sequence" refusal, another refusal of the stream leader (an API error
in the publish acknowledgement) or no responders (during a stream leader election) ->
DefiniteFailure (an acquire retries these until its deadline, as for a held lock); a timeout or a
connection lost while waiting for the acknowledgement -> Indeterminate (the write may be in the
Raft log).
Options: `endpoints`, `op_timeout_s`, `bucket`, `bucket_ttl_ms` (the service's), `worker` (the
preferred server, so workers spread), `poll_ms` (acquire poll interval, default 20).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.kv import KeyValue

from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate
from fencecheck.workloads.clients.polling import poll

log = logging.getLogger(__name__)

T = TypeVar("T")

# JSStreamWrongLastSequenceErrF and its constant form: the expected revision did not match.
_WRONG_LAST = frozenset({10071, 10164})


@dataclass(frozen=True, slots=True)
class NatsHandle:
    """Grant.handle of a NATS KV grant: the key's revision we wrote last, and our value."""

    revision: int
    owner: bytes


class _Refused(Exception):
    """No connection could be made: nothing was sent."""


class _Loop:
    """An asyncio event loop in a daemon thread; `run` waits for one coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="nats-loop",
                                       daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5.0)
        if not self.thread.is_alive():
            self.loop.close()


class NatsKvClient:
    """LockClient over a JetStream KV bucket. See the module docstring."""

    name = "nats"

    def __init__(self, options: Mapping[str, Any]) -> None:
        endpoints = list(options["endpoints"])
        if not endpoints:
            raise ValueError("nats: no endpoints")
        start = int(options.get("worker", 0)) % len(endpoints)
        self.endpoints = endpoints[start:] + endpoints[:start]
        self.op_timeout_s = float(options.get("op_timeout_s", 2.0))
        self.bucket = str(options.get("bucket", "fc-locks"))
        self.bucket_ttl_ms = int(options.get("bucket_ttl_ms", 0)) or None
        self.poll_s = float(options.get("poll_ms", 20)) / 1000.0
        self.owner_prefix = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._loop = _Loop()
        self._nc: Client | None = None
        self._kv: KeyValue | None = None

    # -- connection

    async def _connect(self) -> KeyValue:
        if self._nc is not None and self._nc.is_connected and self._kv is not None:
            return self._kv
        await self._drop()

        async def quiet(e: Exception) -> None:
            log.debug("nats: %s", e)

        errors: list[str] = []
        for ep in list(self.endpoints):
            try:
                nc = await asyncio.wait_for(
                    nats.connect(servers=[f"nats://{ep}"], allow_reconnect=False,
                                 connect_timeout=max(1, int(self.op_timeout_s)),
                                 max_reconnect_attempts=1, reconnect_time_wait=0,
                                 error_cb=quiet),
                    self.op_timeout_s)
            except (TimeoutError, OSError, nats.errors.Error) as e:
                errors.append(f"{ep}: {type(e).__name__}: {e}")
                self.endpoints = self.endpoints[1:] + self.endpoints[:1]
                continue
            js = nc.jetstream(timeout=self.op_timeout_s)
            # Bound without the stream-info round trip of js.key_value(): one less request
            # that could fail, and the bucket's layout is fixed by the service.
            self._nc = nc
            self._kv = KeyValue(name=self.bucket, stream=f"KV_{self.bucket}",
                                pre=f"$KV.{self.bucket}.", js=js, direct=True)
            return self._kv
        raise _Refused("; ".join(errors))

    async def _drop(self) -> None:
        nc, self._nc, self._kv = self._nc, None, None
        if nc is not None and not nc.is_closed:
            try:
                await asyncio.wait_for(nc.close(), 1.0)
            except (TimeoutError, nats.errors.Error, OSError) as e:
                log.debug("nats: close: %s", e)

    def _write(self, what: str, op: str, key: str, value: bytes, last: int | None) -> int:
        """One KV write (`create`, `update` or `delete`) and its revision; maps errors as the
        module docstring says. A wrong last revision raises DefiniteFailure(`what`)."""

        async def go() -> int:
            kv = await self._connect()
            if op == "create":
                return await kv.create(key, value)
            if op == "update":
                return await kv.update(key, value, last=last)
            await kv.delete(key, last=last)
            return 0

        try:
            # Room for a connect to each server in turn and create's three requests: the
            # client's own timeouts end the call first, this bound only catches a stuck loop.
            return self._loop.run(go(), self.op_timeout_s * (len(self.endpoints) + 3) + 1.0)
        except _Refused as e:
            raise DefiniteFailure("connection-refused", f"{op}: {e}") from None
        except nats.js.errors.InvalidKeyError:
            raise DefiniteFailure("bad-key", f"{key!r} is not a valid KV key") from None
        except nats.js.errors.KeyWrongLastSequenceError as e:
            raise DefiniteFailure(what, f"{op} {key}: {e}") from None
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError) as e:
            # create's follow-up read after a refused write: the key came or went meanwhile
            raise DefiniteFailure(what, f"{op} {key}: {type(e).__name__}") from None
        except nats.js.errors.APIError as e:
            if e.err_code in _WRONG_LAST:
                raise DefiniteFailure(what, f"{op} {key}: {e}") from None
            raise DefiniteFailure("refused", f"{op} {key}: {e}") from None
        except nats.js.errors.NoStreamResponseError:
            # A 503 "no responders" status: no server had the stream's subject (a stream leader
            # election), so the message reached no one.
            raise DefiniteFailure("unavailable", f"{op} {key}: no responders") from None
        except (TimeoutError, nats.errors.TimeoutError, concurrent.futures.TimeoutError) as e:
            self._rotate()
            raise Indeterminate("timeout", f"{op} {key}: {type(e).__name__}") from None
        except (nats.errors.Error, OSError) as e:
            self._rotate()
            raise Indeterminate("connection-lost", f"{op} {key}: {type(e).__name__}: {e}") \
                from None

    def _rotate(self) -> None:
        """After an uncertain outcome: reconnect to the next server at the next operation (the
        one that did not answer may be paused or cut off)."""
        self.endpoints = self.endpoints[1:] + self.endpoints[:1]
        try:
            self._loop.run(self._drop(), 2.0)
        except concurrent.futures.TimeoutError:
            self._nc, self._kv = None, None

    # -- LockClient

    def _check_lease(self, lease_ms: int) -> None:
        if self.bucket_ttl_ms is not None and lease_ms > self.bucket_ttl_ms:
            raise DefiniteFailure("lease-too-long",
                                  f"{lease_ms} ms > the bucket's TTL {self.bucket_ttl_ms} ms")

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        self._check_lease(lease_ms)
        owner = f"{self.owner_prefix}-{uuid.uuid4().hex[:8]}".encode()

        last: list[DefiniteFailure] = []

        def attempt() -> int | None:
            try:
                return self._write("held", "create", lock, owner, None)
            except DefiniteFailure as e:
                # Held, or surely not written (no stream leader, no server): try again until the
                # acquire's deadline, as for a held lock.
                if e.error in ("held", "unavailable", "connection-refused"):
                    last[:] = [e]
                    return None
                raise

        try:
            revision, sent_ns = poll(lock, timeout_s, attempt, self.poll_s)
        except DefiniteFailure as e:
            if last and last[0].error != "held":
                raise last[0] from None  # why the deadline passed: the service, not a holder
            raise e from None
        return Grant(lock, revision, lease_ms, NatsHandle(revision, owner), attempt_ns=sent_ns)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        handle = nats_handle(grant)
        self._check_lease(lease_ms)
        revision = self._write("lease-expired", "update", grant.lock, handle.owner,
                               handle.revision)
        return Grant(grant.lock, grant.token, lease_ms, NatsHandle(revision, handle.owner),
                     attempt_ns=grant.attempt_ns)

    def release(self, grant: Grant) -> Mapping[str, Any] | None:
        handle = nats_handle(grant)
        self._write("lease-expired", "delete", grant.lock, b"", handle.revision)
        return None

    def close(self) -> None:
        try:
            self._loop.run(self._drop(), 3.0)
        except concurrent.futures.TimeoutError:
            log.debug("nats: close timed out")
        self._loop.stop()


def nats_handle(grant: Grant) -> NatsHandle:
    """The grant's NatsHandle; DefiniteFailure("not-owner") if it is not a NATS grant."""
    if not isinstance(grant.handle, NatsHandle):
        raise DefiniteFailure("not-owner", "not a NATS KV grant")
    return grant.handle
