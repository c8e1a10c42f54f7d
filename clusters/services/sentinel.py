"""`SentinelService`: Redis primary/replica with Sentinel failover ("redis-sentinel").

One redis-server per node (the first node starts as primary, the others as its replicas) and one
sentinel per node on `sentinel_port` (quorum N/2+1, down-after 1 s, failover timeout 3 s, so a
failover completes within a few seconds). Clients are given the sentinels' addresses and the
master name `MASTER_NAME`. Setup returns once every sentinel names the same primary and knows
every replica and every other sentinel, and every replica is in sync.

`FailoverNemesis` (start-/stop-failover: isolate, pause or kill the primary) is at the end.
Failover primitives for it and others: `primary()`, `replicas()`, `kill_primary()`, `failover()`
(SENTINEL FAILOVER: a forced, coordinated one), `wait_for_new_primary(old)` and
`isolation(node)` (the grudge that cuts a node off from the other service nodes, for a `Net`).
Pausable and Killable act on the data servers, never on the sentinels.

Files: `<run dir>/nodes/<node>/{redis.conf,redis.log,sentinel.conf,sentinel.log}`. Sentinels and
replicas rewrite their own config files as the topology changes; that is why each has one.
"""

from __future__ import annotations

import hashlib
import logging
import signal
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import (
    ClusterError,
    Daemon,
    Grudge,
    Remote,
    RemoteError,
)
from fencecheck.clusters.cleaner import Ledger
from fencecheck.clusters.services.daemons import start_recorded, stop_daemon
from fencecheck.clusters.services.redis import Persistence, RedisService

log = logging.getLogger(__name__)

# Must match workloads/clients/sentinel.py's default (workloads never imports clusters).
MASTER_NAME = "fc-primary"


class _ReplicatedRedis(RedisService):
    """RedisService whose non-primary nodes start as replicas of the primary."""

    def __init__(
        self,
        primary_address: str,
        port: int,
        persistence: Persistence,
        env_for: Callable[[str], Mapping[str, str]] | None,
        ledger: Ledger | None,
        binary: str,
    ) -> None:
        super().__init__(port, persistence, env_for, ledger=ledger, binary=binary)
        self.primary_address = primary_address

    def config(self, address: str, data_dir: Path) -> str:
        lines = [
            # On loopback aliases the kernel would pick 127.0.0.1 as source address, and every
            # replica and sentinel would announce itself as 127.0.0.1: pin the real one.
            f"bind-source-addr {address}",
            f"replica-announce-ip {address}",
            # Diskless sync waits 5 s by default for more replicas to share one transfer.
            "repl-diskless-sync-delay 0",
        ]
        if address != self.primary_address:
            lines.append(f"replicaof {self.primary_address} {self.port}")
        return super().config(address, data_dir) + "\n".join(lines) + "\n"


