"""`HazelcastService`: a Hazelcast cluster (the community jar pinned by
clusters/services/hazelcast_build.py, which says why 5.4.0), one member per node, with the CP
Subsystem on 3 CP members (Raft), or with none (`cp_members=0`: "unsafe mode", where the same
`FencedLock` API runs on the partitioned, asynchronously backed-up AP structures).

Each member is Hazelcast's own start class (`HazelcastMemberStarter`) in a small, quick-starting
JVM (hazelcast_build.JVM_FLAGS, and the class-data-sharing archive the build made, where the node
runs the cached jar itself) with a config of ours, `<run dir>/nodes/<node>/hazelcast/
hazelcast.yaml` (clusters/services/hazelcast_config.py: what is tuned and why; the CP session
TTL follows the run's lease). It logs to `<run dir>/nodes/<node>/hazelcast.log`. A node that does
not see the build cache (a container, an ssh host) gets the jar copied into that folder.

Readiness, from each node over the member port's REST endpoints (bash's /dev/tcp, no client on
the node): every member ACTIVE in a cluster of all of them, and with CP members, the CP
Subsystem's members all discovered. Nothing is persisted (CP persistence is Enterprise): a member
keeps no data directory.

Capabilities: `Pausable` (SIGSTOP/SIGCONT), `Killable` (SIGKILL; `restart` starts a fresh member,
which joins the cluster as a new member: with CP members it then takes the killed member's place
in the CP Subsystem, removed and promoted over REST, as an operator would; with a majority of the
CP members killed that cannot be done, since the CP groups have lost their majority for good
without persistence), `LogFiles`, `ClientOptions` (the cluster name, the session TTL, whether
CP is on).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fencecheck.clusters.base import ClusterError, Remote, RemoteError
from fencecheck.clusters.services import hazelcast_build as build
from fencecheck.clusters.services.daemons import NodeDaemons, ProcessLedger
from fencecheck.clusters.services.hazelcast_config import (
    bind_address,
    member_config,
    render,
    session_ttl_s,
)

log = logging.getLogger(__name__)

JAVA = "java"

# One HTTP/1.0 request to a member's REST endpoint, from the node (argv after the script:
# address port method path body); prints the status line and headers (without their \r), a
# blank line and the body. The member keeps the connection open after its answer, so the body is
# read by its Content-Length rather than to the end of the stream.
_HTTP = r"""exec 3<>"/dev/tcp/$0/$1" || exit 1
ct='Content-Type: application/x-www-form-urlencoded'
printf '%s %s HTTP/1.0\r\n%s\r\nContent-Length: %d\r\n\r\n%s' "$2" "$3" "$ct" "${#4}" "$4" >&3
len=0
while IFS= read -r line <&3; do
  line=${line%$'\r'}
  [ -z "$line" ] && break
  printf '%s\n' "$line"
  case "${line,,}" in content-length:*) len=${line#*:}; len=${len//[!0-9]/} ;; esac
done
printf '\n'
[ "${len:-0}" -gt 0 ] && head -c "$len" <&3
exit 0
"""


class HazelcastOptions(BaseModel):
    """The hazelcast backend's own options (`--backend-opt`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cp_members: int = Field(
        default=3, ge=0,
        description="CP members (Raft), 0 or at least 3; 0 runs FencedLock in Hazelcast's "
        "\"unsafe mode\" on the AP structures (the hazelcast-unsafe backend is this with 0)")


