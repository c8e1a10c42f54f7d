"""`EtcdClient`: etcd's v3 lock service through its JSON gateway (httpx), and the small HTTP
helper it shares with the etcd resource (workloads/resources/etcd.py).

A grant is a lease plus a lock key. acquire = `/v3/lease/grant` (TTL = lease_ms rounded up to
whole seconds, at least 1; etcd itself raises TTLs below its floor, 2 s with our 1 s election
timeout, so the real lease is never shorter than asked) then `/v3/lock/lock` with that lease,
which blocks until the key `<prefix><lease-hex>` is the oldest under the lock's prefix. While
blocked there the client keeps the lease alive from a thread of its own (as etcd's clientv3
session does; the lock service itself does not, see `_keeping_alive`). The
token is that key's create revision (a range on the key): revisions grow with every write to
the cluster, and a later grant's key was created later, so tokens strictly increase.
renew = `/v3/lease/keepalive` (TTL absent or 0 in the answer = the lease is gone).
release = `/v3/lease/revoke`, which deletes the key atomically with the lease; `/v3/lock/unlock`
is a plain delete that cannot tell whether the key was still ours, while a revoke answers 404
exactly when the lease (and so the lock) had already expired.

No hidden retries: httpx makes one attempt per request. The one thing tried twice is the
*connection*: a refused or timed-out connect sent nothing, so the next endpoint is tried within
the same operation. Errors map to the history as follows: nothing sent, or a gRPC error that
surely changed nothing (lease not found, invalid argument) -> DefiniteFailure; a timeout, a
lost connection or an "unavailable"-kind error -> Indeterminate.

An acquire that times out while blocked in the lock API is Indeterminate unless it can prove
it was never granted: before asking, it reads the lock's current owner (the oldest key under the
prefix); after the timeout it revokes its lease (so its key is gone and can never be created
again) and reads the owner again. If the same owner key (same create revision) was present both
times, our key, created in between with a higher revision, was never the oldest: DefiniteFailure
("timeout"). Otherwise (no owner before, a different one after, a failed revoke): Indeterminate.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import math
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate

log = logging.getLogger(__name__)

LOCK_NAMESPACE = "fc/lock/"

# gRPC status codes that mean the request surely changed nothing.
_DEFINITE_CODES = frozenset({3, 5, 7, 9, 11, 16})  # invalid arg, not found, permission, ...


def lock_name(lock: str) -> str:
    """The name given to `/v3/lock/lock`; the server's keys are `<name>/<lease-hex>`."""
    return LOCK_NAMESPACE + lock


def lock_prefix(lock: str) -> str:
    return lock_name(lock) + "/"


def b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def unb64(s: str) -> bytes:
    return base64.b64decode(s)


def prefix_end(prefix: str) -> str:
    """The range end that selects every key starting with prefix (last byte + 1)."""
    raw = prefix.encode()
    return b64(raw[:-1] + bytes([raw[-1] + 1]))


class Refused(Exception):
    """Nothing was sent: connecting failed on every endpoint."""


class Uncertain(Exception):
    """The request may or may not have taken effect."""


class GrpcError(Exception):
    """The gateway answered with a gRPC error."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(f"{status} code {code}: {message}")
        self.code = code
        self.message = message

    @property
    def definite(self) -> bool:
        return self.code in _DEFINITE_CODES or "lease not found" in self.message


class Gateway:
    """One httpx client over etcd's JSON gateway, with a preferred endpoint."""

    def __init__(self, endpoints: list[str], prefer: int, op_timeout_s: float) -> None:
        if not endpoints:
            raise ValueError("etcd: no endpoints")
        start = prefer % len(endpoints)
        self.endpoints = endpoints[start:] + endpoints[:start]
        self.op_timeout_s = op_timeout_s
        # retries=0 is httpx's default; spelled out because a hidden retry would be a lie.
        self.http = httpx.Client(transport=httpx.HTTPTransport(retries=0))

    def post(self, path: str, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        """POST to the first endpoint that accepts a connection; see the module docstring."""
        timeout = httpx.Timeout(timeout_s or self.op_timeout_s, connect=self.op_timeout_s)
        errors: list[str] = []
        for i, ep in enumerate(self.endpoints):
            try:
                resp = self.http.post(f"http://{ep}{path}", json=body, timeout=timeout)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                errors.append(f"{ep}: {e}")
                continue
            except httpx.HTTPError as e:
                raise Uncertain(f"{ep}{path}: {type(e).__name__}: {e}") from None
            if i:  # stick to the endpoint that answered
                self.endpoints = self.endpoints[i:] + self.endpoints[:i]
            try:
                data = resp.json()
            except ValueError:
                raise Uncertain(f"{ep}{path}: {resp.status_code} not JSON") from None
            if resp.status_code != 200:
                raise GrpcError(resp.status_code, int(data.get("code", 2)), data.get("message", ""))
            err = data.get("error") if isinstance(data, dict) else None
            if isinstance(err, dict):  # a streaming call (keepalive) reports errors in a 200
                code = int(err.get("grpc_code") or err.get("code") or 2)
                raise GrpcError(resp.status_code, code, str(err.get("message", "")))
            return data
        raise Refused("; ".join(errors))

    def range(self, key: str, end: str | None = None, **extra: Any) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"key": b64(key), **extra}
        if end is not None:
            body["range_end"] = end
        kvs: list[dict[str, Any]] = self.post("/v3/kv/range", body).get("kvs", [])
        return kvs

    def close(self) -> None:
        self.http.close()


