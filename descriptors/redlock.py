"""The `redlock` backend: independent redis masters and the Redlock algorithm (no token)."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    CLOCK,
    KILL,
    PAUSE,
    UNSYNCED,
    BackendDescriptor,
    ClientDescriptor,
)
from fencecheck.descriptors.redis import REDIS_NEEDS, REDIS_VERSION

BACKEND = BackendDescriptor(
    name="redlock",
    summary="independent redis masters (5 by default)",
    service="fencecheck.clusters.services.redis:RedisService",
    clients=(
        ClientDescriptor("redlock-ref", "fencecheck.workloads.redlock_clients:RedlockRefClient",
                         token=None),
        ClientDescriptor("redlock", "fencecheck.workloads.redlock_clients:PotteryRedlockClient",
                         token=None),
        # npm redlock + ioredis, a program built by scripts/build-clients.sh
        ClientDescriptor("node-redlock", "fencecheck.workloads.third_party:NodeRedlockClient",
                         token=None, workloads=frozenset({"lock"})),
        ClientDescriptor("aioredlock", "fencecheck.workloads.pylib_clients:AioredlockClient",
                         token=None),
        # go-redsync (Redlock in Go), a program built by scripts/build-clients.sh
        ClientDescriptor("go-redsync", "fencecheck.workloads.third_party:GoRedsyncClient",
                         token=None, workloads=frozenset({"lock"})),
    ),
    token="none",
    nodes=5,
    capabilities=frozenset({PAUSE, KILL, CLOCK, UNSYNCED}),
    service_args=frozenset({"persistence", "env_for", "ledger"}),
    needs=REDIS_NEEDS,
    version_argv=REDIS_VERSION,
    python_libs=("redis", "pottery", "aioredlock"),
)
