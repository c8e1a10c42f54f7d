"""MariadbService against a real MariaDB 10.11 on a loopback address: ready, serving the database
to the passwordless client user, pausable, killable and restartable on its data, stopped cleanly
with its data dir removed and its log kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymysql  # type: ignore[import-untyped,unused-ignore]
import pytest

from fencecheck.clusters.base import Killable, LogFiles, Pausable
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.services.mariadb import MARIADBD, MariadbService
from tests.backends import mariadb_server, need, net, store_dir
from tests.conftest import all_threads_stopped

__all__ = ["mariadb_server", "store_dir"]


def connect(svc: MariadbService, address: str | None = None, timeout: int = 3) -> Any:
    host, port = svc.endpoints()[0].rsplit(":", 1)
    return pymysql.connect(host=address or host, port=int(port), user="fencecheck",
                           database="fencecheck", connect_timeout=timeout, read_timeout=timeout)


def test_server_ready_and_serving(mariadb_server: MariadbService) -> None:
    assert mariadb_server.ready_s is not None and mariadb_server.ready_s < 30
    assert mariadb_server.endpoints() == [f"{net(60)}.2:3306"]
    assert mariadb_server.client_options() == {"database": "fencecheck", "user": "fencecheck"}
    with connect(mariadb_server) as conn, conn.cursor() as cur:
        cur.execute("SELECT DATABASE(), CURRENT_USER(), @@innodb_flush_log_at_trx_commit")
        assert cur.fetchone() == ("fencecheck", "fencecheck@%", 0)
    assert isinstance(mariadb_server, LogFiles | Pausable | Killable)
    [logfile] = mariadb_server.log_files()["mdb"]
    assert "ready for connections" in logfile.read_text()


def test_listens_on_the_node_address_only(mariadb_server: MariadbService) -> None:
    with pytest.raises(pymysql.OperationalError):
        connect(mariadb_server, f"{net(60)}.3", timeout=2)


def test_a_paused_server_answers_nothing_until_resumed(mariadb_server: MariadbService) -> None:
    with connect(mariadb_server) as conn:
        mariadb_server.pause("mdb")
        try:
            assert mariadb_server.daemon is not None
            assert all_threads_stopped(mariadb_server.daemon.pid)
            with pytest.raises(pymysql.OperationalError), conn.cursor() as cur:
                conn._read_timeout = 1
                cur.execute("SELECT 1")
        finally:
            mariadb_server.resume("mdb")
    with connect(mariadb_server) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")


def test_kill_and_restart_on_the_same_data(store_dir: Path) -> None:
    need(MARIADBD)
    svc = MariadbService(port=3307)
    node = LocalRemote("mdb", f"{net(60)}.3")
    try:
        svc.setup({"mdb": node}, store_dir / "second")
        with connect(svc) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE kept (x INT)")
        assert svc.daemon is not None
        pid = svc.daemon.pid
        svc.kill("mdb")
        assert not node.alive(pid) and svc.daemon is None
        svc.restart("mdb")
        with connect(svc) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM kept")  # the table outlived the SIGKILL
        assert svc.daemon is not None
        pid = svc.daemon.pid
    finally:
        svc.teardown()
    svc.teardown()
    assert not node.alive(pid)
    ndir = store_dir / "second" / "nodes" / "mdb"
    assert (ndir / "mariadb.log").exists() and not (ndir / "mariadb").exists()
    assert "Normal shutdown" in (ndir / "mariadb.log").read_text()
    assert not Path(svc._socket()).exists()
