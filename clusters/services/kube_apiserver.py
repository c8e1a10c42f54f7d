"""`KubeApiserverService`: the `kubernetes` backend, a Kubernetes control plane reduced to what
Leases need: one kube-apiserver per node over a 3-member etcd cluster (the project's
`EtcdService`, one member on each node: the "stacked etcd" topology of an HA control plane, each
API server talking to its own node's member), and nothing else of Kubernetes (no scheduler, no
controller manager, no kubelet).

Each API server listens with TLS on its node's address (`port`, 6443), serving a certificate made
for the run (clusters/services/kube_certs.py: a CA and a serving certificate whose SANs are every
node address), and accepts one static bearer token (group system:masters). Clients get, besides
the endpoints, the client options `k8s_token`, `k8s_ca_file` (the CA) and `k8s_namespace`.
Readiness is every API server's `/readyz` answering `ok`, asked from the node itself (a netns
node is reachable only from inside the switch).

Capabilities act on the API servers, never on etcd: `Pausable` (SIGSTOP/SIGCONT), `Killable`
(SIGKILL; `restart` starts it again: its state is in etcd), `LogFiles` (both daemons' logs).

Files: `<run dir>/kube/` (credentials), `<run dir>/nodes/<node>/kube-apiserver.log`, and etcd's.
The binary is built once per machine (clusters/services/kube_build.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError, Remote, RemoteError
from fencecheck.clusters.services import kube_build
from fencecheck.clusters.services.daemons import NodeDaemons, ProcessLedger
from fencecheck.clusters.services.etcd import EtcdService
from fencecheck.clusters.services.kube_certs import KubeCredentials, make_credentials

log = logging.getLogger(__name__)

NAMESPACE = "default"
SERVICE_CIDR = "10.96.0.0/24"

# Asked on the node: GET /readyz?verbose with the token, verified against the CA; prints the
# body, also of a 500 (it lists the failing checks).
_READYZ = """
import ssl, sys, urllib.error, urllib.request
url, ca, token, timeout = sys.argv[1:5]
req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
ctx = ssl.create_default_context(cafile=ca)
try:
    with urllib.request.urlopen(req, context=ctx, timeout=float(timeout)) as r:
        sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    sys.stdout.write(e.read().decode())
    sys.exit(1)