class SentinelService:
    """A primary, N-1 replicas and N sentinels on N nodes (N = 3 by default)."""

    name = "redis-sentinel"

    def __init__(
        self,
        port: int = 6379,
        sentinel_port: int = 26379,
        persistence: Persistence = "off",
        env_for: Callable[[str], Mapping[str, str]] | None = None,
        *,
        ledger: Ledger | None = None,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        binary: str = "redis-server",
        ready_timeout_s: float = 30.0,
    ) -> None:
        self.port = port
        self.sentinel_port = sentinel_port
        self.persistence: Persistence = persistence
        self.env_for = env_for
        self.ledger = ledger
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.binary = binary
        self.ready_timeout_s = ready_timeout_s
        self.redis: _ReplicatedRedis | None = None
        self._nodes: dict[str, Remote] = {}
        self._dirs: dict[str, Path] = {}
        self._sentinels: dict[str, Daemon] = {}

    # --- LockService ----------------------------------------------------------------------

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        if len(nodes) < 3:
            raise ClusterError("redis-sentinel needs at least 3 nodes")
        self._nodes = dict(nodes)
        first = next(iter(self._nodes.values()))
        self.redis = _ReplicatedRedis(
            first.address,
            port=self.port,
            persistence=self.persistence,
            env_for=self.env_for,
            ledger=self.ledger,
            binary=self.binary,
        )
        self.redis.setup(self._nodes, run_dir)
        self._wait(lambda: self._replicas_in_sync(first.name), "replicas to sync")
        for node, remote in self._nodes.items():
            d = run_dir / "nodes" / node
            self._dirs[node] = d
            conf = d / "sentinel.conf"
            conf.write_text(self.sentinel_config(remote.address, first.address, d))
            remote.put_file(conf, str(conf))
        for node in self._nodes:
            self._start_sentinel(node)
        self._wait(lambda: self._sentinels_agree(first.name), "sentinels to agree")
        log.info("redis-sentinel: primary %s, sentinels %s", first.name, self.endpoints())

    def endpoints(self) -> list[str]:
        """The sentinels: clients find the primary through them."""
        return [f"{r.address}:{self.sentinel_port}" for r in self._nodes.values()]

    def client_options(self) -> dict[str, Any]:
        """What clients need besides the endpoints: the name the sentinels monitor."""
        return {"service_name": MASTER_NAME}

    def data_endpoints(self) -> list[str]:
        return [f"{r.address}:{self.port}" for r in self._nodes.values()]

    def teardown(self) -> None:
        """Sentinels first (so they do not react to the servers going away), then the servers.
        Idempotent; gathers errors and raises them together."""
        errors: list[str] = []
        for node, d in list(self._sentinels.items()):
            try:
                stop_daemon(self._nodes[node], d, signal.SIGTERM, wait_s=3.0)
            except ClusterError as e:
                errors.append(f"{node}: sentinel: {e}")
            else:
                del self._sentinels[node]
        if self.redis is not None:
            try:
                self.redis.teardown()
            except ClusterError as e:
                errors.append(str(e))
        if errors:
            raise ClusterError("redis-sentinel teardown: " + "; ".join(errors))

    # --- Pausable / Killable / LogFiles: the data servers ---------------------------------

    def pause(self, node: str) -> None:
        self._redis().pause(node)

    def resume(self, node: str) -> None:
        self._redis().resume(node)

    def kill(self, node: str) -> None:
        self._redis().kill(node)

    def restart(self, node: str) -> None:
        """Start a killed server again; the sentinels turn an old primary into a replica."""
        self._redis().restart(node)

    def log_files(self) -> dict[str, list[Path]]:
        out = self._redis().log_files() if self.redis else {}
        for node, d in self._dirs.items():
            out.setdefault(node, []).append(d / "sentinel.log")
        return out

    # --- failover primitives --------------------------------------------------------------

    def primary(self) -> str:
        """The node a majority of the sentinels name as primary. ClusterError if none."""
        votes = Counter(a for a in (self._master_addr(n) for n in self._sentinels) if a)
        quorum = len(self._nodes) // 2 + 1
        if votes:
            addr, n = votes.most_common(1)[0]
            if n >= quorum:
                return self._node_at(addr)
        raise ClusterError(f"the sentinels do not agree on a primary: {dict(votes)}")

    def replicas(self) -> list[str]:
        p = self.primary()
        return [n for n in self._nodes if n != p]

    def kill_primary(self) -> str:
        """SIGKILL the current primary's server; returns its node (restart it with restart)."""
        node = self.primary()
        log.info("redis-sentinel: killing primary %s", node)
        self.kill(node)
        return node

    def failover(self, wait_s: float = 15.0) -> str:
        """Ask a sentinel for a forced failover (no agreement needed); returns the new primary
        once the sentinels agree on it."""
        old = self.primary()
        node = next(iter(self._sentinels))
        self._cli(node, self.sentinel_port, "SENTINEL", "FAILOVER", MASTER_NAME)
        return self.wait_for_new_primary(old, wait_s)

    def wait_for_new_primary(self, old: str, timeout_s: float = 15.0) -> str:
        """Wait until a majority of sentinels name a primary other than `old` and that server
        says it is a master; return it."""
        found: list[str] = []

        def moved() -> bool:
            try:
                p = self.primary()
            except ClusterError:
                return False
            if p == old or self._role(p) != "master":
                return False
            found.append(p)
            return True

        self._wait(moved, f"a primary other than {old}", timeout_s)
        return found[-1]

    def isolation(self, node: str) -> Grudge:
        """The grudge that cuts `node` off from every other service node, both ways."""
        others = frozenset(n for n in self._nodes if n != node)
        return {node: others, **{n: frozenset({node}) for n in others}}

    # --- helpers --------------------------------------------------------------------------

    def sentinel_config(self, address: str, primary_address: str, data_dir: Path) -> str:
        quorum = len(self._nodes) // 2 + 1
        m = MASTER_NAME
        lines = [
            f"bind {address}",
            f"port {self.sentinel_port}",
            "protected-mode no",
            "daemonize no",
            'logfile ""',
            f"dir {data_dir}",
            f"bind-source-addr {address}",
            f"sentinel announce-ip {address}",
            "sentinel resolve-hostnames no",
            f"sentinel myid {_sentinel_id(address)}",
            f"sentinel monitor {m} {primary_address} {self.port} {quorum}",
            f"sentinel down-after-milliseconds {m} {self.down_after_ms}",
            f"sentinel failover-timeout {m} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {m} 1",
        ]
        # Telling each sentinel its peers and the replicas up front saves the seconds of hello
        # and INFO rounds it would take to discover them; they still verify them as usual.
        for r in self._nodes.values():
            if r.address != primary_address:
                lines.append(f"sentinel known-replica {m} {r.address} {self.port}")
            if r.address != address:
                lines.append(
                    f"sentinel known-sentinel {m} {r.address} {self.sentinel_port} "
                    f"{_sentinel_id(r.address)}"
                )
        return "\n".join(lines) + "\n"

    def _redis(self) -> _ReplicatedRedis:
        if self.redis is None:
            raise ClusterError("redis-sentinel is not set up")
        return self.redis

    def _start_sentinel(self, node: str) -> None:
        remote, d = self._nodes[node], self._dirs[node]
        argv = [self.binary, str(d / "sentinel.conf"), "--sentinel"]
        self._sentinels[node] = start_recorded(
            remote, node, "sentinel", argv, log=d / "sentinel.log",
            env=self.env_for(node) if self.env_for is not None else None, ledger=self.ledger,
        )

    def _cli(self, node: str, port: int, *args: str, timeout_s: float = 2.0) -> str | None:
        """redis-cli on the node against its own server or sentinel; None if unreachable."""
        remote = self._nodes[node]
        # --raw: one value a line, no quoting or numbering.
        argv = ["redis-cli", "--raw", "-h", remote.address, "-p", str(port), *args]
        try:
            res = remote.run(argv, timeout_s=timeout_s, check=False)
        except RemoteError:
            return None
        if res.returncode != 0 or res.stdout.startswith(("ERR", "Could not connect")):
            return None
        return res.stdout

    def _master_addr(self, node: str) -> str | None:
        out = self._cli(
            node, self.sentinel_port, "SENTINEL", "get-master-addr-by-name", MASTER_NAME
        )
        lines = (out or "").split()
        return lines[0] if len(lines) == 2 else None

    def _sentinel_view(self, node: str) -> dict[str, str]:
        out = self._cli(node, self.sentinel_port, "SENTINEL", "master", MASTER_NAME) or ""
        lines = out.splitlines()
        return dict(zip(lines[::2], lines[1::2], strict=False))

    def _info(self, node: str, section: str) -> dict[str, str]:
        out = self._cli(node, self.port, "INFO", section) or ""
        return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)

    def _role(self, node: str) -> str | None:
        return self._info(node, "replication").get("role")

    def _replicas_in_sync(self, primary: str) -> bool:
        info = self._info(primary, "replication")
        online = [v for k, v in info.items() if k.startswith("slave") and "state=online" in v]
        return len(online) == len(self._nodes) - 1

    def _sentinels_agree(self, primary: str) -> bool:
        want = self._nodes[primary].address
        n = len(self._nodes)
        for node in self._nodes:
            view = self._sentinel_view(node)
            if (
                view.get("ip") != want
                or view.get("num-slaves") != str(n - 1)
                or view.get("num-other-sentinels") != str(n - 1)
            ):
                return False
        return True

    def _node_at(self, address: str) -> str:
        for name, r in self._nodes.items():
            if r.address == address:
                return name
        raise ClusterError(f"the sentinels name {address}, which is none of the nodes")

    def _wait(self, cond: Callable[[], bool], what: str, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (timeout_s or self.ready_timeout_s)
        while not cond():
            if time.monotonic() > deadline:
                raise ClusterError(f"redis-sentinel: timed out waiting for {what}")
            time.sleep(0.1)


def _sentinel_id(address: str) -> str:
    """A sentinel's run id (40 hex digits), derived from its address so peers can name it."""
    return hashlib.sha1(f"fencecheck-sentinel-{address}".encode()).hexdigest()
