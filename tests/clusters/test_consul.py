"""ConsulService against 3 real Consul servers (the pinned v1.16.1 build) on loopback addresses:
ready and serving sessions through every server; which index of a lock key is a fencing token
(ModifyIndex grows with every grant, LockIndex starts again once the key is deleted); what
lock-delay does after a session is invalidated; a session outlives its TTL; pause/resume; kill
and restart; teardown leaves nothing."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fencecheck.clusters.base import ClientOptions, ClusterError, Killable, LogFiles, Pausable
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.services import consul_build
from fencecheck.clusters.services.consul import ConsulService
from tests.backends import consul_binary, consul_cluster, loopback_nodes, net, store_dir

# On a fresh machine the first test waits for consul's build, which the README's test command
# runs beside the tests (about 10 CPU minutes): the time limit covers that wait.
LATE_BUILD = pytest.mark.timeout(1800)
pytestmark = [LATE_BUILD]

__all__ = ["consul_cluster", "store_dir"]
log = logging.getLogger(__name__)


def api(svc: ConsulService, node: str, method: str, path: str, body: Any = None) -> Any:
    """One request to a server's HTTP API from the test (the servers are on loopback): the
    decoded reply; a status other than 200 fails the test."""
    url = f"http://{svc.nodes[node].address}:{svc.http_port}{path}"
    r = httpx.request(method, url, json=body, timeout=10.0)
    assert r.status_code == 200, (method, path, r.status_code, r.text)
    return r.json()


def session(svc: ConsulService, node: str, **body: Any) -> str:
    return str(api(svc, node, "PUT", "/v1/session/create", body)["ID"])


def acquire(svc: ConsulService, node: str, key: str, sid: str) -> bool:
    return api(svc, node, "PUT", f"/v1/kv/{key}?acquire={sid}", {"holder": sid}) is True


def release(svc: ConsulService, node: str, key: str, sid: str) -> None:
    assert api(svc, node, "PUT", f"/v1/kv/{key}?release={sid}", {"holder": None}) is True


def entry(svc: ConsulService, node: str, key: str) -> dict[str, Any]:
    return dict(api(svc, node, "GET", f"/v1/kv/{key}?consistent")[0])


def destroy(svc: ConsulService, node: str, sid: str) -> None:
    api(svc, node, "PUT", f"/v1/session/destroy/{sid}")


def test_cluster_ready_and_serving_through_every_server(consul_cluster: ConsulService) -> None:
    svc = consul_cluster
    assert svc.ready_s is not None and svc.ready_s < 30
    log.info("consul: 3 servers ready in %.2f s", svc.ready_s)
    assert svc.endpoints() == [f"{net(66)}.{i}:8500" for i in (2, 3, 4)]
    assert isinstance(svc, Pausable | Killable | LogFiles | ClientOptions)
    assert svc.client_options() == {"consul_binary": str(consul_build.binary())}
    for files in svc.log_files().values():
        assert files[0].exists() and files[0].stat().st_size > 0
    # through the node's Remote (a python3 start on the node: slow at a high load)
    assert svc.http("c1", "GET", "/v1/status/peers", timeout_s=30.0)[0] == 200
    assert len(api(svc, "c1", "GET", "/v1/status/peers")) == 3
    sid = session(svc, "c1", Name="fc-test", TTL="10s")
    info = api(svc, "c3", "GET", f"/v1/session/info/{sid}?consistent")
    assert info and info[0]["ID"] == sid  # replicated
    assert info[0]["NodeChecks"] == ["serfHealth"] and info[0]["Node"] == "c1"
    destroy(svc, "c1", sid)


def test_modify_index_grows_with_every_grant_and_lock_index_does_not(
        consul_cluster: ConsulService) -> None:
    """The token: a grant is an `acquire` of the key by a session. LockIndex counts those on one
    key and starts again at 1 when the key is deleted (as `consul lock` deletes its key when no
    one waits); ModifyIndex is the Raft index of the acquiring write, which never goes back."""
    svc, key = consul_cluster, "fc-token/.lock"
    a = session(svc, "c1", Name="a", TTL="30s", LockDelay="0s")
    b = session(svc, "c2", Name="b", TTL="30s", LockDelay="0s")
    lock_index, modify_index = [], []
    for holder, node, delete in ((a, "c1", False), (b, "c2", True), (a, "c3", False)):
        assert acquire(svc, node, key, holder)
        e = entry(svc, node, key)
        assert e["Session"] == holder
        lock_index.append(e["LockIndex"])
        modify_index.append(e["ModifyIndex"])
        release(svc, node, key, holder)
        if delete:
            assert api(svc, node, "DELETE", f"/v1/kv/{key}") is True
    assert lock_index == [1, 2, 1]  # repeated: not a token
    assert modify_index == sorted(modify_index) and len(set(modify_index)) == 3
    for sid in (a, b):
        destroy(svc, "c1", sid)


def test_lock_delay_holds_an_invalidated_holders_key(consul_cluster: ConsulService) -> None:
    """After the holding session is invalidated (destroyed here), its lock-delay keeps the key
    from every other session: Consul's default 15 s, or none when the session asked for 0."""
    svc = consul_cluster
    for delay, key in ((None, "fc-delay-default"), ("0s", "fc-delay-zero")):
        body = {"Name": "holder", "TTL": "30s"} | ({"LockDelay": delay} if delay else {})
        holder = session(svc, "c1", **body)
        info = api(svc, "c1", "GET", f"/v1/session/info/{holder}")
        assert info[0]["LockDelay"] == (0 if delay else 15 * 10**9)
        assert acquire(svc, "c1", key, holder)
        destroy(svc, "c1", holder)
        other = session(svc, "c2", Name="other", TTL="30s", LockDelay="0s")
        assert acquire(svc, "c2", key, other) is (delay == "0s")
        destroy(svc, "c2", other)


