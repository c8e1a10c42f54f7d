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
    Program,
    scenario,
)
from fencecheck.descriptors.rows import CLOCK_JUMP, LONG_SECTION, RESTART_EMPTY

REDIS_NEEDS = (Need("redis", binary="redis-server", package="redis-server"),)
REDIS_VERSION = ("redis-server", "--version")
# Redisson's RLock and RFencedLock, one program (its mode the first argument); the redis-sentinel
# backend drives the same program through the sentinels.
REDISSON_LOCK_PROGRAM = Program(
    "java/redisson", "maven", "RedissonLockClient", ("lock",), pins=("redisson", "redisson")
)
REDISSON_FENCED_PROGRAM = Program(
    "java/redisson", "maven", "RedissonLockClient", ("fenced",), pins=("redisson", "redisson")
)



# Redisson's rows in the comparison: on the plain redis backend.
REDISSON_COMPARED = (
    scenario("pause", "must-find", note="a JVM per worker", lease_ms=2000, concurrency=3,
             time_limit_s=20),
)
REDISSON_FENCED_COMPARED = (
    scenario("pause", "must-pass", fencing=True, name="pause-redisson-fenced", lease_ms=2000,
             concurrency=3, time_limit_s=20),
)


def redisson_clients(where: str, token_from: str, *, compared: bool = False
                     ) -> tuple[ClientDescriptor, ClientDescriptor]:
    """Redisson's RLock and RFencedLock as clients of a backend: `where` adds to their words in
    the comparison, `token_from` says where the fenced lock's token comes from; `compared`:
    this backend has their rows in the comparison."""
    return (
        ClientDescriptor("redisson", "fencecheck.workloads.clients.third_party:ShippedClient",
                         library=f"Redisson `RLock` (watchdog){where}",
                         program=REDISSON_LOCK_PROGRAM, token=None,
                         workloads=frozenset({"lock"}), weight=1,
                         comparison=REDISSON_COMPARED if compared else ()),
        ClientDescriptor("redisson-fenced",
                         "fencecheck.workloads.clients.third_party:ShippedClient",
                         library=f"Redisson `RFencedLock` (its token){where}",
                         program=REDISSON_FENCED_PROGRAM,
                         token=f"RFencedLock's fencing token ({token_from})",
                         workloads=frozenset({"lock"}), weight=1,
                         comparison=REDISSON_FENCED_COMPARED if compared else ()),
    )


BACKEND = BackendDescriptor(
    name="redis",
    summary="a single redis-server",
    service="fencecheck.clusters.services.redis:RedisService",
    clients=(
        ClientDescriptor(
            "redis-setnx",
            "fencecheck.workloads.clients.redis:SetnxClient",
            library="SET NX PX + INCR token in one script",
            dist="redis",
            token="INCR of a per-lock counter in the SET NX script",
            comparison=(
                scenario("none", "must-pass", fencing=None, time_limit_s=10),
                scenario("pause", "must-find"),
                scenario("pause", "must-pass", fencing=True),
                scenario("kill", "must-find", **RESTART_EMPTY),
                scenario("pause", "must-find", name="careless-pause-redis-setnx-strict",
                         section="careless", time_limit_s=20, workload_options={"renew": True}),
                scenario("delay", "must-find", time_limit_s=20),
                scenario("delay", "must-pass", fencing=True, time_limit_s=20),
            ),
        ),
        ClientDescriptor(
            "redis-py",
            "fencecheck.workloads.clients.redis:RedisPyClient",
            library="redis-py `redis.lock.Lock`",
            dist="redis",
            token=None,
            comparison=(
                scenario("pause", "must-find"),
            ),
        ),
        ClientDescriptor(
            "redis-lease",
            "fencecheck.workloads.clients.leader:RedisLeaseClient",
            library="redis-py lease loop",
            dist="redis",
            token="INCR of a per-lock counter in the SET NX script",
        ),
        ClientDescriptor(
            "redis-setnx-careless",
            "fencecheck.workloads.clients.careless:CarelessSetnxClient",
            library="redis-setnx, careless (plain DEL, blind renew, works on)",
            dist="redis",
            token="as redis-setnx (--client-opt careless=STEP,...)",
            comparison=(
                scenario("pause", "must-find", name="careless-pause-redis-setnx-careless",
                         section="careless", time_limit_s=20, workload_options={"renew": True}),
                scenario("pause", "must-find", fencing=True,
                         name="careless-pause-redis-setnx-careless-fenced", section="careless",
                         time_limit_s=20, workload_options={"renew": True}),
            ),
        ),
        ClientDescriptor(
            "python-redis-lock",
            "fencecheck.workloads.clients.pylib:PythonRedisLockClient",
            library="python-redis-lock `Lock(auto_renewal=True)`",
            dist="python-redis-lock",
            token=None,
            comparison=(
                scenario("none", "must-pass", fencing=None, time_limit_s=10),
                scenario("pause", "must-find"),
                scenario("partition", "must-find", **LONG_SECTION),
                scenario("clock", "must-find", **CLOCK_JUMP),
                scenario("kill", "must-find", **RESTART_EMPTY),
            ),
        ),
        # Redisson's RLock and RFencedLock (watchdog renewal), built by `fencecheck build`
        *redisson_clients("", "INCR per grant", compared=True),
        # ShedLock's Redis provider (scheduled jobs run once), built by `fencecheck build`
        ClientDescriptor(
            "shedlock",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="ShedLock, Redis provider (Spring Data Redis)",
            program=Program(
                "java/shedlock",
                "maven",
                "ShedLockClient",
                shared=("java/shedlock-common",),
                pins=("shedlock-provider-redis-spring", "shedlock"),
            ),
            token=None,
            workloads=frozenset({"cron"}),
            weight=1,
            comparison=(
                scenario("pause", "must-find", fencing=None,
                         note=("lockAtMostFor = the lease; jobs of 100 ms. Its unlock deletes "
                               "the key unchecked: a double grant"),
                         workload="cron", lease_ms=2000, concurrency=3, time_limit_s=20,
                         workload_options={"think_ms": 100, "idempotent": True}),
            ),
        ),
    ),
    token="setnx: yes",
    nodes=1,
    capabilities=frozenset({PAUSE, KILL, CLOCK, UNSYNCED}),
    service_args=frozenset({"persistence", "env_for", "ledger"}),
    options="fencecheck.clusters.services.redis:RedisOptions",
    needs=REDIS_NEEDS,
    version_argv=REDIS_VERSION,
    python_libs=("redis", "python-redis-lock"),
)