@dataclass(frozen=True, slots=True)
class EtcdHandle:
    """Grant.handle of an etcd grant."""

    lease_id: str
    key: str  # the lock key, decoded
    ttl_s: int


def gateway_failure(e: Exception, what: str) -> Exception:
    """Map a gateway exception to the history's fail/info."""
    if isinstance(e, Refused):
        return DefiniteFailure("connection-refused", f"{what}: {e}")
    if isinstance(e, GrpcError) and e.definite:
        return DefiniteFailure("lease-not-found" if "lease" in e.message else "refused", str(e))
    return Indeterminate("timeout" if "Timeout" in str(e) else "unknown", f"{what}: {e}")


class EtcdClient:
    """LockClient over etcd's lock API. Options: `endpoints` (["host:port"]), `op_timeout_s`,
    optional `worker` (index of the preferred endpoint, so workers spread over members)."""

    name = "etcd"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.op_timeout_s = float(options.get("op_timeout_s", 2.0))
        self.gw = Gateway(
            list(options["endpoints"]), int(options.get("worker", 0)), self.op_timeout_s
        )

    def _prefix(self, lock: str) -> str:
        """The prefix of the contenders' keys (the server's keys are `<prefix><lease-hex>`)."""
        return lock_prefix(lock)

    def _owner(self, lock: str) -> tuple[str, str] | None:
        """The lock's current owner key and its create revision (oldest key under the prefix):
        what proves that a timed-out acquire was never granted (`_unsure_acquire`)."""
        prefix = self._prefix(lock)
        kvs = self.gw.range(
            prefix, prefix_end(prefix), sort_order="ASCEND", sort_target="CREATE", limit=1
        )
        return (kvs[0]["key"], str(kvs[0]["create_revision"])) if kvs else None

    def _revoke(self, lease_id: str) -> bool:
        """Revoke; True if the lease is surely gone afterwards (revoked now or already gone)."""
        try:
            self.gw.post("/v3/lease/revoke", {"ID": lease_id})
        except GrpcError as e:
            return e.code == 5
        except (Refused, Uncertain):
            return False
        return True

    # What acquire says in its outcomes: "locking" / "lock" / "granted" here; the election
    # client changes these and where it waits (`_wait_granted`), nothing else.
    verbs = ("locking", "lock", "granted")

    def _wait_granted(self, lock: str, lease_id: str, timeout_s: float) -> str:
        """Block until the lock is ours; returns our (decoded) key."""
        resp = self.gw.post(
            "/v3/lock/lock", {"name": b64(lock_name(lock)), "lease": lease_id}, timeout_s=timeout_s
        )
        return unb64(resp["key"]).decode()

    def acquire(self, lock: str, lease_ms: int, timeout_s: float) -> Grant:
        ttl_s = max(1, math.ceil(lease_ms / 1000))
        waiting, call, granted = self.verbs
        try:
            before = self._owner(lock)
            lease = self.gw.post("/v3/lease/grant", {"TTL": ttl_s})
        except (Refused, Uncertain, GrpcError) as e:
            # Nothing was locked yet; a lease granted unseen expires on its own.
            detail = f"before {waiting}: {e}"
            code = "connection-refused" if isinstance(e, Refused) else "unavailable"
            raise DefiniteFailure(code, detail) from None
        lease_id = str(lease["ID"])
        granted_ttl_s = int(lease.get("TTL", ttl_s))
        try:
            with self._keeping_alive(lease_id, granted_ttl_s):
                key = self._wait_granted(lock, lease_id, timeout_s)
        except (Refused, Uncertain, GrpcError) as e:
            if isinstance(e, Refused) or (isinstance(e, GrpcError) and e.definite):
                self._revoke(lease_id)
                raise gateway_failure(e, call) from None
            raise self._unsure_acquire(lock, lease_id, before, e) from None
        try:
            kvs = self.gw.range(key)
        except (Refused, Uncertain, GrpcError) as e:
            self._revoke(lease_id)
            raise Indeterminate("token-unknown", f"{granted}, then range failed: {e}") from None
        # An answer that came after our lease ran out names a key that no longer exists.
        if not kvs:
            self._revoke(lease_id)
            raise Indeterminate("lock-lost", f"{granted}, but the key was gone before its token")
        token = int(kvs[0]["create_revision"])
        return Grant(lock, token, lease_ms, EtcdHandle(lease_id, key, granted_ttl_s))

    @contextlib.contextmanager
    def _keeping_alive(self, lease_id: str, ttl_s: int) -> Iterator[None]:
        """Keep the lease alive while blocked in the lock call (what etcd's clientv3 session
        does). etcd's lock service does not: a waiter whose lease runs out is still answered
        "granted" once the holder leaves, with a key that no longer exists (seen on 3.4)."""
        stop = threading.Event()

        def beat() -> None:
            with httpx.Client(transport=httpx.HTTPTransport(retries=0)) as http:
                while not stop.wait(max(0.2, ttl_s / 3)):
                    try:
                        ep = self.gw.endpoints[0]
                        http.post(f"http://{ep}/v3/lease/keepalive", json={"ID": lease_id},
                                  timeout=self.op_timeout_s)
                    except httpx.HTTPError as e:
                        log.debug("etcd: keepalive of %s while waiting: %s", lease_id, e)

        t = threading.Thread(target=beat, name=f"keepalive-{lease_id}", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join(self.op_timeout_s + 1.0)

    def _unsure_acquire(
        self, lock: str, lease_id: str, before: tuple[str, str] | None, e: Exception
    ) -> Exception:
        if not self._revoke(lease_id):
            return Indeterminate("timeout", f"lock: {e}; revoke failed")
        try:
            after = self._owner(lock)
        except (Refused, Uncertain, GrpcError) as e2:
            return Indeterminate("timeout", f"lock: {e}; owner unknown: {e2}")
        if before is not None and after == before:
            return DefiniteFailure("timeout", f"held by {unb64(before[0]).decode()} throughout")
        return Indeterminate("timeout", f"lock: {e}")

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        handle = etcd_handle(grant)
        if lease_ms > handle.ttl_s * 1000:
            # A keepalive restores the TTL granted at acquire; it cannot lengthen the lease.
            raise DefiniteFailure("lease-too-long", f"{lease_ms} ms > TTL {handle.ttl_s} s")
        try:
            data = self.gw.post("/v3/lease/keepalive", {"ID": handle.lease_id})
        except (Refused, Uncertain, GrpcError) as e:
            raise gateway_failure(e, "keepalive") from None
        if int(data.get("result", {}).get("TTL", 0)) <= 0:
            raise DefiniteFailure("lease-expired", f"lease {handle.lease_id}")
        return Grant(grant.lock, grant.token, lease_ms, handle)

    def release(self, grant: Grant) -> Mapping[str, Any] | None:
        handle = etcd_handle(grant)
        try:
            self.gw.post("/v3/lease/revoke", {"ID": handle.lease_id})
        except GrpcError as e:
            if e.code == 5:
                raise DefiniteFailure("lease-expired", f"lease {handle.lease_id}") from None
            raise gateway_failure(e, "revoke") from None
        except (Refused, Uncertain) as e:
            raise gateway_failure(e, "revoke") from None
        return None

    def close(self) -> None:
        self.gw.close()


def etcd_handle(grant: Grant) -> EtcdHandle:
    """The grant's EtcdHandle; DefiniteFailure("not-owner") if it is not an etcd grant."""
    if not isinstance(grant.handle, EtcdHandle):
        raise DefiniteFailure("not-owner", "not an etcd grant")
    return grant.handle