def test_a_session_outlives_its_ttl_without_renewal(consul_cluster: ConsulService) -> None:
    """A server invalidates a silent session after its TTL at the earliest (the checker's lease
    counts one TTL); Consul waits up to twice the TTL."""
    svc = consul_cluster
    sid = session(svc, "c1", Name="ttl", TTL="1s")
    t0 = time.monotonic()  # after it was made: the time to its end is at most what we see
    while True:
        if not api(svc, "c2", "GET", f"/v1/session/info/{sid}?consistent"):
            break
        assert time.monotonic() - t0 < 15.0, "a 1 s session was never invalidated"
        time.sleep(0.05)
    gone = time.monotonic() - t0
    log.info("a 1 s session was invalidated after %.2f s", gone)
    assert gone >= 1.0


def test_pause_and_resume(consul_cluster: ConsulService) -> None:
    consul_cluster.pause("c3")
    try:
        assert consul_cluster.http("c3", "GET", "/v1/status/leader", timeout_s=1.0)[0] == 0
    finally:
        consul_cluster.resume("c3")
    consul_cluster.wait_ready(120.0, ["c3"])


def test_kill_and_restart_one_server(consul_cluster: ConsulService) -> None:
    svc = consul_cluster
    old_pid = svc.daemons["c2"].pid
    svc.kill("c2")
    assert not svc.nodes["c2"].alive(old_pid)
    svc.pause("c2")  # pause and kill nemeses overlap: pausing a dead server is a no-op
    svc.resume("c2")
    deadline = time.monotonic() + 120.0
    while not svc.serving("c1"):  # a majority serves, after an election if c2 led
        assert time.monotonic() < deadline
        time.sleep(0.3)
    svc.restart("c2")
    svc.wait_ready(120.0, ["c2"])
    assert svc.daemons["c2"].pid != old_pid


def test_wrong_node_count_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="want 5"):
        ConsulService(5).setup(loopback_nodes("x", net(66), 3), tmp_path)


def test_teardown_is_idempotent_and_leaves_nothing(store_dir: Path) -> None:
    svc = ConsulService(1, binary=consul_binary())
    nodes = {"s1": LocalRemote("s1", f"{net(66)}.9")}
    try:
        svc.setup(nodes, store_dir / "single")
        pid = svc.daemons["s1"].pid
        assert svc.serving("s1", timeout_s=30.0)
    finally:
        svc.teardown()
    svc.teardown()
    assert not nodes["s1"].alive(pid)
    assert not (store_dir / "single" / "nodes" / "s1" / "consul").exists()