class HazelcastService(NodeDaemons):
    """A Hazelcast cluster of `nodes` members, `cp_members` of them CP members (0: unsafe mode).
    See the module docstring. `lease_ms` sets the CP session TTL (whole seconds, rounded up)."""

    name = "hazelcast"

    def __init__(
        self,
        nodes: int | None = None,
        env_for: Callable[[str], Mapping[str, str]] | None = None,
        *,
        lease_ms: int = 2000,
        cp_members: int = 3,
        port: int = 5701,
        ready_timeout_s: float = 90.0,
        keep_data: bool = False,
        ledger: ProcessLedger | None = None,
        jar: str | None = None,
    ) -> None:
        if lease_ms <= 1000:
            raise ClusterError(
                f"hazelcast: lease_ms must be more than 1000, not {lease_ms}: the CP session "
                "TTL it sets is whole seconds and must outlast the 1 s session heartbeat")
        if cp_members and cp_members < 3:
            raise ClusterError(f"hazelcast: cp_members must be 0 or at least 3, not {cp_members}")
        self.init_daemons(nodes, env_for, ledger, keep_data)
        self.lease_ms = lease_ms
        self.cp_members = cp_members
        self.port = port
        self.ready_timeout_s = ready_timeout_s
        self.jar = jar
        self.cp_uuids: dict[str, str] = {}  # node -> its CP member's uuid
        self._run_jar: dict[str, tuple[str, str | None]] = {}  # node -> (class path, CDS)

    # -- LockService

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        self.adopt_nodes(nodes, run_dir)
        if self.cp_members and len(self.nodes) < self.cp_members:
            raise ClusterError(f"hazelcast: {self.cp_members} CP members need as many nodes, "
                               f"not {len(self.nodes)}")
        t0 = time.monotonic()
        for node in self.nodes:
            self._configure(node)
        for node in self.nodes:
            self._start(node)
        self.wait_ready(self.ready_timeout_s)
        if self.cp_members:
            self.cp_uuids = self.wait_cp(self.ready_timeout_s)
        self.ready_s = time.monotonic() - t0
        log.info("hazelcast: %d members (%d CP) ready in %.2f s", len(self.nodes),
                 self.cp_members, self.ready_s)

    def endpoints(self) -> list[str]:
        return [f"{r.address}:{self.port}" for r in self.nodes.values()]

    def client_options(self) -> dict[str, Any]:
        return {"cluster_name": self.cluster_name, "cp": bool(self.cp_members),
                "session_ttl_s": session_ttl_s(self.lease_ms)}

    def teardown(self) -> None:
        self.stop_all("hazelcast")
        if not self.keep_data and self.run_dir is not None:
            for node, remote in self.nodes.items():  # a copied jar, if any
                remote.run(["rm", "-f", str(self._conf_dir(node) / build.JAR)], check=False)

    # -- Pausable, Killable (pause, resume, kill: NodeDaemons), LogFiles

    def restart(self, node: str) -> None:
        """Start a killed member again (a new member: nothing was persisted) and wait until it
        has joined; with CP members, put it in the killed member's place in the CP Subsystem.
        Unable to (the CP groups lost their majority), it stays an AP member: logged."""
        if self.running(node):
            return
        self._start(node)
        self.wait_ready(self.ready_timeout_s, [node])
        if self.cp_members and node in self.cp_uuids:
            try:
                self._replace_cp_member(node)
            except ClusterError as e:
                log.warning("hazelcast: %s rejoined as an AP member only: %s", node, e)

    def log_files(self) -> dict[str, list[Path]]:
        return {node: [self._node_dir(node) / "hazelcast.log"] for node in self.nodes}

    # -- REST

    @property
    def cluster_name(self) -> str:
        return f"fc-{self.run_dir.name}" if self.run_dir is not None else "fc-hazelcast"

    def rest(self, node: str, path: str, method: str = "GET", body: str = "",
             timeout_s: float = 3.0) -> tuple[int, str] | None:
        """One request to the member on node, sent from the node: (status, body), or None if
        it did not answer."""
        remote = self.nodes[node]
        argv = ["timeout", str(timeout_s), "bash", "-c", _HTTP, remote.address, str(self.port),
                method, path, body]
        try:
            res = remote.run(argv, timeout_s=timeout_s + 2.0, check=False)
        except RemoteError:
            return None
        head, _, text = res.stdout.partition("\n\n")
        parts = head.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            return None
        return int(parts[1]), text

    def rest_json(self, node: str, path: str) -> Any:
        """A GET's decoded JSON body, or None if it failed."""
        got = self.rest(node, path)
        if got is None or got[0] != 200:
            return None
        try:
            return json.loads(got[1])
        except ValueError:
            return None

    def health(self, node: str) -> dict[str, Any] | None:
        """The member's `/hazelcast/health` (nodeState, clusterState, clusterSize, ...)."""
        h = self.rest_json(node, "/hazelcast/health")
        return h if isinstance(h, dict) else None

    def wait_ready(self, timeout_s: float, nodes: list[str] | None = None) -> None:
        """Wait until every member (or those named) is ACTIVE in a cluster of all the members
        that run (a member restarted while another is still killed joins a smaller one)."""
        pending = list(nodes if nodes is not None else self.nodes)
        want = len(self.daemons)
        deadline = time.monotonic() + timeout_s
        while pending:
            healths = {n: self.health(n) for n in pending}
            pending = [n for n, h in healths.items()
                       if not (h and h.get("nodeState") == "ACTIVE"
                               and h.get("clusterSize") == want)]
            if not pending:
                return
            self.check_exited(pending, "hazelcast.log")
            if time.monotonic() > deadline:
                raise ClusterError(f"hazelcast: not all {want} members joined after {timeout_s}"
                                   f" s on {', '.join(pending)}: {healths}")
            time.sleep(0.2)

    def cp_member_uuids(self, node: str) -> list[str] | None:
        """The CP Subsystem's members as `node` sees them (None before it discovered them)."""
        members = self.rest_json(node, "/hazelcast/rest/cp-subsystem/members")
        if not isinstance(members, list):
            return None
        return [str(m["uuid"]) for m in members if isinstance(m, dict) and "uuid" in m]

    def local_cp_uuid(self, node: str) -> str | None:
        """The uuid of the CP member on node, None if it is not one (or did not answer)."""
        local = self.rest_json(node, "/hazelcast/rest/cp-subsystem/members/local")
        return str(local["uuid"]) if isinstance(local, dict) and "uuid" in local else None

    def wait_cp(self, timeout_s: float) -> dict[str, str]:
        """Wait until the CP Subsystem is initialized (its METADATA group has committed its
        members, as every member reports them); node -> CP member uuid."""
        deadline = time.monotonic() + timeout_s
        while True:
            uuids = {n: self.local_cp_uuid(n) for n in self.nodes}
            found = {n: u for n, u in uuids.items() if u is not None}
            committed = [self.cp_member_uuids(n) for n in self.nodes]
            if len(found) >= self.cp_members and all(
                    c is not None and sorted(c) == sorted(found.values()) for c in committed):
                return found
            self.check_exited(list(self.nodes), "hazelcast.log")
            if time.monotonic() > deadline:
                raise ClusterError(f"hazelcast: the CP Subsystem is not initialized after "
                                   f"{timeout_s} s (its members: {found}; as seen: {committed})")
            time.sleep(0.3)

    def _replace_cp_member(self, node: str) -> None:
        """Remove the killed member's CP identity (through another CP member) and promote the
        restarted member on node in its place."""
        old = self.cp_uuids[node]
        auth = f"{self.cluster_name}&"  # cluster name & (empty) password
        others = [n for n in self.cp_uuids if n != node and self.running(n)]
        removed = False
        for other in others:
            got = self.rest(other, f"/hazelcast/rest/cp-subsystem/members/{old}/remove",
                            "POST", auth, timeout_s=5.0)
            if got is not None and got[0] == 200:
                removed = True
                break
        if not removed:
            raise ClusterError(f"could not remove the killed CP member {old} (no majority?)")
        got = self.rest(node, "/hazelcast/rest/cp-subsystem/members", "POST", auth,
                        timeout_s=10.0)
        if got is None or got[0] != 200:
            raise ClusterError(f"could not promote {node} to a CP member: {got}")
        uuid = self.local_cp_uuid(node)
        if uuid is None:
            raise ClusterError(f"{node} was promoted but reports no CP member")
        self.cp_uuids[node] = uuid
        log.info("hazelcast: %s is CP member %s in place of %s", node, uuid, old)

    # -- start

    def _conf_dir(self, node: str) -> Path:
        return self._node_dir(node) / "hazelcast"

    def _configure(self, node: str) -> None:
        remote = self.nodes[node]
        conf = self._conf_dir(node)
        remote.run(["mkdir", "-p", str(conf)])
        cfg = member_config(cluster=self.cluster_name, address=remote.address, port=self.port,
                            members=[r.address for r in self.nodes.values()],
                            cp_members=self.cp_members, lease_ms=self.lease_ms)
        conf.mkdir(parents=True, exist_ok=True)  # written here, put on the node at this path
        staging = conf / "hazelcast.yaml.staging"
        staging.write_text(render(cfg))
        remote.put_file(staging, str(conf / "hazelcast.yaml"))
        self._run_jar[node] = self._place_jar(node)

    def _place_jar(self, node: str) -> tuple[str, str | None]:
        """The class path the node's member runs, and the CDS archive to use with it: the
        cache's jars, where the node sees them (netns); else a copy of the member jar in the
        node's folder, without the archive (it names the cached jars' paths)."""
        cached = Path(self.jar) if self.jar is not None else build.jar()
        remote = self.nodes[node]
        if remote.run(["test", "-r", str(cached)], check=False).returncode == 0:
            cds = build.cds_archive() if self.jar is None else None
            if cds is not None and remote.run(["test", "-r", str(cds[0])],
                                              check=False).returncode == 0:
                return f"{cached}:{cds[1]}", str(cds[0])
            return str(cached), None
        target = str(self._conf_dir(node) / build.JAR)
        remote.put_file(cached, target)
        return target, None

    def _start(self, node: str) -> None:
        conf = self._conf_dir(node)
        classpath, cds = self._run_jar[node]
        argv = [JAVA, *build.JVM_FLAGS]
        if cds is not None:
            argv.append(f"-XX:SharedArchiveFile={cds}")
        argv += [
            f"-Dhazelcast.config={conf / 'hazelcast.yaml'}",
            bind_address(self.nodes[node].address),
            "-Djava.util.logging.SimpleFormatter.format=%1$tFT%1$tT.%1$tL %4$s %3$s: %5$s%6$s%n",
            "-cp", classpath, build.MAIN,
        ]
        self.start_node_daemon(node, "hazelcast", argv, self._node_dir(node) / "hazelcast.log")


class HazelcastUnsafeService(HazelcastService):
    """The same cluster with no CP members: FencedLock in unsafe mode."""

    name = "hazelcast-unsafe"

    def __init__(self, nodes: int | None = None,
                 env_for: Callable[[str], Mapping[str, str]] | None = None, *,
                 lease_ms: int = 2000, ledger: ProcessLedger | None = None,
                 **kwargs: Any) -> None:
        super().__init__(nodes, env_for, lease_ms=lease_ms, ledger=ledger, cp_members=0,
                         **kwargs)
