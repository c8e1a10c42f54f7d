"""`GaleraService`: a MariaDB 10.11 Galera cluster (Debian's `galera-4`), one `mariadbd` per node,
for the `galera` backend (a lock table, workloads/clients/galera.py).

The first node is made with `mariadb-install-db`, bootstraps the cluster (`--wsrep-new-cluster`)
and runs the `--init-file` (the passwordless user `fencecheck`@`%`, the database `fencecheck`),
which Galera replicates; the others start on empty data dirs and get the first node's by rsync
SST. The nodes run as the `mysql` user (`--user=mysql`): as root, `wsrep_sst_rsync`'s rsync daemon
drops to `nobody` and cannot write the joiner's data dir (docs/findings/galera-start.md). So the
data dirs are under `/var/tmp/fencecheck-galera/<hash of the node dir>/`, owned by `mysql`
(a store under /root or pytest's 0700 tmp dirs is not reachable by that user), removed on
teardown unless `keep_data`; each node's log stays in the store (`<run dir>/nodes/<node>/`).

Ready: every node answers and says `wsrep_local_state_comment = Synced`. Pause is SIGSTOP of a
node's mariadbd. Kill and restart are not offered: a restarted node must rejoin by IST or SST,
which is not tested here.
"""

from __future__ import annotations

import hashlib
import logging
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError, Remote, RemoteError
from fencecheck.clusters.services.daemons import NodeDaemons, ProcessLedger
from fencecheck.clusters.services.mariadb import INNODB, INSTALL_DB, MARIADBD, USER, init_sql

log = logging.getLogger(__name__)

PROVIDER = "/usr/lib/galera/libgalera_smm.so"
CLIENT = "/usr/bin/mariadb"
DATA_ROOT = Path("/var/tmp/fencecheck-galera")
RUN_AS = "mysql"


