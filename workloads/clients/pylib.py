"""The Python lock libraries people use, as lock clients, each used the way its README shows:
`PythonRedisLockClient` ("python-redis-lock": `redis_lock.Lock` with `auto_renewal`, on the
`redis` backend), `AioredlockClient` ("aioredlock": Redlock over the `redlock` backend's
independent masters, with its watchdog), `Etcd3Client` ("etcd3": python-etcd3's `Lock`, on the
`etcd` backend, over gRPC). None of them hands out a fencing token.

Two of them renew behind the caller's back: python-redis-lock's daemon thread extends the key
every 2/3 of its expiry, aioredlock's watchdog task every 0.6 of the lease. Those renewals are not
operations in the history (they would interleave with the worker's own operations), so the
checker sees a grant surely held only for the lease after its acquire; the real hold is longer.
That can only make a check quieter, never louder, which is the direction the verdict may err in.
A stopped process stops its renewer too, which is the case these libraries get wrong: after the
pause the main thread carries on writing while the renewer finds the lock gone. Each extend the
renewer made is kept as evidence (workloads/evidence.py) in the value of the grant's release
("renewals": time, outcome; with "renewer" and "expire_ms"), which checker/steps/renewals.py
reads to say when the renewer last kept the lock.

No hidden retries: each library's own retry knob is set to one attempt, and acquire polls (each
poll one attempt) until its timeout. Errors: a definite refusal (held, not the owner) is
DefiniteFailure; a timeout or a lost connection is Indeterminate.

Options: `endpoints`, `op_timeout_s`, `poll_ms` (default 20), `key_prefix` (default "fc:").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import threading
import time
from collections.abc import Coroutine, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from fencecheck.workloads import options as opts
from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate
from fencecheck.workloads.clients.polling import poll
from fencecheck.workloads.clients.redis import RedisConn
from fencecheck.workloads.evidence import EVIDENCE

T = TypeVar("T")


def _poll_s(options: Mapping[str, Any]) -> float:
    return float(options.get("poll_ms", 20)) / 1000.0


class PythonRedisLockClient:
    """python-redis-lock's `Lock(expire=..., auto_renewal=True)`. Its expiry is whole seconds,
    rounded up from the lease so that the key never lives shorter than the history says."""

    name = "python-redis-lock"

    def __init__(self, options: Mapping[str, Any]) -> None:
        import redis_lock

        self._lib = redis_lock
        self._redis = RedisConn.from_options(options)
        redis_lock.Lock.register_scripts(self._redis.client)
        self.poll_s = _poll_s(options)
        self.prefix = str(options.get("key_prefix", "fc:"))

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        handle = _recording_lock(self._lib)(self._redis.client, f"{self.prefix}{lock}",
                                            expire=max(1, math.ceil(lease_ms / 1000)),
                                            auto_renewal=True)
        # blocking=False: one SET NX per call. The library's blocking wait is a BLPOP that
        # outlives the socket timeout, which would turn every wait into an `info`.
        _, sent = poll(lock, timeout_s,
                       lambda: self._redis.call(lambda: handle.acquire(blocking=False)) or None,
                       self.poll_s)
        return Grant(lock, None, lease_ms, handle, attempt_ns=sent)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        handle = grant.handle
        try:
            self._redis.call(lambda: handle.extend(max(1, math.ceil(lease_ms / 1000))))
        except self._lib.NotAcquired as e:
            raise DefiniteFailure("not-owner", str(e)) from None
        return Grant(grant.lock, grant.token, lease_ms, handle)

    def release(self, grant: Grant) -> Mapping[str, Any]:
        handle = grant.handle
        evidence = _renewals("renewal thread", handle.renewals, handle._expire * 1000)
        try:
            self._redis.call(handle.release)
        except self._lib.NotAcquired as e:
            raise DefiniteFailure("not-owner", str(e), evidence) from None
        return {EVIDENCE: evidence}

    def close(self) -> None:
        self._redis.close()


def _renewals(renewer: str, extends: list[dict[str, Any]], expire_ms: float) -> dict[str, Any]:
    return {"renewer": renewer, "expire_ms": int(expire_ms), "renewals": list(extends)}


@functools.cache
def _recording_lock(lib: Any) -> Any:
    """python-redis-lock's Lock keeping every extend its renewal thread made (its evidence).
    (The library registers its scripts once per process, on the class first used: the
    client registers them on Lock itself first, so that this subclass inherits them.)"""

    class RecordingLock(lib.Lock):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.renewals: list[dict[str, Any]] = []
            super().__init__(*args, **kwargs)

        def extend(self, expire: Any = None) -> Any:
            if threading.current_thread() is not self._lock_renewal_thread:
                return super().extend(expire=expire)  # the caller's renew: in the history
            at = time.monotonic_ns()
            try:
                out = super().extend(expire=expire)
            except Exception as e:
                self.renewals.append({"mono_ns": at, "ok": False, "error": type(e).__name__})
                raise
            self.renewals.append({"mono_ns": at, "ok": True})
            return out

    return RecordingLock


class _Loop:
    """An asyncio loop on a daemon thread, so that a library's background tasks (aioredlock's
    watchdog) run while the worker thinks and writes, as they would in an async service."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout_s)
        except FutureTimeout:
            fut.cancel()
            raise Indeterminate("timeout", f"no answer in {timeout_s} s") from None

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(2.0)


