"""NatsKvClient against a real 3-server JetStream cluster: a grant, refusal while held, renewal,
expiry by the bucket's TTL, revisions that grow, and the mapping of refusals and uncertainty to
fail/info; and the Go nats.go program (`nats-go`) on the same grants and refusals."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.services.nats import NatsService
from fencecheck.workloads.base import DefiniteFailure, Grant, Indeterminate, LockClient
from fencecheck.workloads.clients.nats import NatsHandle, NatsKvClient
from fencecheck.workloads.registry import make_client
from tests.backends import nats_cluster, store_dir
from tests.workloads.lockchecks import acquire_error, assert_strictly_increasing, take_turns

__all__ = ["nats_cluster", "store_dir"]

LEASE_MS = 2000  # the bucket's TTL (tests.backends.nats_cluster)


@pytest.fixture
def clients(nats_cluster: NatsService) -> Iterator[list[NatsKvClient]]:
    made: list[NatsKvClient] = []
    for i in range(3):
        opts: dict[str, Any] = {"endpoints": nats_cluster.endpoints(), "op_timeout_s": 1.0,
                                "worker": i, **nats_cluster.client_options()}
        made.append(NatsKvClient(opts))
    yield made
    for c in made:
        c.close()


def test_grant_carries_the_create_revision_and_revisions_increase(
        clients: list[NatsKvClient]) -> None:
    grants = take_turns(clients, "inc", LEASE_MS)
    for g in grants:
        assert isinstance(g.handle, NatsHandle) and g.handle.revision == g.token
        assert g.attempt_ns is not None
    assert_strictly_increasing([g.token for g in grants])


def _held_by_a_then_refused_to_b(a: NatsKvClient, b: NatsKvClient) -> Grant:
    """a's grant, after b's acquire (0.5 s of tries, then one try) was refused while a held. On a
    starved machine the bucket's TTL may pass between a's grant and b's tries (a is never
    renewed here): b's grant is then no error, and the steps are tried again on a new key, at
    most three times; a grant to b within the TTL of a's fails the test."""
    for attempt in range(3):
        lock = f"excl-{attempt}"
        started = time.monotonic()
        g = a.acquire(lock, LEASE_MS, 1.0)
        t0 = time.monotonic()
        try:
            with pytest.raises(DefiniteFailure) as e:
                b.acquire(lock, LEASE_MS, 0.5)
            assert e.value.error == "timeout" and time.monotonic() - t0 >= 0.5
            with pytest.raises(DefiniteFailure, match="held"):
                b.acquire(lock, LEASE_MS, 0)  # a single try
            return g
        except pytest.fail.Exception:
            if time.monotonic() - started < LEASE_MS / 1000:
                raise  # granted twice within the TTL
    pytest.fail("three times, the bucket's TTL passed before b's tries ended (a starved machine)")


def test_refused_while_held_then_granted_after_release(clients: list[NatsKvClient]) -> None:
    a, b, _ = clients
    g = _held_by_a_then_refused_to_b(a, b)
    a.release(g)
    g2 = b.acquire(g.lock, LEASE_MS, 1.0)  # over a's delete marker
    assert g.token is not None and g2.token is not None and g2.token > g.token
    with pytest.raises(DefiniteFailure) as e2:
        a.release(g)  # the revision-guarded delete cannot remove b's lock
    assert e2.value.error == "lease-expired"
    with pytest.raises(DefiniteFailure):
        a.renew(g, LEASE_MS)
    b.release(g2)


def test_renewal_keeps_the_lock_past_the_ttl(clients: list[NatsKvClient]) -> None:
    a, b, _ = clients
    g = a.acquire("renew", LEASE_MS, 1.0)
    for _ in range(3):  # 3 x 1 s > the 2 s TTL: only the renewals keep the key
        time.sleep(1.0)
        g = a.renew(g, LEASE_MS)
        with pytest.raises(DefiniteFailure):
            b.acquire("renew", LEASE_MS, 0)
    assert isinstance(g.handle, NatsHandle) and g.handle.revision > (g.token or 0)
    a.release(g)


def test_the_key_expires_with_the_bucket_ttl(clients: list[NatsKvClient]) -> None:
    a, b, _ = clients
    g = a.acquire("ttl", LEASE_MS, 1.0)
    t0 = time.monotonic()
    g2 = b.acquire("ttl", LEASE_MS, 5.0)  # polls until the server expired a's key
    waited = time.monotonic() - t0
    assert LEASE_MS / 1000 - 0.2 <= waited < LEASE_MS / 1000 + 2.5, waited
    assert g.token is not None and g2.token is not None and g2.token > g.token
    with pytest.raises(DefiniteFailure) as e:
        a.renew(g, LEASE_MS)
    assert e.value.error == "lease-expired"
    b.release(g2)


