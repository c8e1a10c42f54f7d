"""The `nats` backend: a NATS JetStream cluster; a lock is a KV key created if absent, the key's
revision as token."""

from __future__ import annotations

import sys

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

BACKEND = BackendDescriptor(
    name="nats",
    summary="a NATS JetStream cluster (3 servers), a KV bucket with 3 replicas",
    service="fencecheck.clusters.services.nats:NatsService",
    clients=(
        ClientDescriptor("nats", "fencecheck.workloads.clients.nats:NatsKvClient",
                         library="NATS JetStream KV `create` / `update` at the last revision",
                         dist="nats-py",
                         token="the lock key's revision at its create",
                         comparison=(
                             scenario("none", "must-pass", fencing=None, time_limit_s=10),
                             scenario("pause", "must-find"),
                             scenario("pause", "must-pass", fencing=True),
                         )),
        ClientDescriptor("nats-go", "fencecheck.workloads.clients.third_party:ShippedClient",
                         library="NATS JetStream KV `Create` / `Update` at the last revision "
                                 "(nats.go)",
                         program=Program("go/nats", "go", "nats-kv-client",
                                         pins=("github.com/nats-io/nats.go", "nats.go")),
                         token="the lock key's revision at its create",
                         workloads=frozenset({"lock"}),
                         comparison=(
                             scenario("none", "must-pass", fencing=None, time_limit_s=10),
                             scenario("pause", "must-find"),
                             scenario("pause", "must-pass", fencing=True),
                         )),
    ),
    token="KV revision",
    nodes=3,
    weight=2,  # three nats-server processes
    capabilities=frozenset({PAUSE, KILL, UNSYNCED}),
    # lease_ms: the bucket's max_age is every key's lease (clusters/services/nats.py says why
    # not a per-key TTL)
    service_args=frozenset({"env_for", "ledger", "lease_ms"}),
    options="fencecheck.clusters.services.nats:NatsOptions",
    # The servers run the binary from this machine's build cache, which only the netns
    # runtime's nodes share.
    runtimes=frozenset({"netns"}),
    # Debian's 2.9.10 is not what runs (it grants one lock twice with no fault: see
    # clusters/services/nats_build.py); it is installed for the test that shows it.
    needs=(Need("nats-server 2.9 (Debian)", binary="nats-server", package="nats-server"),),
    # The pinned release (the binary is not on PATH: it is in the build cache).
    version_argv=(sys.executable, "-m", "fencecheck.clusters.services.nats_build", "--version"),
    python_libs=("nats-py",),
    clock_refusal=(
        "the clock nemesis cannot skew nats-server: Go binaries read the clock through the "
        "vDSO, which an LD_PRELOAD shim cannot intercept"
    ),
    preflight="fencecheck.clusters.services.nats_build:binary",
    server_build="fencecheck.clusters.services.nats_build",
)
