"""The `hazelcast` backend: a Hazelcast cluster with the CP Subsystem (3 CP members, Raft); a lock
is a CP `FencedLock`, its fence the token. `hazelcast-unsafe` (descriptors/hazelcast_unsafe.py)
is the same cluster without CP members."""

from __future__ import annotations

import sys
from typing import Any

from fencecheck.descriptors.base import (
    CLOCK,
    KILL,
    PAUSE,
    BackendDescriptor,
    ClientDescriptor,
    Need,
    Program,
    Scenario,
    scenario,
)


def hazelcast_clients(mode: str, rows: tuple[Scenario, ...] = (),
                      java_rows: tuple[Scenario, ...] = ()
                      ) -> tuple[ClientDescriptor, ClientDescriptor]:
    """The Python and Java `FencedLock` clients, `mode` adding to their words in the
    comparison, and each one's rows in it on this backend."""
    return (
        ClientDescriptor("hazelcast", "fencecheck.workloads.clients.hazelcast:HazelcastLockClient",
                         library=f"hazelcast-python-client `FencedLock`{mode}",
                         dist="hazelcast-python-client",
                         token="the lock's fence", workloads=frozenset({"lock"}),
                         comparison=rows),
        # Hazelcast's Java client, a program built by scripts/build-clients.sh
        ClientDescriptor("hazelcast-java",
                         "fencecheck.workloads.clients.third_party:ShippedClient",
                         library=f"Hazelcast Java client `FencedLock`{mode}",
                         program=Program("java/hazelcast", "maven", "HazelcastLockClient",
                                         pins=("hazelcast", "hazelcast")),
                         token="the lock's fence", workloads=frozenset({"lock"}), weight=1,
                         comparison=java_rows),
    )


# The CP session TTL is the lease in whole seconds, more than 1 (hazelcast_config.py).
CP_LEASE: dict[str, Any] = {"lease_ms": 2000}
CP_ROWS = (
    scenario("none", "must-pass", fencing=None, time_limit_s=10, **CP_LEASE,
             note="Hazelcast FencedLock (5.4.0, fencecheck build hazelcast hazelcast-java): the "
                  "CP Subsystem's (3 CP members, Raft) and the same API in unsafe mode (no CP "
                  "members), through hazelcast-python-client and the Java client; the fence is "
                  "the token"),
    scenario("pause", "must-find", time_limit_s=15, **CP_LEASE),
    scenario("pause", "must-pass", fencing=True, time_limit_s=15, **CP_LEASE),
    scenario("partition,kill", "must-pass", fencing=True, time_limit_s=20, **CP_LEASE),
)
CP_JAVA_ROWS = (
    scenario("pause", "must-find", concurrency=3, time_limit_s=40, **CP_LEASE,
             note="a JVM per worker"),
)

HAZELCAST_NEEDS = (Need("java (Hazelcast members)", binary="java", package="default-jre-headless"),)
# The pinned release (its jar is in the build cache, not on the machine's class path).
HAZELCAST_VERSION = (sys.executable, "-m", "fencecheck.clusters.services.hazelcast_build",
                     "--version")
HAZELCAST_PREFLIGHT = "fencecheck.clusters.services.hazelcast_build:jar"

BACKEND = BackendDescriptor(
    name="hazelcast",
    summary="a Hazelcast cluster (3 members, 5.4.0) with the CP Subsystem on 3 CP members",
    service="fencecheck.clusters.services.hazelcast:HazelcastService",
    clients=hazelcast_clients(" (CP)", CP_ROWS, CP_JAVA_ROWS),
    token="fence (Raft commit index)",
    nodes=3,
    weight=3,  # three member JVMs
    capabilities=frozenset({PAUSE, KILL, CLOCK}),
    # lease_ms: the CP session TTL (clusters/services/hazelcast_config.py)
    service_args=frozenset({"env_for", "ledger", "lease_ms"}),
    # netns runs the cached jar (with its CDS archive); docker nodes get a copy of the jar in
    # the run's store (measured: a run found its violations); ssh is untried.
    runtimes=frozenset({"netns", "docker"}),
    needs=HAZELCAST_NEEDS,
    version_argv=HAZELCAST_VERSION,
    python_libs=("hazelcast-python-client",),
    preflight=HAZELCAST_PREFLIGHT,
    server_build="fencecheck.clusters.services.hazelcast_build",
    # --backend-opt cp_members=0: unsafe mode (hazelcast-unsafe names that cluster for the
    # comparison)
    options="fencecheck.clusters.services.hazelcast:HazelcastOptions",
)