def test_a_lease_longer_than_the_bucket_ttl_is_refused(clients: list[NatsKvClient]) -> None:
    with pytest.raises(DefiniteFailure, match="lease-too-long"):
        clients[0].acquire("long", LEASE_MS + 1, 1.0)


def test_nothing_listening_is_a_definite_failure() -> None:
    c = NatsKvClient({"endpoints": ["127.0.0.1:1", "127.0.0.1:2"], "op_timeout_s": 0.5})
    assert acquire_error(c) == "connection-refused"


def _wait_stopped(pid: int) -> None:
    """Until every thread of pid is stopped: a Go server's threads take a moment to freeze, and
    one still running could answer the request meant to find it paused."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        states = {Path(f"/proc/{pid}/task/{t}/stat").read_text().split()[2]
                  for t in os.listdir(f"/proc/{pid}/task")}
        if states <= {"T", "t"}:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} not stopped: {states}")


def test_a_paused_server_makes_the_outcome_indeterminate(nats_cluster: NatsService) -> None:
    node = "n1"
    c = NatsKvClient({"endpoints": [nats_cluster.endpoints()[0]], "op_timeout_s": 0.5,
                      **nats_cluster.client_options()})
    try:
        g = c.acquire("paused", LEASE_MS, 1.0)
        nats_cluster.pause(node)
        try:
            _wait_stopped(nats_cluster.daemons[node].pid)
            with pytest.raises(Indeterminate) as e:
                c.renew(g, LEASE_MS)
            assert e.value.error in ("timeout", "connection-lost")
        finally:
            nats_cluster.resume(node)
        nats_cluster.wait_ready(15.0, [node])
    finally:
        c.close()


def test_a_foreign_grant_is_not_ours(clients: list[NatsKvClient]) -> None:
    with pytest.raises(DefiniteFailure, match="not-owner"):
        clients[0].release(Grant("x", 1, LEASE_MS, handle="other"))


def test_no_responders_is_retried_then_a_definite_failure(nats_cluster: NatsService) -> None:
    # A bucket no stream serves answers as a stream between leaders does: 503, no responders.
    c = NatsKvClient({"endpoints": nats_cluster.endpoints(), "op_timeout_s": 1.0,
                      "bucket": "fc-none"})
    t0 = time.monotonic()
    assert acquire_error(c, timeout_s=0.5) == "unavailable"
    assert time.monotonic() - t0 >= 0.5  # tried until the deadline, not given up at once


def test_a_lock_name_that_is_no_kv_key_is_refused(clients: list[NatsKvClient]) -> None:
    with pytest.raises(DefiniteFailure, match="bad-key"):
        clients[0].acquire("no spaces", LEASE_MS, 0.2)


@pytest.fixture
def go_clients(nats_cluster: NatsService) -> Iterator[list[LockClient]]:
    """The Go nats.go program (`nats-go`), three of them, one per server."""
    made = [make_client("nats-go", {"endpoints": nats_cluster.endpoints(), "op_timeout_s": 1.0,
                                    "worker": i, **nats_cluster.client_options()})
            for i in range(3)]
    yield made
    for c in made:
        c.close()


def test_go_client_grants_and_refusals_are_the_python_clients(
        go_clients: list[LockClient]) -> None:
    grants = take_turns(go_clients, "go-inc", LEASE_MS)
    assert_strictly_increasing([g.token for g in grants])
    a, b, _ = go_clients
    g = a.acquire("go-excl", LEASE_MS, 1.0)
    t0 = time.monotonic()
    with pytest.raises(DefiniteFailure) as e:
        b.acquire("go-excl", LEASE_MS, 0.5)
    assert e.value.error == "timeout" and time.monotonic() - t0 >= 0.5
    g = a.renew(g, LEASE_MS)
    a.release(g)
    g2 = b.acquire("go-excl", LEASE_MS, 1.0)  # over a's delete marker
    assert g.token is not None and g2.token is not None and g2.token > g.token
    b.release(g2)
    g = a.acquire("go-guard", LEASE_MS, 1.0)
    g2 = b.acquire("go-guard", LEASE_MS, 5.0)  # polls until the server expired a's key
    with pytest.raises(DefiniteFailure) as e2:
        a.release(g)  # the revision-guarded delete cannot remove b's lock
    assert e2.value.error == "lease-expired"
    b.release(g2)
    with pytest.raises(DefiniteFailure, match="lease-too-long"):
        a.acquire("go-long", LEASE_MS + 1, 1.0)
