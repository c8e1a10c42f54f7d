"""The `redis` backend: one redis-server; SET NX PX locks, a token from INCR in the same script."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    CLOCK,
    KILL,
    PAUSE,
    UNSYNCED,
    BackendDescriptor,
    ClientDescriptor,
    Need,
)

REDIS_NEEDS = (Need("redis", binary="redis-server", package="redis-server"),)
REDIS_VERSION = ("redis-server", "--version")

BACKEND = BackendDescriptor(
    name="redis",
    summary="a single redis-server",
    service="fencecheck.clusters.services.redis:RedisService",
    clients=(
        ClientDescriptor("redis-setnx", "fencecheck.workloads.redis_clients:SetnxClient",
                         token="INCR of a per-lock counter in the SET NX script"),
        ClientDescriptor("redis-py", "fencecheck.workloads.redis_clients:RedisPyClient",
                         token=None),
        ClientDescriptor("redis-lease", "fencecheck.workloads.leader_clients:RedisLeaseClient",
                         token="INCR of a per-lock counter in the SET NX script"),
        ClientDescriptor("redis-setnx-careless",
                         "fencecheck.workloads.careless:CarelessSetnxClient",
                         token="as redis-setnx (--client-opt careless=STEP,...)"),
        ClientDescriptor("python-redis-lock",
                         "fencecheck.workloads.pylib_clients:PythonRedisLockClient", token=None),
        # Redisson's RLock and RFencedLock (watchdog renewal), built by scripts/build-clients.sh
        ClientDescriptor("redisson", "fencecheck.workloads.third_party:RedissonClient",
                         token=None, workloads=frozenset({"lock"}), weight=1),
        ClientDescriptor("redisson-fenced",
                         "fencecheck.workloads.third_party:RedissonFencedClient",
                         token="RFencedLock's fencing token (INCR per grant)",
                         workloads=frozenset({"lock"}), weight=1),
        # ShedLock's Redis provider (scheduled jobs run once), built by scripts/build-clients.sh
        ClientDescriptor("shedlock", "fencecheck.workloads.third_party:ShedLockClient",
                         token=None, workloads=frozenset({"cron"}), weight=1),
    ),
    token="setnx: yes",
    nodes=1,
    capabilities=frozenset({PAUSE, KILL, CLOCK, UNSYNCED}),
    service_args=frozenset({"persistence", "env_for", "ledger"}),
    needs=REDIS_NEEDS,
    version_argv=REDIS_VERSION,
    python_libs=("redis", "python-redis-lock"),
)
