"""The docker runtime against a real dockerd: containers on an internal network, client
namespaces on its bridge, commands and daemons through nsenter, partitions with iptables inside
containers, and teardown by label (live, and from the ledger alone as after a crash).

Skipped with a reason where dockerd is not running (`bash scripts/dockerd.sh start`). The first
test builds the node image if it is missing (minutes; `python -m fencecheck.clusters.runtimes.image`
does it ahead)."""

from __future__ import annotations

import ipaddress
import itertools
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.base import ClusterError
from fencecheck.clusters.cleaner import NETNS_DIR, teardown_run
from fencecheck.clusters.faults.partition import IptablesNet
from tests.conftest import at_once


@pytest.mark.parametrize("change", ["content", "base"])
def test_the_image_tag_is_a_hash_of_the_dockerfile_and_base(tmp_path: Path, change: str) -> None:
    from fencecheck.clusters.runtimes.image import image_tag

    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("FROM x\nRUN true\n")
    b.write_text("FROM x\nRUN true\n" if change == "base" else "FROM x\nRUN false\n")
    assert image_tag("base1", a) == image_tag("base1", a)
    assert image_tag("base1", a).startswith("fencecheck-node:")
    assert image_tag("base1", a) != image_tag("base2" if change == "base" else "base1", b)


def docker_or_skip() -> Any:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    try:
        import docker

        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as e:  # any failure to reach dockerd means: skip, and say why
        pytest.skip(f"dockerd not running ({type(e).__name__}); bash scripts/dockerd.sh start")
    return client


def ensure_node_image() -> str:
    """The node image's tag, built if missing; skips the test where dockerd is not running."""
    client = docker_or_skip()
    from fencecheck.clusters.runtimes.image import ensure_image

    return ensure_image(client)


@pytest.fixture(scope="session")
def node_image() -> str:
    return ensure_node_image()


def left_by(run_id: str) -> list[str]:
    """Containers, networks, namespaces and host links of run_id that still exist."""
    client = docker_or_skip()
    label = {"label": f"fencecheck.run={run_id}"}
    out = [f"container {c.name}" for c in client.containers.list(all=True, filters=label)]
    out += [f"network {n.name}" for n in client.networks.list(filters=label)]
    if NETNS_DIR.exists():
        out += [f"netns {n}" for n in os.listdir(NETNS_DIR) if n.startswith(f"fc-{run_id}-")]
    out += [f"link {n}" for n in os.listdir("/sys/class/net") if n.startswith(f"fc{run_id}")]
    return out


