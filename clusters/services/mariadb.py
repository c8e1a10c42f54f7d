"""`MariadbService`: one MariaDB 10.11 server (Debian's `mariadbd`) on one node, for the
`mariadb` backend (`GET_LOCK`, workloads/clients/mariadb.py).

The data dir is made with `mariadb-install-db` in `<run dir>/nodes/<node>/mariadb/` (removed on
teardown unless `keep_data`; the server's log, `mariadb.log`, stays). No system service and no
file of /etc/mysql is used (`--no-defaults` everywhere). The server runs as root with an explicit
`--user=root` (mariadbd refuses root only without it), so any store works, unlike PostgreSQL.
Its unix socket, which nothing here uses but mariadbd always opens, goes under /tmp by a hash of
the node dir: a socket path is limited to 107 bytes and a store's path may be longer. Its
temporary files go beside the data dir (`mariadb-tmp/`, removed with it): the bootstrap servers
of mariadb-install-db in runs side by side, sharing /tmp, failed on each other's temporary
tables (`Unknown table 'mysql.tmp_user_sys'`).

The server listens on the node's address only; an `--init-file` run at every start creates the
passwordless user `fencecheck`@`%` and the database `fencecheck`. InnoDB is shrunk (8 MB redo log,
12 MB system tablespace, 32 MB buffer pool) and flushes once a second: durability across host
crashes is not what is tested, and a small data dir is what makes setup take about a second.
Readiness is `mariadb-admin ping` run on the node, as that user.

Pause is SIGSTOP of mariadbd; kill is SIGKILL, and restart starts it again on its data dir.
"""

from __future__ import annotations

import hashlib
import logging
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import Remote
from fencecheck.clusters.services.daemons import (
    OneNode,
    ProcessLedger,
    start_recorded,
    stop_daemon,
)

log = logging.getLogger(__name__)

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
ADMIN = "/usr/bin/mariadb-admin"
USER = "fencecheck"

# Shared by mariadb-install-db's bootstrap server and the server itself: InnoDB refuses to start
# on a system tablespace or redo log of another size than the one it was made with.
INNODB = ("--innodb-log-file-size=8M", "--innodb-data-file-path=ibdata1:12M:autoextend",
          "--innodb-undo-tablespaces=0")


def init_sql(database: str) -> str:
    """What the server runs at every start (idempotent): the clients' user and database."""
    return (f"CREATE USER IF NOT EXISTS '{USER}'@'%';\n"
            f"GRANT ALL ON *.* TO '{USER}'@'%';\n"
            f"CREATE DATABASE IF NOT EXISTS `{database}`;\n")


class MariadbService(OneNode):
    """One MariaDB server on the single node given to `setup`. See the module docstring."""

    name = "mariadb"
    what = "mariadb"

    def __init__(
        self,
        *,
        port: int = 3306,
        database: str = "fencecheck",
        ready_timeout_s: float = 30.0,
        keep_data: bool = False,
        ledger: ProcessLedger | None = None,
    ) -> None:
        self._one_node(port, database, ready_timeout_s, keep_data, ledger)

    # -- LockService

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        self._bring_up(nodes, run_dir, (self._install, self._start,
                                        lambda: self.wait_ready(self.ready_timeout_s)))

    def client_options(self) -> dict[str, Any]:
        return {"database": self.database, "user": USER}

    def teardown(self) -> None:
        if self.daemon is not None and self.remote is not None:
            # SIGTERM is mariadbd's normal shutdown (it closes sessions, then InnoDB).
            stop_daemon(self.remote, self.daemon, signal.SIGTERM, wait_s=10.0)
            self.daemon = None
        if self.remote is not None and self.run_dir is not None:
            self.remote.run(["rm", "-f", self._socket()], check=False)
            if not self.keep_data:
                self.remote.run(["rm", "-rf", str(self._datadir()), str(self._tmpdir())],
                                check=False)

    def log_files(self) -> dict[str, list[Path]]:
        if self.node is None:
            return {}
        return {self.node: [self._dir() / "mariadb.log"]}

    # -- Pausable, Killable

    def pause(self, node: str) -> None:
        if self.daemon is not None and node == self.node:
            self._remote().signal(self.daemon.pid, signal.SIGSTOP)

    def resume(self, node: str) -> None:
        if self.daemon is not None and node == self.node:
            self._remote().signal(self.daemon.pid, signal.SIGCONT)

    def kill(self, node: str) -> None:
        daemon, self.daemon = self.daemon, None
        if daemon is not None and node == self.node:
            stop_daemon(self._remote(), daemon, signal.SIGKILL, wait_s=5.0)

    def restart(self, node: str) -> None:
        if self.daemon is None and node == self.node:
            self._start()
            self.wait_ready(self.ready_timeout_s)

    def wait_ready(self, timeout_s: float) -> None:
        argv = [ADMIN, "--no-defaults", "-h", self._remote().address, "-P", str(self.port), "-u",
                USER, "--connect-timeout=2", "ping"]
        self._wait_answering(argv, "mariadb.log", timeout_s)

    # -- helpers

    def _datadir(self) -> Path:
        return self._dir() / "mariadb"

    def _tmpdir(self) -> Path:
        return self._dir() / "mariadb-tmp"

    def _socket(self) -> str:
        return f"/tmp/fc-mariadb-{hashlib.sha256(str(self._dir()).encode()).hexdigest()[:16]}.sock"

    def _install(self) -> None:
        remote, datadir = self._remote(), self._datadir()
        remote.run(["rm", "-rf", str(datadir), str(self._tmpdir())], check=False)
        remote.run(["mkdir", "-p", str(datadir), str(self._tmpdir())])
        remote.run(
            [INSTALL_DB, "--no-defaults", f"--datadir={datadir}", f"--tmpdir={self._tmpdir()}",
             "--user=root",
             "--auth-root-authentication-method=normal", "--skip-test-db",
             "--skip-name-resolve", *INNODB],
            timeout_s=60.0,
        )
        staging = self._dir() / "init.sql.staging"
        staging.write_text(init_sql(self.database))
        remote.put_file(staging, str(self._dir() / "init.sql"))

    def _start(self) -> None:
        remote = self._remote()
        argv = [
            MARIADBD, "--no-defaults", f"--datadir={self._datadir()}",
            f"--tmpdir={self._tmpdir()}", "--user=root",
            f"--bind-address={remote.address}", f"--port={self.port}",
            f"--socket={self._socket()}", f"--pid-file={self._dir() / 'mariadb.pid'}",
            f"--init-file={self._dir() / 'init.sql'}",
            "--skip-name-resolve", "--skip-log-bin", *INNODB,
            "--innodb-buffer-pool-size=32M", "--innodb-flush-log-at-trx-commit=0",
            "--max-connections=200", "--max-connect-errors=1000000",
        ]
        # Without --log-error mariadbd logs to stderr, which start_daemon sends to the log.
        self.daemon = start_recorded(
            remote, self.node or "?", "mariadbd", argv, log=self._dir() / "mariadb.log",
            ledger=self.ledger,
        )
