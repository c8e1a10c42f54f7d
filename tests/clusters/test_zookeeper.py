"""ZookeeperService against a real 3-server ensemble on loopback addresses: ready (one leader),
serving through kazoo, session timeouts as asked, kill + restart of the leader."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from fencecheck.clusters.base import ClusterError, Killable, LogFiles, Pausable
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.services.zookeeper import ZookeeperService
from tests.backends import loopback_nodes, net, store_dir, zk_cluster
from tests.conftest import all_threads_stopped

__all__ = ["store_dir", "zk_cluster"]
log = logging.getLogger(__name__)


@pytest.fixture
def kazoo(zk_cluster: ZookeeperService) -> Iterator[KazooClient]:
    zk = KazooClient(hosts=",".join(zk_cluster.endpoints()), timeout=2.0)
    zk.start(timeout=10)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def test_ensemble_ready_with_one_leader(zk_cluster: ZookeeperService) -> None:
    assert zk_cluster.ready_s is not None and zk_cluster.ready_s < 30
    log.info("zookeeper 3 servers ready in %.2f s", zk_cluster.ready_s)
    modes = sorted(zk_cluster.mode(n) or "-" for n in zk_cluster.nodes)
    assert modes == ["follower", "follower", "leader"]
    assert zk_cluster.endpoints() == [f"{net(45)}.2:2181", f"{net(45)}.3:2181", f"{net(45)}.4:2181"]
    assert isinstance(zk_cluster, Pausable | Killable | LogFiles)
    assert zk_cluster.four_letter("z1", "ruok") == "imok"
    for files in zk_cluster.log_files().values():
        assert files[0].exists() and "QuorumPeer" in files[0].read_text()


def test_config_allows_long_and_short_sessions(zk_cluster: ZookeeperService) -> None:
    cfg = zk_cluster.config("z1")
    assert "minSessionTimeout=400\n" in cfg and "maxSessionTimeout=120000\n" in cfg
    assert f"clientPortAddress={net(45)}.2\n" in cfg


def test_kill_and_restart_leader_keeps_serving(
    zk_cluster: ZookeeperService, kazoo: KazooClient
) -> None:
    kazoo.ensure_path("/fc/test")
    leader = next(n for n in zk_cluster.nodes if zk_cluster.mode(n) == "leader")
    zk_cluster.kill(leader)
    assert zk_cluster.mode(leader) is None
    others = [n for n in zk_cluster.nodes if n != leader]
    zk_cluster.wait_ready(20.0, others)  # the two survivors elect a new leader
    deadline = time.monotonic() + 20
    while True:  # the session reconnects to a survivor on its own
        try:
            kazoo.create("/fc/test/while-down", b"x")
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    zk_cluster.restart(leader)
    zk_cluster.wait_ready(30.0, [leader])
    assert zk_cluster.mode(leader) == "follower"


def test_pause_and_resume(zk_cluster: ZookeeperService) -> None:
    node = next(n for n in zk_cluster.nodes if zk_cluster.mode(n) == "follower")
    zk_cluster.pause(node)
    try:
        # kill(2) returns before a busy thread has stopped: ask only once every one has
        assert all_threads_stopped(zk_cluster.daemons[node].pid)
        assert zk_cluster.four_letter(node, "ruok", timeout_s=1.0) is None
    finally:
        zk_cluster.resume(node)
    zk_cluster.wait_ready(20.0, [node])


def test_wrong_node_count_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="want 5"):
        ZookeeperService(5).setup(loopback_nodes("x", net(45), 3), tmp_path)


def test_teardown_is_idempotent(store_dir: Path) -> None:
    svc = ZookeeperService(1)
    node = LocalRemote("s1", f"{net(45)}.9")
    try:
        svc.setup({"s1": node}, store_dir / "single")
        assert svc.mode("s1") == "standalone"
        pid = svc.daemons["s1"].pid
    finally:
        svc.teardown()
    svc.teardown()
    assert not node.alive(pid)
    conf = store_dir / "single" / "nodes" / "s1" / "zookeeper"
    assert (conf / "zoo.cfg").exists() and not (conf / "data").exists()
