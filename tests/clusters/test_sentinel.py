"""Tests of clusters/services/sentinel.py against real redis-server and redis-sentinel processes on
loopback addresses: setup and agreement, a failover after the primary is killed, the old
primary's return as a replica, a forced failover, idempotent teardown."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from fencecheck.clusters.base import ClusterError, NemesisOp
from fencecheck.clusters.faults.failover import FailoverNemesis
from fencecheck.clusters.faults.partition import IptablesNet
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.runtimes.netns import NetnsRuntime
from fencecheck.clusters.services.sentinel import MASTER_NAME, SentinelService
from tests import servers
from tests.servers import sentinel_service

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis")

sentinel = servers.sentinel  # the fixture (tests/servers.py)


def _pids(svc: SentinelService) -> list[int]:
    assert svc.redis is not None
    return [d.pid for d in svc._sentinels.values()] + [svc.redis.pid(n) for n in svc._nodes]


def test_setup_agrees_on_the_first_node_as_primary(sentinel: SentinelService) -> None:
    assert sentinel.primary() == "s1"
    assert sentinel.replicas() == ["s2", "s3"]
    assert [sentinel._role(n) for n in ("s1", "s2", "s3")] == ["master", "slave", "slave"]
    assert len(sentinel.endpoints()) == 3
    assert all(e.endswith(f":{sentinel.sentinel_port}") for e in sentinel.endpoints())
    logs = sentinel.log_files()
    assert {p.name for p in logs["s2"]} == {"redis.log", "sentinel.log"}
    view = sentinel._sentinel_view("s3")
    assert view["name"] == MASTER_NAME and view["quorum"] == "2"


def test_killing_the_primary_promotes_a_replica(sentinel: SentinelService) -> None:
    t0 = time.monotonic()
    old = sentinel.kill_primary()
    new = sentinel.wait_for_new_primary(old, timeout_s=20)
    took = time.monotonic() - t0
    assert old == "s1" and new in ("s2", "s3")
    assert sentinel._role(new) == "master"
    assert took < 15, f"failover took {took:.1f} s"
    # The old primary comes back empty; the sentinels must not hand it the primary role
    # (its demotion takes the sentinels ~10 s: the isolate test below waits for one).
    sentinel.restart(old)
    time.sleep(1.5)
    assert sentinel.primary() == new and sentinel._role(new) == "master"


def test_forced_failover_and_isolation_grudge(sentinel: SentinelService) -> None:
    new = sentinel.failover()
    assert new != "s1" and sentinel.primary() == new
    assert sentinel.isolation("s2") == {
        "s2": frozenset({"s1", "s3"}),
        "s1": frozenset({"s2"}),
        "s3": frozenset({"s2"}),
    }


def test_teardown_stops_everything_and_is_idempotent(tmp_path: Path) -> None:
    svc, nodes = sentinel_service()
    try:
        svc.setup(nodes, tmp_path / "store")
        pids = _pids(svc)
        assert len(pids) == 6
    finally:
        svc.teardown()
    svc.teardown()
    for pid in pids:
        assert not LocalRemote("x", "127.0.0.1").alive(pid)


def test_refuses_fewer_than_three_nodes(tmp_path: Path) -> None:
    svc = SentinelService()
    with pytest.raises(ClusterError, match="at least 3"):
        svc.setup({"a": LocalRemote("a", "127.0.0.1")}, tmp_path)
    svc.teardown()  # nothing started: still fine


def test_failover_nemesis_heal_is_idempotent(sentinel: SentinelService) -> None:
    with pytest.raises(ClusterError, match="mode"):
        FailoverNemesis(sentinel, mode="explode")  # type: ignore[arg-type]
    assert FailoverNemesis(sentinel).mode == "pause"  # loopback nodes: no net to cut with
    nem = FailoverNemesis(sentinel, mode="pause")
    assert nem.invoke(NemesisOp("start-failover")) == {"primary": "s1", "mode": "pause"}
    assert "skipped" in nem.invoke(NemesisOp("start-failover"))
    nem.heal()
    nem.heal()
    assert sentinel._role("s1") == "master"  # resumed (and healed before down-after)
    with pytest.raises(ClusterError, match="unknown op"):
        nem.invoke(NemesisOp("start-warp"))


@pytest.mark.netns
def test_isolating_the_primary_loses_a_lock_granted_on_it(
    runtime: NetnsRuntime, tmp_path: Path
) -> None:
    """The failover nemesis's isolate mode: the promoted replica never sees a lock granted on
    the cut-off primary, which keeps granting until the heal demotes it and drops the lock."""
    cluster = runtime.setup(["n1", "n2", "n3"], [])
    svc = SentinelService()
    try:
        svc.setup(cluster.servers, tmp_path / "store")
        nem = FailoverNemesis(svc)  # as the controller makes it: isolate, on netns nodes
        assert nem.mode == "isolate" and isinstance(nem.net, IptablesNet)
        try:
            started = nem.invoke(NemesisOp("start-failover"))
            assert started["mode"] == "isolate" and started["primary"] == "n1"
            assert started["grudge"]["n1"] == ["n2", "n3"]
            new = svc.wait_for_new_primary("n1", timeout_s=20)
            set_lock = ("SET", "fc:lock:L", "a", "NX", "PX", "60000")
            assert (svc._cli("n1", svc.port, *set_lock) or "").strip() == "OK"
            assert (svc._cli(new, svc.port, "GET", "fc:lock:L") or "").strip() == ""
            stopped = nem.invoke(NemesisOp("stop-failover"))
            assert stopped == {"node": "n1", "primary": new}
            deadline = time.monotonic() + 30
            while svc._role("n1") != "slave":
                assert time.monotonic() < deadline, "the old primary was never demoted"
                time.sleep(0.2)
            deadline = time.monotonic() + 10
            while (svc._cli("n1", svc.port, "GET", "fc:lock:L") or "").strip() != "":
                assert time.monotonic() < deadline, "the demoted primary kept the lock"
                time.sleep(0.1)
        finally:
            nem.heal()
            nem.heal()
    finally:
        svc.teardown()
