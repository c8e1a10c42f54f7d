"""EtcdClient against a real 3-member etcd cluster: tokens, mutual exclusion, lease expiry,
renewal, and the mapping of refusals and uncertainty to fail/info."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fencecheck.clusters.services.etcd import EtcdService
from fencecheck.workloads.base import DefiniteFailure, Indeterminate
from fencecheck.workloads.clients.etcd import EtcdClient, EtcdHandle
from tests.backends import etcd_cluster, store_dir
from tests.workloads.lockchecks import (
    acquire_error,
    assert_strictly_increasing,
    assert_waits_then_times_out,
    take_turns,
)

__all__ = ["etcd_cluster", "store_dir"]


@pytest.fixture
def clients(etcd_cluster: EtcdService) -> Iterator[list[EtcdClient]]:
    made: list[EtcdClient] = []

    def make(**extra: Any) -> EtcdClient:
        opts = {"endpoints": etcd_cluster.endpoints(), "op_timeout_s": 1.0, "worker": len(made)}
        c = EtcdClient({**opts, **extra})
        made.append(c)
        return c

    for _ in range(3):
        make()
    yield made
    for c in made:
        c.close()


def test_tokens_strictly_increase_across_clients(clients: list[EtcdClient]) -> None:
    grants = take_turns(clients, "inc", 5000)
    for g in grants:
        assert isinstance(g.handle, EtcdHandle) and g.handle.key.startswith("fc/lock/inc/")
    assert_strictly_increasing([g.token for g in grants])


def test_second_client_waits_then_fails_definitely(clients: list[EtcdClient]) -> None:
    a, b, _ = clients
    g = a.acquire("excl", 5000, 2.0)
    assert_waits_then_times_out(b, "excl", 5000)
    a.release(g)
    g2 = b.acquire("excl", 5000, 2.0)
    assert g.token is not None and g2.token is not None and g2.token > g.token
    b.release(g2)
    with pytest.raises(DefiniteFailure):
        b.release(g2)  # already released: the lease is gone


def test_unrenewed_lease_expires_and_passes_on(clients: list[EtcdClient]) -> None:
    a, b, _ = clients
    ga = a.acquire("expiry", 1000, 2.0)  # TTL 1 s, raised to etcd's 2 s floor
    t0 = time.monotonic()
    gb = b.acquire("expiry", 1000, 10.0)  # a does not renew: its lease runs out
    waited = time.monotonic() - t0
    assert 0.9 <= waited < 8.0
    assert gb.token is not None and ga.token is not None and gb.token > ga.token
    with pytest.raises(DefiniteFailure) as e:
        a.renew(ga, 1000)
    assert e.value.error == "lease-expired"
    with pytest.raises(DefiniteFailure):
        a.release(ga)
    b.release(gb)


def test_renewal_keeps_the_lock(etcd_cluster: EtcdService) -> None:
    # 3 s per request, not the fixture's 1 s: under the parallel suite's load an acquire's
    # answer once took longer than 1 s (an Indeterminate ReadTimeout before any renewal).
    a, b = (EtcdClient({"endpoints": etcd_cluster.endpoints(), "op_timeout_s": 3.0,
                        "worker": i}) for i in range(2))
    try:
        _renewal_keeps_the_lock(a, b)
    finally:
        a.close()
        b.close()


def _renewal_keeps_the_lock(a: EtcdClient, b: EtcdClient) -> None:
    # A TTL of 2 s renewed every 0.4 s for 4.5 s: past the lease, and a stall of this process of
    # up to 1.6 s (the parallel suite loads 2 cores) still keeps it; with 1 s, a 0.6 s stall let
    # the lease lapse and b's attempt was rightly indeterminate.
    g = a.acquire("renewed", 2000, 2.0)
    deadline = time.monotonic() + 4.5
    while time.monotonic() < deadline:
        g = a.renew(g, 2000)
        time.sleep(0.4)
    with pytest.raises(DefiniteFailure):
        b.acquire("renewed", 2000, 0.3)
    with pytest.raises(DefiniteFailure) as e:
        a.renew(g, 60_000)  # a keepalive cannot lengthen the granted TTL
    assert e.value.error == "lease-too-long"
    a.release(g)


def test_refused_connection_is_a_definite_failure() -> None:
    c = EtcdClient({"endpoints": ["127.0.44.20:2379", "127.0.44.21:2379"], "op_timeout_s": 0.5})
    assert acquire_error(c) == "connection-refused"


def test_paused_member_makes_renew_indeterminate(etcd_cluster: EtcdService) -> None:
    ep = etcd_cluster.endpoints()[2]
    c = EtcdClient({"endpoints": [ep], "op_timeout_s": 0.5})
    try:
        g = c.acquire("paused", 5000, 2.0)
        etcd_cluster.pause("e3")
        try:
            t0 = time.monotonic()
            with pytest.raises(Indeterminate):
                c.renew(g, 5000)  # sent, never answered: no retry, no verdict
            assert time.monotonic() - t0 < 2.0
        finally:
            etcd_cluster.resume("e3")
        etcd_cluster.wait_ready(10.0, ["e3"])
        c.release(g)
    finally:
        c.close()


def test_waiter_keeps_its_lease_while_blocked(clients: list[EtcdClient]) -> None:
    """etcd's lock service answers "granted" to a waiter whose lease ran out while it waited;
    the client's own keepalive during the wait must prevent that."""
    a, b, _ = clients
    ga = a.acquire("long-wait", 10_000, 2.0)
    releaser = threading.Timer(3.5, a.release, args=(ga,))  # past b's 2 s lease
    releaser.start()
    try:
        gb = b.acquire("long-wait", 1000, 8.0)
    finally:
        releaser.join()
    assert gb.token is not None and ga.token is not None and gb.token > ga.token
    b.renew(gb, 1000)  # the lease is alive, so the lock is really ours
    b.release(gb)
