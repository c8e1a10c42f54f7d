"""`LocalKube`: a one-node Kubernetes cluster of fencecheck's own making on this host, for the
Indexed Job of examples/k8s/ (docs/nightly.md): etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, containerd (Debian's 1.6.20, runc under cgroupfs) and a kubelet with the bridge
CNI, all in one network namespace (the node), reached from the host over a veth.

`up()` claims a run id (clusters/cleaner.py: the machine-wide index), records each thing in the
run's ledger before making it (the node's namespace, the `kube-node` sweep record, every
process), writes the credentials (clusters/services/kube_certs.py, as for the `kubernetes`
backend: a CA, serving and client certificates, a token per component) and the configuration
files (files.py), starts the daemons in order and waits until the node is Ready and the default
service account exists. `down()` drains (stops the controller manager so no pod is made again,
deletes every pod so the kubelet tears each down as it would, waits until containerd runs no
task), then removes everything by the ledger, the path `fencecheck teardown --run ID` takes after
a crash: processes, the sweep of the node (sweep.py), the namespace with its veth.

Binaries: kube-apiserver (clusters/services/kube_build.py) and the node build
(node_build.py), both cached per machine; containerd, runc, ctr and the CNI plugins from Debian.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import ClusterError, Daemon
from fencecheck.clusters.cleaner import RUN_INDEX, Ledger, claim_run_id, teardown_run
from fencecheck.clusters.kube import components, files, images, node_build, sweep
from fencecheck.clusters.kube.files import Layout
from fencecheck.clusters.reaper import NETNS_DIR, _alive
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.services import kube_build
from fencecheck.clusters.services.daemons import start_recorded, stop_daemon
from fencecheck.clusters.services.kube_certs import KubeCredentials, make_credentials

log = logging.getLogger(__name__)

# The host's end and the node's end of each cluster's veth: a /30 of this range, the first free
# one, taken under a machine-wide lock.
HOST_LINKS = ipaddress.ip_network("10.254.0.0/16")
NET_LOCK = Path("/run/fencecheck/kube-net.lock")


def _free_link() -> tuple[str, str]:
    res = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True,
                         check=True)
    used = {ipaddress.ip_interface(w).network.supernet(new_prefix=30)
            for line in res.stdout.splitlines() for w in line.split()[3:4]
            if ipaddress.ip_interface(w).ip in HOST_LINKS}
    for net in HOST_LINKS.subnets(new_prefix=30):
        if net not in used:
            a, b = list(net.hosts())
            return str(a), str(b)
    raise ClusterError(f"no free /30 left in {HOST_LINKS} for the cluster's veth")


class LocalKube:
    """One cluster; `with LocalKube() as kube:` brings it up and always takes it down."""

    def __init__(self, base: Path = files.DEFAULT_BASE, *, index: Path = RUN_INDEX,
                 ready_timeout_s: float = 900.0) -> None:
        self.base = base
        self.index = index
        self.ready_timeout_s = ready_timeout_s
        self.layout: Layout | None = None
        self.ledger: Ledger | None = None
        self.creds: KubeCredentials | None = None
        self.daemons: dict[str, Daemon] = {}
        self.timings: dict[str, float] = {}

    def __enter__(self) -> LocalKube:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- up

    def up(self) -> None:
        """Bring the cluster up (module docstring); on any failure, take down what exists."""
        kube_bin, node_dir = kube_build.binary(), node_build.build_dir()
        node_build.binary("kubelet")  # NotBuilt before anything exists
        if missing := files.missing_cni_plugins():
            raise ClusterError(f"kube: no CNI plugin {', '.join(missing)} in "
                               f"{files.CNI_BIN_DIR}: apt-get install {files.CNI_PACKAGE}")
        t0 = time.monotonic()
        try:
            self._claim()
            self._write_files()
            self._control_plane(kube_bin, node_dir)
            self.timings["control_plane_s"] = time.monotonic() - t0
            self._node(node_dir)
            self.wait_ready()
        except BaseException:
            self.down()
            raise
        self.timings["ready_s"] = time.monotonic() - t0
        log.info("kube: cluster %s ready in %.1f s", self.run, self.timings["ready_s"])

    @property
    def run(self) -> str:
        return self._layout().run

    def _layout(self) -> Layout:
        if self.layout is None:
            raise ClusterError("kube: not up")
        return self.layout

    def _claim(self) -> None:
        run = claim_run_id(self.index)
        NET_LOCK.parent.mkdir(parents=True, exist_ok=True)
        with open(NET_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            host_ip, node_ip = _free_link()
            self.layout = lay = Layout(run, self.base, host_ip, node_ip)
            lay.dir.mkdir(parents=True, exist_ok=True)
            self.ledger = Ledger(lay.dir / "ledger.jsonl", run, self.index)
            # The veth goes with the namespace: one record for both.
            self.ledger.record("netns", lay.netns)
            ns = ["ip", "-n", lay.netns]
            for argv in (["ip", "netns", "add", lay.netns],
                         [*ns, "link", "set", "lo", "up"],
                         ["ip", "link", "add", lay.host_veth, "type", "veth", "peer", "name",
                          lay.node_veth, "netns", lay.netns],
                         ["ip", "addr", "add", f"{host_ip}/30", "dev", lay.host_veth],
                         ["ip", "link", "set", lay.host_veth, "up"],
                         [*ns, "addr", "add", f"{node_ip}/30", "dev", lay.node_veth],
                         [*ns, "link", "set", lay.node_veth, "up"]):
                _host(argv)

    def _write_files(self) -> None:
        lay = self._layout()
        for d in (lay.pki, lay.logs, lay.cni_conf_dir, lay.cni_data_dir, lay.kubelet_root,
                  lay.dir / "etcd", lay.dir / "sysctl", lay.dir / "varlog", lay.dir / "pod-logs",
                  lay.containerd_root):
            d.mkdir(parents=True, exist_ok=True)
        (lay.dir / "etcd").chmod(0o700)
        users = [components.SCHEDULER, components.CONTROLLER_MANAGER, components.node_user(lay)]
        self.creds = c = make_credentials(lay.pki, [lay.node_ip], users=users,
                                          clients=[components.KUBELET_CLIENT])
        for name, (user, _) in (("scheduler", components.SCHEDULER),
                                ("controller-manager", components.CONTROLLER_MANAGER),
                                ("kubelet", components.node_user(lay))):
            (lay.dir / f"{name}.kubeconfig").write_text(
                files.kubeconfig(lay.server, c.ca_file, c.tokens[user], user))
        lay.admin_kubeconfig.write_text(files.kubeconfig(lay.server, c.ca_file, c.token,
                                                         "fencecheck"))
        (lay.dir / "kubelet.json").write_text(files.kubelet_config(lay, c.ca_file))
        (lay.dir / "containerd" / "config.toml").write_text(files.containerd_config(
            lay, images.sandbox_ref(node_build.version())))
        (lay.cni_conf_dir / "10-fencecheck.conflist").write_text(files.cni_conflist(lay))
        for path, text in components.kernel_tunable_files(lay).items():
            path.write_text(text)

    def _start(self, name: str, argv: list[str]) -> Daemon:
        lay = self._layout()
        remote = LocalRemote("kube", lay.node_ip, ["nsenter", f"--net={NETNS_DIR / lay.netns}"])
        d = start_recorded(remote, "kube", name, argv, log=lay.logs / f"{name}.log",
                           ledger=self.ledger)
        self.daemons[name] = d
        return d

    def _control_plane(self, kube_bin: Path, node_dir: Path) -> None:
        lay, c = self._layout(), self._creds()
        self._start("etcd", components.etcd(lay))
        self._start("kube-apiserver", components.apiserver(kube_bin, lay, c))
        self._wait("the API server's /readyz", lambda: self._readyz(), ["etcd", "kube-apiserver"])
        self._start("kube-controller-manager", components.controller_manager(
            node_dir / "kube-controller-manager", lay, c))
        self._start("kube-scheduler", components.scheduler(node_dir / "kube-scheduler", lay))

    def _node(self, node_dir: Path) -> None:
        lay = self._layout()
        assert self.ledger is not None
        # Recorded before containerd exists: whatever it or the kubelet makes, the sweep finds.
        self.ledger.record(sweep.KIND, lay.node_name, **sweep.record(
            lay.dir, lay.cgroup_root, lay.containerd_sock, files.cni_network(lay)))
        for top in (p for p in sweep.CGROUP_FS.iterdir() if p.is_dir()):
            (top / lay.cgroup_root.strip("/")).mkdir(exist_ok=True)
        self._start("containerd", components.containerd(lay))
        self._wait("containerd", lambda: _host(images.ctr_argv(lay.containerd_sock, "version"),
                                                check=False).returncode == 0, ["containerd"])
        t = time.monotonic()
        images.import_pause(lay.containerd_sock, node_dir / "pause",
                            images.sandbox_ref(node_build.version()))
        self.timings["pause_import_s"] = time.monotonic() - t
        # The kubelet's root is a shared mount: the volumes it mounts in its own mount
        # namespace (components.py) appear here, where containerd gives them to containers.
        _host(["mount", "--bind", str(lay.kubelet_root), str(lay.kubelet_root)])
        _host(["mount", "--make-shared", str(lay.kubelet_root)])
        self._start("kubelet", components.kubelet(node_dir / "kubelet", lay))

    def wait_ready(self) -> None:
        """Until the node is Ready and the default service account exists (a Job's pods are
        refused before it does)."""
        lay = self._layout()
        self._wait(f"node {lay.node_name} Ready", self._node_ready, list(self.daemons))
        self._wait("the default service account",
                   lambda: self.get("/api/v1/namespaces/default/serviceaccounts/default")
                   is not None, list(self.daemons))

    def _wait(self, what: str, ready: Any, daemons: list[str]) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while not ready():
            for name in daemons:
                d = self.daemons[name]
                if not _alive(d.pid):
                    tail = d.log.read_text(errors="replace").strip().splitlines()[-5:]
                    raise ClusterError(f"kube: {name} exited while waiting for {what} "
                                       f"({d.log}): " + " / ".join(tail))
            if time.monotonic() > deadline:
                raise ClusterError(f"kube: {what}: not after {self.ready_timeout_s:.0f} s "
                                   f"(logs in {self._layout().logs})")
            time.sleep(0.5)

    # -- the API, as the admin

    def _creds(self) -> KubeCredentials:
        if self.creds is None:
            raise ClusterError("kube: not up")
        return self.creds

    def _request(self, path: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
        c = self._creds()
        req = urllib.request.Request(self._layout().server + path,
                                     headers={"Authorization": f"Bearer {c.token}"})
        ctx = ssl.create_default_context(cafile=str(c.ca_file))
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=timeout_s) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (OSError, ssl.SSLError):
            return 0, b""

    def get(self, path: str) -> Any:
        """GET an API path as the admin: the decoded object, or None if it is not there (or the
        API server does not answer)."""
        status, body = self._request(path)
        return json.loads(body) if status == 200 else None

    def _readyz(self) -> bool:
        return self._request("/readyz")[0] == 200

    def _node_ready(self) -> bool:
        node = self.get(f"/api/v1/nodes/{self._layout().node_name}")
        conds = (node or {}).get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

    def kubectl(self, *args: str, check: bool = True, timeout_s: float = 120.0,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the node build's kubectl as the admin."""
        argv = [str(node_build.binary("kubectl")),
                f"--kubeconfig={self._layout().admin_kubeconfig}", *args]
        log.debug("host: %s", argv)
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                             input=stdin)
        if check and res.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} exited {res.returncode}: "
                               f"{res.stderr.strip()[-500:]}")
        return res

    # -- down

    def drain(self, timeout_s: float = 60.0) -> None:
        """Best effort, before the ledger's teardown: no new pods, every pod deleted through
        the API, until containerd runs no task (or `timeout_s`)."""
        kcm = self.daemons.get("kube-controller-manager")
        if kcm is not None:
            with contextlib.suppress(ClusterError):
                stop_daemon(LocalRemote("kube", ""), kcm, signal.SIGTERM, 5.0)
        if "kubelet" not in self.daemons or not self._readyz():
            return
        self.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=5",
                     "--wait=false", check=False)
        deadline = time.monotonic() + timeout_s
        sock = self._layout().containerd_sock
        while time.monotonic() < deadline:
            res = _host(images.ctr_argv(sock, "tasks", "ls", "-q"), check=False)
            if res.returncode != 0 or not res.stdout.strip():
                return
            time.sleep(1.0)
        log.warning("kube: pods still running after %.0f s; killing them", timeout_s)

    def down(self) -> None:
        """Drain, then remove everything the ledger holds. Idempotent."""
        if self.ledger is None:
            return
        t0 = time.monotonic()
        try:
            with contextlib.suppress(ClusterError, subprocess.TimeoutExpired, OSError):
                self.drain()
            teardown_run(self.run, self.index)
        finally:
            self.ledger = None
            self.daemons.clear()
        self.timings["down_s"] = time.monotonic() - t0


def _host(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    log.debug("host: %s", argv)
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check and res.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.strip()}")
    return res
