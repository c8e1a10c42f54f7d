"""The `nats` backend: a NATS JetStream cluster; a lock is a KV key created if absent, the key's
revision as token."""

from __future__ import annotations

from fencecheck.descriptors.base import KILL, PAUSE, BackendDescriptor, ClientDescriptor, Need

BACKEND = BackendDescriptor(
    name="nats",
    summary="a NATS JetStream cluster (3 servers), a KV bucket with 3 replicas",
    service="fencecheck.clusters.services.nats:NatsService",
    clients=(
        ClientDescriptor("nats", "fencecheck.workloads.nats_client:NatsKvClient",
                         token="the lock key's revision at its create"),
    ),
    token="KV revision",
    nodes=3,
    weight=2,  # three nats-server processes
    capabilities=frozenset({PAUSE, KILL}),
    # lease_ms: the bucket's max_age is every key's lease (nats-server 2.9 has no per-key TTL)
    service_args=frozenset({"env_for", "ledger", "lease_ms"}),
    # The docker node image (clusters/runtimes/Dockerfile) does not carry nats-server yet.
    runtimes=frozenset({"netns"}),
    needs=(Need("nats-server", binary="nats-server", package="nats-server"),),
    version_argv=("nats-server", "--version"),
    python_libs=("nats-py",),
    clock_refusal=(
        "the clock nemesis cannot skew nats-server: Go binaries read the clock through the "
        "vDSO, which an LD_PRELOAD shim cannot intercept"
    ),
)
