"""The `kubernetes` backend: Kubernetes Leases on real kube-apiservers (one per node, over a
stacked 3-member etcd); the token is the Lease's resourceVersion of the winning write."""

from __future__ import annotations

import sys

from fencecheck.descriptors.base import (
    KILL,
    PAUSE,
    BackendDescriptor,
    ClientDescriptor,
    Need,
    Program,
    ServerBuild,
)

BACKEND = BackendDescriptor(
    name="kubernetes",
    summary="Kubernetes Leases on kube-apiservers over etcd (3 nodes)",
    service="fencecheck.clusters.services.kube_apiserver:KubeApiserverService",
    clients=(
        ClientDescriptor(
            "kubernetes-python",
            "fencecheck.workloads.clients.kube_lease:KubernetesPythonClient",
            library="kubernetes `leaderelection` over a Lease",
            dist="kubernetes",
            token="the Lease's resourceVersion of the winning write",
            workloads=frozenset({"lock", "leader"}),
            settings_check="fencecheck.workloads.clients.kube_lease:check_settings",
        ),
        ClientDescriptor(
            "client-go",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="client-go `leaderelection` with a `LeaseLock`",
            program=Program(
                "go/client-go", "go", "client-go-lease", pins=("k8s.io/client-go", "client-go")
            ),
            token="the Lease's resourceVersion of the winning write",
            workloads=frozenset({"lock", "leader"}),
        ),
    ),
    token="the Lease's resourceVersion",
    nodes=3,
    weight=3,  # three kube-apiservers and three etcd members
    capabilities=frozenset({PAUSE, KILL}),
    service_args=frozenset({"ledger"}),
    # The API servers run the binary from this machine's build cache, which only the netns
    # runtime's nodes share.
    runtimes=frozenset({"netns"}),
    needs=(
        Need("etcd", binary="etcd", package="etcd-server"),
        Need("etcdctl", binary="etcdctl", package="etcd-client"),
    ),
    # The pinned release (the binary is not on PATH: it is in the build cache).
    version_argv=(sys.executable, "-m", "fencecheck.clusters.services.kube_build", "--version"),
    python_libs=("kubernetes",),
    clock_refusal=(
        "the clock nemesis cannot skew kube-apiserver or etcd: Go binaries read the clock "
        "through the vDSO, which an LD_PRELOAD shim cannot intercept"
    ),
    preflight="fencecheck.clusters.services.kube_build:binary",
    server_build=ServerBuild("kube-apiserver", "fencecheck.clusters.services.kube_build"),
)
