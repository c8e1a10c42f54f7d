"""The `consul` backend's clients against 3 real Consul servers on loopback addresses:
- `consul-go` (the Go `api.Lock` program): grants take turns with growing ModifyIndex tokens, a
  waiter is refused at its deadline, renew renews the session and sees it gone, lock-delay is
  the session's option;
- `consul-lock` (the `consul lock` command): its child carries out the section's writes, a
  second holder is refused while it runs, release lets the next one in, and a lost lock (the
  session destroyed behind its back) kills the child, after which nothing more is written."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fencecheck.clusters.services.consul import ConsulService
from fencecheck.workloads.base import DefiniteFailure, Indeterminate, LockClient
from fencecheck.workloads.clients.consul_cli import ConsulLockClient
from fencecheck.workloads.registry import make_client, make_resource
from tests.backends import consul, net, store_dir
from tests.workloads.conftest import StartServer
from tests.workloads.lockchecks import assert_strictly_increasing, take_turns

__all__ = ["store_dir"]

# On a fresh machine the first test waits for consul's build, which the README's test command
# runs beside the tests (about 10 CPU minutes): the time limit covers that wait.
LATE_BUILD = pytest.mark.timeout(1800)
pytestmark = [LATE_BUILD]

LEASE_MS = 2000


@pytest.fixture(scope="module")
def cluster(store_dir: Path) -> Iterator[ConsulService]:
    with consul(3, "k", net(67), store_dir / "consul") as svc:
        yield svc


def options(svc: ConsulService, worker: int, **extra: Any) -> dict[str, Any]:
    return {"endpoints": svc.endpoints(), "op_timeout_s": 10.0, "worker": worker,
            **svc.client_options(), **extra}


@pytest.fixture
def go_clients(cluster: ConsulService) -> Iterator[list[LockClient]]:
    made = [make_client("consul-go", options(cluster, i, lock_delay_ms=0)) for i in range(3)]
    yield made
    for c in made:
        c.close()


def holder_session(svc: ConsulService, lock: str) -> dict[str, Any]:
    """The session holding fencecheck/<lock> (whose key is the lock itself for consul-go and
    <lock>/.lock for consul lock), as the servers report it."""
    for key in (f"fencecheck/{lock}", f"fencecheck/{lock}/.lock"):
        pairs = api(svc, "GET", f"/v1/kv/{key}?consistent")
        if pairs and pairs[0].get("Session"):
            info = api(svc, "GET", f"/v1/session/info/{pairs[0]['Session']}")
            assert info, info
            return dict(info[0])
    raise AssertionError(f"nobody holds {lock}")


def api(svc: ConsulService, method: str, path: str) -> Any:
    """One request to the first server's HTTP API: the decoded reply (404: None)."""
    r = httpx.request(method, f"http://{svc.endpoints()[0]}{path}", timeout=10.0)
    if r.status_code == 404:
        return None
    assert r.status_code == 200, (method, path, r.status_code, r.text)
    return r.json()


def test_go_grants_take_turns_with_growing_modify_index(go_clients: list[LockClient]) -> None:
    grants = take_turns(go_clients, "turns", LEASE_MS)
    assert_strictly_increasing([g.token for g in grants])


def test_go_waiter_is_refused_at_its_deadline(go_clients: list[LockClient]) -> None:
    a, b, _ = go_clients
    g = a.acquire("wait", LEASE_MS, 20.0)
    t0 = time.monotonic()
    with pytest.raises(DefiniteFailure) as e:
        b.acquire("wait", LEASE_MS, 1.0)
    assert e.value.error == "not-acquired" and time.monotonic() - t0 >= 1.0
    a.release(g)
    g2 = b.acquire("wait", LEASE_MS, 20.0)
    assert g.token is not None and g2.token is not None and g2.token > g.token
    b.release(g2)


