"""`EtcdResource`: integer values in etcd, written only while the writer's lock key exists.

As Jepsen's lock-etcd-set does, every fenced request is one transaction guarded by the lock:
`compare create_revision(<lock key>) == token` then put (write) or range (read). The lock key is
the one the etcd client's grant created (`fc/lock/<lock>/<lease-hex>`, see
workloads/clients/etcd.py); the resource finds it from the token alone with a range over the
lock's prefix filtered to that create revision, and caches it. When the key is gone (the lease
expired or was revoked, so the lock passed on) the compare fails and the request is refused
with StaleToken. This is fencing by *liveness of the holder's grant* rather than by a highest
token seen: a stale holder is refused because its key is gone, whatever its number.

With `fencing: false` reads and writes are plain range and put. A read with token None (the
final observer read) is always a plain range. A fenced write with token None is refused
(StaleToken): there is no grant to check it against.

Values live under `fc/data/<key>` as decimal strings; a missing key reads as None.
Options: `endpoints`, `fencing` (default true), `op_timeout_s`, optional `worker`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fencecheck.workloads.base import DefiniteFailure, Indeterminate, StaleToken, WorkloadError
from fencecheck.workloads.clients.etcd import (
    Gateway,
    GrpcError,
    Refused,
    Uncertain,
    b64,
    lock_prefix,
    prefix_end,
    unb64,
)

log = logging.getLogger(__name__)

DATA_NAMESPACE = "fc/data/"


def fencing_option(options: Mapping[str, Any]) -> bool:
    """`fencing`: a bool, as the worker configuration carries it (the CLI's "on"/"off" become a
    bool in the run's configuration, before any process starts). Absent means on, as for the
    fenced store."""
    v = options.get("fencing", True)
    if not isinstance(v, bool):
        raise WorkloadError(f"resource option fencing: expected true or false, got {v!r}")
    return v


def _failure(e: Exception, what: str) -> Exception:
    if isinstance(e, Refused):
        return DefiniteFailure("connection-refused", f"{what}: {e}")
    if isinstance(e, GrpcError) and e.definite:
        return DefiniteFailure("refused", f"{what}: {e}")
    return Indeterminate("timeout" if "Timeout" in str(e) else "unknown", f"{what}: {e}")


class EtcdResource:
    """Resource in etcd guarded by the etcd lock's key. See the module docstring."""

    name = "etcd"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.fencing = fencing_option(options)
        self.gw = Gateway(
            list(options["endpoints"]),
            int(options.get("worker", 0)),
            float(options.get("op_timeout_s", 2.0)),
        )
        self._lock_keys: dict[tuple[str, int], str] = {}

    def _lock_key(self, lock: str, token: int) -> str:
        """The lock key whose create revision is token; StaleToken if there is none now."""
        cached = self._lock_keys.get((lock, token))
        if cached is not None:
            return cached
        pfx = lock_prefix(lock)
        kvs = self.gw.range(
            pfx,
            prefix_end(pfx),
            min_create_revision=token,
            max_create_revision=token,
            keys_only=True,
        )
        if not kvs:
            raise StaleToken(f"no lock key of {lock} with create revision {token}")
        key = unb64(kvs[0]["key"]).decode()
        self._lock_keys = {(lock, token): key}  # only the current grant is worth keeping
        return key

    def _guarded(self, lock: str, token: int, op: dict[str, Any]) -> dict[str, Any]:
        key = self._lock_key(lock, token)
        body = {
            "compare": [
                {
                    "key": b64(key),
                    "target": "CREATE",
                    "result": "EQUAL",
                    "create_revision": str(token),
                }
            ],
            "success": [op],
        }
        resp: dict[str, Any] = self.gw.post("/v3/kv/txn", body)
        if not resp.get("succeeded", False):
            raise StaleToken(f"lock key {key} with revision {token} is gone")
        out: dict[str, Any] = resp.get("responses", [{}])[0]
        return out

    def read(self, key: str, token: int | None, lock: str) -> int | None:
        k = DATA_NAMESPACE + key
        try:
            if not self.fencing or token is None:
                kvs = self.gw.range(k)
            else:
                resp = self._guarded(lock, token, {"request_range": {"key": b64(k)}})
                kvs = resp.get("response_range", {}).get("kvs", [])
        except (Refused, Uncertain, GrpcError) as e:
            raise _failure(e, "read") from None
        return int(unb64(kvs[0]["value"])) if kvs and kvs[0].get("value") else None

    def write(self, key: str, value: int, token: int | None, lock: str) -> None:
        k = DATA_NAMESPACE + key
        put = {"key": b64(k), "value": b64(str(value))}
        try:
            if not self.fencing:
                self.gw.post("/v3/kv/put", put)
                return
            if token is None:
                raise StaleToken("a fenced write needs a token")
            self._guarded(lock, token, {"request_put": put})
        except (Refused, Uncertain, GrpcError) as e:
            raise _failure(e, "write") from None

    def close(self) -> None:
        self.gw.close()
