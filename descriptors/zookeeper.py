"""The `zookeeper` backend: a ZooKeeper ensemble; kazoo's lock recipe, the czxid as token."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    CLOCK,
    KILL,
    PAUSE,
    BackendDescriptor,
    ClientDescriptor,
    Need,
    Program,
    scenario,
)

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
                         lease_ms=2000, time_limit_s=15),
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
        ),
    ),
    token="czxid",
    nodes=3,
    weight=2,  # three ZooKeeper JVMs
    capabilities=frozenset({PAUSE, KILL, CLOCK}),
    service_args=frozenset({"env_for", "ledger"}),
    needs=(
        Need("java (ZooKeeper)", binary="java", package="default-jre-headless"),
        Need("zookeeper", path="/usr/share/java/zookeeper.jar", package="zookeeper"),
    ),
    version_argv=("dpkg-query", "-W", "-f=${Version}", "zookeeper"),
    python_libs=("kazoo",),
)