def test_go_renew_renews_and_sees_the_session_gone(cluster: ConsulService,
                                                   go_clients: list[LockClient]) -> None:
    a = go_clients[0]
    g = a.acquire("renew", LEASE_MS, 20.0)
    assert a.renew(g, LEASE_MS).token == g.token
    sid = holder_session(cluster, "renew")["ID"]
    api(cluster, "PUT", f"/v1/session/destroy/{sid}")
    with pytest.raises(DefiniteFailure) as e:
        a.renew(g, LEASE_MS)
    assert e.value.error in ("lock-lost", "session-invalidated")


def test_go_session_ttl_and_lock_delay_are_options(cluster: ConsulService) -> None:
    # 0 is asked as 1 ms: the api leaves a zero LockDelay out, and the server then applies 15 s
    for extra, delay_ns in (({"lock_delay_ms": 0}, 1_000_000), ({}, 15 * 10**9),
                            ({"lock_delay_ms": 2500}, 2_500_000_000)):
        c = make_client("consul-go", options(cluster, 1, session_ttl_ms=3000, **extra))
        try:
            g = c.acquire(f"delay-{delay_ns}", LEASE_MS, 20.0)
            info = holder_session(cluster, f"delay-{delay_ns}")
            assert (info["LockDelay"], info["TTL"]) == (delay_ns, "3s")
            c.release(g)
        finally:
            c.close()


@pytest.fixture
def cli_pair(cluster: ConsulService, start_store: StartServer) -> Iterator[list[Any]]:
    """Two consul-lock clients, each with its resource hosted (the fenced store, unfenced)."""
    store = start_store(fencing=False)
    made = []
    for i in (0, 1):
        c = ConsulLockClient(options(cluster, i))
        res_opts = {"address": store.address, "op_timeout_s": 2.0}
        hosted = c.host_sections("store", res_opts, make_resource("store", res_opts))
        made.append((c, hosted))
    yield made
    for c, hosted in made:
        c.close()
        hosted.close()


def test_consul_lock_runs_the_section_in_its_child(cluster: ConsulService,
                                                   cli_pair: list[Any]) -> None:
    (a, res_a), (b, res_b) = cli_pair
    g = a.acquire("cl", LEASE_MS, 20.0)
    assert g.token is None
    child = a.held["cl"].child
    assert child.held and child.pid != 0
    res_a.write("cl", 7, None, "cl")
    assert res_a.read("cl", None, "cl") == 7
    info = holder_session(cluster, "cl")
    assert info["TTL"] == "15s" and info["LockDelay"] == 15 * 10**9  # consul lock's fixed ones
    with pytest.raises(DefiniteFailure) as e:
        b.acquire("cl", LEASE_MS, 1.0)
    assert e.value.error == "not-acquired"
    a.release(g)
    g2 = b.acquire("cl", LEASE_MS, 20.0)
    res_b.write("cl", 8, None, "cl")
    assert res_b.read("cl", None, "cl") == 8
    b.release(g2)


def test_consul_lock_kills_its_child_when_the_lock_is_lost(cluster: ConsulService,
                                                          cli_pair: list[Any]) -> None:
    (a, res_a), _ = cli_pair
    g = a.acquire("lost", LEASE_MS, 20.0)
    res_a.write("lost", 1, None, "lost")
    api(cluster, "PUT", f"/v1/session/destroy/{holder_session(cluster, 'lost')['ID']}")
    deadline = time.monotonic() + 30.0
    while True:  # consul lock's monitor sees the key's session gone, then SIGTERMs the child
        try:
            res_a.write("lost", 2, None, "lost")
        except DefiniteFailure as e:
            assert e.error == "child-gone"
            break
        except Indeterminate as e:  # killed while it carried this one out: the next is refused
            assert e.error == "child-gone"
        assert time.monotonic() < deadline, "the child outlived its lock by 30 s"
        time.sleep(0.05)
    a.release(g)  # consul lock has exited
    assert res_a.read("lost", None, "") in (1, 2)  # the direct read: the store kept the last
