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
itself with bash's /dev/tcp (no nc needed; the same argv works on netns and ssh nodes).

Capabilities: `Pausable`, `Killable` (SIGKILL; restart on the same data dir), `LogFiles`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fencecheck.clusters.base import ClusterError, Remote, RemoteError
from fencecheck.clusters.services.daemons import NodeDaemons, ProcessLedger

log = logging.getLogger(__name__)

JAVA = "/usr/bin/java"
CLASSPATH_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_SERVING = ("leader", "follower", "standalone")

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
    ) -> None:
        self.init_daemons(nodes, env_for, ledger, keep_data)
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
                remote.run(["rm", "-rf", str(self._conf_dir(node) / "data")], check=False)

    # -- Pausable, Killable (pause, resume, kill: NodeDaemons), LogFiles

    def restart(self, node: str) -> None:
        """Start a killed server again on its data dir; returns once the JVM runs (it rejoins
        the ensemble in the background: use `wait_ready` to wait for it)."""
        if not self.running(node):
            self._start(node)

    def log_files(self) -> dict[str, list[Path]]:
        return {node: [self._node_dir(node) / "zookeeper.log"] for node in self.nodes}

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

    def _conf_dir(self, node: str) -> Path:
        return self._node_dir(node) / "zookeeper"

    def config(self, node: str) -> str:
        """The zoo.cfg of the server on node."""
        remote = self.nodes[node]
        lines = [
            f"tickTime={self.tick_ms}",
            "initLimit=50",
            "syncLimit=10",
            f"dataDir={self._conf_dir(node) / 'data'}",
            f"clientPort={self.client_port}",
            f"clientPortAddress={remote.address}",
            f"minSessionTimeout={2 * self.tick_ms}",
            f"maxSessionTimeout={self.max_session_ms}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            # Snapshots and logs are tiny in a test; purge nothing, keep it simple.
            "autopurge.purgeInterval=0",
        ]
        for i, r in enumerate(self.nodes.values(), start=1):
            lines.append(f"server.{i}={r.address}:{self.quorum_port}:{self.election_port}")
        return "\n".join(lines) + "\n"

    def _configure(self, node: str) -> None:
        remote = self.nodes[node]
        conf = self._conf_dir(node)
        myid = list(self.nodes).index(node) + 1
        remote.run(["mkdir", "-p", str(conf / "data")])
        staging = conf / "zoo.cfg"
        # Written here (the store is this host's) and put on the node at the same path.
        staging.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(self.config(node))
        remote.put_file(staging, str(conf / "zoo.cfg"))
        (conf / "myid.staging").write_text(f"{myid}\n")
        remote.put_file(conf / "myid.staging", str(conf / "data" / "myid"))

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
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
            "-cp",
            ":".join([str(conf), *CLASSPATH_JARS]),
            MAIN,
            str(conf / "zoo.cfg"),
        ]
        self.start_node_daemon(node, "zookeeper", argv, self._node_dir(node) / "zookeeper.log")
