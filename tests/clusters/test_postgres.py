"""PostgresService against a real PostgreSQL 15 on a loopback address: ready, serving the
database as the postgres user, stopped cleanly, and refusing a store it could not use."""

from __future__ import annotations

import tempfile
from pathlib import Path

import psycopg
import pytest

from fencecheck.clusters.base import LogFiles
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.services.postgres import PostgresService
from tests.backends import net, pg_server, store_dir

__all__ = ["pg_server", "store_dir"]


def test_server_ready_and_serving(pg_server: PostgresService) -> None:
    assert pg_server.ready_s is not None and pg_server.ready_s < 30
    assert pg_server.endpoints() == [f"{net(46)}.2:5432"]
    with psycopg.connect(pg_server.dsn(), autocommit=True, connect_timeout=3) as conn:
        row = conn.execute("SELECT current_user, current_database(), current_setting('fsync')")
        assert row.fetchone() == ("postgres", "fencecheck", "off")
    assert isinstance(pg_server, LogFiles)
    [logfile] = pg_server.log_files()["pg"]
    assert "ready to accept connections" in logfile.read_text()


def test_listens_on_the_node_address_only(pg_server: PostgresService) -> None:
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(f"host={net(46)}.3 port=5432 dbname=fencecheck user=postgres",
                        connect_timeout=2)


def test_teardown_stops_postmaster_and_children(store_dir: Path) -> None:
    svc = PostgresService(port=5433)
    node = LocalRemote("pg", f"{net(46)}.3")
    try:
        svc.setup({"pg": node}, store_dir / "second")
        assert svc.daemon is not None
        pid = svc.daemon.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        assert children  # checkpointer, walwriter, ...
    finally:
        svc.teardown()
    svc.teardown()
    assert not node.alive(pid)
    ndir = store_dir / "second" / "nodes" / "pg"
    assert (ndir / "postgres.log").exists() and not (ndir / "postgres").exists()
    assert not any(node.alive(int(c)) for c in children)


def test_store_the_postgres_user_cannot_reach_gets_data_elsewhere() -> None:
    with tempfile.TemporaryDirectory() as d:  # mkdtemp makes it 0700, owned by root
        svc = PostgresService(port=5434)
        try:
            svc.setup({"pg": LocalRemote("pg", f"{net(46)}.4")}, Path(d) / "store")
            assert svc.pgdata is not None
            assert str(svc.pgdata).startswith("/var/tmp/fencecheck-pg/")
            assert (Path(d) / "store" / "nodes" / "pg" / "postgres.log").exists()
            pgdata = svc.pgdata
        finally:
            svc.teardown()
        assert svc.daemon is None
        assert not pgdata.exists()
