"""The plugin's own backend, `demo-redis`: its descriptor, with its options model, its two
clients (the demo SET NX class, and the same lock as a shipped Go program, `demo-go-setnx`:
its source folder go/setnx/ and its descriptor here, nothing else) and their rows in the
comparison."""

from __future__ import annotations

from pathlib import Path

from fencecheck.descriptors.base import (
    KILL,
    PAUSE,
    BackendDescriptor,
    ClientDescriptor,
    Need,
    Program,
    scenario,
)

# A plugin's program names its source folder by absolute path (the tree's own are relative to
# fencecheck/workloads/clients/); it is package data of the installed plugin.
GO = Path(__file__).resolve().parent / "go"

BACKEND = BackendDescriptor(
    name="demo-redis",
    summary="one redis-server on a port of the run's choosing (a plugin's backend)",
    service="fencecheck_demo_plugin.service:DemoRedisService",
    options="fencecheck_demo_plugin.service:DemoRedisOptions",
    clients=(
        ClientDescriptor(
            "demo-redis-setnx", "fencecheck_demo_plugin.client:DemoSetnxClient",
            token=None, library="the demo plugin's SET NX PX",
            options="fencecheck_demo_plugin.client:DemoClientOptions",
            comparison=(
                scenario("none", "must-pass", fencing=None, concurrency=2, time_limit_s=4,
                         seeds=[1], backend_options={"port": 6391},
                         note="the plugin's own backend, client and row"),
            ),
        ),
        ClientDescriptor(
            "demo-go-setnx", "fencecheck.workloads.clients.third_party:ShippedClient",
            token=None, library="the demo plugin's SET NX PX in Go",
            options="fencecheck_demo_plugin.client:DemoClientOptions",
            program=Program(str(GO / "setnx"), "go", "demo-go-setnx",
                            pins=("github.com/redis/go-redis/v9", "go-redis")),
            comparison=(
                scenario("none", "must-pass", fencing=None, concurrency=2, time_limit_s=4,
                         seeds=[1], backend_options={"port": 6392},
                         note="the plugin's shipped Go program"),
            ),
        ),
    ),
    token="none",
    nodes=1,
    max_nodes=1,
    capabilities=frozenset({PAUSE, KILL}),
    service_args=frozenset({"env_for", "ledger"}),
    runtimes=frozenset({"netns"}),
    needs=(Need("redis", binary="redis-server", package="redis-server"),),
    version_argv=("redis-server", "--version"),
)
