"""The `etcd` backend: an etcd cluster; leases and the v3 lock API, the create revision as token."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    KILL,
    PAUSE,
    UNSYNCED,
    BackendDescriptor,
    ClientDescriptor,
    Need,
    Program,
    scenario,
)
from fencecheck.descriptors.rows import LONG_SECTION

BACKEND = BackendDescriptor(
    name="etcd",
    summary="an etcd cluster (3 or 5 members)",
    service="fencecheck.clusters.services.etcd:EtcdService",
    clients=(
        ClientDescriptor(
            "etcd",
            "fencecheck.workloads.clients.etcd:EtcdClient",
            library="etcd lease + v3 lock API (JSON gateway)",
            dist="httpx",
            token="the lock key's create revision",
            comparison=(
                scenario("pause", "must-find"),
                scenario("pause", "must-pass", fencing=True),
                scenario("partition", "must-pass", fencing=True, **LONG_SECTION),
                scenario("kill", "must-pass", fencing=True, time_limit_s=15),
                scenario("pause", "must-find", name="careless-pause-etcd-strict",
                         section="careless", time_limit_s=20, lease_ms=2000,
                         workload_options={"renew": True}),
                scenario("delay", "must-pass", fencing=True, time_limit_s=20),
            ),
        ),
        ClientDescriptor(
            "etcd-election",
            "fencecheck.workloads.clients.leader:EtcdElectionClient",
            library="etcd lease + v3 election API (JSON gateway)",
            dist="httpx",
            token="the leader key's create revision",
        ),
        # etcd's Go concurrency.Mutex, a program built by `fencecheck build`
        ClientDescriptor(
            "etcd-go",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="etcd Go `concurrency.Mutex`",
            program=Program(
                "go", "go", "etcd-client", pins=("go.etcd.io/etcd/client/v3", "etcd client")
            ),
            token="the lock key's create revision",
            workloads=frozenset({"lock"}),
        ),
        ClientDescriptor(
            "etcd-careless",
            "fencecheck.workloads.clients.careless:CarelessEtcdClient",
            library="etcd, careless (plain delete, blind renew, works on)",
            dist="httpx",
            token="as etcd (--client-opt careless=STEP,...)",
            comparison=(
                scenario("pause", "must-find", name="careless-pause-etcd-careless",
                         section="careless", time_limit_s=20, lease_ms=2000,
                         workload_options={"renew": True}),
                scenario("pause", "must-find", fencing=True,
                         name="careless-pause-etcd-careless-fenced", section="careless",
                         time_limit_s=20, lease_ms=2000, workload_options={"renew": True}),
            ),
        ),
        ClientDescriptor(
            "etcd3",
            "fencecheck.workloads.clients.pylib:Etcd3Client",
            library="python-etcd3 `Lock` (gRPC)",
            dist="etcd3",
            token=None,
            comparison=(
                scenario("none", "must-pass", fencing=None, time_limit_s=10),
                scenario("pause", "must-find"),
                scenario("partition", "must-find", **LONG_SECTION),
            ),
        ),
        # etcd's Go concurrency.Election, a program built by `fencecheck build`
        ClientDescriptor(
            "etcd-go-election",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="etcd Go `concurrency.Election`",
            program=Program(
                "go/election",
                "go",
                "etcd-election",
                pins=("go.etcd.io/etcd/client/v3", "etcd client"),
            ),
            token="the leader key's create revision",
            workloads=frozenset({"leader"}),
            comparison=(
                scenario("pause", "must-find", workload="leader", lease_ms=2000, time_limit_s=30),
                scenario("pause", "must-pass", fencing=True, workload="leader", lease_ms=2000,
                         time_limit_s=20),
            ),
        ),
    ),
    token="create revision",
    nodes=3,
    weight=2,  # three etcd members
    capabilities=frozenset({PAUSE, KILL, UNSYNCED}),
    service_args=frozenset({"env_for", "ledger"}),
    needs=(
        Need("etcd", binary="etcd", package="etcd-server"),
        Need("etcdctl", binary="etcdctl", package="etcd-client"),
    ),
    version_argv=("etcd", "--version"),
    python_libs=("httpx", "etcd3"),
    clock_refusal=(
        "the clock nemesis cannot skew etcd: Go binaries read the clock through the vDSO, "
        "which an LD_PRELOAD shim cannot intercept (and etcd expires leases by monotonic time)"
    ),
)