class GaleraService(NodeDaemons):
    """A Galera cluster on the nodes given to `setup`. See the module docstring."""

    name = "galera"

    def __init__(
        self,
        *,
        port: int = 3306,
        database: str = "fencecheck",
        ready_timeout_s: float = 120.0,
        keep_data: bool = False,
        ledger: ProcessLedger | None = None,
        env_for: Callable[[str], Mapping[str, str]] | None = None,
    ) -> None:
        self.init_daemons(None, env_for, ledger, keep_data)
        self.port = port
        self.database = database
        self.ready_timeout_s = ready_timeout_s

    # -- LockService

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        if len(nodes) < 3:
            raise ClusterError(f"galera: want at least 3 nodes, got {len(nodes)}")
        self.adopt_nodes(nodes, run_dir)
        t0 = time.monotonic()
        first, *rest = list(self.nodes)
        for n in self.nodes:
            self._prepare(n, install=(n == first))
        self._start(first, bootstrap=True)
        self.wait_ready(self.ready_timeout_s, [first])
        for n in rest:
            self._start(n, bootstrap=False)
        self.wait_ready(self.ready_timeout_s, rest)
        self.ready_s = time.monotonic() - t0
        log.info("galera on %s ready in %.2f s", ",".join(self.nodes), self.ready_s)

    def endpoints(self) -> list[str]:
        return [f"{r.address}:{self.port}" for r in self.nodes.values()]

    def client_options(self) -> dict[str, Any]:
        return {"database": self.database, "user": USER}

    def teardown(self) -> None:
        try:
            self.stop_all("galera", signal.SIGTERM, wait_s=15.0)
        finally:
            for n, remote in self.nodes.items():
                remote.run(["rm", "-f", self._socket(n)], check=False)
                if not self.keep_data:
                    remote.run(["rm", "-rf", str(self._base(n))], check=False)

    def log_files(self) -> dict[str, list[Path]]:
        return {n: [self._node_dir(n) / "galera.log"] for n in self.nodes}

    # -- helpers

    def _base(self, node: str) -> Path:
        tag = hashlib.sha256(str(self._node_dir(node)).encode()).hexdigest()[:16]
        return DATA_ROOT / tag

    def _socket(self, node: str) -> str:
        tag = hashlib.sha256(str(self._node_dir(node)).encode()).hexdigest()[:16]
        return f"/tmp/fc-galera-{tag}.sock"

    def _prepare(self, node: str, install: bool) -> None:
        remote, base = self.nodes[node], self._base(node)
        remote.run(["rm", "-rf", str(base)], check=False)
        remote.run(["mkdir", "-p", str(base / "data"), str(base / "tmp"),
                    str(self._node_dir(node))])
        remote.run(["chmod", "711", str(DATA_ROOT)])
        remote.run(["chown", "-R", f"{RUN_AS}:{RUN_AS}", str(base)])
        if install:
            remote.run(
                [INSTALL_DB, "--no-defaults", f"--datadir={base / 'data'}",
                 f"--tmpdir={base / 'tmp'}", f"--user={RUN_AS}",
                 "--auth-root-authentication-method=normal", "--skip-test-db",
                 "--skip-name-resolve", *INNODB],
                timeout_s=60.0,
            )
            staging = self._node_dir(node) / "init.sql.staging"
            staging.write_text(init_sql(self.database))
            remote.put_file(staging, str(base / "init.sql"))
            remote.run(["chown", "-R", f"{RUN_AS}:{RUN_AS}", str(base)])

    def _start(self, node: str, bootstrap: bool) -> None:
        remote, base = self.nodes[node], self._base(node)
        ip = remote.address
        peers = ",".join(r.address for r in self.nodes.values())
        provider_opts = ";".join([
            f"gmcast.listen_addr=tcp://{ip}:4567", f"ist.recv_addr={ip}:4568",
            "gcache.size=16M", "evs.suspect_timeout=PT3S", "evs.inactive_timeout=PT5S",
        ])
        argv = [
            MARIADBD, "--no-defaults", f"--datadir={base / 'data'}", f"--tmpdir={base / 'tmp'}",
            f"--user={RUN_AS}", f"--bind-address={ip}", f"--port={self.port}",
            f"--socket={self._socket(node)}", f"--pid-file={base / 'mariadb.pid'}",
            "--skip-name-resolve", *INNODB, "--innodb-buffer-pool-size=32M",
            "--innodb-flush-log-at-trx-commit=0", "--max-connections=200",
            "--max-connect-errors=1000000", "--binlog-format=ROW",
            "--innodb-autoinc-lock-mode=2", "--default-storage-engine=InnoDB",
            "--wsrep-on=ON", f"--wsrep-provider={PROVIDER}",
            f"--wsrep-cluster-address=gcomm://{peers}", f"--wsrep-node-address={ip}",
            f"--wsrep-node-name={node}", "--wsrep-cluster-name=fencecheck",
            f"--wsrep-provider-options={provider_opts}", "--wsrep-sst-method=rsync",
            f"--wsrep-sst-receive-address={ip}:4444",
        ]
        if bootstrap:
            argv += ["--wsrep-new-cluster", f"--init-file={base / 'init.sql'}"]
        self.start_node_daemon(node, "mariadbd", argv, self._node_dir(node) / "galera.log")

    def state(self, node: str) -> str | None:
        """The node's `wsrep_local_state_comment` (Synced, Donor/Desynced, ...), with " (not
        ready)" after it while `wsrep_ready` is OFF (a node outside the primary component
        refuses statements: "WSREP has not yet prepared node for application use"); None if it
        does not answer."""
        remote = self.nodes[node]
        argv = [CLIENT, "--no-defaults", "-h", remote.address, "-P", str(self.port), "-u", USER,
                "--connect-timeout=2", "-N", "-B", "-e",
                "SHOW STATUS WHERE Variable_name IN "
                "('wsrep_local_state_comment', 'wsrep_ready')"]
        try:
            r = remote.run(argv, timeout_s=5.0, check=False)
        except RemoteError:
            return None
        if r.returncode != 0:
            return None
        status = dict(line.split("\t", 1) for line in r.stdout.splitlines() if "\t" in line)
        comment = status.get("wsrep_local_state_comment")
        if comment is None:
            return None
        return comment if status.get("wsrep_ready") == "ON" else f"{comment} (not ready)"

    def wait_ready(self, timeout_s: float, nodes: list[str] | None = None) -> None:
        """Wait until every node (or those named) is Synced and ready."""
        deadline = time.monotonic() + timeout_s
        waiting = list(nodes if nodes is not None else self.nodes)
        while waiting:
            self.check_exited(waiting, "galera.log")
            waiting = [n for n in waiting if self.state(n) != "Synced"]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"galera: {', '.join(waiting)} not synced after {timeout_s} s")
            time.sleep(0.2)
