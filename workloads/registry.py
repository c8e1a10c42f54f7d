"""Names of lock clients and resources, and the factories that build them from options.

Every client and resource class takes one argument, `options: Mapping[str, Any]`; the common keys
are `endpoints` (list of "host:port") and `op_timeout_s`, the rest are backend-specific. Imports
are lazy (a "module:Class" string), so naming a backend never imports the others' libraries.
A name containing ":" is a user plugin, itself a "module:Class" string.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any, cast

from fencecheck.workloads.base import LockClient, Resource, WorkloadError

log = logging.getLogger(__name__)

CLIENTS: dict[str, str] = {
    "redis-setnx": "fencecheck.workloads.redis_clients:SetnxClient",
    "redis-py": "fencecheck.workloads.redis_clients:RedisPyClient",
    "redlock-ref": "fencecheck.workloads.redlock_clients:RedlockRefClient",
    "redlock": "fencecheck.workloads.redlock_clients:PotteryRedlockClient",
    "redis-sentinel": "fencecheck.workloads.sentinel_client:SentinelSetnxClient",
    "etcd": "fencecheck.workloads.etcd_client:EtcdClient",
    "zookeeper": "fencecheck.workloads.zk_client:ZkClient",
    # leader elections (the `leader` workload)
    "etcd-election": "fencecheck.workloads.leader_clients:EtcdElectionClient",
    "zookeeper-election": "fencecheck.workloads.leader_clients:ZkElectionClient",
    "redis-lease": "fencecheck.workloads.leader_clients:RedisLeaseClient",
}

RESOURCES: dict[str, str] = {
    "store": "fencecheck.workloads.store:StoreResource",
    "postgres": "fencecheck.workloads.pg_resource:PgResource",
    "etcd": "fencecheck.workloads.etcd_resource:EtcdResource",
}


def load_class(spec: str) -> type[Any]:
    """Import "module:Class". Raises WorkloadError with the reason if it cannot."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise WorkloadError(f"{spec!r} is not of the form module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise WorkloadError(f"cannot import {module_name!r} for {spec!r}: {e}") from e
    try:
        cls = getattr(module, attr)
    except AttributeError:
        raise WorkloadError(f"module {module_name!r} has no {attr!r}") from None
    if not isinstance(cls, type):
        raise WorkloadError(f"{spec!r} is not a class")
    return cls


def _resolve(kind: str, table: Mapping[str, str], name: str) -> type[Any]:
    if ":" in name:
        return load_class(name)
    try:
        spec = table[name]
    except KeyError:
        known = ", ".join(sorted(table))
        raise WorkloadError(
            f"unknown {kind} {name!r}; known: {known} (or module:Class for your own)"
        ) from None
    return load_class(spec)


def make_client(name: str, options: Mapping[str, Any]) -> LockClient:
    """Build the lock client called `name` (or a plugin "module:Class") from `options`."""
    cls = _resolve("client", CLIENTS, name)
    log.debug("client %s -> %s.%s", name, cls.__module__, cls.__qualname__)
    return cast(LockClient, cls(options))


def make_resource(name: str, options: Mapping[str, Any]) -> Resource:
    """Build the resource called `name` (or a plugin "module:Class") from `options`."""
    cls = _resolve("resource", RESOURCES, name)
    log.debug("resource %s -> %s.%s", name, cls.__module__, cls.__qualname__)
    return cast(Resource, cls(options))