"""


class KubeApiserverService(NodeDaemons):
    """kube-apiserver on every node over a stacked etcd cluster. See the module docstring."""

    name = "kubernetes"

    def __init__(
        self,
        nodes: int | None = None,
        *,
        port: int = 6443,
        # Each API server needs about 1.5 s of CPU to get ready (about 7 s for three on 2 busy
        # cores); the limit is generous because a machine shared with other runs stretches that.
        ready_timeout_s: float = 180.0,
        keep_data: bool = False,
        ledger: ProcessLedger | None = None,
        binary: Path | None = None,
    ) -> None:
        self.init_daemons(nodes, None, ledger, keep_data)
        self.port = port
        self.ready_timeout_s = ready_timeout_s
        self.binary = binary
        self.etcd = EtcdService(nodes, ledger=ledger, keep_data=keep_data)
        self.creds: KubeCredentials | None = None

    # -- LockService

    def setup(self, nodes: Mapping[str, Remote], run_dir: Path) -> None:
        if self.binary is None:
            self.binary = kube_build.binary()
        self.adopt_nodes(nodes, run_dir)
        t0 = time.monotonic()
        self.etcd.setup(nodes, run_dir)
        self.creds = make_credentials(run_dir / "kube", [r.address for r in nodes.values()])
        for remote in self.nodes.values():
            remote.run(["mkdir", "-p", str(self.creds.ca_file.parent)])
            for f in self.creds.files():
                remote.put_file(f, str(f))
        for node in self.nodes:
            self._start(node)
        self.wait_ready(self.ready_timeout_s)
        self.ready_s = time.monotonic() - t0
        log.info("kubernetes: %d API servers ready in %.2f s", len(self.nodes), self.ready_s)

    def endpoints(self) -> list[str]:
        return [f"{r.address}:{self.port}" for r in self.nodes.values()]

    def client_options(self) -> dict[str, Any]:
        """The token, the CA to verify the API servers against, the Leases' namespace."""
        if self.creds is None:
            raise ClusterError("kubernetes: not set up")
        return {"k8s_token": self.creds.token, "k8s_ca_file": str(self.creds.ca_file),
                "k8s_namespace": NAMESPACE}

    def teardown(self) -> None:
        """API servers first (they would log etcd's going away), then etcd. Idempotent; gathers
        errors and raises them together."""
        errors: list[str] = []
        try:
            self.stop_all("kube-apiserver")
        except ClusterError as e:
            errors.append(str(e))
        try:
            self.etcd.teardown()
        except ClusterError as e:
            errors.append(str(e))
        if errors:
            raise ClusterError("kubernetes teardown: " + "; ".join(errors))

    # -- Pausable, Killable (pause, resume, kill: NodeDaemons), LogFiles

    def restart(self, node: str) -> None:
        """Start a killed API server again; returns once the process runs (`wait_ready` waits
        for its /readyz)."""
        if not self.running(node):
            self._start(node)

    def log_files(self) -> dict[str, list[Path]]:
        out = self.etcd.log_files()
        for node in self.nodes:
            out.setdefault(node, []).append(self._node_dir(node) / "kube-apiserver.log")
        return out

    # -- helpers

    def readyz(self, node: str, timeout_s: float = 5.0) -> str | None:
        """None if the node's API server answers /readyz with `ok`; else what it said (its
        failing checks, from /readyz?verbose) or why it could not be asked."""
        if self.creds is None:
            return "not set up"
        remote = self.nodes[node]
        url = f"https://{remote.address}:{self.port}/readyz?verbose"
        try:
            res = remote.run(["python3", "-c", _READYZ, url, str(self.creds.ca_file),
                              self.creds.token, str(timeout_s)], timeout_s=timeout_s + 5.0,
                             check=False)
        except RemoteError as e:
            return str(e)
        out = res.stdout.strip()
        if res.returncode == 0 and out.endswith("readyz check passed"):
            return None
        failing = [line for line in out.splitlines() if line.startswith("[-]")]
        return "; ".join(failing) or (res.stderr.strip().splitlines() or [out or "no answer"])[-1]

    def wait_ready(self, timeout_s: float, nodes: list[str] | None = None) -> None:
        """Wait until every API server (or those named) is ready."""
        pending = {n: "not asked" for n in (nodes if nodes is not None else self.nodes)}
        deadline = time.monotonic() + timeout_s
        restarts: dict[str, int] = {}
        while pending:
            said = {n: self.readyz(n) for n in pending}
            pending = {n: why for n, why in said.items() if why is not None}
            if not pending:
                return
            for n in pending:
                # An API server that exits while starting (a post-start hook that timed out on
                # a busy etcd: "unable to perform initial IP and Port allocation check") is
                # started again, as the kubelet restarts a control plane's static pod; twice
                # at most, then the run stops and names its log.
                if n in self.daemons and not self.running(n) and restarts.get(n, 0) < 2:
                    restarts[n] = restarts.get(n, 0) + 1
                    log.warning("kubernetes: the API server on %s exited while starting; "
                                "starting it again (%d of 2)", n, restarts[n])
                    self.daemons.pop(n, None)
                    self._start(n)
            self.check_exited(list(pending), "kube-apiserver.log")
            if time.monotonic() > deadline:
                raise ClusterError(f"kube-apiserver not ready after {timeout_s} s: " + ", ".join(
                    f"{n}: {why}" for n, why in pending.items()))
            time.sleep(0.3)

    def _start(self, node: str) -> None:
        if self.creds is None or self.binary is None:
            raise ClusterError("kubernetes: not set up")
        remote = self.nodes[node]
        c = self.creds
        argv = [
            str(self.binary),
            f"--etcd-servers=http://{remote.address}:{self.etcd.client_port}",
            f"--bind-address={remote.address}",
            f"--advertise-address={remote.address}",
            f"--secure-port={self.port}",
            f"--tls-cert-file={c.cert_file}",
            f"--tls-private-key-file={c.key_file}",
            f"--token-auth-file={c.token_file}",
            f"--service-account-key-file={c.sa_key_file}",
            f"--service-account-signing-key-file={c.sa_key_file}",
            "--service-account-issuer=https://fencecheck.invalid",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--profiling=false",
            # As kubeadm and the managed clusters set it: the nightly's Job runs privileged pods
            # (the default, false, refuses them, even in a dry run).
            "--allow-privileged=true",
            # No Service endpoints to keep (there are no nodes or pods); the reconciler would
            # also refuse loopback addresses, which the tests' nodes use.
            "--endpoint-reconciler-type=none",
        ]
        self.start_node_daemon(node, "kube-apiserver", argv,
                               log=self._node_dir(node) / "kube-apiserver.log")
