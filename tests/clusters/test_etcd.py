"""EtcdService against a real 3-member etcd cluster on loopback addresses: ready, serving,
log files, pause/resume, and kill + restart of a member on its own data dir."""

from __future__ import annotations

import base64
import logging
import time
from pathlib import Path

import httpx
import pytest

from fencecheck.clusters.base import ClusterError, Killable, LogFiles, Pausable
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.services.etcd import EtcdService
from tests.backends import etcd_cluster, loopback_nodes, net, store_dir

__all__ = ["etcd_cluster", "store_dir"]
log = logging.getLogger(__name__)


def _put(endpoint: str, key: str, value: str) -> None:
    body = {"key": base64.b64encode(key.encode()).decode(),
            "value": base64.b64encode(value.encode()).decode()}
    httpx.post(f"http://{endpoint}/v3/kv/put", json=body, timeout=3.0).raise_for_status()


def _get(endpoint: str, key: str) -> str | None:
    body = {"key": base64.b64encode(key.encode()).decode()}
    r = httpx.post(f"http://{endpoint}/v3/kv/range", json=body, timeout=3.0)
    r.raise_for_status()
    kvs = r.json().get("kvs", [])
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def test_cluster_ready_and_serving(etcd_cluster: EtcdService) -> None:
    assert etcd_cluster.ready_s is not None and etcd_cluster.ready_s < 20
    log.info("etcd 3 members ready in %.2f s", etcd_cluster.ready_s)
    eps = etcd_cluster.endpoints()
    assert eps == [f"{net(44)}.2:2379", f"{net(44)}.3:2379", f"{net(44)}.4:2379"]
    _put(eps[0], "fc/test/a", "1")
    assert _get(eps[2], "fc/test/a") == "1"  # written on one member, read on another
    assert isinstance(etcd_cluster, Pausable | Killable | LogFiles)
    for files in etcd_cluster.log_files().values():
        assert files[0].exists() and files[0].stat().st_size > 0


def test_pause_and_resume(etcd_cluster: EtcdService) -> None:
    etcd_cluster.pause("e3")
    try:
        assert not etcd_cluster.member_healthy("e3", timeout_s=1.0)
    finally:
        etcd_cluster.resume("e3")
    etcd_cluster.wait_ready(10.0, ["e3"])


def test_kill_and_restart_one_member(etcd_cluster: EtcdService) -> None:
    eps = etcd_cluster.endpoints()
    old_pid = etcd_cluster.daemons["e2"].pid
    etcd_cluster.kill("e2")
    assert not etcd_cluster.nodes["e2"].alive(old_pid)
    etcd_cluster.pause("e2")  # pause and kill nemeses overlap: pausing a dead member is a no-op
    etcd_cluster.resume("e2")
    with pytest.raises(httpx.ConnectError):
        _get(eps[1], "fc/test/a")
    deadline = time.monotonic() + 15.0
    while True:  # a majority still serves, after an election if e2 led
        try:
            _put(eps[0], "fc/test/b", "while-down")
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
    etcd_cluster.restart("e2")
    etcd_cluster.wait_ready(15.0, ["e2"])
    assert etcd_cluster.daemons["e2"].pid != old_pid
    assert _get(eps[1], "fc/test/b") == "while-down"  # caught up from the same data dir


def test_wrong_node_count_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="want 5"):
        EtcdService(5).setup(loopback_nodes("x", net(44), 3), tmp_path)


def test_teardown_is_idempotent_and_leaves_nothing(store_dir: Path) -> None:
    svc = EtcdService(1)
    nodes = {"s1": LocalRemote("s1", f"{net(44)}.9")}
    try:
        svc.setup(nodes, store_dir / "single")
        pid = svc.daemons["s1"].pid
    finally:
        svc.teardown()
    svc.teardown()
    assert not nodes["s1"].alive(pid)
    ndir = store_dir / "single" / "nodes" / "s1"
    assert (ndir / "etcd.log").exists() and not (ndir / "etcd").exists()  # 64 MB WAL gone
