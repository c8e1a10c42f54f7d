"""`NatsService`: a JetStream cluster of nats-server (the pinned release built by
clusters/services/nats_build.py, which says why not Debian's 2.9.10), one server per node, and
the KV bucket the lock clients use, with 3 replicas.

Each server listens on its node's address (client port 4222, cluster port 6222, monitoring port
8222), keeps its JetStream store under `<run dir>/nodes/<node>/nats/` and logs to
`<run dir>/nodes/<node>/nats.log`; the stores are removed on teardown unless `keep_data`. The
bucket (`fc-locks`, stream `KV_fc-locks`) is created at setup with the stream settings nats.go
and nats-py give a KV bucket, R3 (or fewer, on a smaller cluster), and `max_age` = the run's
lease, counted from the key's last write (a renewal's update replaces the message, restarting
it). Not a per-key TTL (the `Nats-TTL` header, 2.11+): nats-py's KV `update` cannot send one
(only `create` can, in whole seconds), so a renewed key would stop expiring, and 2.9 has none.
Each replica expires messages by its own clock, outside the Raft log.

JetStream's Raft timings are not configurable (elections take seconds), and its file store
syncs to disk every 2 minutes by default (`sync_interval`), which is what Jepsen's 2025
analysis found losing acknowledged writes after crashes; both are left as shipped, unless the
run sets the option `sync_interval=always` (`--backend-opt`: each write is synced, O_SYNC,
before it is acknowledged; given in a config file, `jetstream { sync_interval: always }`, as
nats-server has no flag for it).

Capabilities: `Pausable` (SIGSTOP/SIGCONT), `Killable` (SIGKILL; `restart` starts the server
again on the same store), `DataDirs` (the store placed elsewhere, e.g. on the lose-unsynced file
system; the log stays), `LogFiles`, `ClientOptions` (the bucket and its TTL). Readiness and
the bucket's creation go through each node's Remote (`python3` with a few lines of the NATS
protocol, and the monitoring port's `/healthz`), as they would on ssh nodes; the binary itself
is in this machine's build cache, which only netns nodes share.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fencecheck.clusters.base import ClusterError, Remote, RemoteError
from fencecheck.clusters.services import nats_build
from fencecheck.clusters.services.daemons import NodeDaemons, ProcessLedger

log = logging.getLogger(__name__)

# Debian's 2.9.10: only for the test that shows why the backend does not run it.
DEBIAN_NATS_SERVER = "/usr/sbin/nats-server"
SyncInterval = Literal["default", "always"]


class NatsOptions(BaseModel):
    """The nats backend's own options (`--backend-opt`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sync_interval: SyncInterval = Field(
        default="default",
        description="default (JetStream's file store synced every 2 minutes, as shipped) or "
        "always (each write synced before it is acknowledged)")
BUCKET = "fc-locks"

# One JetStream API request over the NATS text protocol, from the node itself (argv: address,
# port, subject, JSON body, timeout); prints the reply's body. No client library on the node.
_JS_REQUEST = r"""
import socket, sys
host, port, subject, body, timeout = sys.argv[1:6]
s = socket.create_connection((host, int(port)), float(timeout))
s.settimeout(float(timeout))
f = s.makefile("rb")
f.readline()
data = body.encode()
s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.fc 1\r\n'
          + b"PUB %s _INBOX.fc %d\r\n%s\r\n" % (subject.encode(), len(data), data))
while True:
    line = f.readline()
    if not line:
        sys.exit("connection closed")
    if line.startswith(b"PING"):
        s.sendall(b"PONG\r\n")
    elif line.startswith(b"MSG "):
        n = int(line.split()[-1])
        sys.stdout.write(f.read(n + 2)[:n].decode())
        break
    elif line.startswith(b"-ERR"):
        sys.exit(line.decode().strip())
"""


def kv_stream_config(bucket: str, replicas: int, ttl_ms: int) -> dict[str, Any]:
    """The stream behind a KV bucket, as nats.go's CreateKeyValue makes it (history 1)."""
    ttl_ns = ttl_ms * 1_000_000
    return {
        "name": f"KV_{bucket}",
        "subjects": [f"$KV.{bucket}.>"],
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": ttl_ns,
        "max_msgs_per_subject": 1,
        "max_msg_size": -1,
        "storage": "file",
        "discard": "new",
        "num_replicas": replicas,
        "duplicate_window": min(ttl_ns, 120 * 1_000_000_000),
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "allow_direct": True,
    }


