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
    scenario,
)
from fencecheck.descriptors.redis import REDIS_NEEDS, REDIS_VERSION, redisson_clients

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
            comparison=(
                scenario("pause", "must-find"),
            ),
        ),
        # Redisson's RLock and RFencedLock through the sentinels, built by `fencecheck build`
        *redisson_clients(", through the sentinels", "INCR on the primary"),
    ),
    token="yes",
    nodes=3,
    capabilities=frozenset({PAUSE, KILL, CLOCK, FAILOVER}),
    service_args=frozenset({"persistence", "env_for", "ledger"}),
    options="fencecheck.clusters.services.redis:RedisOptions",
    needs=(*REDIS_NEEDS, Need("redis-sentinel", binary="redis-sentinel", package="redis-sentinel")),
    version_argv=REDIS_VERSION,
    python_libs=("redis",),
)
