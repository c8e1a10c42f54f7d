"""The `zookeeper` backend: a ZooKeeper ensemble; kazoo's lock recipe, the czxid as token."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    CLOCK,
    KILL,
    PAUSE,
    RECONFIG,
    UNSYNCED,
    BackendDescriptor,
    ClientDescriptor,
    Need,
    Program,
    scenario,
)
from fencecheck.descriptors.rows import NOTICES_WORK

BACKEND = BackendDescriptor(
    name="zookeeper",
    summary="a ZooKeeper ensemble (3 or 5 servers)",
    service="fencecheck.clusters.services.zookeeper:ZookeeperService",
    clients=(
        ClientDescriptor(
            "zookeeper",
            "fencecheck.workloads.clients.zk:ZkClient",
            library="kazoo `Lock`",
            dist="kazoo",
            token="the lock node's czxid",
            comparison=(
                scenario("pause", "must-find",
                         note="the session timeout (ZooKeeper allows 400 ms to 120 s)",
                         lease_ms=2000, time_limit_s=15, client_options=NOTICES_WORK),
                scenario("pause", "must-pass", fencing=True, lease_ms=2000, time_limit_s=15),
                scenario("clock", "must-pass", lease_ms=2000, time_limit_s=15),
                scenario("kill", "must-pass", fencing=True, lease_ms=2000, time_limit_s=15),
            ),
        ),
        ClientDescriptor(
            "zookeeper-election",
            "fencecheck.workloads.clients.leader:ZkElectionClient",
            library="kazoo `Election`",
            dist="kazoo",
            token="the election node's czxid",
        ),
        # Apache Curator's InterProcessMutex, a program built by `fencecheck build`
        ClientDescriptor(
            "curator",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="Apache Curator `InterProcessMutex` (Debian's jars)",
            program=Program("java", "javac", "CuratorClient"),
            token="the lock node's czxid",
            workloads=frozenset({"lock"}),
            weight=1,
            # A JVM per worker: 3 workers, 30 s; sections of 6 writes 300 ms apart, so that a
            # woken holder still holds the lock when Curator says SUSPENDED (its notice)
            comparison=(
                scenario("pause", "must-find", concurrency=3, lease_ms=2000, time_limit_s=30,
                         workload_options={"writes_per_section": 6, "think_ms": 300},
                         client_options=NOTICES_WORK),
            ),
        ),
    ),
    token="czxid",
    nodes=3,
    weight=2,  # three ZooKeeper JVMs
    capabilities=frozenset({PAUSE, KILL, CLOCK, UNSYNCED, RECONFIG}),
    service_args=frozenset({"env_for", "ledger"}),
    options="fencecheck.clusters.services.zookeeper:ZookeeperOptions",
    needs=(
        Need("java (ZooKeeper)", binary="java", package="default-jre-headless"),
        Need("zookeeper", path="/usr/share/java/zookeeper.jar", package="zookeeper"),
    ),
    version_argv=("dpkg-query", "-W", "-f=${Version}", "zookeeper"),
    python_libs=("kazoo",),
)
