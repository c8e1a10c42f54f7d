"""Integration tests of the netns runtime: reachability, isolation, teardown, setup time."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from fencecheck.clusters.base import ClientNode, ClusterError, Remote
from fencecheck.clusters.cleaner import run_namespaces
from fencecheck.clusters.runtimes.netns import NetnsRuntime, veth_name

pytestmark = pytest.mark.netns

# Listen on ADDR:PORT, answer each connection with this node's name, forever.
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()
while True:
    c, _ = s.accept(); c.sendall(sys.argv[3].encode()); c.close()
"""
CONNECT = """
import socket, sys, time
deadline = time.monotonic() + 5
while True:
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)
        print(c.recv(100).decode()); break
    except ConnectionRefusedError:
        if time.monotonic() > deadline: raise
        time.sleep(0.02)
"""


def test_veth_names_fit() -> None:
    assert veth_name("abc123", "n1", 0) == "fcabc123-n1"
    assert len(veth_name("abc123", "client-long-name", 7)) <= 15
    assert veth_name("abc123", "client-long-name", 7) == "fcabc123-7"


def test_nodes_reach_each_other_and_nothing_else(
    runtime: NetnsRuntime, nothing_left: Callable[[str], None]
) -> None:
    cluster = runtime.setup(["n1", "n2"], ["c1"])
    assert set(cluster.servers) == {"n1", "n2"} and set(cluster.clients) == {"c1"}
    as_remote: Remote = runtime.remote("c1")  # mypy: a netns node is a Remote and a ClientNode
    as_client: ClientNode = runtime.remote("c1")
    assert as_remote.address == as_client.address == "10.77.0.4"
    assert [runtime.address(n) for n in ("n1", "n2", "c1")] == [
        "10.77.0.2", "10.77.0.3", "10.77.0.4",
    ]
    n1 = cluster.servers["n1"]
    d = n1.start_daemon(
        "echo", [sys.executable, "-c", SERVER, n1.address, "7001", "n1"],
        log=runtime.run_dir / "echo.log",
    )
    assert n1.alive(d.pid)
    for node in ("n2", "c1"):
        out = runtime.remote(node).run([sys.executable, "-c", CONNECT, n1.address, "7001"])
        assert out.stdout.strip() == "n1"
    for node in ("n1", "c1"):
        r = runtime.remote(node)
        routes = r.run(["ip", "route"]).stdout
        assert "default" not in routes
        # No route out: the kernel refuses before a packet is built, so nothing is sent.
        res = r.run(["ip", "route", "get", "192.0.2.1"], check=False)
        assert res.returncode != 0 and "unreachable" in res.stderr
        lo = r.run(["ip", "-o", "link", "show", "lo"]).stdout
        assert "UP" in lo
    # The host netns got nothing: no veth, no address of the subnet.
    assert f"fc{runtime.run_id}" not in subprocess.run(
        ["ip", "-o", "link"], capture_output=True, text=True
    ).stdout
    assert "10.77.0." not in subprocess.run(
        ["ip", "-o", "addr"], capture_output=True, text=True
    ).stdout
    # A daemon in a node is killed by teardown, namespaces are deleted.
    runtime.teardown()
    assert not n1.alive(d.pid)
    nothing_left(runtime.run_id)
    runtime.teardown()  # idempotent


def test_setup_time_eight_nodes(runtime: NetnsRuntime) -> None:
    t0 = time.monotonic()
    runtime.setup([f"n{i}" for i in range(1, 6)], ["c1", "c2", "c3"])
    took = time.monotonic() - t0
    assert len(run_namespaces(runtime.run_id)) == 9  # 8 nodes + the switch
    # Measured about 0.1 s; the bound is generous for a loaded 2-core CI machine.
    assert took < 3.0, took
    ready = runtime.remote("c3").run(
        [sys.executable, "-c", "import socket; socket.socket().bind(('10.77.0.9', 0))"]
    )
    assert ready.returncode == 0


def test_bad_node_names_rejected(runtime: NetnsRuntime) -> None:
    with pytest.raises(ClusterError, match="bad node name"):
        runtime.setup(["sw"], [])
    with pytest.raises(ClusterError, match="duplicate"):
        runtime.setup(["n1"], ["n1"])
    with pytest.raises(ClusterError, match="bad node name"):
        runtime.setup(["N 1"], [])
    assert run_namespaces(runtime.run_id) == []


def test_teardown_drops_the_run_from_the_index(runtime: NetnsRuntime) -> None:
    runtime.setup(["n1"], [])
    entry = runtime.ledger.index / runtime.run_id
    assert entry.exists()
    runtime.teardown()
    assert not entry.exists()
    assert runtime.ledger.path.exists()  # the evidence stays
