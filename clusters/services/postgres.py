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
loopback), and runs with fsync off: durability across host crashes is not what is tested, except
where its data dir is placed (`DataDirs`, the lose-unsynced file system): there it runs as a
durable PostgreSQL does, with `fsync`, `synchronous_commit` and `full_page_writes` on.
Readiness is `pg_isready` run on the node. The table the resource uses is created by the
resource itself (workloads/resources/postgres.py), so the service knows nothing about it.

Capabilities: `Killable` (SIGKILL of the postmaster and its children at once, as a power loss;
`restart` starts it again on its data, which recovers from its WAL), `DataDirs`, `LogFiles`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import signal
import time
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
RECOVERY_S = 180.0  # the longest a restarted server may take to recover (see `restart`)


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
        self.placed: Path | None = None  # DataDirs: the data dir's place, durable settings on

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
            # ~1,000 files: through the lose-unsynced file system that takes minutes under load
            self.remote.run(["rm", "-rf", str(self.pgdata)], check=False,
                            timeout_s=300.0 if self.placed is not None else 30.0)

    def log_files(self) -> dict[str, list[Path]]:
        if self.node is None:
            return {}
        return {self.node: [self._dir() / "postgres.log"]}

    def place_data(self, node: str, path: Path) -> None:
        self.placed = path

    def kill(self, node: str) -> None:
        """SIGKILL the postmaster and every child at once (a child would outlive its postmaster
        a moment, holding the shared memory a restart needs), and wait until they are gone."""
        daemon, self.daemon = self.daemon, None
        if daemon is None:
            return
        remote = self._remote()
        # Stopped first, so it forks no new child between the listing and the kill.
        res = remote.run(["sh", "-c", 'kill -STOP "$0"; kids=$(cat /proc/"$0"/task/*/children); '
                          'kill -KILL "$0" $kids; echo $kids', str(daemon.pid)], check=False)
        pids = [daemon.pid, *(int(p) for p in res.stdout.split())]
        deadline = time.monotonic() + 10.0
        while any(remote.alive(p) for p in pids):
            if time.monotonic() > deadline:
                raise ClusterError(f"postgres: {pids} survived SIGKILL")
            time.sleep(0.02)

    def restart(self, node: str) -> None:
        """Start a killed server again on its data dir (it recovers from its WAL) and wait
        until it accepts connections: up to RECOVERY_S, as its crash recovery ends with a
        checkpoint that syncs every file (over a minute through the lose-unsynced file system on
        a loaded machine)."""
        if self.daemon is None:
            self._start()
            self.wait_ready(max(self.ready_timeout_s, RECOVERY_S))

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
        self._dir().mkdir(parents=True, exist_ok=True)  # the log and staging stay here
        placed = self.placed / "postgres" if self.placed is not None else None
        if placed is not None and not self._writable_by_postgres(placed):
            raise ClusterError(f"postgres: user {USER} cannot reach its placed data dir "
                               f"{placed} (give a --store that user can traverse)")
        # A placed data dir is made beside it and copied in: initdb's thousands of small writes
        # through the lose-unsynced file system take minutes on a loaded machine, a copy seconds.
        pgdata = self._dir() / ("postgres-init" if placed is not None else "postgres")
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
        if placed is not None:
            remote.run(["cp", "-a", f"{pgdata}/.", str(placed)], timeout_s=300.0)
            remote.run(["rm", "-rf", str(pgdata)])
            self.pgdata = pgdata = placed
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
            *self._durability(),
            "-c", "max_connections=200",
            "-c", "shared_buffers=32MB",
            "-c", "log_destination=stderr",
            "-c", "logging_collector=off",
        ]
        # The log is opened by this (root) process and inherited, so its owner does not matter.
        # (A restarted server appends to it.)
        self.daemon = start_recorded(
            remote, self.node or "?", "postgres", argv, log=self._dir() / "postgres.log",
            ledger=self.ledger,
        )

    def _durability(self) -> list[str]:
        """Durable where the data dir is placed (what a power loss tests), fast elsewhere."""
        on = "on" if self.placed is not None else "off"
        return [arg for k in ("fsync", "synchronous_commit", "full_page_writes")
                for arg in ("-c", f"{k}={on}")]
