"""The `hazelcast-unsafe` backend: the `hazelcast` cluster with no CP members (`cp-member-count`
0), where the same `FencedLock` API runs in Hazelcast's "unsafe mode", on the partitioned AP
structures and their asynchronous backups: what a deployment gets that never enabled CP. It is
`--backend hazelcast --backend-opt cp_members=0` under a name of its own, so that the comparison,
the nightly and the report name the mode."""

from __future__ import annotations

import dataclasses

from fencecheck.descriptors import hazelcast
from fencecheck.descriptors.base import scenario
from fencecheck.descriptors.hazelcast import hazelcast_clients

# The partitions that split the members (every seed that drew one found the double grant).
SPLITS = "one-node,halves,majorities-ring"

# The hazelcast backend's cluster, needs, build and runtimes; its own name, service, clients,
# token, and no options (cp_members=0 is what it is).
BACKEND = dataclasses.replace(
    hazelcast.BACKEND,
    name="hazelcast-unsafe",
    summary="the hazelcast cluster without CP members: FencedLock in unsafe mode (AP)",
    service="fencecheck.clusters.services.hazelcast:HazelcastUnsafeService",
    clients=hazelcast_clients(" (unsafe mode)", (
        scenario("partition", "must-find", suffix="-unsafe", lease_ms=2000, time_limit_s=25,
                 fault_duration_s=[10, 12],
                 fault_options={"partition": {"shapes": SPLITS}},
                 note="a member cut off forms its own cluster after about 5 s; only shapes "
                      "that split the members (the 5 of 10 runs that drew only client cut-offs "
                      "and bridges found nothing)"),)),
    token="fence (unsafe mode)",
    options=None,
)
