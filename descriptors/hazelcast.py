"""The `hazelcast` backend: a Hazelcast cluster with the CP Subsystem (3 CP members, Raft); a lock
is a CP `FencedLock`, its fence the token. `hazelcast-unsafe` (descriptors/hazelcast_unsafe.py)
is the same cluster without CP members."""

from __future__ import annotations

import sys

from fencecheck.descriptors.base import (
    CLOCK,
    KILL,
    PAUSE,
    BackendDescriptor,
    ClientDescriptor,
    Need,
    Program,
)


def hazelcast_clients(mode: str) -> tuple[ClientDescriptor, ClientDescriptor]:
    """The Python and Java `FencedLock` clients, `mode` adding to their words in the
    comparison."""
    return (
        ClientDescriptor("hazelcast", "fencecheck.workloads.clients.hazelcast:HazelcastLockClient",
                         library=f"hazelcast-python-client `FencedLock`{mode}",
                         dist="hazelcast-python-client",
                         token="the lock's fence", workloads=frozenset({"lock"})),
        # Hazelcast's Java client, a program built by scripts/build-clients.sh
        ClientDescriptor("hazelcast-java",
                         "fencecheck.workloads.clients.third_party:ShippedClient",
                         library=f"Hazelcast Java client `FencedLock`{mode}",
                         program=Program("java/hazelcast", "maven", "HazelcastLockClient",
                                         pins=("hazelcast", "hazelcast")),
                         token="the lock's fence", workloads=frozenset({"lock"}), weight=1),
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
    clients=hazelcast_clients(" (CP)"),
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
)
