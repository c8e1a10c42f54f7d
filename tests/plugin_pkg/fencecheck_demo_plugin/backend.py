"""The plugin's own backend, `demo-redis`: its descriptor, with its options model, its one
client (the demo SET NX class) and that client's row in the comparison."""

from __future__ import annotations

from fencecheck.descriptors.base import (
    KILL,
    PAUSE,
    BackendDescriptor,
    ClientDescriptor,
    Need,
    scenario,
)

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
