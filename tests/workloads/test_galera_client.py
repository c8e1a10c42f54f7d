"""The Galera lock-table client (workloads/clients/galera.py) against a real 3-node Galera
cluster on loopback addresses: workers on different nodes exclude each other, tokens grow with
every grant through any node, an expired row is taken over, and only the holder releases."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencecheck.clusters.services.galera import PROVIDER, GaleraService
from fencecheck.clusters.services.mariadb import MARIADBD
from fencecheck.workloads.base import DefiniteFailure
from fencecheck.workloads.clients.galera import GaleraLockTableClient, endpoint_for
from tests.backends import loopback_nodes, need, net, running, store_dir
from tests.workloads.lockchecks import assert_strictly_increasing, assert_waits_then_times_out

__all__ = ["store_dir"]


@pytest.fixture(scope="module")
def galera(store_dir: Path) -> Iterator[GaleraService]:
    need(MARIADBD)
    need(PROVIDER)
    with running(GaleraService(), loopback_nodes("g", net(62), 3), store_dir / "galera") as svc:
        yield svc


@pytest.fixture
def clients(galera: GaleraService) -> Iterator[list[GaleraLockTableClient]]:
    # Each test from a whole cluster: at load 13 a node once refused the first statement
    # ("WSREP has not yet prepared node"; 3 s suspect timeouts, for the partition tests)
    galera.wait_ready(60.0)
    made = [GaleraLockTableClient({"endpoints": galera.endpoints(), "worker": i,
                                   "op_timeout_s": 3.0, **galera.client_options()})
            for i in range(3)]
    yield made
    for c in made:
        c.close()


def name() -> str:
    return f"lock-{uuid.uuid4().hex[:8]}"


def test_each_worker_writes_through_its_own_node() -> None:
    eps = ["a:1", "b:2", "c:3"]
    assert [endpoint_for({"endpoints": eps, "worker": w}) for w in range(4)] == [
        ("a", 1), ("b", 2), ("c", 3), ("a", 1)]


def test_workers_on_different_nodes_exclude_each_other(
        clients: list[GaleraLockTableClient]) -> None:
    a, b, c = clients
    assert len({(x.host, x.port) for x in clients}) == 3
    lock, tokens = name(), []
    g = a.acquire(lock, 5000, 2.0)
    tokens.append(g.token)
    assert_waits_then_times_out(b, lock, 5000)
    with pytest.raises(DefiniteFailure) as e:
        c.release(g)  # not c's row
    assert e.value.error == "not-owner"
    a.release(a.renew(g, 5000))
    for x in (b, c, a):
        got = x.acquire(lock, 5000, 3.0)
        tokens.append(got.token)
        x.release(got)
    assert_strictly_increasing(tokens)


def test_an_expired_row_is_taken_over_and_its_holder_told(
        clients: list[GaleraLockTableClient]) -> None:
    a, b, _ = clients
    lock = name()
    g = a.acquire(lock, 300, 1.0)
    time.sleep(0.5)
    got = b.acquire(lock, 5000, 2.0)
    assert got.token is not None and g.token is not None and got.token > g.token
    with pytest.raises(DefiniteFailure):
        a.renew(g, 300)
    b.release(got)
