"""`EtcdService`: a static etcd 3.4 cluster (Debian's /usr/bin/etcd), one member per node.

Each member listens on its node's address (client port 2379 with the v3 JSON gateway, peer port
2380), keeps its data dir under `<run dir>/nodes/<node>/etcd/` and logs to
`<run dir>/nodes/<node>/etcd.log`; the data dirs are removed on teardown unless `keep_data` (each
member preallocates 64 MB of WAL). Elections are fast (heartbeat 100 ms, election timeout 1 s) so
that faults heal within a test. Note the lease floor that follows from these timings: etcd
raises any lease TTL below 1.5 x election timeout, so TTLs under 2 s become 2 s.

Capabilities: `Pausable` (SIGSTOP/SIGCONT), `Killable` (SIGKILL; `restart` starts the member
again on the same data dir with `--initial-cluster-state existing`), `DataDirs` (the data dir
placed elsewhere, e.g. on the lose-unsynced file system; the log stays), `Reconfigurable`
(`etcdctl member remove` / `member add`, run on a node through its Remote; a fresh member on a
node is its next generation: name `<node>-g<N>`, data dir `etcd-g<N>`, started with
`--initial-cluster-state existing`), `LogFiles`. Readiness is polled through each node's Remote
with `etcdctl endpoint health` (a quorum read), so it works unchanged on netns or ssh nodes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError, Remote, RemoteError
from fencecheck.clusters.services.daemons import NodeDaemons, ProcessLedger, retried

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
        self._gen: dict[str, int] = {}  # node -> generation of its member (1: the first)

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
                for gen in range(1, self._gen.get(node, 1) + 1):
                    remote.run(["rm", "-rf", str(self._data(node, gen))], check=False)

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

    # -- Reconfigurable

    def members(self) -> dict[str, str]:
        return {node: f"{m['ID']:x}" for node, m in self._member_list().items()}

    def leader(self) -> str | None:
        try:  # each running member says who leads; one that cannot answer says nothing
            statuses = self._etcdctl(["endpoint", "status"], check=False) or []
        except ValueError:
            return None
        ids = {s["Status"]["header"]["member_id"]: s["Endpoint"] for s in statuses}
        if not statuses:
            return None
        # The newest term's word (a member catching up may still name an old leader); 0, or
        # absent: none yet.
        newest = max(statuses, key=lambda s: s["Status"].get("raftTerm", 0))
        lead = newest["Status"].get("leader", 0)
        return self._node_of(ids[lead]) if lead in ids else None

    def remove_member(self, node: str) -> dict[str, Any]:
        gone: list[str] = []

        def attempt() -> bool:
            member = self._member_list().get(node)
            if member is None:
                return True
            gone.append(f"{member['ID']:x}")
            self._etcdctl(["member", "remove", gone[-1]])
            return False  # checked again: removed once the list lacks it

        retried(f"etcd: member remove {node}", attempt, self.ready_timeout_s)
        self.kill(node)  # a removed member stops by itself; this makes sure, and forgets it
        return {"member": gone[0] if gone else None, "members": sorted(self.members())}

    def add_member(self, node: str) -> dict[str, Any]:
        added: list[str] = []

        def attempt() -> bool:
            if node in self._member_list():
                return True
            self.kill(node)  # a leftover of a half-done removal
            self._gen[node] = self._gen.get(node, 1) + 1
            self.nodes[node].run(["rm", "-rf", str(self._data(node))])
            reply = self._etcdctl(["member", "add", self._name(node),
                                   f"--peer-urls={self._peer_url(node)}"])
            added.append(f"{reply['member']['ID']:x}")
            cluster = {m.get("name") or self._name(node): m["peerURLs"][0]
                       for m in reply["members"]}
            self._start(node, "existing", cluster)
            return True

        retried(f"etcd: member add {node}", attempt, self.ready_timeout_s)
        if not self.running(node):  # added, then killed or never started
            self._start(node, "existing")
        self.wait_ready(self.ready_timeout_s, [node])
        members = self.members()
        return {"member": added[-1] if added else members[node], "name": self._name(node),
                "members": sorted(members)}

    # -- helpers

    def _etcdctl(self, args: list[str], timeout_s: float = 5.0, check: bool = True,
                 on: list[str] | None = None) -> Any:
        """`etcdctl ARGS -w json` against the members on `on`, or every member that runs, from
        one of their nodes."""
        up = on or [n for n in self.nodes if self.running(n)]
        if not up:
            raise ClusterError("etcd: no member runs to ask")
        urls = ",".join(f"http://{self.nodes[n].address}:{self.client_port}" for n in up)
        argv = [ETCDCTL, f"--endpoints={urls}", f"--dial-timeout={timeout_s}s",
                f"--command-timeout={timeout_s}s", "-w", "json", *args]
        res = self.nodes[up[0]].run(argv, timeout_s=timeout_s * 2 + 5.0, check=check)
        return json.loads(res.stdout) if res.stdout.strip() else None

    def _member_list(self) -> dict[str, dict[str, Any]]:
        """node -> its member in `etcdctl member list` (by peer address), as the leader has it:
        etcd 3.4 answers from the asked member's own store, and a member catching up, a fresh
        one above all, may still list a member removed since. While there is no leader (an
        election), waited for, up to the ready timeout."""
        deadline = time.monotonic() + self.ready_timeout_s
        while (leader := self.leader()) is None:
            if time.monotonic() > deadline:
                raise ClusterError(f"etcd: no leader after {self.ready_timeout_s} s")
            time.sleep(0.2)
        found = {}
        for m in self._etcdctl(["member", "list"], on=[leader]).get("members", []):
            node = self._node_of(m["peerURLs"][0])
            if node is not None:
                found[node] = m
        return found

    def _node_of(self, url: str) -> str | None:
        host = url.split("://", 1)[-1].rsplit(":", 1)[0]
        return next((n for n, r in self.nodes.items() if r.address == host), None)

    def _name(self, node: str) -> str:
        gen = self._gen.get(node, 1)
        return node if gen == 1 else f"{node}-g{gen}"

    def _peer_url(self, node: str) -> str:
        return f"http://{self.nodes[node].address}:{self.peer_port}"

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

    def _data(self, node: str, gen: int | None = None) -> Path:
        gen = gen if gen is not None else self._gen.get(node, 1)
        return self._placed.get(node, self._node_dir(node)) / (
            "etcd" if gen == 1 else f"etcd-g{gen}")

    def _start(self, node: str, state: str, cluster: Mapping[str, str] | None = None) -> None:
        """Start node's member; `cluster` (name -> peer URL) for a fresh member joining, else
        every node's member (a member with data ignores it)."""
        remote = self.nodes[node]
        data = self._data(node)
        remote.run(["mkdir", "-p", str(data)])
        remote.run(["chmod", "700", str(data)])  # etcd 3.4 warns (3.5 refuses) otherwise
        cluster = cluster or {self._name(n): self._peer_url(n) for n in self.nodes}
        peers = ",".join(f"{name}={url}" for name, url in cluster.items())
        argv = [
            ETCD,
            f"--name={self._name(node)}",
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
