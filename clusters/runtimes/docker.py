"""`DockerRuntime`: server nodes as Docker containers on an `internal` network; client nodes as
network namespaces on this host joined to that network's bridge.

Layout of one run (run id R):

    fc-R             the Docker network: `internal` (no route out), subnet as given or else a
                     free /24 of 10.96.0.0/12 taken under a machine-wide lock (`take_subnet`:
                     two runs at once never share one), bridge
                     `fcR-br` in the host netns (named by us, so it is findable), gateway `.1`
    fc-R-<node>      one container per server node (image `fencecheck-node:<hash>`, see
                     clusters/runtimes/image.py), `sleep infinity` under docker-init, NET_ADMIN
    fc-R-<client>    one namespace per client node, its veth `fcR-<client>` on the bridge

Every container and the network carry the label `fencecheck.run=R` and are recorded in the
run's ledger before they are created (kinds `docker-container`, `docker-network`); their undo
removes by label, so `fencecheck teardown` also finds containers a crash left unrecorded.

Files: the run's store directory is bind-mounted into every container at the same path, so the
services' configs, data and logs (`<run dir>/nodes/<node>/...`) are written straight into the store
and `put_file`/`get_file` under it are plain copies. The project and its Python are mounted
read-only at their host paths too, so the resource server
(`sys.executable -m fencecheck.workloads.resources.store`)
runs in a container unchanged.

Commands enter a container's namespaces with `nsenter` on its init pid rather than `docker exec`
(measured: a median 4 ms against 74 ms a command; readiness polls run dozens): its mount, uts, ipc
and network namespaces. Containers share this host's pid namespace (`pid_mode=host`), so a
daemon's pid is one pid everywhere: in `Daemon.pid`, `signal`, `alive` and the ledger, and in
what the server reports of itself (redis's `process_id`, which RedisService checks); and
`/proc/self` resolves inside a container (java finds libjli.so through it). Such a daemon does
not die with its container by itself: the container undo first kills every process in the
container's network namespace, so a crash between starting a daemon and recording it leaves
nothing behind.

The names, the subnet pool, the SDK client and the undo of the ledger records are in
docker_host.py (what `fencecheck teardown` needs without a live run).
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fencecheck.clusters.base import Cluster, ClusterError, CommandResult, Daemon, RemoteError
from fencecheck.clusters.cleaner import (
    Ledger,
    TeardownError,
    check_run_id,
    teardown_records,
)
from fencecheck.clusters.runtimes.docker_host import (
    LABEL,
    bridge_name,
    container_name,
    docker_client,
    network_name,
    take_subnet,
)
from fencecheck.clusters.runtimes.local import LocalRemote
from fencecheck.clusters.runtimes.netns import NODE_RE, namespace_name, veth_name

log = logging.getLogger(__name__)

PROJECT = Path(__file__).resolve().parents[2]  # clusters/runtimes/docker.py -> the checkout
NSENTER = ("-m", "-u", "-i", "-n")
# The Docker SDK, imported where it is used (docker_host): declared for the run's preflight, which
# refuses a run without it before anything exists, naming the extra (fencecheck.run.wiring).
PYTHON_DIST = "docker"


class DockerRemote(LocalRemote):
    """A container, through nsenter on its init pid. Pids in and out are host pids."""

    def __init__(self, name: str, address: str, container: str, init_pid: int,
                 shared: Sequence[Path]) -> None:
        # Commands run in the controller's working directory where the container has it (an
        # ancestor of the store's mount), so a store given as a relative path works inside.
        here = Path.cwd().resolve()
        # (`env -C` inside, not nsenter's --wd: that one opens the directory on this host.)
        wd = ["env", "-C", str(here)] if any(s.is_relative_to(here) for s in shared) else []
        super().__init__(name, address,
                         prefix=["nsenter", "-t", str(init_pid), *NSENTER, "--", *wd])
        self.container = container
        self.init_pid = init_pid
        self.shared = tuple(shared)

    def start_daemon(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Daemon:
        log.parent.mkdir(parents=True, exist_ok=True)
        script = ('cd "$1" || exit 1; log=$2; shift 2; '
                  'setsid "$@" </dev/null >>"$log" 2>&1 & echo $!')
        full = [*self.prefix, "sh", "-c", script, "sh", cwd or ".", str(log), *argv]
        logging.getLogger(__name__).debug("%s: daemon %s: %s", self.name, name, full)
        # The JVM maps its cgroup (this host's, as nsenter leaves it) onto the container's
        # cgroup mounts, finds none and dies of a NullPointerException: no container support.
        env = {"JAVA_TOOL_OPTIONS": "-XX:-UseContainerSupport", **(env or {})}
        p = subprocess.run(full, capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL, env={**os.environ, **env})
        out = p.stdout.strip()
        if p.returncode != 0 or not out.isdigit():
            res = CommandResult(self.name, tuple(argv), p.returncode, p.stdout, p.stderr)
            raise RemoteError(res, f"could not start daemon {name}")
        pid = int(out)
        return Daemon(node=self.name, name=name, pid=pid, log=log)

    def _is_shared(self, path: str) -> bool:
        p = Path(path).resolve()
        return any(p.is_relative_to(s) for s in self.shared)

    def put_file(self, local: Path, path: str) -> None:
        if self._is_shared(path):
            super().put_file(local, path)
            return
        self.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path],
                 stdin=local.read_bytes())

    def get_file(self, path: str, local: Path) -> None:
        if self._is_shared(path):
            super().get_file(path, local)
            return
        data = self.run(["cat", path]).stdout
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(data)


class DockerRuntime:
    """Runtime on Docker containers; needs root (namespaces for clients) and a local dockerd."""

    name = "docker"

    def __init__(self, run_id: str, run_dir: Path, subnet: str | None = None,
                 *, image: str | None = None) -> None:
        self.run_id = check_run_id(run_id)
        self.run_dir = run_dir
        # None: a /24 of SUBNET_POOL no Docker network holds, taken when the network is made.
        self.subnet = ipaddress.IPv4Network(subnet) if subnet is not None else None
        self.image = image
        self.ledger = Ledger(run_dir / "ledger.jsonl", run_id)
        self.network = network_name(run_id)
        self.bridge = bridge_name(run_id)
        self._remotes: dict[str, LocalRemote] = {}
        self._client: Any = None

    def address(self, node: str) -> str:
        return self.remote(node).address

    def remote(self, node: str) -> LocalRemote:
        try:
            return self._remotes[node]
        except KeyError:
            raise ClusterError(f"no node {node!r} in run {self.run_id}") from None

    def setup(self, servers: Sequence[str], clients: Sequence[str]) -> Cluster:
        import docker.errors

        try:
            return self._setup(servers, clients)
        except docker.errors.APIError as e:  # e.g. the subnet overlaps another network's
            raise ClusterError(f"docker: {e.explanation or e}") from None

    def _setup(self, servers: Sequence[str], clients: Sequence[str]) -> Cluster:
        nodes = [*servers, *clients]
        self._validate(nodes)
        from docker.types import IPAMConfig, IPAMPool

        from fencecheck.clusters.runtimes.image import ensure_image

        self._client = client = docker_client()
        image = self.image or ensure_image(client)
        t0 = time.monotonic()

        labels = {LABEL: self.run_id}
        self.ledger.record("docker-network", self.network)

        def create(net: ipaddress.IPv4Network) -> None:
            gateway = str(next(net.hosts()))
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=str(net), gateway=gateway)])
            client.networks.create(
                self.network, driver="bridge", internal=True, ipam=ipam, labels=labels,
                options={"com.docker.network.bridge.name": self.bridge},
            )

        if self.subnet is None:
            self.subnet = take_subnet(client, self.run_id, create)
        else:
            create(self.subnet)
        self.ledger.record("docker-subnet", str(self.subnet))
        hosts = self.subnet.hosts()
        next(hosts)  # the gateway's
        addrs = {node: str(next(hosts)) for node in nodes}
        shared = self._mounts()
        # Containers start in parallel (dockerd takes ~0.4 s a start here), and the client
        # namespaces, which need only the bridge, are made meanwhile.
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(servers) + 1) as ex:
            futs = {n: ex.submit(self._container, client, image, n, addrs[n], shared)
                    for n in servers}
            namespaces = ex.submit(self._clients, clients, addrs)
            pids = {n: f.result() for n, f in futs.items()}
            namespaces.result()

        cluster = Cluster()
        for n in servers:
            r = DockerRemote(n, addrs[n], container_name(self.run_id, n), pids[n], shared)
            self._remotes[n] = cluster.servers[n] = r
        for n in clients:
            ns = namespace_name(self.run_id, n)
            c = LocalRemote(n, addrs[n], prefix=["ip", "netns", "exec", ns])
            self._remotes[n] = cluster.clients[n] = c
        log.info("docker run %s: %d containers and %d client namespaces in %.0f ms on %s",
                 self.run_id, len(servers), len(clients), 1000 * (time.monotonic() - t0),
                 self.subnet)
        return cluster

    def _mounts(self) -> list[Path]:
        """Host directories every container sees at the same path: the store (rw), then the
        project and its Python (ro; see the module docstring)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        out = [self.run_dir.resolve()]
        for p in (PROJECT, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()):
            if not any(p.is_relative_to(q) for q in out[1:]):
                out.append(p)
        return out

    def _container(self, client: Any, image: str, node: str, addr: str,
                   shared: list[Path]) -> int:
        name = container_name(self.run_id, node)
        self.ledger.record("docker-container", name, node=node)
        api = client.api
        binds = {str(shared[0]): {"bind": str(shared[0]), "mode": "rw"}}
        binds.update({str(p): {"bind": str(p), "mode": "ro"} for p in shared[1:]})
        host_config = api.create_host_config(
            binds=binds, cap_add=["NET_ADMIN"], init=True, network_mode=self.network,
            pid_mode="host",
        )
        netcfg = api.create_networking_config(
            {self.network: api.create_endpoint_config(ipv4_address=addr)}
        )
        cid = api.create_container(
            image, command=["sleep", "infinity"], name=name, hostname=node,
            labels={LABEL: self.run_id, "fencecheck.node": node},
            host_config=host_config, networking_config=netcfg,
        )["Id"]
        api.start(cid)
        pid = int(api.inspect_container(cid)["State"]["Pid"])
        if pid <= 0:
            raise ClusterError(f"docker: container {name} did not start")
        # An internal network still gives a default route to the gateway (this host's bridge
        # address); drop it, so nothing in a node can route past the subnet.
        _ip(["route", "del", "default"], "", prefix=["nsenter", "-t", str(pid), "-n"])
        return pid

    def _clients(self, clients: Sequence[str], addrs: Mapping[str, str]) -> None:
        """One namespace per client with a veth on the network's bridge."""
        if not clients:
            return
        namespaces = [namespace_name(self.run_id, c) for c in clients]
        for ns in namespaces:
            self.ledger.record("netns", ns)
        lines = [f"netns add {ns}" for ns in namespaces]
        for i, (c, ns) in enumerate(zip(clients, namespaces, strict=True)):
            veth = veth_name(self.run_id, c, 100 + i)
            self.ledger.record("host-veth", veth, node=c)
            lines += [
                f"link add {veth} type veth peer name eth0 netns {ns}",
                f"link set {veth} master {self.bridge}",
                f"link set {veth} up",
            ]
        _ip(["-batch", "-"], "\n".join(lines) + "\n")
        assert self.subnet is not None  # taken in _setup
        plen = self.subnet.prefixlen
        for c, ns in zip(clients, namespaces, strict=True):
            _ip(["-n", ns, "-batch", "-"],
                f"link set lo up\naddr add {addrs[c]}/{plen} dev eth0\nlink set eth0 up\n")

    def teardown(self) -> None:
        """Undo the ledger LIFO (processes, containers, the network, then namespaces), then drop
        the run from the global index. Idempotent."""
        errors: list[str] = []
        removed = teardown_records(self.ledger.records(), errors)
        log.info("docker run %s: removed %d resources", self.run_id, len(removed))
        if errors:
            raise TeardownError(errors)
        self.ledger.unregister()

    def _validate(self, nodes: list[str]) -> None:
        if self._remotes:
            raise ClusterError(f"docker run {self.run_id} is already set up")
        if len(set(nodes)) != len(nodes):
            raise ClusterError(f"duplicate node names: {nodes}")
        for node in nodes:
            if not NODE_RE.match(node) or node in ("sw", "br"):
                raise ClusterError(f"bad node name {node!r}: want [a-z0-9-], not 'sw' or 'br'")
        room = self.subnet.num_addresses if self.subnet is not None else 256
        if len(nodes) > room - 3:
            raise ClusterError(f"{len(nodes)} nodes do not fit in {self.subnet or 'a /24'}")


def _ip(args: list[str], stdin: str, prefix: Sequence[str] = ()) -> None:
    argv = [*prefix, "ip", *args]
    log.debug("host: %s <<< %r", argv, stdin)
    p = subprocess.run(argv, input=stdin.encode(), capture_output=True)
    if p.returncode != 0:
        res = CommandResult("host", tuple(argv), p.returncode, p.stdout.decode(), p.stderr.decode())
        raise RemoteError(res, "ip batch failed")

