"""Careless variants of the Redis and etcd lock clients: the same services, with the client's
disciplines skipped on purpose, to show what each discipline is for.

Clients: "redis-setnx-careless" (workloads/clients/redis.py `SetnxClient` otherwise) and
"etcd-careless" (workloads/clients/etcd.py `EtcdClient` otherwise). The option `careless` picks
the skipped steps (a comma-separated string or a list; default all three):
- `release-without-token`: release deletes the lock whoever holds it (Redis: a plain `DEL`;
  etcd: a delete of the lock's current owner key) instead of only its own.
- `renew-without-owner`: renew extends the lock whoever holds it (Redis: a plain `PEXPIRE`;
  etcd: a keepalive whose "lease gone" answer is taken as success).
- `work-after-failed-renew`: the worker keeps going after a refused renewal (the worker reads
  this from the client, see workloads/base.py `Careless`).

Every careless step records what it touched, so that the checker can name it in a violation's
explanation without guessing: a release's ok value carries `deleted_token` (the token of the
lock it deleted, null if none), a renew's carries `extended_token` (Redis) or `lease_ttl_s`
(etcd: 0 when the lease was already gone). For that, the Redis variant stores its token in the
lock's value (`<token>:<owner>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fencecheck.workloads.base import DefiniteFailure, Grant, WorkloadError
from fencecheck.workloads.clients.etcd import (
    EtcdClient,
    GrpcError,
    Refused,
    Uncertain,
    etcd_handle,
    gateway_failure,
    lock_prefix,
    prefix_end,
)
from fencecheck.workloads.clients.redis import SetnxClient

STEPS = ("release-without-token", "renew-without-owner", "work-after-failed-renew")


def careless_steps(options: Mapping[str, Any]) -> frozenset[str]:
    """The `careless` option as a set of step names (default: all)."""
    raw = options.get("careless", ",".join(STEPS))
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple):
        raise WorkloadError(f"options.careless must be a list or comma-separated string, "
                            f"not {raw!r}")
    steps = frozenset(str(s).strip() for s in items if str(s).strip())
    unknown = sorted(steps - set(STEPS))
    if unknown:
        raise WorkloadError(f"options.careless: unknown step(s) {', '.join(unknown)} "
                            f"(choose from {', '.join(STEPS)})")
    return steps


# The token goes into the lock's value, so that a careless DEL/PEXPIRE can say whose it was.
ACQUIRE_TAGGED_LUA = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], t .. ':' .. ARGV[1], 'PX', ARGV[2])
  return t
end
return false
"""
DEL_ANY_LUA = """
local v = redis.call('GET', KEYS[1])
if v then redis.call('DEL', KEYS[1]) end
return v
"""
PEXPIRE_ANY_LUA = """
local v = redis.call('GET', KEYS[1])
if v and redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 1 then return v end
return false
"""


def _token_of(value: Any) -> int | None:
    head = str(value).split(":", 1)[0]
    return int(head) if head.isdigit() else None


class CarelessSetnxClient(SetnxClient):
    """redis-setnx with the disciplines in `careless` skipped (see the module docstring)."""

    name = "redis-setnx-careless"

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self.careless = careless_steps(options)

    acquire_script = ACQUIRE_TAGGED_LUA

    def _handle(self, token: int, owner: str) -> str:
        return f"{token}:{owner}"  # the lock's value, which the owner checks compare with

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        if "renew-without-owner" not in self.careless:
            return super().renew(grant, lease_ms)
        lock_key, _ = self._keys(grant.lock)
        found = self._redis.execute("EVAL", PEXPIRE_ANY_LUA, 1, lock_key, int(lease_ms))
        if not found:
            raise DefiniteFailure("no-lock", grant.lock)
        return Grant(grant.lock, grant.token, lease_ms, grant.handle,
                     evidence={"extended_token": _token_of(found)})

    def release(self, grant: Grant) -> Mapping[str, Any] | None:
        if "release-without-token" not in self.careless:
            return super().release(grant)
        lock_key, _ = self._keys(grant.lock)
        deleted = self._redis.execute("EVAL", DEL_ANY_LUA, 1, lock_key)
        return {"deleted_token": None if deleted is None else _token_of(deleted)}


class CarelessEtcdClient(EtcdClient):
    """etcd with the disciplines in `careless` skipped (see the module docstring)."""

    name = "etcd-careless"

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self.careless = careless_steps(options)

    def renew(self, grant: Grant, lease_ms: int) -> Grant:
        if "renew-without-owner" not in self.careless:
            return super().renew(grant, lease_ms)
        handle = etcd_handle(grant)
        try:
            data = self.gw.post("/v3/lease/keepalive", {"ID": handle.lease_id})
        except (Refused, Uncertain, GrpcError) as e:
            raise gateway_failure(e, "keepalive") from None
        ttl = int(data.get("result", {}).get("TTL", 0))
        # The careless step: a TTL of 0 (the lease is gone) is not looked at.
        return Grant(grant.lock, grant.token, lease_ms, handle, evidence={"lease_ttl_s": ttl})

    def release(self, grant: Grant) -> Mapping[str, Any] | None:
        if "release-without-token" not in self.careless:
            return super().release(grant)
        # "The lock" taken to be its owner key (the oldest under the prefix), whoever's it is.
        prefix = lock_prefix(grant.lock)
        try:
            kvs = self.gw.range(prefix, prefix_end(prefix), sort_order="ASCEND",
                                sort_target="CREATE", limit=1)
            if not kvs:
                return {"deleted_token": None}
            resp = self.gw.post("/v3/kv/deleterange", {"key": kvs[0]["key"], "prev_kv": True})
        except (Refused, Uncertain, GrpcError) as e:
            raise gateway_failure(e, "delete") from None
        prev = resp.get("prev_kvs") or []
        return {"deleted_token": int(prev[0]["create_revision"]) if prev else None}
