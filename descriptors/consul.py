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
    scenario,
)

# lease_ms is the session's TTL.
_NO_DELAY = {"lock_delay_ms": 0}

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
            comparison=(
                scenario("none", "must-pass", fencing=None,
                         note=("Consul sessions (3 servers, v1.16.1; fencecheck build consul "
                               "consul-go): the Go api.Lock, and `consul lock` whose child "
                               "does the writes."),
                         time_limit_s=10),
                scenario("pause", "must-find",
                         note=("lock-delay 0, asked as 1 ms (the api leaves out a zero); "
                               "lease_ms is the session's TTL."),
                         client_options=_NO_DELAY, lease_ms=2000, time_limit_s=15),
                scenario("pause", "must-pass", fencing=True, client_options=_NO_DELAY,
                         lease_ms=2000, time_limit_s=15),
                scenario("pause", "must-pass", suffix="-lock-delay",
                         note="Consul's default lock-delay, 15 s: longer than these pauses.",
                         lease_ms=2000, time_limit_s=15),
            ),
        ),
        ClientDescriptor(
            "consul-lock",
            "fencecheck.workloads.clients.consul_cli:ConsulLockClient",
            library="`consul lock` (the CLI), its child doing the writes",
            token=None,
            workloads=frozenset({"lock"}),
            settings_check="fencecheck.workloads.clients.consul_cli:settings",
            comparison=(
                scenario("none", "must-pass", fencing=None, time_limit_s=10),
                scenario("pause", "must-pass",
                         note=("consul lock's session TTL is 15 s: these pauses (a few s) are "
                               "far shorter."),
                         lease_ms=2000, time_limit_s=15),
                scenario("partition", "must-find",
                         note=("Its child writes until consul lock sees the lock lost; a child "
                               "that runs as long as it holds the lock (an app), cut off past "
                               "the session's 2 x 15 s TTL and 15 s lock-delay; seeds 2 and 3: "
                               "their first partition cuts the holder off from the servers."),
                         lease_ms=2000, concurrency=3, writes_per_section=1000, think_ms=50,
                         fault_duration_s=[60, 60], time_limit_s=60, seeds=[2, 3]),
            ),
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
    server_build="fencecheck.clusters.services.consul_build",
)
