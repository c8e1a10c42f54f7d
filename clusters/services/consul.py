"""`ConsulService`: a cluster of Consul servers (v1.16.1, built by
clusters/services/consul_build.py), one `consul agent -server` per node, for the `consul`
backend (sessions and KV locks: workloads/clients/consul_cli.py and the Go program
workloads/clients/go/consul/).

Each server reads `<run dir>/nodes/<node>/consul.json` (written at setup), keeps its Raft and
Serf state under `<run dir>/nodes/<node>/consul/` and logs to `<run dir>/nodes/<node>/consul.log`;
the data is removed on teardown unless `keep_data`. The servers find each other by `retry_join`
and elect a leader once `bootstrap_expect` of them (all) have joined. Clients talk to a server's
HTTP API directly (port 8500; there is no client agent on the client nodes), so a session made
through a server is tied to that server's `serfHealth` check as well as to its TTL. DNS, gRPC
and the WAN pool are off.

Two settings differ from Consul's defaults, both for short runs:
- `performance.raft_multiplier = 1` (HashiCorp's production setting; the default 5 is for
  development machines): a leader is elected in about a second, not five.
- `session_ttl_min = "500ms"` (default 10 s): a session's TTL is the run's lease, usually 1-3 s.
  A server invalidates a session only after twice its TTL without a renewal (Consul's
  `SessionTTLMultiplier`), so the checker's lease (one TTL from the last renewal's invoke) is on
  the safe side of it.
Lock-delay is a session's setting (the clients' `lock_delay_ms`), not the server's.

Ready: every server has a leader and can create (and destroy) a session, which needs the server
registered in the catalog by the leader. Capabilities: `Pausable` (SIGSTOP/SIGCONT), `Killable`
(SIGKILL; `restart` starts it again on its data), `LogFiles`, `ClientOptions` (the `consul`
binary, for `consul lock`). Readiness goes through each node's Remote (`python3` and urllib on
the node), as it would on ssh nodes; the binary is in this machine's build cache, which only
netns nodes share.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError, Remote, RemoteError
from fencecheck.clusters.services import consul_build
from fencecheck.clusters.services.daemons import NodeDaemons, ProcessLedger

log = logging.getLogger(__name__)

SESSION_TTL_MIN = "500ms"

# One HTTP request from the node itself (argv: method, url, JSON body or "", timeout); prints
# {"status", "body"} (status 0: no answer).
_HTTP = r"""
import json, sys, urllib.error, urllib.request
method, url, body, timeout = sys.argv[1:5]
req = urllib.request.Request(url, data=body.encode() if body else None, method=method)
try:
    with urllib.request.urlopen(req, timeout=float(timeout)) as r:
        out = {"status": r.status, "body": r.read().decode()}
except urllib.error.HTTPError as e:
    out = {"status": e.code, "body": e.read().decode()}
except OSError as e:
    out = {"status": 0, "body": str(e)}
sys.stdout.write(json.dumps(out))
"""


# Whether the server at argv[1] (http://host:port) serves: it knows a leader and makes (then
# destroys) a session; prints "ready" or why not. One process per look, not one per request.
_READY = r"""
import json, sys, urllib.request
base, timeout = sys.argv[1], float(sys.argv[2])
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode() or "null")
try:
    if not call("GET", "/v1/status/leader"):
        sys.exit("no leader")
    sid = call("PUT", "/v1/session/create", {"Name": "fencecheck-ready", "TTL": "10s"})["ID"]
    call("PUT", "/v1/session/destroy/" + sid)
except (OSError, ValueError, KeyError, TypeError) as e:
    sys.exit(str(e))
