"""`ZookeeperService`: a ZooKeeper 3.8 ensemble (Debian's package), one server per node.

Debian's zkServer.sh ignores a custom config, so each server is started directly as
`java -cp CONF:zookeeper.jar:slf4j-simple.jar QuorumPeerMain zoo.cfg`. The jar's manifest already
names its dependencies (jute, netty, slf4j-api, ...); slf4j-simple is added so that the server
logs (to stderr, i.e. the node's `zookeeper.log`) instead of falling back to slf4j's no-op.

Config per server under `<run dir>/nodes/<node>/zookeeper/`: `zoo.cfg`, `data/myid` (data/ is
removed on teardown unless `keep_data`). tickTime is
200 ms so sessions can be short: ZooKeeper negotiates session timeouts into
[minSessionTimeout, maxSessionTimeout], here [2 ticks = 400 ms, 120 s], so a client's lease is
granted as asked instead of being silently clamped. The AdminServer is off (it would want port
8080) and the `ruok`/`srvr` four-letter words are whitelisted: readiness is `srvr` reporting
`Mode: leader|follower` (`standalone` for one server) on every server, polled from the node
itself with bash's /dev/tcp (no nc needed; the same argv works on netns and ssh nodes); `conf`
says a server's view of the ensemble's configuration.

Options (`--backend-opt`): `forceSync` yes (ZooKeeper's default: the transaction log is
fsynced before a write is acknowledged) or no (written, never forced to disk).

Capabilities: `Pausable`, `Killable` (SIGKILL; restart on the same data dir), `DataDirs` (the
data dir, myid included, placed elsewhere, e.g. on the lose-unsynced file system; zoo.cfg and
the log stay), `Reconfigurable` (dynamic reconfiguration, `reconfigEnabled=true`, through kazoo's
`reconfig` run on a node: clusters/services/zk_admin.py; a fresh member on a node is its next
generation: a new server id, config dir `zookeeper-g<N>`, an empty data dir), `LogFiles`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fencecheck.clusters.base import ClusterError, Remote, RemoteError
from fencecheck.clusters.services import zk_admin
from fencecheck.clusters.services.daemons import NodeDaemons, ProcessLedger, retried

log = logging.getLogger(__name__)

JAVA = "/usr/bin/java"
CLASSPATH_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_SERVING = ("leader", "follower", "standalone")
ForceSync = Literal["yes", "no"]


class ZookeeperOptions(BaseModel):
    """The zookeeper backend's own options (`--backend-opt`), named as in zoo.cfg."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    forceSync: ForceSync = Field(  # zoo.cfg's name
        default="yes",
        description="yes (the transaction log fsynced before a write is acknowledged, "
        "ZooKeeper's default) or no (written, never forced to disk)")

# Sends one four-letter word and prints the answer; argv after the script: address port word.
# bash's /dev/tcp starts in milliseconds where python3 takes a good fraction of a second on a
# loaded 2-core machine, and readiness polls it many times.
_FLW = 'exec 3<>"/dev/tcp/$0/$1" && printf %s "$2" >&3 && cat <&3'


