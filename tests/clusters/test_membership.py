"""Membership changes on real ensembles (etcd 3.4 and ZooKeeper 3.8, three members each on
loopback addresses 127.W.70.x and 127.W.71.x): the leader removed leaves a serving ensemble of
two, a fresh member added on its node (a new id, an empty data directory) serves the data
written before, a killed fresh member restarts on its own data, and the nemesis's heal after a
start that was never stopped brings back the original membership."""

from __future__ import annotations

import time
from collections.abc import Iterator
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


def _etcd_get(svc: EtcdService, node: str, key: str) -> str:
    url = f"http://{svc.nodes[node].address}:{svc.client_port}"
    res = svc.nodes[node].run([ETCDCTL, f"--endpoints={url}", "get", "--print-value-only", key])
    return res.stdout.strip()


def _until(what: str, check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not callable(check) or not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not {what} after {timeout_s} s")
        time.sleep(0.2)


def test_etcd_leader_removed_and_a_fresh_member_added(etcd3: EtcdService) -> None:
    assert isinstance(etcd3, Reconfigurable)
    nodes = sorted(etcd3.nodes)
    before = etcd3.members()
    assert sorted(before) == nodes
    url = f"http://{etcd3.nodes[nodes[0]].address}:{etcd3.client_port}"
    etcd3.nodes[nodes[0]].run([ETCDCTL, f"--endpoints={url}", "put", "fc-before", "kept"])
    leader = etcd3.leader()
    assert leader in nodes
    removed = etcd3.remove_member(leader)
    assert removed["member"] == before[leader] and removed["members"] == \
        [n for n in nodes if n != leader]
    assert not etcd3.running(leader)
    _until("a new leader", lambda: etcd3.leader() not in (None, leader))
    added = etcd3.add_member(leader)
    assert added["members"] == nodes and added["member"] != before[leader]
    assert added["name"] == f"{leader}-g2" and etcd3.members()[leader] == added["member"]
    assert _etcd_get(etcd3, leader, "fc-before") == "kept"  # the fresh member caught up
    etcd3.kill(leader)  # a fresh member restarts on its own data
    etcd3.restart(leader)
    etcd3.wait_ready(30.0, [leader])
    assert etcd3.members() == {**before, leader: added["member"]}


def test_etcd_heal_after_a_start_never_stopped(etcd3: EtcdService) -> None:
    nem = MembershipNemesis(etcd3, sorted(etcd3.nodes))
    out = nem.invoke(NemesisOp("start-membership", {"node": LEADER}))
    assert out["was_leader"] and out["removed"] not in out["members"]
    nem.heal()
    assert sorted(etcd3.members()) == sorted(etcd3.nodes)
    etcd3.wait_ready(30.0)
    nem.heal()  # again: nothing to do
    assert sorted(etcd3.members()) == sorted(etcd3.nodes)


def test_zookeeper_leader_removed_and_a_fresh_server_added(zk3: ZookeeperService) -> None:
    assert isinstance(zk3, Reconfigurable)
    nodes = sorted(zk3.nodes)
    before = zk3.members()
    assert before == {n: str(i) for i, n in enumerate(nodes, start=1)}
    zk = KazooClient(hosts=",".join(zk3.endpoints()), timeout=5.0)
    zk.start(timeout=20)
    try:
        zk.create("/fc-before", b"kept")
        leader = zk3.leader()
        assert leader in nodes
        removed = zk3.remove_member(leader)
        assert removed["member"] == before[leader]
        assert removed["members"] == [n for n in nodes if n != leader]
        _until("a new leader", lambda: zk3.leader() not in (None, leader))
        zk.create("/fc-while-two", b"x")  # two of two serve
        added = zk3.add_member(leader)
        assert added["members"] == nodes and added["member"] == "4"
        assert zk3.members() == {**before, leader: "4"}
        assert zk3.mode(leader) in ("follower", "leader")
    finally:
        zk.stop()
        zk.close()
    fresh = KazooClient(hosts=f"{zk3.nodes[leader].address}:{zk3.client_port}", timeout=5.0)
    fresh.start(timeout=20)
    try:
        assert fresh.get("/fc-before")[0] == b"kept"
    finally:
        fresh.stop()
        fresh.close()


def test_zookeeper_heal_after_a_start_never_stopped(zk3: ZookeeperService) -> None:
    nodes = sorted(zk3.nodes)
    nem = MembershipNemesis(zk3, nodes)
    out = nem.invoke(NemesisOp("start-membership", {"node": nodes[0]}))
    assert out["removed"] == nodes[0] and nodes[0] not in out["members"]
    nem.heal()
    assert sorted(zk3.members()) == nodes
    zk3.kill(nodes[0])  # the healed member, a fresh server, restarts on its own data
    zk3.restart(nodes[0])
    zk3.wait_ready(60.0, [nodes[0]])