class AioredlockClient:
    """aioredlock's `Aioredlock.lock(resource)` (lock_timeout None: the watchdog extends it),
    with `internal_lock_timeout` = the lease and `retry_count` = 1."""

    name = "aioredlock"

    def __init__(self, options: Mapping[str, Any]) -> None:
        import aioredlock

        self._lib = aioredlock
        self.op_timeout_s = opts.op_timeout_s(options)
        self.poll_s = _poll_s(options)
        self.prefix = str(options.get("key_prefix", "fc:"))
        self.endpoints = [{"host": h, "port": p} for h, p in opts.endpoints(options)]
        self._loop = _Loop()
        self._managers: dict[int, Any] = {}  # lease_ms -> Aioredlock (the lease is per manager)

    def _manager(self, lease_ms: int) -> Any:
        if lease_ms not in self._managers:
            self._managers[lease_ms] = _recording_manager(self._lib)(
                self.endpoints, retry_count=1, internal_lock_timeout=lease_ms / 1000.0)
        return self._managers[lease_ms]

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return self._loop.run(coro, self.op_timeout_s)
        except self._lib.LockAcquiringError as e:
            raise DefiniteFailure("held", str(e)) from None
        except (self._lib.LockError, OSError) as e:
            raise Indeterminate("error", f"{type(e).__name__}: {e}") from None

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        manager = self._manager(lease_ms)

        def attempt() -> Any:
            try:
                return self._run(manager.lock(f"{self.prefix}{lock}"))
            except DefiniteFailure:  # held (LockAcquiringError)
                return None

        handle, sent = poll(lock, timeout_s, attempt, self.poll_s)
        return Grant(lock, None, lease_ms, (manager, handle), attempt_ns=sent)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        manager, handle = grant.handle
        try:
            self._run(manager.extend(handle, lease_ms / 1000.0))
        except DefiniteFailure as e:
            raise DefiniteFailure("not-owner", str(e)) from None
        except RuntimeError as e:
            # "Lock is not valid": its watchdog's failed extend already unlocked it.
            raise DefiniteFailure("not-owner", str(e)) from None
        return Grant(grant.lock, grant.token, lease_ms, grant.handle)

    def release(self, grant: Grant) -> Mapping[str, Any]:
        manager, handle = grant.handle
        evidence = _renewals("watchdog", manager.renewals.pop(handle.id, []),
                             manager.internal_lock_timeout * 1000)
        try:
            self._run(manager.unlock(handle))
        except (DefiniteFailure, Indeterminate) as e:
            e.evidence = evidence
            raise
        return {EVIDENCE: evidence}

    def close(self) -> None:
        for manager in self._managers.values():
            # Closing on the way out: nothing is left to record, whatever destroy() raises.
            with contextlib.suppress(Exception):
                self._loop.run(manager.destroy(), self.op_timeout_s)
        self._loop.close()


