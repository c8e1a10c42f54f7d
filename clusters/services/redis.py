"""`RedisService`: one independent redis-server master on each of 1..N nodes.

With one node it is the plain Redis lock service; with N nodes it is the set of independent
masters Redlock runs on. It runs the host's redis-server binary with an explicit config per node
(`<run dir>/nodes/<node>/redis.conf`; data dir and `redis.log` beside it): bound to the node's
address, protected mode off, and persistence as asked:

- "off": no RDB snapshots and no AOF, so a restarted node comes back empty (the Redlock
  restart-without-persistence scenario);
- "everysec": AOF, fsync once a second (a crash may lose the last second);
- "always": AOF, fsync on every write.

Capabilities: `Pausable` (SIGSTOP/SIGCONT), `Killable` (SIGKILL, then restart on the same data
dir), `DataDirs` (the AOF's `dir` placed elsewhere, e.g. on the lose-unsynced file system;
config and log stay in the node's directory), `LogFiles`. `env_for(node)` adds environment to a
node's server (e.g. LD_PRELOAD for a clock shim). Given the run's `Ledger`, every server is
marked and recorded so that `teardown_run` finds it after a crash even outside a namespace; that
part assumes the node's processes are on this host (netns or loopback runtimes).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fencecheck.clusters.base import ClusterError, Daemon, Remote, RemoteError
from fencecheck.clusters.cleaner import Ledger
from fencecheck.clusters.services.daemons import start_recorded, stop_daemon

log = logging.getLogger(__name__)

Persistence = Literal["off", "everysec", "always"]


class RedisOptions(BaseModel):
    """The Redis backends' own options (`--backend-opt`; redis, redlock, redis-sentinel)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    persistence: Persistence = Field(
        default="off",
        description="off (no AOF: a restarted server comes back empty), everysec or always (AOF "
        "appendfsync)")


