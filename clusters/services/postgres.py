"""`PostgresService`: one PostgreSQL 15 server (Debian's) on one node, the `postgres` resource.

The cluster is made with `initdb` in `<run dir>/nodes/<node>/postgres/` (removed on teardown
unless `keep_data`; the server's log stays) and run as the `postgres`
user (PostgreSQL refuses to run as root). `setpriv` switches user and execs in place, so the
daemon's pid is the postmaster itself (`runuser` would stay in between as a parent). Where that
user cannot reach the store (a store under a 0700 directory such as /root or pytest's
/tmp/pytest-of-root), the data dir goes to `/var/tmp/fencecheck-pg/<store hash>/` instead,
removed the same way; the server's log always stays in the store.

The server listens on the node's address only (no unix socket, so nothing in /run is shared
with other servers), trusts connections from `trust_cidrs` (default: the node's /24 and
loopback), and runs with fsync off: durability across host crashes is not what is tested.
Readiness is `pg_isready` run on the node. The table the resource uses is created by the
resource itself (workloads/resources/postgres.py), so the service knows nothing about it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from fencecheck.clusters.base import ClusterError, Remote
from fencecheck.clusters.services.daemons import (
    OneNode,
    ProcessLedger,
    start_recorded,
    stop_daemon,
)

log = logging.getLogger(__name__)

BIN = "/usr/lib/postgresql/15/bin"
USER = "postgres"


class PostgresService(OneNode):
    """One PostgreSQL server on the single node given to `setup`. See the module docstring."""

    name = "postgres"
    what = "postgres"

    def __init__(
        self,
        *,
        port: int = 5432,
        database: str = "fencecheck",
        trust_cidrs: Sequence[str] | None = None,
        ready_timeout_s: float = 30.0,
        keep_data: bool = False,
        ledger: ProcessLedger | None = None,
    ) -> None:
        self._one_node(port, database, ready_timeout_s, keep_data, ledger)
        self.trust_cidrs = list(trust_cidrs) if trust_cidrs is not None else None
        self.pgdata: Path | None = None

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        self._bring_up(nodes, run_dir, (
            self._initdb, self._start, lambda: self.wait_ready(self.ready_timeout_s),
            lambda: self._run_as([f"{BIN}/createdb", "-h", self._remote().address, "-p",
                                  str(self.port), self.database])))

    def dsn(self) -> str:
        """A libpq connection string for the resource's options."""
        if self.remote is None:
            raise ClusterError("postgres: not set up")
        return f"host={self.remote.address} port={self.port} dbname={self.database} user={USER}"

    def teardown(self) -> None:
        if self.daemon is not None and self.remote is not None:
            # SIGINT is PostgreSQL's "fast shutdown": the postmaster stops its children first.
            stop_daemon(self.remote, self.daemon, signal.SIGINT, wait_s=10.0)
            self.daemon = None
        if not self.keep_data and self.remote is not None and self.pgdata is not None:
            self.remote.run(["rm", "-rf", str(self.pgdata)], check=False)

    def log_files(self) -> dict[str, list[Path]]:
        if self.node is None:
            return {}
        return {self.node: [self._dir() / "postgres.log"]}

    def wait_ready(self, timeout_s: float) -> None:
        argv = [f"{BIN}/pg_isready", "-q", "-h", self._remote().address, "-p", str(self.port),
                "-U", USER]
        self._wait_answering(argv, "postgres.log", timeout_s)

    # -- helpers

    def _run_as(self, argv: list[str]) -> None:
        self._remote().run(
            ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", *argv],
            timeout_s=60.0,
        )

    def _hba(self) -> str:
        cidrs = self.trust_cidrs
        if cidrs is None:
            net = ipaddress.ip_network(f"{self._remote().address}/24", strict=False)
            cidrs = [str(net), "127.0.0.0/8"]
        lines = ["local all all trust"]
        lines += [f"host all all {c} trust" for c in cidrs]
        return "\n".join(lines) + "\n"

    def _writable_by_postgres(self, path: Path) -> bool:
        remote = self._remote()
        remote.run(["mkdir", "-p", str(path)])
        remote.run(["chown", f"{USER}:{USER}", str(path)])
        remote.run(["chmod", "700", str(path)])
        probe = remote.run(
            ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", "test", "-w",
             str(path)],
            check=False,
        )
        return probe.returncode == 0

    def _initdb(self) -> None:
        remote = self._remote()
        pgdata = self._dir() / "postgres"
        if not self._writable_by_postgres(pgdata):
            remote.run(["rm", "-rf", str(pgdata)], check=False)
            tag = hashlib.sha256(str(self._dir()).encode()).hexdigest()[:16]
            pgdata = Path("/var/tmp/fencecheck-pg") / tag
            remote.run(["rm", "-rf", str(pgdata)], check=False)
            remote.run(["mkdir", "-p", str(pgdata.parent)])
            remote.run(["chmod", "711", str(pgdata.parent)])
            if not self._writable_by_postgres(pgdata):
                raise ClusterError(f"postgres: user {USER} cannot write {pgdata}")
            log.info("postgres: the store is not reachable by user %s; data in %s", USER, pgdata)
        self.pgdata = pgdata
        self._run_as(
            [f"{BIN}/initdb", "-D", str(pgdata), "-U", USER, "-A", "trust", "-E", "UTF8",
             "--no-sync", "--no-instructions"]
        )
        staging = self._dir() / "pg_hba.conf.staging"
        staging.write_text(self._hba())
        remote.put_file(staging, str(pgdata / "pg_hba.conf"))
        remote.run(["chown", f"{USER}:{USER}", str(pgdata / "pg_hba.conf")])

    def _start(self) -> None:
        remote = self._remote()
        pgdata = self.pgdata or self._dir() / "postgres"
        argv = [
            "setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups",
            f"{BIN}/postgres", "-D", str(pgdata),
            "-c", f"listen_addresses={remote.address}",
            "-c", f"port={self.port}",
            "-c", "unix_socket_directories=",
            "-c", "fsync=off",
            "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off",
            "-c", "max_connections=200",
            "-c", "shared_buffers=32MB",
            "-c", "log_destination=stderr",
            "-c", "logging_collector=off",
        ]
        # The log is opened by this (root) process and inherited, so its owner does not matter.
        self.daemon = start_recorded(
            remote, self.node or "?", "postgres", argv, log=self._dir() / "postgres.log",
            ledger=self.ledger,
        )