def _recording_manager(lib: Any) -> Any:
    """aioredlock's Aioredlock keeping, per lock, every extend its watchdog made."""

    class RecordingManager(lib.Aioredlock):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.renewals: dict[str, list[dict[str, Any]]] = {}

        async def extend(self, lock: Any, lock_timeout: Any = None) -> Any:
            task = asyncio.current_task()
            if task is None or task not in self._watchdogs.values():
                return await super().extend(lock, lock_timeout)  # the caller's renew
            at = time.monotonic_ns()
            log = self.renewals.setdefault(lock.id, [])
            try:
                out = await super().extend(lock, lock_timeout)
            except Exception as e:
                log.append({"mono_ns": at, "ok": False, "error": type(e).__name__})
                raise
            log.append({"mono_ns": at, "ok": True})
            return out

    return RecordingManager


class Etcd3Client:
    """python-etcd3's `Lock(name, ttl)`: a lease of `ttl` whole seconds (rounded up from the
    lease) and a key created under it in a transaction. No automatic renewal: `renew` is
    `Lock.refresh()`. python-etcd3 0.12 (its last release) ships protobuf code generated by an
    old protoc, which today's protobuf refuses in its C implementation, so this process uses the
    pure-Python one; and see `_etcd3_attempt` for its acquire under tenacity 8 or later."""

    name = "etcd3"

    def __init__(self, options: Mapping[str, Any]) -> None:
        os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
        import etcd3

        self._lib = etcd3
        self.op_timeout_s = opts.op_timeout_s(options)
        self.poll_s = _poll_s(options)
        self.prefix = str(options.get("key_prefix", "fc-"))
        host, port = opts.endpoints(options)[0]
        self.client = etcd3.client(host=host, port=port, timeout=self.op_timeout_s)

    def _call(self, fn: Any) -> Any:
        import grpc

        try:
            return fn()
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            if code == grpc.StatusCode.UNAVAILABLE:
                raise Indeterminate("unavailable", str(code)) from None
            raise Indeterminate("error", str(code)) from None
        except self._lib.exceptions.Etcd3Exception as e:
            raise Indeterminate(type(e).__name__.lower(), str(e)) from None

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        handle = self.client.lock(f"{self.prefix}{lock}", ttl=max(1, math.ceil(lease_ms / 1000)))
        _, sent = poll(lock, timeout_s, lambda: self._call(lambda: _etcd3_attempt(handle)) or None,
                       self.poll_s)
        return Grant(lock, None, lease_ms, handle, attempt_ns=sent)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        handle = grant.handle
        # A lease keep-alive answers TTL 0 for a lease that is gone (and its key with it).
        replies = self._call(handle.refresh)
        if not replies or int(replies[0].TTL) <= 0:
            raise DefiniteFailure("not-owner", grant.lock)
        return Grant(grant.lock, grant.token, lease_ms, handle)

    def release(self, grant: Grant) -> None:
        if not self._call(grant.handle.release):
            raise DefiniteFailure("not-owner", grant.lock)

    def close(self) -> None:
        self.client.close()


def _etcd3_attempt(handle: Any) -> bool:
    """One attempt of python-etcd3's `Lock.acquire` (timeout=0). Its retry loop passes tenacity
    a wait function of the signature tenacity dropped in 8.0, so once the attempt's transaction
    has failed (the key exists: the lock is held) the wait raises this TypeError instead of
    returning False. That TypeError therefore means "held"; anything else propagates."""
    try:
        return bool(handle.acquire(timeout=0))
    except TypeError as e:
        if "delay_since_first_attempt" in str(e):
            return False
        raise