print("ready")
"""


class ConsulService(NodeDaemons):
    """Consul servers on `nodes` nodes (None: as many as setup is given). See the module
    docstring. `binary` defaults to the pinned build (NotBuilt, naming the command that builds
    it, if there is none)."""

    name = "consul"

    def __init__(
        self,
        nodes: int | None = None,
        env_for: Callable[[str], Mapping[str, str]] | None = None,
        *,
        http_port: int = 8500,
        server_port: int = 8300,
        serf_port: int = 8301,
        ready_timeout_s: float = 120.0,
        keep_data: bool = False,
        ledger: ProcessLedger | None = None,
        binary: str | None = None,
    ) -> None:
        self.init_daemons(nodes, env_for, ledger, keep_data)
        self.http_port = http_port
        self.server_port = server_port
        self.serf_port = serf_port
        self.ready_timeout_s = ready_timeout_s
        self.binary = binary

    # -- LockService

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        self.adopt_nodes(nodes, run_dir)
        if self.binary is None:
            self.binary = str(consul_build.binary())
        t0 = time.monotonic()
        for node in self.nodes:
            self._write_config(node)
        for node in self.nodes:
            self._start(node)
        self.wait_ready(self.ready_timeout_s)
        self.ready_s = time.monotonic() - t0
        log.info("consul: %d servers ready in %.2f s", len(self.nodes), self.ready_s)

    def endpoints(self) -> list[str]:
        return [f"{r.address}:{self.http_port}" for r in self.nodes.values()]

    def client_options(self) -> dict[str, Any]:
        return {"consul_binary": self.binary or str(consul_build.binary())}

    def teardown(self) -> None:
        self.stop_all("consul")
        if not self.keep_data and self.run_dir is not None:
            for node, remote in self.nodes.items():
                remote.run(["rm", "-rf", str(self._node_dir(node) / "consul")], check=False)

    # -- Pausable, Killable (pause, resume, kill: NodeDaemons), LogFiles

    def restart(self, node: str) -> None:
        """Start a killed server again on its data; returns once the process runs (use
        `wait_ready` to wait until it serves)."""
        if not self.running(node):
            self._start(node)

    def log_files(self) -> dict[str, list[Path]]:
        return {node: [self._node_dir(node) / "consul.log"] for node in self.nodes}

    # -- helpers

    def http(self, node: str, method: str, path: str, body: Any = None,
             timeout_s: float = 3.0) -> tuple[int, Any]:
        """One request to the node's HTTP API, sent from the node: (status, decoded JSON body
        or its text); status 0 when nothing answered."""
        remote = self.nodes[node]
        url = f"http://{remote.address}:{self.http_port}{path}"
        argv = ["python3", "-c", _HTTP, method, url,
                "" if body is None else json.dumps(body), str(timeout_s)]
        try:
            res = remote.run(argv, timeout_s=timeout_s + 5.0, check=False)
            out = json.loads(res.stdout)
        except (RemoteError, ValueError):
            return 0, None
        text = out.get("body", "")
        try:
            return int(out["status"]), json.loads(text)
        except ValueError:
            return int(out["status"]), text

    def serving(self, node: str, timeout_s: float = 3.0) -> bool:
        """The server knows a leader and can make a session (so it is in the catalog)."""
        remote = self.nodes[node]
        argv = ["python3", "-c", _READY, f"http://{remote.address}:{self.http_port}",
                str(timeout_s)]
        try:
            res = remote.run(argv, timeout_s=3 * timeout_s + 5.0, check=False)
        except RemoteError:
            return False
        return res.returncode == 0 and res.stdout.strip() == "ready"

    def wait_ready(self, timeout_s: float, nodes: list[str] | None = None) -> None:
        """Wait until every server (or those named) serves sessions."""
        pending = list(nodes if nodes is not None else self.nodes)
        deadline = time.monotonic() + timeout_s
        while pending:
            pending = [n for n in pending if not self.serving(n)]
            if not pending:
                return
            self.check_exited(pending, "consul.log")
            if time.monotonic() > deadline:
                raise ClusterError(f"consul not serving after {timeout_s} s on "
                                   f"{', '.join(pending)}")
            time.sleep(0.2)

    def config(self, node: str) -> dict[str, Any]:
        """The server's configuration file (JSON)."""
        remote = self.nodes[node]
        return {
            "server": True,
            "bootstrap_expect": len(self.nodes),
            "node_name": node,
            "datacenter": "fc",
            "data_dir": str(self._node_dir(node) / "consul"),
            "bind_addr": remote.address,
            "advertise_addr": remote.address,
            "client_addr": remote.address,
            "retry_join": [f"{r.address}:{self.serf_port}"
                           for n, r in self.nodes.items() if n != node],
            "retry_interval": "1s",
            "ports": {"http": self.http_port, "server": self.server_port,
                      "serf_lan": self.serf_port, "serf_wan": -1, "dns": -1, "grpc": -1,
                      "grpc_tls": -1},
            "performance": {"raft_multiplier": 1},
            "session_ttl_min": SESSION_TTL_MIN,
            "disable_update_check": True,
            "disable_host_node_id": True,
            "leave_on_terminate": False,
            "skip_leave_on_interrupt": True,
            "ui_config": {"enabled": False},
            "log_level": "INFO",
        }

    def _write_config(self, node: str) -> None:
        remote = self.nodes[node]
        ndir = self._node_dir(node)
        remote.run(["mkdir", "-p", str(ndir / "consul")])
        staging = ndir / "consul.json.staging"
        staging.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(json.dumps(self.config(node), indent=1) + "\n")
        remote.put_file(staging, str(ndir / "consul.json"))

    def _start(self, node: str) -> None:
        ndir = self._node_dir(node)
        argv = [self.binary or str(consul_build.binary()), "agent",
                f"-config-file={ndir / 'consul.json'}"]
        self.start_node_daemon(node, "consul", argv, log=ndir / "consul.log")
