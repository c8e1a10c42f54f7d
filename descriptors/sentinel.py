"""The `redis-sentinel` backend: a primary, replicas and sentinels that fail over."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    CLOCK,
    FAILOVER,
    KILL,
    PAUSE,
    BackendDescriptor,
    ClientDescriptor,
    Need,
)
from fencecheck.descriptors.redis import REDIS_NEEDS, REDIS_VERSION, REDISSON_FENCED, REDISSON_LOCK

BACKEND = BackendDescriptor(
    name="redis-sentinel",
    summary="a redis primary with replicas and sentinels (3 + 3)",
    service="fencecheck.clusters.services.sentinel:SentinelService",
    clients=(
        ClientDescriptor(
            "redis-sentinel",
            "fencecheck.workloads.clients.sentinel:SentinelSetnxClient",
            library="SET NX on the Sentinel primary",
            dist="redis",
            token="INCR on the primary (lost with the primary's unreplicated writes)",
        ),
        # Redisson's RLock and RFencedLock through the sentinels, built by build-clients.sh
        ClientDescriptor(
            "redisson",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="Redisson `RLock` (watchdog), through the sentinels",
            program=REDISSON_LOCK,
            token=None,
            workloads=frozenset({"lock"}),
            weight=1,
        ),
        ClientDescriptor(
            "redisson-fenced",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="Redisson `RFencedLock` (its token), through the sentinels",
            program=REDISSON_FENCED,
            token="RFencedLock's fencing token (INCR on the primary)",
            workloads=frozenset({"lock"}),
            weight=1,
        ),
    ),
    token="yes",
    nodes=3,
    capabilities=frozenset({PAUSE, KILL, CLOCK, FAILOVER}),
    service_args=frozenset({"persistence", "env_for", "ledger"}),
    needs=(*REDIS_NEEDS, Need("redis-sentinel", binary="redis-sentinel", package="redis-sentinel")),
    version_argv=REDIS_VERSION,
    python_libs=("redis",),
)