class ZookeeperService(NodeDaemons):
    """A ZooKeeper ensemble of `nodes` servers. See the module docstring."""

    name = "zookeeper"

    def __init__(
        self,
        nodes: int | None = None,
        env_for: Callable[[str], Mapping[str, str]] | None = None,
        *,
        client_port: int = 2181,
        quorum_port: int = 2888,
        election_port: int = 3888,
        tick_ms: int = 200,
        max_session_ms: int = 120_000,
        heap_mb: int = 256,
        ready_timeout_s: float = 60.0,
        keep_data: bool = False,
        ledger: ProcessLedger | None = None,
        forceSync: ForceSync = "yes",  # ZooKeeper's own name, as in --backend-opt
    ) -> None:
        self.init_daemons(nodes, env_for, ledger, keep_data)
        if forceSync not in ("yes", "no"):
            raise ClusterError(f"zookeeper: forceSync must be yes or no, not {forceSync!r}")
        self.force_sync = forceSync
        self._placed: dict[str, Path] = {}
        self._gen: dict[str, int] = {}  # node -> generation of its server (1: the first)
        self._sid: dict[str, int] = {}  # node -> its server's id (myid)
        self.client_port = client_port
        self.quorum_port = quorum_port
        self.election_port = election_port
        self.tick_ms = tick_ms
        self.max_session_ms = max_session_ms
        self.heap_mb = heap_mb
        self.ready_timeout_s = ready_timeout_s

    # -- LockService

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        self.adopt_nodes(nodes, run_dir)
        self._sid = {n: i for i, n in enumerate(self.nodes, start=1)}
        t0 = time.monotonic()
        for node in self.nodes:
            self._configure(node)
        for node in self.nodes:
            self._start(node)
        self.wait_ready(self.ready_timeout_s)
        self.ready_s = time.monotonic() - t0
        log.info("zookeeper: %d servers ready in %.2f s", len(self.nodes), self.ready_s)

    def endpoints(self) -> list[str]:
        return [f"{r.address}:{self.client_port}" for r in self.nodes.values()]

    def teardown(self) -> None:
        self.stop_all("zookeeper")
        if not self.keep_data and self.run_dir is not None:
            # Transaction logs are preallocated in 64 MB steps; zoo.cfg and the logs stay.
            for node, remote in self.nodes.items():
                for gen in range(1, self._gen.get(node, 1) + 1):
                    remote.run(["rm", "-rf", str(self._data_dir(node, gen))], check=False)

    # -- Pausable, Killable (pause, resume, kill: NodeDaemons), LogFiles

    def restart(self, node: str) -> None:
        """Start a killed server again on its data dir; returns once the JVM runs (it rejoins
        the ensemble in the background: use `wait_ready` to wait for it)."""
        if not self.running(node):
            self._start(node)

    def log_files(self) -> dict[str, list[Path]]:
        return {node: [self._node_dir(node) / "zookeeper.log"] for node in self.nodes}

    def place_data(self, node: str, path: Path) -> None:
        self._placed[node] = path

    # -- Reconfigurable

    def members(self) -> dict[str, str]:
        return {node: str(sid) for node, (sid, _) in self._config().items()}

    def leader(self) -> str | None:
        up = [n for n in self.nodes if self.running(n)]
        with ThreadPoolExecutor(max(1, len(up))) as pool:
            modes = dict(zip(up, pool.map(self.mode, up), strict=True))
        return next((n for n, m in modes.items() if m == "leader"), None)

    def remove_member(self, node: str) -> dict[str, Any]:
        gone: list[int] = []

        def attempt() -> bool:
            sid = self._config().get(node, (None, ""))[0]
            if sid is None:
                return True
            gone.append(sid)
            self._admin("reconfig", "--leaving", str(sid), avoid=node)
            return False  # checked again: removed once the configuration lacks it

        retried(f"zookeeper: reconfig -remove {node}", attempt, self.ready_timeout_s)
        self.kill(node)  # a server removed from the ensemble stops serving; this stops it
        return {"member": str(gone[0]) if gone else None, "members": sorted(self._config())}

    def add_member(self, node: str) -> dict[str, Any]:
        def attempt() -> bool:
            config = self._config()
            if node in config:
                return True
            self.kill(node)  # a leftover of a half-done removal
            self._gen[node] = self._gen.get(node, 1) + 1
            self._sid[node] = max([*self._sid.values(), *(s for s, _ in config.values())]) + 1
            remote = self.nodes[node]
            line = (f"server.{self._sid[node]}={remote.address}:{self.quorum_port}:"
                    f"{self.election_port}:participant;{remote.address}:{self.client_port}")
            # Added first, then started on the configuration that holds it: a quorum of the
            # new configuration is already up, so the change commits without it.
            after = self._admin("reconfig", "--joining", line, avoid=node)["config"]
            remote.run(["rm", "-rf", str(self._data_dir(node))])
            self._configure(node, servers=list(after))
            self._start(node)
            return True

        retried(f"zookeeper: reconfig -add {node}", attempt, self.ready_timeout_s)
        if not self.running(node):  # added, then killed or never started
            if not (self._conf_dir(node) / "zoo.cfg").exists():  # added, reply lost: no config
                self._configure(node, servers=[line for _, line in self._config().values()])
            self._start(node)
        self.wait_ready(self.ready_timeout_s, [node])
        config = self._config()
        return {"member": str(config[node][0]), "members": sorted(config)}

    # -- helpers

    def four_letter(self, node: str, word: str, timeout_s: float = 3.0) -> str | None:
        """Send a four-letter word to the server on node, from the node; None if unreachable."""
        remote = self.nodes[node]
        argv = ["timeout", str(timeout_s), "bash", "-c", _FLW, remote.address,
                str(self.client_port), word]
        try:
            res = remote.run(argv, timeout_s=timeout_s + 2.0, check=False)
        except RemoteError:
            return None
        return res.stdout if res.returncode == 0 else None

    def mode(self, node: str) -> str | None:
        """`leader`, `follower`, `standalone`, or None while the server does not serve."""
        out = self.four_letter(node, "srvr")
        for line in (out or "").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def wait_ready(self, timeout_s: float, nodes: list[str] | None = None) -> None:
        """Wait until every server (or those named) serves as leader or follower (standalone:
        a one-server ensemble)."""
        pending = list(nodes if nodes is not None else self.nodes)
        deadline = time.monotonic() + timeout_s
        while pending:
            with ThreadPoolExecutor(len(pending)) as pool:
                modes = list(pool.map(self.mode, pending))
            pending = [n for n, m in zip(pending, modes, strict=True) if m not in _SERVING]
            if not pending:
                return
            self.check_exited(pending, "zookeeper.log")
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"zookeeper not serving after {timeout_s} s on {', '.join(pending)}"
                )
            time.sleep(0.2)

    def _conf_dir(self, node: str, gen: int | None = None) -> Path:
        gen = gen if gen is not None else self._gen.get(node, 1)
        return self._node_dir(node) / ("zookeeper" if gen == 1 else f"zookeeper-g{gen}")

    def _data_dir(self, node: str, gen: int | None = None) -> Path:
        if node not in self._placed:
            return self._conf_dir(node, gen) / "data"
        gen = gen if gen is not None else self._gen.get(node, 1)
        return self._placed[node] / ("zookeeper" if gen == 1 else f"zookeeper-g{gen}")

    def _admin(self, *args: str, avoid: str | None = None) -> dict[str, Any]:
        """zk_admin.py run on a node whose server runs, asking the others (not `avoid`'s)."""
        up = [n for n in self.nodes if self.running(n) and n != avoid]
        if not up:
            raise ClusterError("zookeeper: no other server runs to ask")
        hosts = ",".join(f"{self.nodes[n].address}:{self.client_port}" for n in up)
        argv = [sys.executable, "-m", "fencecheck.clusters.services.zk_admin", hosts, *args]
        res = self.nodes[up[0]].run(argv, timeout_s=60.0)
        reply: dict[str, Any] = json.loads(res.stdout)
        return reply

    def _config(self) -> dict[str, tuple[int, str]]:
        """node -> (server id, server line) in the newest configuration a running server
        reports (`conf`: each server's committed view; the newest is the ensemble's). Servers
        electing a leader report none: waited for, up to the ready timeout."""
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            up = [n for n in self.nodes if self.running(n)]
            with ThreadPoolExecutor(max(1, len(up))) as pool:
                views = [v for out in pool.map(lambda n: self.four_letter(n, "conf"), up)
                         if out and (v := _membership(out))[1]]
            if views:
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"zookeeper: no server reported its configuration in "
                                   f"{self.ready_timeout_s} s")
            time.sleep(0.2)
        found = {}
        for line in max(views, key=lambda v: v[0])[1]:
            key, _, spec = line.partition("=")
            host = spec.split(":", 1)[0]
            node = next((n for n, r in self.nodes.items() if r.address == host), None)
            if node is not None:
                found[node] = (int(key.removeprefix("server.")), line)
        return found

    def config(self, node: str, servers: list[str] | None = None) -> str:
        """The zoo.cfg of the server on node: every node's server, or `servers` (lines)."""
        remote = self.nodes[node]
        lines = [
            f"tickTime={self.tick_ms}",
            "initLimit=50",
            "syncLimit=10",
            f"dataDir={self._data_dir(node)}",
            f"clientPort={self.client_port}",
            f"clientPortAddress={remote.address}",
            f"minSessionTimeout={2 * self.tick_ms}",
            f"maxSessionTimeout={self.max_session_ms}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,conf",
            # Snapshots and logs are tiny in a test; purge nothing, keep it simple.
            "autopurge.purgeInterval=0",
            # Membership changes (the membership fault); only the super user may make them.
            "reconfigEnabled=true",
        ]
        if self.force_sync == "no":
            lines.append("forceSync=no")
        # Each server's client address is in its line (3.5's form): ZooKeeper drops clientPort
        # from zoo.cfg when it rewrites it after a reconfiguration.
        lines += servers if servers is not None else [
            f"server.{self._sid.get(n, i)}={r.address}:{self.quorum_port}:{self.election_port}"
            f":participant;{r.address}:{self.client_port}"
            for i, (n, r) in enumerate(self.nodes.items(), start=1)]
        return "\n".join(lines) + "\n"

    def _configure(self, node: str, servers: list[str] | None = None) -> None:
        remote = self.nodes[node]
        conf = self._conf_dir(node)
        data = self._data_dir(node)
        myid = self._sid.get(node, list(self.nodes).index(node) + 1)
        remote.run(["mkdir", "-p", str(conf), str(data)])
        staging = conf / "zoo.cfg"
        # Written here (the store is this host's) and put on the node at the same path.
        staging.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(self.config(node, servers))
        remote.put_file(staging, str(conf / "zoo.cfg"))
        (conf / "myid.staging").write_text(f"{myid}\n")
        remote.put_file(conf / "myid.staging", str(data / "myid"))

    def _start(self, node: str) -> None:
        conf = self._conf_dir(node)
        argv = [
            JAVA,
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",  # fewer threads and less memory on a 2-core machine
            # C1 only: a test's server runs seconds to minutes, where C2's compiles never pay
            # back (half the CPU of a start: docs/test-suite-cpu.md)
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.jmx.log4j.disable=true",
            f"-Dzookeeper.DigestAuthenticationProvider.superDigest={zk_admin.super_digest()}",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
            "-cp",
            ":".join([str(conf), *CLASSPATH_JARS]),
            MAIN,
            str(conf / "zoo.cfg"),
        ]
        self.start_node_daemon(node, "zookeeper", argv, self._node_dir(node) / "zookeeper.log")


def _membership(conf: str) -> tuple[int, list[str]]:
    """The `conf` four-letter word's configuration: its version and its server lines."""
    lines = conf.splitlines()
    version = next((int(x.split("=", 1)[1], 16) for x in lines if x.startswith("version=")), 0)
    return version, [x for x in lines if x.startswith("server.")]
