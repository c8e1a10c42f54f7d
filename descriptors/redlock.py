"""The `redlock` backend: independent redis masters and the Redlock algorithm (no token)."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    CLOCK,
    KILL,
    PAUSE,
    UNSYNCED,
    BackendDescriptor,
    ClientDescriptor,
    Program,
    scenario,
)
from fencecheck.descriptors.redis import REDIS_NEEDS, REDIS_VERSION
from fencecheck.descriptors.rows import CLOCK_JUMP, LONG_SECTION

BACKEND = BackendDescriptor(
    name="redlock",
    summary="independent redis masters (5 by default)",
    service="fencecheck.clusters.services.redis:RedisService",
    clients=(
        ClientDescriptor(
            "redlock-ref",
            "fencecheck.workloads.clients.redlock:RedlockRefClient",
            library="the published Redlock algorithm (reference client)",
            dist="redis",
            token=None,
            comparison=(
                scenario("pause", "must-find"),
                scenario("clock", "must-find", **CLOCK_JUMP),
            ),
        ),
        ClientDescriptor(
            "redlock",
            "fencecheck.workloads.clients.redlock:PotteryRedlockClient",
            library="pottery `Redlock`",
            dist="pottery",
            token=None,
            comparison=(
                scenario("pause", "must-find"),
                scenario("clock", "must-find", **CLOCK_JUMP),
            ),
        ),
        # npm redlock + ioredis, a program built by `fencecheck build`
        ClientDescriptor(
            "node-redlock",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="npm `redlock` over ioredis",
            program=Program("node", "npm", "redlock-client.js", pins=("redlock", "redlock")),
            token=None,
            workloads=frozenset({"lock"}),
        ),
        ClientDescriptor(
            "aioredlock",
            "fencecheck.workloads.clients.pylib:AioredlockClient",
            library="aioredlock `Aioredlock.lock` (watchdog)",
            dist="aioredlock",
            token=None,
            comparison=(
                scenario("none", "must-pass", fencing=None, time_limit_s=10),
                scenario("pause", "must-find"),
                scenario("partition", "must-find", **LONG_SECTION),
                scenario("clock", "must-find", **CLOCK_JUMP),
            ),
        ),
        # go-redsync (Redlock in Go), a program built by `fencecheck build`
        ClientDescriptor(
            "go-redsync",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="go-redsync `Mutex` (Redlock in Go)",
            program=Program(
                "go/redsync",
                "go",
                "redsync-client",
                pins=("github.com/go-redsync/redsync/v4", "redsync"),
            ),
            token=None,
            workloads=frozenset({"lock"}),
            comparison=(
                scenario("none", "must-pass", fencing=None, lease_ms=5000, time_limit_s=8),
                scenario("clock", "must-find", lease_ms=2000, time_limit_s=12,
                         workload_options={"think_ms": 100}),
            ),
        ),
    ),
    token="none",
    nodes=5,
    capabilities=frozenset({PAUSE, KILL, CLOCK, UNSYNCED}),
    service_args=frozenset({"persistence", "env_for", "ledger"}),
    options="fencecheck.clusters.services.redis:RedisOptions",
    needs=REDIS_NEEDS,
    version_argv=REDIS_VERSION,
    python_libs=("redis", "pottery", "aioredlock"),
)
