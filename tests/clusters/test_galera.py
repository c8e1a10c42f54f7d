"""GaleraService against a real 3-node MariaDB Galera cluster on loopback addresses: every node
synced, a write through one node read through another, and a clean teardown (data dirs gone,
logs kept, no mariadbd left)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql  # type: ignore[import-untyped,unused-ignore]
import pytest

from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.services.galera import PROVIDER, GaleraService
from fencecheck.clusters.services.mariadb import MARIADBD
from tests.backends import loopback_nodes, need, net, running, store_dir

__all__ = ["store_dir"]


@pytest.fixture(scope="module")
def galera(store_dir: Path) -> Iterator[GaleraService]:
    need(MARIADBD)
    need(PROVIDER)
    with running(GaleraService(), loopback_nodes("g", net(61), 3), store_dir / "galera") as svc:
        yield svc


def connect(endpoint: str) -> Any:
    host, port = endpoint.rsplit(":", 1)
    return pymysql.connect(host=host, port=int(port), user="fencecheck", database="fencecheck",
                           connect_timeout=3, read_timeout=5, autocommit=True)


def test_every_node_is_synced_and_serves(galera: GaleraService) -> None:
    assert galera.ready_s is not None
    assert galera.endpoints() == [f"{net(61)}.{i}:3306" for i in (2, 3, 4)]
    assert [galera.state(n) for n in galera.nodes] == ["Synced"] * 3
    with connect(galera.endpoints()[2]) as conn, conn.cursor() as cur:
        cur.execute("SHOW STATUS LIKE 'wsrep_cluster_size'")
        assert cur.fetchone() == ("wsrep_cluster_size", "3")


def test_a_write_through_one_node_is_read_through_another(galera: GaleraService) -> None:
    a, c = galera.endpoints()[0], galera.endpoints()[2]
    with connect(a) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS t (k INT PRIMARY KEY, v INT)")
        cur.execute("REPLACE INTO t VALUES (1, 42)")
    with connect(c) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION wsrep_sync_wait = 1")  # read after what the cluster committed
        cur.execute("SELECT v FROM t WHERE k = 1")
        assert cur.fetchone() == (42,)


def test_teardown_leaves_logs_and_nothing_running(store_dir: Path) -> None:
    need(MARIADBD)
    need(PROVIDER)
    nodes = {f"h{i}": LocalRemote(f"h{i}", f"{net(61)}.{i + 10}") for i in (1, 2, 3)}
    svc = GaleraService()
    try:
        svc.setup(nodes, store_dir / "second")
        pids = {n: d.pid for n, d in svc.daemons.items()}
        bases = [svc._base(n) for n in nodes]
    finally:
        svc.teardown()
    assert not any(nodes[n].alive(p) for n, p in pids.items())
    assert not any(b.exists() for b in bases)
    assert all((store_dir / "second" / "nodes" / n / "galera.log").exists() for n in nodes)
