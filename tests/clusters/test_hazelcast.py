"""HazelcastService against a real 3-member cluster on loopback addresses: ready with 3 CP
members and the session TTL of the lease, log files, pause/resume, kill + restart (the new
member takes the killed one's place in the CP Subsystem), and refusals of bad settings."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencecheck.clusters.base import ClientOptions, ClusterError, Killable, LogFiles, Pausable
from fencecheck.clusters.services.hazelcast import HazelcastService, HazelcastUnsafeService
from fencecheck.clusters.services.hazelcast_config import session_ttl_s
from tests.backends import hazelcast, loopback_nodes, net, store_dir

__all__ = ["store_dir"]
log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def hz_cluster(store_dir: Path) -> Iterator[HazelcastService]:
    with hazelcast(3, "h", net(63), store_dir / "hz", lease_ms=2500) as svc:
        yield svc


def test_cluster_ready_with_three_cp_members(hz_cluster: HazelcastService) -> None:
    assert hz_cluster.ready_s is not None and hz_cluster.ready_s < 60
    log.info("hazelcast 3 members (3 CP) ready in %.2f s", hz_cluster.ready_s)
    assert hz_cluster.endpoints() == [f"{net(63)}.{i}:5701" for i in (2, 3, 4)]
    assert isinstance(hz_cluster, Pausable | Killable | LogFiles | ClientOptions)
    opts = hz_cluster.client_options()
    assert opts == {"cluster_name": hz_cluster.cluster_name, "cp": True, "session_ttl_s": 3}
    for node in hz_cluster.nodes:
        health = hz_cluster.health(node)
        assert health is not None and health["clusterSize"] == 3, health
        assert sorted(hz_cluster.cp_member_uuids(node) or []) == sorted(
            hz_cluster.cp_uuids.values())
        cfg = json.loads((hz_cluster.run_dir / "nodes" / node / "hazelcast" /  # type: ignore[operator]
                          "hazelcast.yaml").read_text())["hazelcast"]
        assert cfg["cp-subsystem"]["session-time-to-live-seconds"] == 3  # 2.5 s, rounded up
    for files in hz_cluster.log_files().values():
        assert files[0].exists() and files[0].stat().st_size > 0


def test_pause_and_resume(hz_cluster: HazelcastService) -> None:
    hz_cluster.pause("h3")
    try:
        assert hz_cluster.health("h3") is None
    finally:
        hz_cluster.resume("h3")
    hz_cluster.wait_ready(30.0, ["h3"])


def test_kill_and_restart_takes_the_killed_cp_members_place(
        hz_cluster: HazelcastService) -> None:
    old_pid, old_uuid = hz_cluster.daemons["h2"].pid, hz_cluster.cp_uuids["h2"]
    hz_cluster.kill("h2")
    assert not hz_cluster.nodes["h2"].alive(old_pid)
    hz_cluster.pause("h2")  # pause and kill nemeses overlap: pausing a dead member is a no-op
    hz_cluster.resume("h2")
    assert hz_cluster.health("h2") is None
    hz_cluster.restart("h2")
    assert hz_cluster.daemons["h2"].pid != old_pid
    new_uuid = hz_cluster.cp_uuids["h2"]
    assert new_uuid != old_uuid
    deadline = time.monotonic() + 20.0
    while sorted(hz_cluster.cp_member_uuids("h1") or []) != sorted(hz_cluster.cp_uuids.values()):
        assert time.monotonic() < deadline, hz_cluster.cp_member_uuids("h1")
        time.sleep(0.3)


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="lease_ms must be more than 1000"):
        HazelcastService(3, lease_ms=1000)
    with pytest.raises(ClusterError, match="cp_members"):
        HazelcastService(3, cp_members=2)
    with pytest.raises(ClusterError, match="want 5"):
        HazelcastService(5).setup(loopback_nodes("x", net(64), 3), tmp_path)
    assert HazelcastUnsafeService(3, lease_ms=2000).cp_members == 0
    assert session_ttl_s(2000) == 2 and session_ttl_s(2001) == 3
