"""Membership changes on real ensembles (etcd 3.4 and ZooKeeper 3.8, three members each on
loopback addresses 127.W.70.x and 127.W.71.x), through the nemesis: its start removes the leader
and leaves a serving ensemble of two; its heal, with no stop before it (a run that ended
mid-change), adds a fresh member on that node (a new id, an empty data directory) and so brings
back the original membership; the fresh member serves what was written before it came, and a
fresh member killed restarts on its own data. A second heal has nothing to do."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from fencecheck.clusters.base import NemesisOp, Reconfigurable
from fencecheck.clusters.faults.membership import LEADER, MembershipNemesis
from fencecheck.clusters.services.etcd import ETCDCTL, EtcdService
from fencecheck.clusters.services.zookeeper import ZookeeperService
from tests.backends import etcd, net, store_dir, zookeeper

__all__ = ["store_dir"]


@pytest.fixture(scope="module")
def etcd3(store_dir: Path) -> Iterator[EtcdService]:
    with etcd(3, "m", net(70), store_dir / "etcd") as svc:
        yield svc


@pytest.fixture(scope="module")
def zk3(store_dir: Path) -> Iterator[ZookeeperService]:
    with zookeeper(3, "k", net(71), store_dir / "zk") as svc:
        yield svc


def _until(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not {what} after {timeout_s} s")
        time.sleep(0.2)


def _etcdctl(svc: EtcdService, node: str, *args: str) -> str:
    url = f"http://{svc.nodes[node].address}:{svc.client_port}"
    return svc.nodes[node].run([ETCDCTL, f"--endpoints={url}", *args]).stdout.strip()


def test_etcd_leader_removed_then_healed_by_a_fresh_member(etcd3: EtcdService) -> None:
    assert isinstance(etcd3, Reconfigurable)
    nodes = sorted(etcd3.nodes)
    before = etcd3.members()
    assert sorted(before) == nodes
    _etcdctl(etcd3, nodes[0], "put", "fc-before", "kept")
    nem = MembershipNemesis(etcd3, nodes)
    out = nem.invoke(NemesisOp("start-membership", {"node": LEADER}))
    gone = out["removed"]
    assert out["was_leader"] and out["member"] == before[gone]
    assert out["members"] == [n for n in nodes if n != gone] and not etcd3.running(gone)
    _until("a new leader", lambda: etcd3.leader() not in (None, gone))
    nem.heal()
    after = etcd3.members()
    assert sorted(after) == nodes and after[gone] != before[gone]
    assert {n: m for n, m in after.items() if n != gone} == \
        {n: m for n, m in before.items() if n != gone}
    assert _etcdctl(etcd3, gone, "get", "--print-value-only", "fc-before") == "kept"
    etcd3.kill(gone)  # the fresh member restarts on its own data
    etcd3.restart(gone)
    etcd3.wait_ready(30.0, [gone])
    nem.heal()
    assert etcd3.members() == after


def test_zookeeper_leader_removed_then_healed_by_a_fresh_server(zk3: ZookeeperService) -> None:
    assert isinstance(zk3, Reconfigurable)
    nodes = sorted(zk3.nodes)
    before = zk3.members()
    assert before == {n: str(i) for i, n in enumerate(nodes, start=1)}
    # A session that outlives an election on a loaded machine (5 s expired once)
    zk = KazooClient(hosts=",".join(zk3.endpoints()), timeout=30.0)
    zk.start(timeout=20)
    try:
        zk.create("/fc-before", b"kept")
        nem = MembershipNemesis(zk3, nodes)
        out = nem.invoke(NemesisOp("start-membership", {"node": LEADER}))
        gone = out["removed"]
        assert out["was_leader"] and out["member"] == before[gone]
        assert out["members"] == [n for n in nodes if n != gone]
        _until("a new leader", lambda: zk3.leader() not in (None, gone))
        zk.create("/fc-while-two", b"x")  # two of two serve
        nem.heal()
    finally:
        zk.stop()
        zk.close()
    assert zk3.members() == {**before, gone: "4"}  # the same nodes, a fresh server id
    assert zk3.mode(gone) in ("follower", "leader")
    fresh = KazooClient(hosts=f"{zk3.nodes[gone].address}:{zk3.client_port}", timeout=30.0)
    fresh.start(timeout=20)
    try:
        assert fresh.get("/fc-before")[0] == b"kept"
    finally:
        fresh.stop()
        fresh.close()
    zk3.kill(gone)  # the fresh server restarts on its own data and configuration
    zk3.restart(gone)
    zk3.wait_ready(60.0, [gone])
    nem.heal()
    assert zk3.members() == {**before, gone: "4"}
