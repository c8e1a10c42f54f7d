"""The election clients (workloads/clients/leader.py) against real servers on loopback: etcd's
election service, kazoo's Election on ZooKeeper, and a Redis lease. One leader at a time, terms
that grow, and a paused leader (a real SIGSTOPped process) that is deposed and whose late action
the fenced store refuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.services.etcd import EtcdService
from fencecheck.clusters.services.zookeeper import ZookeeperService
from fencecheck.workloads.base import DefiniteFailure, LockClient, StaleToken
from fencecheck.workloads.clients.leader import (
    EtcdElectionClient,
    RedisLeaseClient,
    ZkElectionClient,
)
from fencecheck.workloads.registry import make_client
from fencecheck.workloads.resources.store import StoreResource
from tests.backends import etcd, net, store_dir, zookeeper
from tests.workloads.conftest import REPO, StartServer

__all__ = ["store_dir"]

CLIENTS = ("etcd-election", "zookeeper-election", "redis-lease")

# A candidate in its own process, so SIGSTOP pauses it (and its keepalives) like a GC pause.
CANDIDATE = """
import json, sys
from fencecheck.workloads.registry import make_client
from fencecheck.workloads.resources.store import StoreResource
client = make_client(sys.argv[1], json.loads(sys.argv[2]))
store = StoreResource({"address": sys.argv[3], "op_timeout_s": 2.0})
lease_ms = int(sys.argv[4])
g = client.acquire("leader", lease_ms, 10.0)
print(json.dumps({"term": g.token}), flush=True)
for line in sys.stdin:
    cmd = line.split()
    try:
        if cmd[0] == "write":
            store.write("leader", int(cmd[1]), g.token, "leader")
        else:
            g = client.renew(g, lease_ms)
        out = "ok"
    except Exception as e:
        out = getattr(e, "error", repr(e))
    print(json.dumps({cmd[0]: out}), flush=True)
client.close()
"""


@pytest.fixture(scope="module")
def etcd_one(store_dir: Path) -> Iterator[EtcdService]:
    """One etcd member on an address of its own (127.W.48.x: no clash with other modules)."""
    with etcd(1, "le", net(48), store_dir / "etcd") as svc:
        yield svc


@pytest.fixture(scope="module")
def zk_one(store_dir: Path) -> Iterator[ZookeeperService]:
    with zookeeper(1, "lz", net(49), store_dir / "zk") as svc:
        yield svc


@pytest.fixture
def options(request: pytest.FixtureRequest, start_redis: StartServer) -> Callable[[str],
                                                                                  dict[str, Any]]:
    """client name -> its options; each backend is started only when a test asks for it."""

    def make(name: str) -> dict[str, Any]:
        if name == "redis-lease":
            if not hasattr(make, "redis"):
                make.redis = start_redis()  # type: ignore[attr-defined]
            endpoints = [make.redis.address]  # type: ignore[attr-defined]
        else:
            fixture = "etcd_one" if name == "etcd-election" else "zk_one"
            endpoints = request.getfixturevalue(fixture).endpoints()
        return {"endpoints": endpoints, "op_timeout_s": 1.0}

    return make


@pytest.fixture
def clients(options: Callable[[str], dict[str, Any]]) -> Iterator[Callable[[str], LockClient]]:
    made: list[LockClient] = []

    def make(name: str) -> LockClient:
        c = make_client(name, options(name))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def candidates() -> Iterator[Callable[[list[str]], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(argv: list[str]) -> subprocess.Popen[str]:
        p = subprocess.Popen([sys.executable, "-c", CANDIDATE, *argv], cwd=REPO, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)  # a stopped process cannot die of SIGKILL's wait
            p.kill()
        p.wait(10)


def line(p: subprocess.Popen[str]) -> dict[str, Any]:
    assert p.stdout is not None
    text = p.stdout.readline()
    assert text, f"candidate exited with {p.poll()}"
    out: dict[str, Any] = json.loads(text)
    return out


def say(p: subprocess.Popen[str], text: str) -> None:
    assert p.stdin is not None
    p.stdin.write(text + "\n")
    p.stdin.flush()


def test_registered_names() -> None:
    opts = {"endpoints": ["127.0.0.1:1"], "op_timeout_s": 0.5}
    kinds = (EtcdElectionClient, ZkElectionClient, RedisLeaseClient)
    for name, kind in zip(CLIENTS, kinds, strict=True):
        c = make_client(name, opts)
        assert isinstance(c, kind) and c.name == name
        c.close()


@pytest.mark.parametrize("name", CLIENTS)
def test_one_leader_at_a_time_and_terms_grow(name: str,
                                             clients: Callable[[str], LockClient]) -> None:
    a, b = clients(name), clients(name)
    lock = f"one-{name}"
    ga = a.acquire(lock, 5000, 2.0)
    assert isinstance(ga.token, int)
    with pytest.raises(DefiniteFailure) as e:
        b.acquire(lock, 5000, 0.5)  # a is in office throughout
    assert e.value.error == "timeout"
    ga = a.renew(ga, 5000)  # still in office
    assert isinstance(ga.token, int)
    a.release(ga)  # resign
    with pytest.raises(DefiniteFailure):
        a.renew(ga, 5000)  # no longer leader
    gb = b.acquire(lock, 5000, 2.0)
    assert isinstance(gb.token, int) and gb.token > ga.token
    b.release(gb)
    gc = a.acquire(lock, 5000, 2.0)
    assert isinstance(gc.token, int) and gc.token > gb.token
    a.release(gc)


@pytest.mark.parametrize("name", CLIENTS)
def test_paused_leader_is_deposed_and_its_late_action_refused(
    name: str,
    options: Callable[[str], dict[str, Any]],
    clients: Callable[[str], LockClient],
    candidates: Callable[[list[str]], subprocess.Popen[str]],
    start_store: StartServer,
) -> None:
    store_server = start_store(fencing=True)
    store = StoreResource({"address": store_server.address, "op_timeout_s": 2.0})
    lease_ms = 1000
    a = candidates([name, json.dumps(options(name)), store_server.address, str(lease_ms)])
    term_a = line(a)["term"]
    say(a, "write 1")
    assert line(a) == {"write": "ok"}
    os.kill(a.pid, signal.SIGSTOP)  # the leader's GC pause: no keepalive, no ping
    b = clients(name)
    t0 = time.monotonic()
    gb = b.acquire("leader", lease_ms, 20.0)  # elected once a's lease/session runs out
    waited = time.monotonic() - t0
    assert isinstance(gb.token, int) and gb.token > term_a
    assert waited >= 0.3, f"elected after {waited:.2f} s while the leader was still in office"
    store.write("leader", 2, gb.token, "leader")
    say(a, "write 99")  # the action a was about to take when it paused
    os.kill(a.pid, signal.SIGCONT)
    assert line(a) == {"write": "stale-token"}
    say(a, "renew")
    assert line(a)["renew"] != "ok"  # deposed
    assert store.read("leader", gb.token, "leader") == 2
    with pytest.raises(StaleToken):
        store.write("leader", 3, term_a, "leader")
    b.release(gb)
    store.close()
