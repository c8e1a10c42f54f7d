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
    scenario,
)
from fencecheck.descriptors.rows import K8S_LEADER, NOTICES_WORK

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
            comparison=(
                scenario("none", "must-pass", fencing=None,
                         note="the library refuses a Lease under 2 s", workload="leader",
                         lease_ms=3000, concurrency=3, time_limit_s=10),
                scenario("pause", "must-find", **K8S_LEADER,
                         time_limit_s=20, client_options=NOTICES_WORK),
                scenario("pause", "must-pass", fencing=True, **K8S_LEADER, time_limit_s=20),
                scenario("partition", "must-pass", fencing=True, **K8S_LEADER, time_limit_s=20),
                scenario("kill", "must-pass", fencing=True,
                         note="an API server killed and restarted", workload="leader",
                         lease_ms=3000, concurrency=3, time_limit_s=15),
                scenario("client-clock", "must-find",
                         note="the python client judges leases by time.time()", lease_ms=3000,
                         time_limit_s=15, workload_options={"think_ms": 600}),
            ),
        ),
        ClientDescriptor(
            "client-go",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="client-go `leaderelection` with a `LeaseLock`",
            # v0.33.13: the newest v0.33 release, whose release writes without reading the
            # Lease first; v0.34.0: the first release with that read (kubernetes/kubernetes
            # PR #132849). Issue 29's measurement of where the release's wipe starts.
            program=Program(
                "go/client-go", "go", "client-go-lease", pins=("k8s.io/client-go", "client-go"),
                versions=("v0.33.13", "v0.34.0"),
                moves_with=("k8s.io/api", "k8s.io/apimachinery"),
            ),
            token="the Lease's resourceVersion of the winning write",
            workloads=frozenset({"lock", "leader"}),
            comparison=(
                scenario("pause", "must-find", lease_ms=2000, time_limit_s=20,
                         client_options=NOTICES_WORK),
                scenario("pause", "must-find", fencing=True,
                         note=("ReleaseOnCancel after a pause empties the successor's Lease: "
                               "double grant only"),
                         lease_ms=2000, time_limit_s=20),
                scenario("partition,kill", "must-pass", fencing=True, lease_ms=2000,
                         time_limit_s=20),
                scenario("client-clock", "must-pass",
                         note="Go measures leases on its monotonic clock", lease_ms=3000,
                         time_limit_s=15, workload_options={"think_ms": 600}),
            ),
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
    server_build="fencecheck.clusters.services.kube_build",
)