class RedisService:
    """Independent redis-server masters, one per node."""

    name = "redis"

    def __init__(
        self,
        port: int = 6379,
        persistence: Persistence = "off",
        env_for: Callable[[str], Mapping[str, str]] | None = None,
        *,
        ledger: Ledger | None = None,
        binary: str = "redis-server",
        startup_timeout_s: float = 10.0,
        stop_grace_s: float = 3.0,
    ) -> None:
        if persistence not in ("off", "everysec", "always"):
            raise ClusterError(f"bad redis persistence {persistence!r}")
        self.port = port
        self.persistence = persistence
        self.env_for = env_for
        self.ledger = ledger
        self.binary = binary
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self._nodes: dict[str, Remote] = {}
        self._dirs: dict[str, Path] = {}
        self._placed: dict[str, Path] = {}
        self._daemons: dict[str, Daemon] = {}

    # --- LockService ----------------------------------------------------------------------

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        if not nodes:
            raise ClusterError("redis needs at least one node")
        self._nodes = dict(nodes)
        for node, remote in self._nodes.items():
            d = run_dir / "nodes" / node
            d.mkdir(parents=True, exist_ok=True)
            self._dirs[node] = d
            conf = d / "redis.conf"
            conf.write_text(self.config(remote.address, self._placed.get(node, d)))
            remote.run(["mkdir", "-p", str(d)])
            remote.put_file(conf, str(conf))
        # Start every server before waiting for any, so N nodes cost one startup, not N.
        for node in self._nodes:
            self._start(node)
        for node in self._nodes:
            self._wait_ready(node)
        log.info("redis (%s persistence) serving on %s", self.persistence, self.endpoints())

    def endpoints(self) -> list[str]:
        return [f"{r.address}:{self.port}" for r in self._nodes.values()]

    def teardown(self) -> None:
        """SIGCONT (a paused server cannot act on SIGTERM), SIGTERM, SIGKILL after the grace.
        Idempotent: servers already gone are skipped."""
        errors = []
        for node, d in self._daemons.items():  # signal all first: they shut down in parallel
            remote = self._nodes[node]
            remote.signal(d.pid, signal.SIGCONT)
            remote.signal(d.pid, signal.SIGTERM)
        for node, d in list(self._daemons.items()):
            try:
                stop_daemon(self._nodes[node], d, signal.SIGTERM, self.stop_grace_s)
            except Exception as e:  # keep stopping the others; report all at the end
                errors.append(f"{node}: {e}")
            else:
                del self._daemons[node]
        if errors:
            raise ClusterError("redis teardown: " + "; ".join(errors))

    # --- Pausable / Killable / DataDirs / LogFiles ------------------------------------------

    def pause(self, node: str) -> None:
        self._nodes[node].signal(self._daemon(node).pid, signal.SIGSTOP)

    def resume(self, node: str) -> None:
        self._nodes[node].signal(self._daemon(node).pid, signal.SIGCONT)

    def kill(self, node: str) -> None:
        """SIGKILL the node's server and wait until it is gone (so a restart can bind)."""
        stop_daemon(self._nodes[node], self._daemon(node), signal.SIGKILL, 5.0)
        del self._daemons[node]

    def restart(self, node: str) -> None:
        """Start the node's server again on the same config and data dir; return when it
        answers PING. A server still running is killed first."""
        if node in self._daemons:
            self.kill(node)
        self._start(node)
        self._wait_ready(node)

    def place_data(self, node: str, path: Path) -> None:
        self._placed[node] = path

    def log_files(self) -> dict[str, list[Path]]:
        return {node: [d / "redis.log"] for node, d in self._dirs.items()}

    # --- helpers --------------------------------------------------------------------------

    def config(self, address: str, data_dir: Path) -> str:
        lines = [
            f"bind {address}",
            f"port {self.port}",
            "protected-mode no",
            "daemonize no",
            f"dir {data_dir}",
            'logfile ""',  # to stdout, which start_daemon sends to redis.log
            'save ""',
        ]
        if self.persistence == "off":
            lines.append("appendonly no")
        else:
            lines += ["appendonly yes", f"appendfsync {self.persistence}"]
        return "\n".join(lines) + "\n"

    def ping(self, node: str, timeout_s: float = 1.0) -> bool:
        """True if the node's server answers PING within timeout_s."""
        remote = self._nodes[node]
        argv = ["redis-cli", "-h", remote.address, "-p", str(self.port), "ping"]
        try:
            res = remote.run(argv, timeout_s=timeout_s, check=False)
        except RemoteError:
            return False  # timed out: the server is paused or unreachable
        return res.returncode == 0 and res.stdout.strip() == "PONG"

    def pid(self, node: str) -> int:
        return self._daemon(node).pid

    def _daemon(self, node: str) -> Daemon:
        try:
            return self._daemons[node]
        except KeyError:
            raise ClusterError(f"redis on {node} is not running") from None

    def _start(self, node: str) -> None:
        remote = self._nodes[node]
        d = self._dirs[node]
        self._daemons[node] = start_recorded(
            remote, node, "redis", [self.binary, str(d / "redis.conf")], log=d / "redis.log",
            env=self.env_for(node) if self.env_for is not None else None, ledger=self.ledger,
        )

    def _wait_ready(self, node: str) -> None:
        remote = self._nodes[node]
        d = self._daemon(node)
        deadline = time.monotonic() + self.startup_timeout_s
        argv = ["redis-cli", "-h", remote.address, "-p", str(self.port), "info", "server"]
        while time.monotonic() < deadline:
            try:
                res = remote.run(argv, timeout_s=1.0, check=False)
            except RemoteError:
                res = None
            # Ready means *our* server answers: another one already on the port would also
            # say PONG while ours dies of "address in use".
            if res is not None and f"process_id:{d.pid}\r" in res.stdout:
                return
            if not remote.alive(d.pid):
                raise self._not_up(node, "exited during startup")
            time.sleep(0.02)
        raise self._not_up(node, f"did not answer PING within {self.startup_timeout_s} s")

    def _not_up(self, node: str, what: str) -> ClusterError:
        logf = self._dirs[node] / "redis.log"
        try:
            tail = logf.read_text(errors="replace").strip().splitlines()[-5:]
        except OSError:
            tail = []
        return ClusterError(
            f"redis on {node} ({self._nodes[node].address}:{self.port}) {what}; "
            f"{logf}: {' / '.join(tail) or '(empty)'}"
        )