class NatsService(NodeDaemons):
    """A nats-server JetStream cluster of `nodes` servers and its KV bucket. See the module
    docstring. `lease_ms` is the bucket's TTL (the run's lease); `binary` defaults to the pinned
    build (NotBuilt, naming the command that builds it, if there is none)."""

    name = "nats"

    def __init__(
        self,
        nodes: int | None = None,
        env_for: Callable[[str], Mapping[str, str]] | None = None,
        *,
        lease_ms: int = 2000,
        client_port: int = 4222,
        cluster_port: int = 6222,
        http_port: int = 8222,
        ready_timeout_s: float = 40.0,
        keep_data: bool = False,
        ledger: ProcessLedger | None = None,
        binary: str | None = None,
        sync_interval: SyncInterval = "default",
    ) -> None:
        if lease_ms <= 0:
            raise ClusterError(f"nats: lease_ms must be > 0, not {lease_ms}")
        self.init_daemons(nodes, env_for, ledger, keep_data)
        self.sync_interval = sync_interval
        self._placed: dict[str, Path] = {}
        self.lease_ms = lease_ms
        self.client_port = client_port
        self.cluster_port = cluster_port
        self.http_port = http_port
        self.ready_timeout_s = ready_timeout_s
        self.binary = binary

    # -- LockService

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        self.adopt_nodes(nodes, run_dir)
        if self.binary is None:
            self.binary = str(nats_build.binary())
        t0 = time.monotonic()
        for node in self.nodes:
            self._start(node)
        self.create_bucket(self.ready_timeout_s)
        self.wait_ready(self.ready_timeout_s)
        self.ready_s = time.monotonic() - t0
        log.info("nats: %d servers and bucket %s ready in %.2f s", len(self.nodes), BUCKET,
                 self.ready_s)

    def endpoints(self) -> list[str]:
        return [f"{r.address}:{self.client_port}" for r in self.nodes.values()]

    def client_options(self) -> dict[str, Any]:
        return {"bucket": BUCKET, "bucket_ttl_ms": self.lease_ms}

    def teardown(self) -> None:
        self.stop_all("nats")
        if not self.keep_data and self.run_dir is not None:
            for node, remote in self.nodes.items():
                remote.run(["rm", "-rf", str(self._store(node))], check=False)

    # -- Pausable, Killable (pause, resume, kill: NodeDaemons), LogFiles

    def restart(self, node: str) -> None:
        """Start a killed server again on its store; returns once the process runs (it may still
        be catching up: use `wait_ready` to wait for health)."""
        if not self.running(node):
            self._start(node)

    def log_files(self) -> dict[str, list[Path]]:
        return {node: [self._node_dir(node) / "nats.log"] for node in self.nodes}

    def place_data(self, node: str, path: Path) -> None:
        self._placed[node] = path

    # -- helpers

    @property
    def replicas(self) -> int:
        return min(3, len(self.nodes))

    def js_request(self, node: str, subject: str, body: Mapping[str, Any],
                   timeout_s: float = 3.0) -> dict[str, Any] | None:
        """One JetStream API request through the node's server, sent from the node; the decoded
        reply, or None if there was none (not serving, no JetStream leader yet)."""
        remote = self.nodes[node]
        argv = ["python3", "-c", _JS_REQUEST, remote.address, str(self.client_port), subject,
                json.dumps(body), str(timeout_s)]
        try:
            res = remote.run(argv, timeout_s=timeout_s + 3.0, check=False)
        except RemoteError:
            return None
        if res.returncode != 0:
            return None
        try:
            reply = json.loads(res.stdout)
        except ValueError:
            return None
        return reply if isinstance(reply, dict) else None

    def create_bucket(self, timeout_s: float) -> None:
        """Create the bucket's stream (idempotent: the same config again is accepted), retrying
        until the cluster has a JetStream meta leader and enough peers for the replicas."""
        cfg = kv_stream_config(BUCKET, self.replicas, self.lease_ms)
        deadline = time.monotonic() + timeout_s
        last: object = "no reply"
        first = next(iter(self.nodes))
        while True:
            reply = self.js_request(first, f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
            if reply is not None and "error" not in reply:
                return
            last = reply["error"] if reply is not None else "no reply"
            self.check_exited(list(self.nodes), "nats.log")
            if time.monotonic() > deadline:
                raise ClusterError(f"nats: bucket {BUCKET} not created after {timeout_s} s: "
                                   f"{last}")
            time.sleep(0.3)

    def server_healthy(self, node: str, timeout_s: float = 2.0) -> bool:
        """The node's `/healthz`: JetStream enabled, and every stream it hosts current."""
        remote = self.nodes[node]
        url = f"http://{remote.address}:{self.http_port}/healthz"
        code = ("import sys, urllib.request\n"
                f"r = urllib.request.urlopen({url!r}, timeout={timeout_s})\n"
                "sys.stdout.write(r.read().decode())\n")
        try:
            res = remote.run(["python3", "-c", code], timeout_s=timeout_s + 3.0, check=False)
        except RemoteError:
            return False
        return res.returncode == 0 and '"ok"' in res.stdout

    def wait_ready(self, timeout_s: float, nodes: list[str] | None = None) -> None:
        """Wait until every server (or those named) reports itself healthy."""
        pending = list(nodes if nodes is not None else self.nodes)
        deadline = time.monotonic() + timeout_s
        while pending:
            pending = [n for n in pending if not self.server_healthy(n)]
            if not pending:
                return
            self.check_exited(pending, "nats.log")
            if time.monotonic() > deadline:
                raise ClusterError(f"nats not healthy after {timeout_s} s on {', '.join(pending)}")
            time.sleep(0.2)

    def _store(self, node: str) -> Path:
        return self._placed.get(node, self._node_dir(node)) / "nats"

    def _start(self, node: str) -> None:
        remote = self.nodes[node]
        ndir = self._node_dir(node)
        store = self._store(node)
        remote.run(["mkdir", "-p", str(store)])
        routes = ",".join(f"nats://{r.address}:{self.cluster_port}"
                          for n, r in self.nodes.items() if n != node)
        run = self.run_dir.name if self.run_dir else "nats"
        argv = [
            self.binary or str(nats_build.binary()),
            f"--name={node}",
            f"--addr={remote.address}",
            f"--port={self.client_port}",
            f"--http_port={self.http_port}",
            "--jetstream",
            f"--store_dir={store}",
        ]
        if self.sync_interval != "default":
            conf = ndir / "nats.conf"  # written here and put on the node at the same path
            ndir.mkdir(parents=True, exist_ok=True)
            conf.write_text(f"jetstream {{\n  sync_interval: {self.sync_interval}\n}}\n")
            remote.put_file(conf, str(conf))
            argv += ["-c", str(conf)]
        if len(self.nodes) > 1:
            argv += [f"--cluster_name=fc-{run}",
                     f"--cluster=nats://{remote.address}:{self.cluster_port}",
                     f"--routes={routes}"]
        self.start_node_daemon(node, "nats-server", argv, log=ndir / "nats.log")
