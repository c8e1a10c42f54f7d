"""The `etcd` backend: an etcd cluster; leases and the v3 lock API, the create revision as token."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    KILL,
    PAUSE,
    UNSYNCED,
    BackendDescriptor,
    ClientDescriptor,
    Need,
)

BACKEND = BackendDescriptor(
    name="etcd",
    summary="an etcd cluster (3 or 5 members)",
    service="fencecheck.clusters.services.etcd:EtcdService",
    clients=(
        ClientDescriptor("etcd", "fencecheck.workloads.etcd_client:EtcdClient",
                         token="the lock key's create revision"),
        ClientDescriptor("etcd-election", "fencecheck.workloads.leader_clients:EtcdElectionClient",
                         token="the leader key's create revision"),
        # etcd's Go concurrency.Mutex, a program built by scripts/build-clients.sh
        ClientDescriptor("etcd-go", "fencecheck.workloads.third_party:EtcdGoClient",
                         token="the lock key's create revision", workloads=frozenset({"lock"})),
        ClientDescriptor("etcd-careless", "fencecheck.workloads.careless:CarelessEtcdClient",
                         token="as etcd (--client-opt careless=STEP,...)"),
        ClientDescriptor("etcd3", "fencecheck.workloads.pylib_clients:Etcd3Client", token=None),
        # etcd's Go concurrency.Election, a program built by scripts/build-clients.sh
        ClientDescriptor("etcd-go-election",
                         "fencecheck.workloads.third_party:EtcdGoElectionClient",
                         token="the leader key's create revision",
                         workloads=frozenset({"leader"})),
    ),
    token="create revision",
    nodes=3,
    weight=2,  # three etcd members
    capabilities=frozenset({PAUSE, KILL, UNSYNCED}),
    service_args=frozenset({"env_for", "ledger"}),
    needs=(Need("etcd", binary="etcd", package="etcd-server"),
           Need("etcdctl", binary="etcdctl", package="etcd-client")),
    version_argv=("etcd", "--version"),
    python_libs=("httpx", "etcd3"),
    clock_refusal=(
        "the clock nemesis cannot skew etcd: Go binaries read the clock through the vDSO, "
        "which an LD_PRELOAD shim cannot intercept (and etcd expires leases by monotonic time)"
    ),
)
