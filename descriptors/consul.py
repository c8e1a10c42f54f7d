"""The `consul` backend: Consul servers (v1.16.1, the last release under the MPL 2.0, built from
the Go module proxy); a lock is a KV key acquired with a session that has a TTL and a
lock-delay. The token is the key's ModifyIndex at the grant."""

from __future__ import annotations

import sys

from fencecheck.descriptors.base import (
    KILL,
    PAUSE,
    BackendDescriptor,
    ClientDescriptor,
    Program,
    ServerBuild,
)

BACKEND = BackendDescriptor(
    name="consul",
    summary="Consul servers (3), sessions with a TTL and lock-delay, KV locks",
    service="fencecheck.clusters.services.consul:ConsulService",
    clients=(
        ClientDescriptor(
            "consul-go",
            "fencecheck.workloads.clients.third_party:ShippedClient",
            library="Consul Go `api.Lock` (session TTL and lock-delay as options)",
            program=Program("go/consul", "go", "consul-client",
                            pins=("github.com/hashicorp/consul/api", "consul api")),
            token="the lock key's ModifyIndex at the grant",
            workloads=frozenset({"lock"}),
            settings_check="fencecheck.workloads.clients.consul_cli:api_settings",
        ),
        ClientDescriptor(
            "consul-lock",
            "fencecheck.workloads.clients.consul_cli:ConsulLockClient",
            library="`consul lock` (the CLI), its child doing the writes",
            token=None,
            workloads=frozenset({"lock"}),
            settings_check="fencecheck.workloads.clients.consul_cli:settings",
        ),
    ),
    token="the lock key's ModifyIndex",
    nodes=3,
    weight=2,  # three consul agents
    capabilities=frozenset({PAUSE, KILL}),
    service_args=frozenset({"env_for", "ledger"}),
    # The servers run the binary from this machine's build cache, which only the netns
    # runtime's nodes share.
    runtimes=frozenset({"netns"}),
    # No package ships Consul here: the pinned release, built (server_build; not on PATH).
    version_argv=(sys.executable, "-m", "fencecheck.clusters.services.consul_build",
                  "--version"),
    clock_refusal=(
        "the clock nemesis cannot skew consul: Go binaries read the clock through the vDSO, "
        "which an LD_PRELOAD shim cannot intercept"
    ),
    preflight="fencecheck.clusters.services.consul_build:binary",
    server_build=ServerBuild("consul", "fencecheck.clusters.services.consul_build"),
)
