"""`EtcdService`: a static etcd 3.4 cluster (Debian's /usr/bin/etcd), one member per node.

Each member listens on its node's address (client port 2379 with the v3 JSON gateway, peer port
2380), keeps its data dir under `<run dir>/nodes/<node>/etcd/` and logs to
`<run dir>/nodes/<node>/etcd.log`; the data dirs are removed on teardown unless `keep_data` (each
member preallocates 64 MB of WAL). Elections are fast (heartbeat 100 ms, election timeout 1 s) so
that faults heal within a test. Note the lease floor that follows from these timings: etcd
raises any lease TTL below 1.5 x election timeout, so TTLs under 2 s become 2 s.

Capabilities: `Pausable` (SIGSTOP/SIGCONT), `Killable` (SIGKILL; `restart` starts the member
again on the same data dir with `--initial-cluster-state existing`), `DataDirs` (the data dir
placed elsewhere, e.g. on the lose-unsynced file system; the log stays), `LogFiles`. Readiness is
polled through each node's Remote with `etcdctl endpoint health` (a quorum read), so it works
unchanged on netns or ssh nodes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from fencecheck.clusters.base import ClusterError, Remote, RemoteError
from fencecheck.clusters.services.daemons import NodeDaemons, ProcessLedger

log = logging.getLogger(__name__)

ETCD = "/usr/bin/etcd"
ETCDCTL = "/usr/bin/etcdctl"


class EtcdService(NodeDaemons):
    """A static etcd cluster of `nodes` members. See the module docstring."""

    name = "etcd"

    def __init__(
        self,
        nodes: int | None = None,
        env_for: Callable[[str], Mapping[str, str]] | None = None,
        *,
        client_port: int = 2379,
        peer_port: int = 2380,
        heartbeat_ms: int = 100,
        election_ms: int = 1000,
        ready_timeout_s: float = 30.0,
        keep_data: bool = False,
        ledger: ProcessLedger | None = None,
    ) -> None:
        self.init_daemons(nodes, env_for, ledger, keep_data)
        self.client_port = client_port
        self.peer_port = peer_port
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.ready_timeout_s = ready_timeout_s
        self._placed: dict[str, Path] = {}

    # -- LockService

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        self.adopt_nodes(nodes, run_dir)
        t0 = time.monotonic()
        for node in self.nodes:
            self._start(node, state="new")
        self.wait_ready(self.ready_timeout_s)
        self.ready_s = time.monotonic() - t0
        log.info("etcd: %d members ready in %.2f s", len(self.nodes), self.ready_s)

    def endpoints(self) -> list[str]:
        return [f"{r.address}:{self.client_port}" for r in self.nodes.values()]

    def teardown(self) -> None:
        self.stop_all("etcd")
        if not self.keep_data and self.run_dir is not None:
            # Each member preallocates 64 MB of WAL; the logs are the evidence, not the data.
            for node, remote in self.nodes.items():
                remote.run(["rm", "-rf", str(self._data(node))], check=False)

    # -- Pausable, Killable (pause, resume, kill: NodeDaemons), LogFiles

    def restart(self, node: str) -> None:
        """Start a killed member again on its data dir; returns once the process runs (it may
        still be catching up, or cut off by a partition: use `wait_ready` to wait for health)."""
        if not self.running(node):
            self._start(node, state="existing")

    def place_data(self, node: str, path: Path) -> None:
        self._placed[node] = path

    def log_files(self) -> dict[str, list[Path]]:
        return {node: [self._node_dir(node) / "etcd.log"] for node in self.nodes}

    # -- helpers

    def member_healthy(self, node: str, timeout_s: float = 2.0) -> bool:
        """One `etcdctl endpoint health` against this member, run on the node itself."""
        remote = self.nodes[node]
        argv = [
            ETCDCTL,
            f"--endpoints=http://{remote.address}:{self.client_port}",
            f"--dial-timeout={timeout_s}s",
            f"--command-timeout={timeout_s}s",
            "endpoint",
            "health",
        ]
        try:
            res = remote.run(argv, timeout_s=timeout_s + 3.0, check=False)
        except RemoteError:
            return False
        return res.returncode == 0 and "is healthy" in (res.stdout + res.stderr)

    def wait_ready(self, timeout_s: float, nodes: list[str] | None = None) -> None:
        """Wait until every member (or those named) answers a health check (a quorum read)."""
        pending = list(nodes if nodes is not None else self.nodes)
        deadline = time.monotonic() + timeout_s
        while pending:
            pending = [n for n in pending if not self.member_healthy(n)]
            if not pending:
                return
            self.check_exited(pending, "etcd.log")
            if time.monotonic() > deadline:
                raise ClusterError(f"etcd not healthy after {timeout_s} s on {', '.join(pending)}")
            time.sleep(0.2)

    def _data(self, node: str) -> Path:
        return self._placed.get(node, self._node_dir(node)) / "etcd"

    def _start(self, node: str, state: str) -> None:
        remote = self.nodes[node]
        data = self._data(node)
        remote.run(["mkdir", "-p", str(data)])
        remote.run(["chmod", "700", str(data)])  # etcd 3.4 warns (3.5 refuses) otherwise
        peers = ",".join(f"{n}=http://{r.address}:{self.peer_port}" for n, r in self.nodes.items())
        argv = [
            ETCD,
            f"--name={node}",
            f"--data-dir={data}",
            f"--listen-client-urls=http://{remote.address}:{self.client_port}",
            f"--advertise-client-urls=http://{remote.address}:{self.client_port}",
            f"--listen-peer-urls=http://{remote.address}:{self.peer_port}",
            f"--initial-advertise-peer-urls=http://{remote.address}:{self.peer_port}",
            f"--initial-cluster={peers}",
            f"--initial-cluster-state={state}",
            f"--initial-cluster-token=fc-{self.run_dir.name if self.run_dir else 'etcd'}",
            f"--heartbeat-interval={self.heartbeat_ms}",
            f"--election-timeout={self.election_ms}",
            "--logger=zap",
            "--log-outputs=stderr",
        ]
        self.start_node_daemon(node, "etcd", argv, log=self._node_dir(node) / "etcd.log")
