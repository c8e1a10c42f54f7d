"""The `hazelcast-unsafe` backend: the `hazelcast` cluster with no CP members (`cp-member-count`
0), where the same `FencedLock` API runs in Hazelcast's "unsafe mode", on the partitioned AP
structures and their asynchronous backups: what a deployment gets that never enabled CP."""

from __future__ import annotations

from fencecheck.descriptors.base import CLOCK, KILL, PAUSE, BackendDescriptor
from fencecheck.descriptors.hazelcast import (
    HAZELCAST_NEEDS,
    HAZELCAST_PREFLIGHT,
    HAZELCAST_VERSION,
    hazelcast_clients,
)

BACKEND = BackendDescriptor(
    name="hazelcast-unsafe",
    summary="the hazelcast cluster without CP members: FencedLock in unsafe mode (AP)",
    service="fencecheck.clusters.services.hazelcast:HazelcastUnsafeService",
    clients=hazelcast_clients(" (unsafe mode)"),
    token="fence (unsafe mode)",
    nodes=3,
    weight=3,  # three member JVMs
    capabilities=frozenset({PAUSE, KILL, CLOCK}),
    service_args=frozenset({"env_for", "ledger", "lease_ms"}),
    # netns runs the cached jar (with its CDS archive); docker nodes get a copy of the jar in
    # the run's store (measured: a run found its violations); ssh is untried.
    runtimes=frozenset({"netns", "docker"}),
    needs=HAZELCAST_NEEDS,
    version_argv=HAZELCAST_VERSION,
    python_libs=("hazelcast-python-client",),
    preflight=HAZELCAST_PREFLIGHT,
)