@pytest.fixture
def runtime(node_image: str, tmp_path: Path) -> Iterator[Any]:
    from fencecheck.clusters.runtimes.docker import DockerRuntime

    run_id = secrets.token_hex(3)
    rt = DockerRuntime(run_id, tmp_path / "store", image=node_image)  # a /24 from the pool
    try:
        yield rt
    finally:
        rt.teardown()
        assert left_by(run_id) == []


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_nodes_commands_daemons_and_teardown(runtime: Any, tmp_path: Path) -> None:
    cluster = runtime.setup(["n1", "n2"], ["c1"])
    n1, n2, c1 = cluster.servers["n1"], cluster.servers["n2"], cluster.clients["c1"]
    net = runtime.subnet  # taken from the pool under its lock
    assert net is not None and net.subnet_of(ipaddress.ip_network("10.96.0.0/12"))
    assert [n1.address, n2.address, c1.address] == [str(net[i]) for i in (2, 3, 4)]
    client = docker_or_skip()
    network = client.networks.get(f"fc-{runtime.run_id}")
    assert network.attrs["Internal"] is True
    assert network.attrs["Labels"]["fencecheck.run"] == runtime.run_id
    assert os.path.exists(f"/sys/class/net/{runtime.bridge}/brif/fc{runtime.run_id}-c1")

    assert n1.run(["hostname"]).stdout.strip() == "n1"
    assert n1.run(["printf", "%s|", "a b", "$HOME"]).stdout == "a b|$HOME|"
    assert "redis-server" in n1.run(["sh", "-c", "ls /usr/bin"]).stdout
    assert n1.run(["cat"], stdin=b"x\n").stdout == "x\n"
    with pytest.raises(ClusterError, match="exit 4"):
        n1.run(["sh", "-c", "exit 4"])
    # internal: no route out of the subnet
    routes = n1.run(["ip", "route"]).stdout
    assert "default" not in routes, routes
    out = n1.run(["python3", "-c", "import socket; socket.create_connection(('192.0.2.1', 80))"],
                 check=False)
    assert "unreachable" in out.stderr, out

    # the store is the same path inside: put/get are copies; elsewhere they go through cat
    src = tmp_path / "f.txt"
    src.write_text("hi\n")
    inside = runtime.run_dir / "nodes" / "n2" / "f.txt"
    n2.put_file(src, str(inside))
    assert n2.run(["cat", str(inside)]).stdout == "hi\n"
    n2.put_file(src, "/etc/fc-test/f.txt")
    assert n2.run(["cat", "/etc/fc-test/f.txt"]).stdout == "hi\n"
    assert not os.path.exists("/etc/fc-test")
    n2.get_file("/etc/fc-test/f.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_text() == "hi\n"

    # a daemon's pid is a host pid in the container's network namespace
    log = runtime.run_dir / "nodes" / "n1" / "srv.log"
    d = n1.start_daemon("srv", ["python3", "-c", "import os,time; print(os.getpid(), flush=True);"
                                " time.sleep(60)"], log=log, env={"FC_T": "1"})
    runtime.ledger.record_process("n1", "srv", d.pid)
    assert os.stat(f"/proc/{d.pid}/ns/net").st_ino == os.stat(
        f"/proc/{n1.init_pid}/ns/net").st_ino
    n1.signal(d.pid, signal.SIGSTOP)
    _until(lambda: _state(d.pid) == "T")
    n1.signal(d.pid, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while not log.exists() or not log.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert int(log.read_text().split()[0]) == d.pid
    # a client in its own namespace reaches a server, and the server sees its address
    n2.start_daemon("echo", ["python3", "-c", ECHO, n2.address], log=log.with_name("echo.log"))
    # 20 s for a python3 started in a container to connect: beside the parallel suite 5 s ran out
    res = _retry(lambda: c1.run(["python3", "-c", CONNECT, n2.address], timeout_s=20))
    assert res.stdout.strip() == c1.address
    runtime.teardown()
    assert not n1.alive(d.pid)
    runtime.teardown()  # idempotent


ECHO = """
import socket, sys
s = socket.create_server((sys.argv[1], 9000))
while True:
    c, a = s.accept(); c.sendall(a[0].encode() + b"\\n"); c.close()
"""
CONNECT = """
import socket, sys
c = socket.create_connection((sys.argv[1], 9000), timeout=1); print(c.recv(100).decode())
"""


def _retry(fn: Any, timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except ClusterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _until(cond: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_partitions_use_iptables_inside_containers_and_client_namespaces(runtime: Any) -> None:
    cluster = runtime.setup(["n1", "n2"], ["c1"])
    remotes = {**cluster.servers, **cluster.clients}
    n1, n2 = cluster.servers["n1"], cluster.servers["n2"]
    n1.start_daemon("echo", ["python3", "-c", ECHO, n1.address],
                    log=runtime.run_dir / "nodes" / "n1" / "echo.log")
    probe = ["python3", "-c", CONNECT, n1.address]
    _retry(lambda: n2.run(probe, timeout_s=20))
    net = IptablesNet(remotes, runtime.run_id, runtime.ledger)
    try:
        net.drop({"n1": frozenset({"n2"})})
        assert n2.run(probe, timeout_s=5, check=False).returncode != 0
        assert remotes["c1"].run(probe, timeout_s=20).returncode == 0  # only n2 is cut off
        on_host = subprocess.run(["iptables", "-w", "-n", "-L", net.chain], capture_output=True)
        assert on_host.returncode != 0  # the chains are inside the containers
        net.drop({"c1": frozenset({"n1"})})
        assert remotes["c1"].run(probe, timeout_s=5, check=False).returncode != 0
    finally:
        net.heal()
    assert n2.run(probe, timeout_s=20).returncode == 0
    assert remotes["c1"].run(probe, timeout_s=20).returncode == 0


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_the_cleaner_removes_a_crashed_run_from_its_ledger_alone(node_image: str,
                                                                 tmp_path: Path) -> None:
    from fencecheck.clusters.runtimes.docker import DockerRuntime

    run_id = secrets.token_hex(3)
    rt = DockerRuntime(run_id, tmp_path / "store", image=node_image)  # a /24 from the pool
    try:
        cluster = rt.setup(["n1"], ["c1"])
        n1 = cluster.servers["n1"]
        d = n1.start_daemon("sleep", ["sleep", "60"], log=rt.run_dir / "sleep.log")
        assert left_by(run_id) != []
        # as `fencecheck teardown <run>` after the controller died: no live object
        removed = teardown_run(run_id)
        assert any("containers" in r for r in removed), removed
        assert left_by(run_id) == []
        assert not n1.alive(d.pid)  # unrecorded, but in the container's network namespace
    finally:
        rt.teardown()


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_an_overlapping_subnet_is_a_clear_error(runtime: Any, node_image: str,
                                               tmp_path: Path) -> None:
    from fencecheck.clusters.runtimes.docker import DockerRuntime

    runtime.setup(["n1"], [])
    other_id = secrets.token_hex(3)
    other = DockerRuntime(other_id, tmp_path / "other", str(runtime.subnet), image=node_image)
    try:
        with pytest.raises(ClusterError, match=r"docker: .*overlap"):
            other.setup(["n1"], [])
    finally:
        other.teardown()
    assert left_by(other_id) == []


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_runs_set_up_at_once_take_different_subnets(node_image: str, tmp_path: Path) -> None:
    from fencecheck.clusters.runtimes.docker import DockerRuntime

    ids = [secrets.token_hex(3) for _ in range(3)]
    rts = [DockerRuntime(i, tmp_path / i, image=node_image) for i in ids]
    try:
        at_once(*(lambda rt=rt: rt.setup(["n1"], []) for rt in rts))
        nets = [rt.subnet for rt in rts]
        assert len(set(nets)) == 3, nets
        assert not any(a.overlaps(b) for a, b in itertools.combinations(nets, 2))
    finally:
        for rt in rts:
            rt.teardown()
    for i in ids:
        assert left_by(i) == []
