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
)
from fencecheck.descriptors.jvm_programs import spring_program

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



def redisson_clients(where: str, token_from: str) -> tuple[ClientDescriptor, ClientDescriptor]:
    """Redisson's RLock and RFencedLock as clients of a backend: `where` adds to their words in
    the comparison, `token_from` says where the fenced lock's token comes from."""
    return (
        ClientDescriptor("redisson", "fencecheck.workloads.clients.third_party:ShippedClient",
                         library=f"Redisson `RLock` (watchdog){where}",
                         program=REDISSON_LOCK_PROGRAM, token=None,
                         workloads=frozenset({"lock"}), weight=1),
        ClientDescriptor("redisson-fenced",
                         "fencecheck.workloads.clients.third_party:ShippedClient",
                         library=f"Redisson `RFencedLock` (its token){where}",
                         program=REDISSON_FENCED_PROGRAM,
                         token=f"RFencedLock's fencing token ({token_from})",
                         workloads=frozenset({"lock"}), weight=1),
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
        ),
        ClientDescriptor(
            "redis-py",
            "fencecheck.workloads.clients.redis:RedisPyClient",
            library="redis-py `redis.lock.Lock`",
            dist="redis",
            token=None,
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
        ),
        ClientDescriptor(
            "python-redis-lock",
            "fencecheck.workloads.clients.pylib:PythonRedisLockClient",
            library="python-redis-lock `Lock(auto_renewal=True)`",
            dist="python-redis-lock",
            token=None,
        ),
        # Redisson's RLock and RFencedLock (watchdog renewal), built by scripts/build-clients.sh
        *redisson_clients("", "INCR per grant"),
        # Spring Integration's RedisLockRegistry, and its leader initiator over it (the program
        # of postgres-advisory's spring-jdbc, in another mode)
        ClientDescriptor(
            "spring-redis",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="Spring Integration `RedisLockRegistry` (TTL)",
            program=spring_program("redis"),
            token=None,
            workloads=frozenset({"lock"}),
            settings_check="fencecheck.workloads.clients.jvm_settings:check_spring",
            weight=1,
        ),
        ClientDescriptor(
            "spring-redis-leader",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="Spring Integration `LockRegistryLeaderInitiator` over `RedisLockRegistry`",
            program=spring_program("redis-leader"),
            token=None,
            workloads=frozenset({"leader"}),
            settings_check="fencecheck.workloads.clients.jvm_settings:check_spring_leader",
            weight=1,
        ),
        # ShedLock's Redis provider (scheduled jobs run once), built by scripts/build-clients.sh
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
        ),
    ),
    token="setnx: yes",
    nodes=1,
    capabilities=frozenset({PAUSE, KILL, CLOCK, UNSYNCED}),
    service_args=frozenset({"persistence", "env_for", "ledger"}),
    needs=REDIS_NEEDS,
    version_argv=REDIS_VERSION,
    python_libs=("redis", "python-redis-lock"),
)
