"""The FencedLock clients against a real 3-member cluster with the CP Subsystem:
HazelcastLockClient (hazelcast-python-client): fences that grow, refusal while held, renewal past
the session TTL, a holder killed (its session expires), a cluster that cannot be reached; and the
Java client's program (`hazelcast-java`, through the stdio protocol): the same grants, renewal
and refusals, on the same locks as the Python client."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.services.hazelcast import HazelcastService
from fencecheck.workloads.base import DefiniteFailure, WorkloadError
from fencecheck.workloads.clients.build import NotBuilt, command
from fencecheck.workloads.clients.hazelcast import HazelcastHandle, HazelcastLockClient
from fencecheck.workloads.clients.third_party import ShippedClient
from tests.backends import hazelcast, net, store_dir
from tests.workloads.lockchecks import assert_strictly_increasing, take_turns

__all__ = ["store_dir"]

LEASE_MS = 2000  # the CP session TTL: 2 s


@pytest.fixture(scope="module")
def hz_cluster(store_dir: Path) -> Iterator[HazelcastService]:
    with hazelcast(3, "k", net(64), store_dir / "hz", lease_ms=LEASE_MS) as svc:
        yield svc


def _client(svc: HazelcastService, worker: int) -> HazelcastLockClient:
    # 10 s for an answer: waiting is harmless here, and a starved member took over 2.5 s once
    opts: dict[str, Any] = {"endpoints": svc.endpoints(), "op_timeout_s": 10.0,
                            "worker": worker, **svc.client_options()}
    return HazelcastLockClient(opts)


@pytest.fixture(scope="module")
def clients(hz_cluster: HazelcastService) -> Iterator[list[HazelcastLockClient]]:
    made = [_client(hz_cluster, i) for i in range(3)]
    # Each client's first lock call opens its CP session and the group's proxies: on a starved
    # machine (CI, beside the suite) it once took over the 2.5 s the turn-taking test allows a
    # try_lock. The tests are about what comes after, so every client opens its session first.
    for c in made:
        c.release(c.acquire("open-the-session", LEASE_MS, 10.0))
    yield made
    for c in made:
        c.close()


def test_fences_are_the_tokens_and_grow(clients: list[HazelcastLockClient]) -> None:
    grants = take_turns(clients, "inc", LEASE_MS)
    assert all(isinstance(g.handle, HazelcastHandle) for g in grants)
    assert_strictly_increasing([g.token for g in grants])


def test_refused_while_held_then_granted_after_release(
        clients: list[HazelcastLockClient]) -> None:
    a, b, _ = clients
    g = a.acquire("excl", LEASE_MS, 2.0)
    t0 = time.monotonic()
    with pytest.raises(DefiniteFailure) as e:
        b.acquire("excl", LEASE_MS, 0.5)
    assert e.value.error == "timeout" and time.monotonic() - t0 >= 0.5
    with pytest.raises(DefiniteFailure, match="held"):
        b.acquire("excl", LEASE_MS, 0)
    released = a.release(g)
    g2 = b.acquire("excl", LEASE_MS, 2.0)
    assert g.token is not None and g2.token is not None and g2.token > g.token
    with pytest.raises(DefiniteFailure) as e2:
        a.release(g)  # a no longer holds it: unlock refuses
    assert e2.value.error == "not-held"
    # each op names its CP session (a's grant, its unlock and its refused unlock: one session)
    assert g.evidence is not None and g2.evidence is not None
    a_session = g.evidence["evidence"]["cp_session"]
    assert isinstance(a_session, int) and isinstance(g2.evidence["evidence"]["cp_session"], int)
    assert released == {"evidence": {"cp_session": a_session}}
    assert e2.value.evidence == {"cp_session": a_session}
    with pytest.raises(DefiniteFailure):
        a.renew(g, LEASE_MS)
    b.release(g2)


def test_a_grant_dropped_unreleased_is_let_go_before_the_next_acquire(
        clients: list[HazelcastLockClient]) -> None:
    # the worker drops a grant unreleased after a read or write of unknown outcome; the next
    # acquire must be a new grant, not a re-entry with the same fence, and not before the
    # dropped grant's lease ran out (the retired process may still act under it)
    a, b, _ = clients
    g = a.acquire("dropped", LEASE_MS, 2.0)
    with pytest.raises(DefiniteFailure) as e:
        a.acquire("dropped", LEASE_MS, 2.0)
    assert e.value.error == "unsettled"
    time.sleep(LEASE_MS / 1000)
    g2 = a.acquire("dropped", LEASE_MS, 2.0)
    assert g.token is not None and g2.token is not None and g2.token > g.token
    a.release(g2)
    g3 = b.acquire("dropped", LEASE_MS, 2.0)  # nothing of a's is left holding it
    b.release(g3)


def test_renewal_keeps_the_same_fence_and_the_lock(clients: list[HazelcastLockClient]) -> None:
    a, b, _ = clients
    g = a.acquire("renew", LEASE_MS, 2.0)
    for _ in range(3):  # 3 x 1 s past the 2 s TTL: the session lives on (heartbeats, renewals)
        time.sleep(1.0)
        g = a.renew(g, LEASE_MS)
        with pytest.raises(DefiniteFailure):
            b.acquire("renew", LEASE_MS, 0)
    a.release(g)
    b.release(b.acquire("renew", LEASE_MS, 2.0))  # renewals left no hold behind


# A client that acquires, prints its fence and waits to be killed (no release, no session close).
_HOLDER = """
import json, sys, time
from fencecheck.workloads.clients.hazelcast import HazelcastLockClient
c = HazelcastLockClient(json.loads(sys.argv[1]))
print(c.acquire("ttl", 2000, 5.0).token, flush=True)
time.sleep(60)
"""


def test_a_killed_holder_loses_its_lock_at_the_session_ttl(
        hz_cluster: HazelcastService, clients: list[HazelcastLockClient]) -> None:
    opts = {"endpoints": hz_cluster.endpoints(), "op_timeout_s": 2.0, "worker": 1,
            **hz_cluster.client_options()}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, json.dumps(opts)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        token = int(holder.stdout.readline())
    finally:
        holder.kill()
        holder.wait()
    t0 = time.monotonic()
    g2 = clients[0].acquire("ttl", LEASE_MS, 15.0)
    waited = time.monotonic() - t0
    assert g2.token is not None and g2.token > token
    # Not before the 2 s TTL (less what passed between the print and the kill), well within 15.
    assert 1.0 < waited < 12.0, waited
    clients[0].release(g2)


def test_unreachable_cluster_is_a_workload_error() -> None:
    with pytest.raises(WorkloadError, match="cannot connect"):
        HazelcastLockClient({"endpoints": [f"{net(64)}.99:5701"], "op_timeout_s": 0.5,
                             "cluster_name": "nobody", "connect_timeout_s": 2.0})


# -- the Java client's program (workloads/clients/java/hazelcast), through the stdio protocol


@pytest.fixture(scope="module")
def java_clients(hz_cluster: HazelcastService) -> Iterator[list[ShippedClient]]:
    try:
        command("hazelcast-java")
    except NotBuilt as e:
        pytest.fail(str(e))  # the README's test command builds it: not a skip
    made = [ShippedClient({"program": "hazelcast-java", "endpoints": hz_cluster.endpoints(),
                           "op_timeout_s": 2.0, "worker": i, "start_timeout_s": 60.0,
                           **hz_cluster.client_options()}) for i in range(3)]
    yield made
    for c in made:
        c.close()


def test_java_fences_grow_and_a_held_lock_is_refused(java_clients: list[ShippedClient]) -> None:
    assert_strictly_increasing([g.token for g in take_turns(java_clients, "java", LEASE_MS)])
    a, b, _ = java_clients
    g = a.acquire("java-excl", LEASE_MS, 2.0)
    with pytest.raises(DefiniteFailure) as e:
        b.acquire("java-excl", LEASE_MS, 0.5)
    assert e.value.error == "timeout"
    g = a.renew(g, LEASE_MS)  # a re-entry and an unlock: still held, same fence
    with pytest.raises(DefiniteFailure):
        b.acquire("java-excl", LEASE_MS, 0)
    a.release(g)
    with pytest.raises(DefiniteFailure) as e2:
        a.release(g)
    assert e2.value.error == "not-held"
    g2 = b.acquire("java-excl", LEASE_MS, 2.0)
    assert g.token is not None and g2.token is not None and g2.token > g.token
    b.release(g2)


def test_java_and_python_clients_share_one_lock(
        java_clients: list[ShippedClient], clients: list[HazelcastLockClient]) -> None:
    g = java_clients[0].acquire("mixed", LEASE_MS, 2.0)
    with pytest.raises(DefiniteFailure):
        clients[0].acquire("mixed", LEASE_MS, 0.3)
    java_clients[0].release(g)
    g2 = clients[0].acquire("mixed", LEASE_MS, 2.0)
    assert g.token is not None and g2.token is not None and g2.token > g.token
    clients[0].release(g2)
